"""tensortier: register a training process's tensors and iteration boundaries with tensortierd.

    import tensortier as tt
    tt.init(name="train.py")                # connects; a missing daemon only logs one warning
    tt.register_module(model)               # parameters now, gradients once they exist
    tt.register_optimizer(optimizer)        # Adam exp_avg / exp_avg_sq once they exist
    for i, (x, y) in enumerate(loader):
        with tt.step(i):
            tt.phase("forward");   loss = loss_fn(model(x), y)
            tt.phase("backward");  loss.backward()
            tt.phase("optimizer"); optimizer.step(); optimizer.zero_grad()

Built on the C ABI of libtensortier.so.1 with ctypes (found through $TENSORTIER_LIB, the installed
path, or the dynamic loader). Works with any PyTorch; torch is not imported by this package.
"""

import atexit

from ._client import (  # noqa: F401
    PAGE_SIZE,
    Client,
    Placement,
    Region,
    RegionKind,
    TensortierError,
    set_log_handler,
    version,
)
from ._native import library_path  # noqa: F401

WEIGHT = RegionKind.WEIGHT
GRADIENT = RegionKind.GRADIENT
OPTIMIZER_STATE = RegionKind.OPTIMIZER_STATE
ACTIVATION = RegionKind.ACTIVATION
WORKSPACE = RegionKind.WORKSPACE
OTHER = RegionKind.OTHER

_default = None


def _close_default_at_exit():
    shutdown()


def init(**options):
    """Creates the process-wide default client (Client(**options)) used by the functions below."""
    global _default
    if _default is not None:
        _default.close()
    _default = Client(**options)
    return _default


def client():
    """The default client, created with default options on first use."""
    global _default
    if _default is None:
        _default = Client()
    return _default


def shutdown():
    """Closes the default client (also done at interpreter exit)."""
    global _default
    if _default is not None:
        _default.close()
        _default = None


atexit.register(_close_default_at_exit)


def _close_default_at_exit():
    shutdown()


def register_tensor(tensor, kind=RegionKind.OTHER, name=None, expected_lifetime_steps=0):
    return client().register_tensor(tensor, kind, name, expected_lifetime_steps)


def register_module(module, prefix=""):
    return client().register_module(module, prefix)


def register_optimizer(optimizer):
    return client().register_optimizer(optimizer)


def step(i):
    """with tt.step(i): marks begin/end of step i and registers new gradients/optimizer state."""
    return client().step(i)


def phase(name, step=None):
    """Marks the beginning of a phase ("forward", "backward", "optimizer") of the current step."""
    return client().phase_begin(name, step)


def query_placement(regions=None):
    return client().query_placement(regions)
