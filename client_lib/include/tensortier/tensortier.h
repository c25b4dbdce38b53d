/* tensortier client library: the stable C ABI (libtensortier.so.1).
 *
 * A training process registers the memory regions of its tensors (weights, gradients, optimizer
 * state, activations) and its iteration boundaries with the tensortierd daemon, which keeps the
 * hot pages in the fast memory tier. The daemon may ask the process to bind a region to a NUMA
 * node; the library does that itself (mbind with MPOL_BIND | MPOL_MF_MOVE) on a background thread.
 *
 * Rules of this ABI:
 *  - Only C types cross it; handles are opaque. Structs that may grow start with struct_size.
 *  - Every function that can fail returns a tensortier_status; the message of the last failure on
 *    the calling thread is tensortier_last_error().
 *  - The daemon being absent is not a failure of the training process: the client keeps trying to
 *    connect in the background, registrations are queued and sent on (re)connection, iteration
 *    marks are dropped, and one warning is logged (not one per call).
 *  - All functions are thread-safe. A client must not be used from a fork()ed child (calls there
 *    are no-ops).
 */
#ifndef TENSORTIER_TENSORTIER_H
#define TENSORTIER_TENSORTIER_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TENSORTIER_API __attribute__((visibility("default")))
#else
#define TENSORTIER_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TENSORTIER_ABI_VERSION 1

typedef struct tensortier_client tensortier_client;
typedef struct tensortier_placement tensortier_placement;
/* A registered region, local to one client; 0 is never a valid handle. Stays valid across daemon
 * restarts (the library re-registers the region and maps the daemon's new id to it). */
typedef uint64_t tensortier_region;

typedef enum tensortier_status {
  TENSORTIER_OK = 0,
  TENSORTIER_ERR_INVALID_ARGUMENT = 1, /* null pointer, zero length, unknown kind */
  TENSORTIER_ERR_UNAVAILABLE = 2,      /* not connected to the daemon: nothing was sent */
  TENSORTIER_ERR_TIMEOUT = 3,          /* the daemon did not answer within the call timeout */
  TENSORTIER_ERR_PROTOCOL = 4,         /* the daemon sent something this library cannot read */
  TENSORTIER_ERR_NO_SUCH_HANDLE = 5,   /* not a live handle of this client */
  /* The daemon's protocol ErrorCode n arrives as TENSORTIER_ERR_DAEMON_BASE + n. */
  TENSORTIER_ERR_DAEMON_BASE = 100,
  TENSORTIER_ERR_DAEMON_BAD_REQUEST = 101,
  TENSORTIER_ERR_DAEMON_UNSUPPORTED_VERSION = 102,
  TENSORTIER_ERR_DAEMON_NOT_REGISTERED = 103,
  TENSORTIER_ERR_DAEMON_NO_SUCH_REGION = 104,
  TENSORTIER_ERR_DAEMON_REGION_NOT_MAPPED = 105,
  TENSORTIER_ERR_DAEMON_REGION_OVERLAPS = 106,
  TENSORTIER_ERR_DAEMON_LIMIT_EXCEEDED = 107,
  TENSORTIER_ERR_DAEMON_PERMISSION_DENIED = 108,
  TENSORTIER_ERR_DAEMON_FRAME_TOO_LARGE = 109,
  TENSORTIER_ERR_DAEMON_INTERNAL = 110,
  TENSORTIER_ERR_DAEMON_STARTING = 111 /* admin requests only: the daemon's sources are still opening */
} tensortier_status;

/* Same numbers as tensortier.v1.RegionKind. */
typedef enum tensortier_region_kind {
  TENSORTIER_KIND_UNSPECIFIED = 0,
  TENSORTIER_KIND_WEIGHT = 1,
  TENSORTIER_KIND_GRADIENT = 2,
  TENSORTIER_KIND_OPTIMIZER_STATE = 3,
  TENSORTIER_KIND_ACTIVATION = 4,
  TENSORTIER_KIND_WORKSPACE = 5,
  TENSORTIER_KIND_OTHER = 6
} tensortier_region_kind;

typedef enum tensortier_log_level {
  TENSORTIER_LOG_DEBUG = 0,
  TENSORTIER_LOG_INFO = 1,
  TENSORTIER_LOG_WARN = 2,
  TENSORTIER_LOG_ERROR = 3
} tensortier_log_level;

typedef struct tensortier_options {
  uint32_t struct_size;          /* sizeof(tensortier_options); set by tensortier_options_init */
  const char* socket_path;       /* NULL: $TENSORTIER_SOCKET, else /run/tensortier/tensortier.sock */
  const char* client_name;       /* NULL: "pid N"; shown in the daemon's logs */
  uint32_t call_timeout_ms;      /* bound on calls that wait for a reply (default 2000) */
  uint32_t connect_timeout_ms;   /* bound on one connect + Hello attempt (default 500) */
  uint32_t reconnect_initial_ms; /* first retry delay after a failed connect (default 100) */
  uint32_t reconnect_max_ms;     /* the retry delay doubles up to this (default 5000) */
  int32_t accepts_mbind;         /* carry out the daemon's MbindRequests (default 1) */
} tensortier_options;

