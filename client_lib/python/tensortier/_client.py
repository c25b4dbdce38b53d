"""The Python client: a thin layer over the C ABI plus PyTorch helpers (duck-typed, torch optional)."""

import atexit
import contextlib
import ctypes
import enum
import logging
import mmap
import threading
import weakref

from . import _native

log = logging.getLogger("tensortier")

OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_UNAVAILABLE = 2
ERR_TIMEOUT = 3
ERR_PROTOCOL = 4
ERR_NO_SUCH_HANDLE = 5
ERR_DAEMON_BASE = 100


class RegionKind(enum.IntEnum):
    UNSPECIFIED = 0
    WEIGHT = 1
    GRADIENT = 2
    OPTIMIZER_STATE = 3
    ACTIVATION = 4
    WORKSPACE = 5
    OTHER = 6


class TensortierError(RuntimeError):
    """A failed call: .code is the C ABI's tensortier_status, .status_name its name."""

    def __init__(self, code, message):
        self.code = code
        self.status_name = _native.lib().tensortier_status_name(code).decode()
        super().__init__(f"{self.status_name}: {message}")


def _check(code):
    if code != OK:
        raise TensortierError(code, _native.lib().tensortier_last_error().decode(errors="replace"))


def version():
    return _native.lib().tensortier_version().decode()


_log_handler_ref = None


def set_log_handler(handler):
    """handler(level:int, message:str) receives the library's log lines (None: back to stderr).
    It may be called from the library's background threads."""
    global _log_handler_ref
    l = _native.lib()
    if handler is None:
        l.tensortier_set_log_handler(_native.LOG_FN(), None)
        _log_handler_ref = None
        return

    def trampoline(level, message, _user):
        try:
            handler(level, message.decode(errors="replace"))
        except Exception:  # never let an exception cross into C
            pass

    _log_handler_ref = _native.LOG_FN(trampoline)
    l.tensortier_set_log_handler(_log_handler_ref, None)
    atexit.register(_reset_log_handler)


def _reset_log_handler():
    # The library's threads must not call into an interpreter that is shutting down.
    if _log_handler_ref is not None:
        set_log_handler(None)


class Placement:
    __slots__ = ("handle", "region_id", "name", "kind", "address", "length", "bytes_per_node", "unmapped_bytes",
                 "heat", "sample_stride")

    def __repr__(self):
        return (f"Placement({self.name!r}, kind={self.kind.name}, length={self.length}, "
                f"bytes_per_node={self.bytes_per_node}, heat={self.heat:.3g})")


class Region:
    """A registered memory range. Unregisters itself when its tensor is garbage collected."""

    __slots__ = ("client", "handle", "name", "kind", "address", "length", "source", "_finalizer", "__weakref__")

    def __init__(self, client, handle, name, kind, address, length, source=None):
        self.client, self.handle, self.name, self.kind = client, handle, name, kind
        self.address, self.length = address, length  # what the daemon was given
        self.source = source  # (data_ptr, nbytes) of the tensor, for tensors
        self._finalizer = None

    def unregister(self):
        if self._finalizer is not None:
            self._finalizer.detach()
        self.client._unregister_quietly(self.handle)

    def __repr__(self):
        return f"Region({self.name!r}, {self.kind.name}, {self.length} bytes at {self.address:#x})"


PAGE_SIZE = mmap.PAGESIZE


def _tensor_span(tensor):
    """(address, nbytes) of a CPU tensor's elements, or None for tensors not in host memory."""
    if tensor is None or getattr(tensor, "device", None) is None or tensor.device.type != "cpu":
        return None
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return None
    return tensor.data_ptr(), nbytes


