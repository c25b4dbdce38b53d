/* Exercises the C ABI from a program compiled as C (not C++). Driven by CAbiTest.cpp, which runs a
 * fake daemon and checks what arrived there. argv[1]: "connected" or "absent" (no daemon).
 * Exit status 0 = every check passed; otherwise the line of the first failed check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensortier/tensortier.h"

#define CHECK(cond)                                                                                   \
  do {                                                                                                \
    if (!(cond)) {                                                                                    \
      fprintf(stderr, "c_abi_program: check failed at line %d: %s (last error: %s)\n", __LINE__, #cond, \
              tensortier_last_error());                                                               \
      return __LINE__ % 256 == 0 ? 1 : __LINE__ % 256;                                                \
    }                                                                                                 \
  } while (0)

static int warnings = 0;
static void on_log(int level, const char* message, void* user) {
  (void)message;
  if (level >= TENSORTIER_LOG_WARN) ++*(int*)user;
}

static int connected_case(void) {
  tensortier_options opts;
  tensortier_options_init(&opts);
  CHECK(opts.struct_size == sizeof opts);
  CHECK(opts.accepts_mbind == 1);
  opts.client_name = "c-abi-program";
  opts.call_timeout_ms = 2000;
  tensortier_client* c = NULL;
  CHECK(tensortier_client_create(&opts, &c) == TENSORTIER_OK && c != NULL);
  CHECK(tensortier_client_connected(c) == 1);
  CHECK(tensortier_client_protocol_version(c) == 1);

  /* Page-aligned and touched, so that a real daemon reports them fully resident on node 0. */
  static _Alignas(4096) char weights[3 * 4096];
  static _Alignas(4096) char grads[2 * 4096];
  memset(weights, 1, sizeof weights);
  memset(grads, 2, sizeof grads);
  tensortier_region w = 0, g = 0, bad = 0;
  CHECK(tensortier_register_region(c, weights, sizeof weights, "c.weights", TENSORTIER_KIND_WEIGHT, 0, &w) ==
        TENSORTIER_OK);
  CHECK(tensortier_register_region(c, grads, sizeof grads, "c.grads", TENSORTIER_KIND_GRADIENT, 5, &g) ==
        TENSORTIER_OK);
  CHECK(w != 0 && g != 0 && w != g);
  /* The daemon's rejection comes back as a status and a message. */
  CHECK(tensortier_register_region(c, weights + 10, 10, "c.overlap", TENSORTIER_KIND_OTHER, 0, &bad) ==
        TENSORTIER_ERR_DAEMON_REGION_OVERLAPS);
  CHECK(bad == 0);
  CHECK(strstr(tensortier_last_error(), "REGION_OVERLAPS") != NULL);
  CHECK(strcmp(tensortier_status_name(TENSORTIER_ERR_DAEMON_STARTING), "TENSORTIER_ERR_DAEMON_STARTING") == 0);
  CHECK(strcmp(tensortier_status_name(TENSORTIER_ERR_DAEMON_REGION_OVERLAPS),
               "TENSORTIER_ERR_DAEMON_REGION_OVERLAPS") == 0);
  /* Bad arguments. */
  CHECK(tensortier_register_region(c, NULL, 10, "x", TENSORTIER_KIND_WEIGHT, 0, &bad) ==
        TENSORTIER_ERR_INVALID_ARGUMENT);
  CHECK(strlen(tensortier_last_error()) > 0);
  CHECK(tensortier_register_region(c, weights, 10, "x", 99, 0, &bad) == TENSORTIER_ERR_INVALID_ARGUMENT);
  CHECK(tensortier_unregister_region(c, 12345) == TENSORTIER_ERR_NO_SUCH_HANDLE);

  CHECK(tensortier_step_begin(c, 1) == TENSORTIER_OK);
  CHECK(tensortier_phase_begin(c, 1, "forward") == TENSORTIER_OK);
  CHECK(tensortier_phase_begin(c, 1, NULL) == TENSORTIER_ERR_INVALID_ARGUMENT);
  CHECK(tensortier_step_end(c, 1) == TENSORTIER_OK);

  tensortier_placement* p = NULL;
  CHECK(tensortier_query_placement(c, NULL, 0, &p) == TENSORTIER_OK && p != NULL);
  CHECK(tensortier_placement_count(p) == 2);
  int seen = 0;
  for (size_t i = 0; i < tensortier_placement_count(p); ++i) {
    const tensortier_region_placement* r = tensortier_placement_at(p, i);
    CHECK(r != NULL);
    CHECK(r->sample_stride == 1); /* small regions: every page asked */
    if (r->handle == w) {
      CHECK(strcmp(r->name, "c.weights") == 0);
      CHECK(r->kind == TENSORTIER_KIND_WEIGHT);
      CHECK(r->address == (uint64_t)(uintptr_t)weights && r->length == sizeof weights);
      seen |= 1;
    } else if (r->handle == g) {
      CHECK(r->kind == TENSORTIER_KIND_GRADIENT);
      seen |= 2;
    }
    CHECK(r->node_count == 1 && r->nodes[0] == 0 && r->node_bytes[0] == r->length);
  }
  CHECK(seen == 3);
  CHECK(tensortier_placement_at(p, 2) == NULL);
  tensortier_placement_free(p);

  p = NULL;
  CHECK(tensortier_query_placement(c, &g, 1, &p) == TENSORTIER_OK);
  CHECK(tensortier_placement_count(p) == 1 && tensortier_placement_at(p, 0)->handle == g);
  tensortier_placement_free(p);

  CHECK(tensortier_unregister_region(c, g) == TENSORTIER_OK);
  tensortier_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK(tensortier_client_stats(c, &s) == TENSORTIER_OK);
  CHECK(s.connected == 1 && s.regions_live == 1 && s.regions_bound == 1 && s.marks_sent == 3);
  /* Leaves c.weights registered: the driver checks the daemon still has it, then sends "quit". */
  printf("registered\n");
  fflush(stdout);
  char line[64];
  if (fgets(line, sizeof line, stdin) == NULL) return 3;
  tensortier_client_destroy(c);
  return 0;
}

static int absent_case(void) {
  tensortier_set_log_handler(on_log, &warnings);
  tensortier_options opts;
  tensortier_options_init(&opts);
  opts.reconnect_initial_ms = 5;
  opts.reconnect_max_ms = 10;
  tensortier_client* c = NULL;
  CHECK(tensortier_client_create(&opts, &c) == TENSORTIER_OK);
  CHECK(tensortier_client_connected(c) == 0);
  static char buf[4096];
  tensortier_region r = 0;
  for (int i = 0; i < 50; ++i) {
    CHECK(tensortier_register_region(c, buf + i, 1, "queued", TENSORTIER_KIND_ACTIVATION, 0, &r) == TENSORTIER_OK);
    CHECK(r != 0);
    CHECK(tensortier_step_begin(c, (uint64_t)i) == TENSORTIER_ERR_UNAVAILABLE);
  }
  tensortier_placement* p = NULL;
  CHECK(tensortier_query_placement(c, NULL, 0, &p) == TENSORTIER_ERR_UNAVAILABLE && p == NULL);
  tensortier_client_destroy(c);
  tensortier_set_log_handler(NULL, NULL);
  CHECK(warnings == 1);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  if (tensortier_version()[0] != (char)('0' + TENSORTIER_ABI_VERSION)) return 4; /* major = SOVERSION */
  if (strcmp(argv[1], "connected") == 0) return connected_case();
  if (strcmp(argv[1], "absent") == 0) return absent_case();
  return 2;
}