typedef struct tensortier_stats {
  uint32_t struct_size;        /* set by the caller to sizeof(tensortier_stats) */
  int32_t connected;           /* 1 while a session with the daemon is up */
  uint64_t connects;           /* successful connect + Hello, the first included */
  uint64_t disconnects;        /* sessions lost */
  uint64_t regions_live;       /* handles not yet unregistered */
  uint64_t regions_bound;      /* of those, the ones the daemon currently knows (has an id for) */
  uint64_t registrations_sent; /* RegisterRegion messages sent, re-registrations included */
  uint64_t marks_sent;
  uint64_t marks_dropped;      /* iteration marks dropped while disconnected or the socket was full */
  uint64_t mbind_done;         /* MbindRequests carried out successfully */
  uint64_t mbind_failed;       /* MbindRequests refused or failed (answered with an errno) */
} tensortier_stats;

typedef struct tensortier_region_placement {
  tensortier_region handle;  /* this client's handle for the region, 0 if it has none */
  uint64_t region_id;        /* the daemon's id (changes when the daemon restarts) */
  uint64_t address;
  uint64_t length;
  uint64_t unmapped_bytes;   /* pages not faulted in yet */
  double heat;
  int32_t kind;              /* tensortier_region_kind */
  uint32_t node_count;       /* entries in nodes / node_bytes */
  const char* name;
  const int32_t* nodes;      /* NUMA node numbers */
  const uint64_t* node_bytes;/* bytes of the region resident on nodes[i] */
  /* 1: every page was asked where it is; N: every Nth, each counted for N (the query was over the
   * daemon's per-request page budget, so the bytes are an estimate). Last: the struct only grows. */
  uint32_t sample_stride;
} tensortier_region_placement;

/* "1.0.0"-style version of the library. */
TENSORTIER_API const char* tensortier_version(void);
/* Message of the last failure on this thread ("" if none). Valid until the next call that fails. */
TENSORTIER_API const char* tensortier_last_error(void);
/* "TENSORTIER_ERR_TIMEOUT" etc. */
TENSORTIER_API const char* tensortier_status_name(int status);

/* Log lines of the library go to stderr unless a handler is set (NULL restores stderr). The
 * handler may be called from the library's background threads. Process-wide. */
typedef void (*tensortier_log_fn)(int level, const char* message, void* user);
TENSORTIER_API void tensortier_set_log_handler(tensortier_log_fn handler, void* user);
TENSORTIER_API void tensortier_set_log_level(int level);

TENSORTIER_API void tensortier_options_init(tensortier_options* options);
/* Connects (one bounded attempt; when the daemon is absent the client still comes up and keeps
 * trying in the background). options may be NULL for the defaults. */
TENSORTIER_API int tensortier_client_create(const tensortier_options* options, tensortier_client** out);
/* Closes the session (the daemon forgets the client's regions) and frees the client. NULL is ok. */
TENSORTIER_API void tensortier_client_destroy(tensortier_client* client);
TENSORTIER_API int tensortier_client_connected(const tensortier_client* client);
TENSORTIER_API int tensortier_client_stats(const tensortier_client* client, tensortier_stats* out);
/* Negotiated protocol version, 0 while disconnected. */
TENSORTIER_API uint32_t tensortier_client_protocol_version(const tensortier_client* client);

/* Registers [address, address + length). Fails only on bad arguments or when the daemon rejects
 * the region (e.g. TENSORTIER_ERR_DAEMON_REGION_OVERLAPS); while disconnected, or when the reply
 * is slow, the handle is returned and the registration completes in the background. */
TENSORTIER_API int tensortier_register_region(tensortier_client* client, const void* address, uint64_t length,
                                              const char* name, int kind, uint64_t expected_lifetime_steps,
                                              tensortier_region* out);
TENSORTIER_API int tensortier_unregister_region(tensortier_client* client, tensortier_region region);

/* Iteration marks: fire-and-forget, never wait for the daemon. TENSORTIER_ERR_UNAVAILABLE when
 * the mark was dropped (not connected, or the socket was full). */
TENSORTIER_API int tensortier_step_begin(tensortier_client* client, uint64_t step);
TENSORTIER_API int tensortier_step_end(tensortier_client* client, uint64_t step);
TENSORTIER_API int tensortier_phase_begin(tensortier_client* client, uint64_t step, const char* phase);

/* Where the given regions' pages are (count 0: all of this client's regions). Free the result with
 * tensortier_placement_free. */
TENSORTIER_API int tensortier_query_placement(tensortier_client* client, const tensortier_region* regions,
                                              size_t count, tensortier_placement** out);
TENSORTIER_API size_t tensortier_placement_count(const tensortier_placement* placement);
TENSORTIER_API const tensortier_region_placement* tensortier_placement_at(const tensortier_placement* placement,
                                                                         size_t index);
TENSORTIER_API void tensortier_placement_free(tensortier_placement* placement);

#ifdef __cplusplus
}
#endif

#endif /* TENSORTIER_TENSORTIER_H */
