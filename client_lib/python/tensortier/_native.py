"""ctypes bindings of libtensortier.so.1 (the C ABI in tensortier/tensortier.h). No compiled code."""

import ctypes
import os

SONAME = "libtensortier.so.1"

c_region = ctypes.c_uint64


class Options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("socket_path", ctypes.c_char_p),
        ("client_name", ctypes.c_char_p),
        ("call_timeout_ms", ctypes.c_uint32),
        ("connect_timeout_ms", ctypes.c_uint32),
        ("reconnect_initial_ms", ctypes.c_uint32),
        ("reconnect_max_ms", ctypes.c_uint32),
        ("accepts_mbind", ctypes.c_int32),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("connected", ctypes.c_int32),
        ("connects", ctypes.c_uint64),
        ("disconnects", ctypes.c_uint64),
        ("regions_live", ctypes.c_uint64),
        ("regions_bound", ctypes.c_uint64),
        ("registrations_sent", ctypes.c_uint64),
        ("marks_sent", ctypes.c_uint64),
        ("marks_dropped", ctypes.c_uint64),
        ("mbind_done", ctypes.c_uint64),
        ("mbind_failed", ctypes.c_uint64),
    ]


class RegionPlacement(ctypes.Structure):
    _fields_ = [
        ("handle", c_region),
        ("region_id", ctypes.c_uint64),
        ("address", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
        ("unmapped_bytes", ctypes.c_uint64),
        ("heat", ctypes.c_double),
        ("kind", ctypes.c_int32),
        ("node_count", ctypes.c_uint32),
        ("name", ctypes.c_char_p),
        ("nodes", ctypes.POINTER(ctypes.c_int32)),
        ("node_bytes", ctypes.POINTER(ctypes.c_uint64)),
        ("sample_stride", ctypes.c_uint32),
    ]


LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def _candidates():
    env = os.environ.get("TENSORTIER_LIB")
    if env:
        yield os.path.join(env, SONAME) if os.path.isdir(env) else env
    try:
        from . import _install_paths  # written by `cmake --install`

        yield _install_paths.LIBRARY
    except ImportError:
        pass
    yield SONAME  # the dynamic loader's search path (ldconfig, LD_LIBRARY_PATH)


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise OSError(
        "tensortier: cannot load libtensortier.so.1 (set TENSORTIER_LIB to the library or its folder, "
        "or install it with `cmake --install`): " + "; ".join(errors)
    )


_lib = None
_lib_path = None


def lib():
    """The loaded library, with argument and result types declared (loaded on first use)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    l, path = _load()
    P = ctypes.POINTER
    sigs = {
        "tensortier_version": (ctypes.c_char_p, []),
        "tensortier_last_error": (ctypes.c_char_p, []),
        "tensortier_status_name": (ctypes.c_char_p, [ctypes.c_int]),
        "tensortier_set_log_handler": (None, [LOG_FN, ctypes.c_void_p]),
        "tensortier_set_log_level": (None, [ctypes.c_int]),
        "tensortier_options_init": (None, [P(Options)]),
        "tensortier_client_create": (ctypes.c_int, [P(Options), P(ctypes.c_void_p)]),
        "tensortier_client_destroy": (None, [ctypes.c_void_p]),
        "tensortier_client_connected": (ctypes.c_int, [ctypes.c_void_p]),
        "tensortier_client_stats": (ctypes.c_int, [ctypes.c_void_p, P(Stats)]),
        "tensortier_client_protocol_version": (ctypes.c_uint32, [ctypes.c_void_p]),
        "tensortier_register_region": (
            ctypes.c_int,
            [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64,
             P(c_region)],
        ),
        "tensortier_unregister_region": (ctypes.c_int, [ctypes.c_void_p, c_region]),
        "tensortier_step_begin": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64]),
        "tensortier_step_end": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64]),
        "tensortier_phase_begin": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p]),
        "tensortier_query_placement": (
            ctypes.c_int, [ctypes.c_void_p, P(c_region), ctypes.c_size_t, P(ctypes.c_void_p)]),
        "tensortier_placement_count": (ctypes.c_size_t, [ctypes.c_void_p]),
        "tensortier_placement_at": (P(RegionPlacement), [ctypes.c_void_p, ctypes.c_size_t]),
        "tensortier_placement_free": (None, [ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(l, name)
        fn.restype = restype
        fn.argtypes = argtypes
    _lib, _lib_path = l, path
    return l


def library_path():
    lib()
    return _lib_path