def _whole_pages(address, nbytes):
    """The pages lying entirely inside [address, address + nbytes), as (start, length), or None.

    The daemon places whole pages and refuses regions whose pages overlap, so two tensors sharing a
    page (small tensors from the allocator's heap, neighbours without page alignment) could not
    both be registered by their bytes. A page shared with another tensor belongs to neither."""
    start = (address + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE
    end = (address + nbytes) // PAGE_SIZE * PAGE_SIZE
    return (start, end - start) if end > start else None


_live_clients = weakref.WeakSet()


@atexit.register
def _close_all_at_exit():
    # Stop the library's threads while the interpreter (and the process's globals) are intact.
    for c in list(_live_clients):
        try:
            c.close()
        except Exception:
            pass


class _Skipped:
    """A tracked tensor that was not registered (too small, or rejected), until its memory changes."""

    __slots__ = ("source",)

    def __init__(self, source):
        self.source = source

    def unregister(self):
        pass


class Client:
    """One session with tensortierd. Never raises or blocks for long because the daemon is absent:
    registrations are then queued, marks dropped, and one warning is logged."""

    def __init__(self, socket_path=None, name=None, call_timeout_ms=None, connect_timeout_ms=None,
                 reconnect_initial_ms=None, reconnect_max_ms=None, accepts_mbind=True):
        l = _native.lib()
        opts = _native.Options()
        l.tensortier_options_init(ctypes.byref(opts))
        if socket_path is not None:
            opts.socket_path = str(socket_path).encode()
        if name is not None:
            opts.client_name = str(name).encode()
        for field, value in (("call_timeout_ms", call_timeout_ms), ("connect_timeout_ms", connect_timeout_ms),
                             ("reconnect_initial_ms", reconnect_initial_ms), ("reconnect_max_ms", reconnect_max_ms)):
            if value is not None:
                setattr(opts, field, int(value))
        opts.accepts_mbind = 1 if accepts_mbind else 0
        handle = ctypes.c_void_p()
        _check(l.tensortier_client_create(ctypes.byref(opts), ctypes.byref(handle)))
        self._lib = l
        self._c = handle
        self._lock = threading.RLock()
        self._step = 0
        self._modules = []      # (prefix, module) whose gradients are tracked
        self._optimizers = []   # optimizers whose state is tracked
        self._param_names = {}  # id(param) -> qualified name, for naming grads / optimizer state
        self._tracked = {}      # key -> Region or _Skipped, for lazily appearing tensors (grads, state)
        self.skipped = {}       # tensor name -> why it is not registered (too small, rejected)
        self._warned_rejection = False
        _live_clients.add(self)

    # ------------------------------------------------------------------ lifecycle
    def close(self):
        """Ends the session; the daemon forgets this client's regions."""
        with self._lock:
            if self._c is not None:
                c, self._c = self._c, None
                self._lib.tensortier_client_destroy(c)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def connected(self):
        return self._c is not None and self._lib.tensortier_client_connected(self._c) == 1

    @property
    def protocol_version(self):
        return 0 if self._c is None else self._lib.tensortier_client_protocol_version(self._c)

    def stats(self):
        s = _native.Stats()
        s.struct_size = ctypes.sizeof(s)
        if self._c is None:
            return {"connected": False}
        _check(self._lib.tensortier_client_stats(self._c, ctypes.byref(s)))
        out = {name: getattr(s, name) for name, _ in s._fields_ if name != "struct_size"}
        out["connected"] = bool(out["connected"])
        return out

    # ------------------------------------------------------------------ regions
    def register(self, address, length, name="", kind=RegionKind.OTHER, expected_lifetime_steps=0):
        """Registers [address, address + length); returns the handle (int). Raises TensortierError on
        bad arguments or when the daemon rejects the region; queues it while the daemon is absent."""
        if self._c is None:
            raise TensortierError(ERR_UNAVAILABLE, "client closed")
        out = _native.c_region()
        _check(self._lib.tensortier_register_region(self._c, ctypes.c_void_p(address), int(length),
                                                    str(name).encode(), int(kind), int(expected_lifetime_steps),
                                                    ctypes.byref(out)))
        return out.value

    def unregister(self, handle):
        if self._c is None:
            return
        _check(self._lib.tensortier_unregister_region(self._c, int(handle)))

    def _unregister_quietly(self, handle):
        with self._lock:
            if self._c is None:
                return
            code = self._lib.tensortier_unregister_region(self._c, int(handle))
        if code not in (OK, ERR_NO_SUCH_HANDLE, ERR_UNAVAILABLE):
            log.debug("tensortier: unregister %d: %s", handle, self._lib.tensortier_last_error().decode())

    def register_tensor(self, tensor, kind=RegionKind.OTHER, name=None, expected_lifetime_steps=0):
        """Registers the memory of a CPU tensor (from data_ptr() and numel() * element_size()): the
        whole pages inside it, since the daemon places pages and a page shared with a neighbouring
        tensor cannot belong to both. Returns a Region, or None (reason in .skipped[name]) for a
        tensor not in host memory, one without a whole page, or one the daemon rejected. The region
        is unregistered when the tensor is garbage collected, or by Region.unregister()."""
        span = _tensor_span(tensor)
        if name is None:
            name = f"tensor@{span[0]:#x}" if span else "tensor"
        if span is None:
            self.skipped[name] = "not a CPU tensor, or empty"
            return None
        pages = _whole_pages(*span)
        if pages is None:
            self.skipped[name] = f"smaller than a page ({span[1]} bytes at {span[0]:#x} hold no whole page)"
            return None
        address, length = pages
        try:
            handle = self.register(address, length, name, kind, expected_lifetime_steps)
        except TensortierError as e:
            self.skipped[name] = str(e)
            if not self._warned_rejection:
                self._warned_rejection = True
                log.warning("tensortier: not registering %s: %s (further rejections are only logged at "
                            "debug level; see Client.skipped)", name, e)
            else:
                log.debug("tensortier: not registering %s: %s", name, e)
            return None
        self.skipped.pop(name, None)
        region = Region(self, handle, name, RegionKind(kind), address, length, span)
        try:
            region._finalizer = weakref.finalize(tensor, self._unregister_quietly, handle)
            region._finalizer.atexit = False
        except TypeError:  # objects without weak references: the caller unregisters
            pass
        return region

    def register_module(self, module, prefix=""):
        """Registers a module's parameters (WEIGHT) now, and its gradients (GRADIENT) as they
        appear: after the first backward they are picked up at the end of each step() or by
        refresh(). Returns the parameters' Regions."""
        regions = []
        with self._lock:
            self._modules.append((prefix, module))
            for pname, p in module.named_parameters():
                qualified = prefix + pname
                self._param_names[id(p)] = qualified
                region = self.register_tensor(p, RegionKind.WEIGHT, qualified)
                if region is not None:
                    regions.append(region)
        self.refresh()
        return regions

    def register_optimizer(self, optimizer):
        """Tracks an optimizer's state tensors (Adam's exp_avg / exp_avg_sq, momentum buffers, ...) as
        OPTIMIZER_STATE; they exist after the first optimizer.step() and are registered at the end
        of each step() or by refresh()."""
        with self._lock:
            self._optimizers.append(optimizer)
        self.refresh()

    def refresh(self):
        """Registers gradients and optimizer state that appeared, re-registers the ones whose memory
        moved, and unregisters the ones that went away (e.g. zero_grad(set_to_none=True))."""
        seen = set()
        with self._lock:
            for prefix, module in self._modules:
                for pname, p in module.named_parameters():
                    key = ("grad", id(p))
                    seen.add(key)
                    self._track(key, p.grad, RegionKind.GRADIENT, prefix + pname + ".grad")
            for opt in self._optimizers:
                for gi, group in enumerate(opt.param_groups):
                    for pi, p in enumerate(group["params"]):
                        state = opt.state.get(p, {})
                        pname = self._param_names.get(id(p), f"group{gi}.param{pi}")
                        for sname, value in state.items():
                            if not hasattr(value, "data_ptr") or value.dim() == 0:
                                continue  # the step counter and other scalars
                            key = ("opt", id(opt), id(p), sname)
                            seen.add(key)
                            self._track(key, value, RegionKind.OPTIMIZER_STATE, f"{pname}.{sname}")
            for key in [k for k in self._tracked if k not in seen]:
                self._tracked.pop(key).unregister()

    def _track(self, key, tensor, kind, name):
        old = self._tracked.get(key)
        span = _tensor_span(tensor)
        if old is not None and span == old.source:
            return  # unchanged (registered, or skipped for good reason: not retried every step)
        if old is not None:
            old.unregister()
            del self._tracked[key]
        if span is not None:
            region = self.register_tensor(tensor, kind, name)
            self._tracked[key] = region if region is not None else _Skipped(span)

    def query_placement(self, regions=None):
        """[Placement] for the given Regions / handles (None: all of this client's regions).
        Raises TensortierError (ERR_UNAVAILABLE while disconnected, ERR_TIMEOUT)."""
        if self._c is None:
            raise TensortierError(ERR_UNAVAILABLE, "client closed")
        handles = [r.handle if isinstance(r, Region) else int(r) for r in (regions or [])]
        arr = (_native.c_region * len(handles))(*handles) if handles else None
        out = ctypes.c_void_p()
        _check(self._lib.tensortier_query_placement(self._c, arr, len(handles), ctypes.byref(out)))
        try:
            result = []
            for i in range(self._lib.tensortier_placement_count(out)):
                r = self._lib.tensortier_placement_at(out, i).contents
                p = Placement()
                p.handle, p.region_id, p.name = r.handle, r.region_id, r.name.decode(errors="replace")
                p.kind = RegionKind(r.kind) if r.kind in RegionKind._value2member_map_ else RegionKind.OTHER
                p.address, p.length, p.unmapped_bytes, p.heat = r.address, r.length, r.unmapped_bytes, r.heat
                p.sample_stride = r.sample_stride  # 1: exact; N: every Nth page asked (an estimate)
                p.bytes_per_node = {r.nodes[j]: r.node_bytes[j] for j in range(r.node_count)}
                result.append(p)
            return result
        finally:
            self._lib.tensortier_placement_free(out)

    # ------------------------------------------------------------------ iteration marks
    def step_begin(self, step):
        self._step = int(step)
        return self._c is not None and self._lib.tensortier_step_begin(self._c, self._step) == OK

    def step_end(self, step=None):
        step = self._step if step is None else int(step)
        return self._c is not None and self._lib.tensortier_step_end(self._c, step) == OK

    def phase_begin(self, phase, step=None):
        step = self._step if step is None else int(step)
        return self._c is not None and self._lib.tensortier_phase_begin(self._c, step, str(phase).encode()) == OK

    @contextlib.contextmanager
    def step(self, step):
        """with client.step(i): ... marks the step's begin and end; at the end, gradients and
        optimizer state that appeared during the step are registered (refresh())."""
        self.step_begin(step)
        try:
            yield self
        finally:
            try:
                self.refresh()
            finally:
                self.step_end(step)

    @contextlib.contextmanager
    def phase(self, name):
        """with client.phase("forward"): marks the phase's begin (phases end where the next begins)."""
        self.phase_begin(name)
        yield self
