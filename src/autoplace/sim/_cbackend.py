"""ctypes binding of the C event loop (``_csim.c``); ``None`` when it was not built.

``AUTOPLACE_SIM_BACKEND=numba`` forces the numba kernel (the reference implementation).
"""

from __future__ import annotations

import ctypes
import os
import warnings
from pathlib import Path

from autoplace.sim._args import C_ARRAYS

__all__ = ["load", "BACKEND", "simulate", "record", "rerecord", "run_recorded", "free_recorded"]

N_ARRAYS = len(C_ARRAYS)  # the arrays ap_simulate takes after its sizes


def load() -> ctypes.CDLL | None:
    if os.environ.get("AUTOPLACE_SIM_BACKEND", "").lower() == "numba":
        return None
    here = Path(__file__).parent
    for path in sorted(here.glob("_csim*.so")) + sorted(here.glob("_csim*.pyd")):
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            continue
        names = getattr(lib, "ap_arg_names", None)
        if names is not None:
            names.restype = ctypes.c_char_p
        if names is None or names().decode().split(",") != list(C_ARRAYS):
            warnings.warn(f"{path.name} is a stale build of the C simulator (rebuild it: pip install -e . or "
                          "python setup.py build_ext --inplace); using the numba kernel", RuntimeWarning, stacklevel=2)
            continue
        fn = lib.ap_simulate
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int64] * 7 + [ctypes.c_void_p] * N_ARRAYS
        lib.ap_inc_new.restype = ctypes.c_void_p
        lib.ap_inc_new.argtypes = [ctypes.c_int64] * 7 + [ctypes.c_void_p] * N_ARRAYS
        lib.ap_inc_run.restype = ctypes.c_int
        lib.ap_inc_run.argtypes = [ctypes.c_void_p, ctypes.c_int64] + [ctypes.c_void_p] * 10
        lib.ap_inc_reset.restype = None
        lib.ap_inc_reset.argtypes = [ctypes.c_void_p] * 11
        lib.ap_inc_free.restype = None
        lib.ap_inc_free.argtypes = [ctypes.c_void_p]
        return lib
    return None


_LIB = load()
BACKEND = "c" if _LIB is not None else "numba"


def simulate(B, n, T, P, D, S, H, arrays) -> None:
    """Call ``ap_simulate`` with the contiguous arrays in its argument order (after the sizes; the graph's
    index arrays as int32, see ``Simulator._c_graph_args``)."""
    if len(arrays) != N_ARRAYS:
        raise TypeError(f"ap_simulate takes {N_ARRAYS} arrays, got {len(arrays)}")
    rc = _LIB.ap_simulate(B, n, T, P, D, S, H, *[a.ctypes.data for a in arrays])
    if rc == -2:
        raise ValueError("the graph is too large for the C simulator (2^31 ops, or tensors and edges); "
                         "use AUTOPLACE_SIM_BACKEND=numba")
    if rc != 0:
        raise MemoryError("the simulator could not allocate its work space")


def record(snapshots, n, T, P, D, S, H, arrays) -> int:
    """Record one placement's run (``arrays`` as for :func:`simulate`, with B = 1 and no schedule) with up to
    ``snapshots`` snapshots; its results go to the output arrays. Returns the handle for
    :func:`run_recorded` (the graph's and cluster's arrays must outlive it; :func:`free_recorded` frees it)."""
    if len(arrays) != N_ARRAYS:
        raise TypeError(f"ap_inc_new takes {N_ARRAYS} arrays, got {len(arrays)}")
    handle = _LIB.ap_inc_new(snapshots, n, T, P, D, S, H, *[a.ctypes.data for a in arrays])
    if not handle:
        raise MemoryError("the simulator could not allocate its work space")
    return handle


def run_recorded(handle, devs, outputs) -> None:
    """Simulate the rows of ``devs`` from the recorded run ``handle``; ``outputs``: step_time, busy_time,
    host_time, peak, link_time, link_bytes, seg_time, n_transfers, n_finished (zeroed, contiguous)."""
    if _LIB.ap_inc_run(handle, len(devs), devs.ctypes.data, *[a.ctypes.data for a in outputs]) != 0:
        raise MemoryError("the simulator could not allocate its work space")


def rerecord(handle, dev, outputs) -> None:
    """Record placement ``dev`` in place of ``handle``'s (its memory reused); ``outputs`` as for
    :func:`run_recorded`, one row."""
    _LIB.ap_inc_reset(handle, dev.ctypes.data, *[a.ctypes.data for a in outputs])


def free_recorded(handle) -> None:
    _LIB.ap_inc_free(handle)
