"""ctypes binding of the C event loop (``_csim.c``); ``None`` when it was not built.

The loop's entry points take the structs of :mod:`autoplace.sim._args` as C structs (``ApGraph``,
``ApCluster``, ``ApTrace``, ``ApRows``), built here from the named tuples: each size an ``int64``, each
array a pointer to its data (contiguous, of the dtype the C struct declares; ``Simulator`` makes them so).
``AUTOPLACE_SIM_BACKEND=numba`` forces the numba kernel (the reference implementation).
"""

from __future__ import annotations

import ctypes
import os
import warnings
from pathlib import Path
from typing import NamedTuple, get_type_hints

import numpy as np

from autoplace.sim._args import C_LISTING, STRUCTS

__all__ = ["load", "BACKEND", "struct", "simulate", "record", "rerecord", "run_recorded", "free_recorded"]


def _c_struct(name: str, nt: type) -> type[ctypes.Structure]:
    hints = get_type_hints(nt)
    fields = [(f, ctypes.c_int64 if hints[f] is int else ctypes.c_void_p) for f in nt._fields]
    return type(f"Ap{name.title()}", (ctypes.Structure,), {"_fields_": fields})


#: the C structs, by the named tuple they mirror
_C_STRUCTS = {nt: _c_struct(name, nt) for name, nt in STRUCTS.items()}


def struct(values: NamedTuple) -> ctypes.Structure:
    """The C struct of one of ``_args``'s named tuples (its arrays must outlive it)."""
    out = []
    for f, v in zip(values._fields, values):
        if isinstance(v, np.ndarray):
            if not v.flags.c_contiguous:
                raise ValueError(f"the simulator's {f} must be contiguous")
            v = v.ctypes.data
        out.append(v)
    return _C_STRUCTS[type(values)](*out)


def load() -> ctypes.CDLL | None:
    if os.environ.get("AUTOPLACE_SIM_BACKEND", "").lower() == "numba":
        return None
    here = Path(__file__).parent
    for path in sorted(here.glob("_csim*.so")) + sorted(here.glob("_csim*.pyd")):
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            continue
        fields = getattr(lib, "ap_struct_fields", None)
        if fields is not None:
            fields.restype = ctypes.c_char_p
        if fields is None or fields().decode() != C_LISTING:
            warnings.warn(f"{path.name} is a stale build of the C simulator (rebuild it: pip install -e . or "
                          "python setup.py build_ext --inplace); using the numba kernel", RuntimeWarning, stacklevel=2)
            continue
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        structs = [ctypes.POINTER(_C_STRUCTS[nt]) for nt in STRUCTS.values()]
        rows = structs[-1]
        for fn, restype, argtypes in (
                (lib.ap_simulate, ctypes.c_int, [i64, p, p, p, *structs]),
                (lib.ap_inc_new, p, [i64, p, p, *structs]),
                (lib.ap_inc_run, ctypes.c_int, [p, i64, p, rows]),
                (lib.ap_inc_reset, None, [p, p, rows]),
                (lib.ap_inc_free, None, [p])):
            fn.restype, fn.argtypes = restype, argtypes
        return lib
    return None


_LIB = load()
BACKEND = "c" if _LIB is not None else "numba"


def simulate(devs, spos, optime, graph, cluster, trace, rows) -> None:
    """``ap_simulate`` on every row of ``devs`` under ``spos`` (``[B, n]`` int64 each); ``optime[n, D]``."""
    structs = [struct(a) for a in (graph, cluster, trace, rows)]
    rc = _LIB.ap_simulate(len(devs), devs.ctypes.data, spos.ctypes.data, optime.ctypes.data,
                          *map(ctypes.byref, structs))
    if rc == -2:
        raise ValueError("the graph is too large for the C simulator (2^31 ops, or tensors and edges); "
                         "use AUTOPLACE_SIM_BACKEND=numba")
    if rc != 0:
        raise MemoryError("the simulator could not allocate its work space")


def record(snapshots, devs, optime, graph, cluster, trace, rows) -> int:
    """Record placement ``devs[0]``'s run (no schedule) with up to ``snapshots`` snapshots; its results go to
    ``trace`` and ``rows`` as :func:`simulate`'s. Returns the handle for :func:`run_recorded` (the graph's and
    cluster's arrays and ``optime`` must outlive it; :func:`free_recorded` frees it)."""
    structs = [struct(a) for a in (graph, cluster, trace, rows)]
    handle = _LIB.ap_inc_new(snapshots, devs.ctypes.data, optime.ctypes.data, *map(ctypes.byref, structs))
    if not handle:
        raise MemoryError("the simulator could not allocate its work space")
    return handle


def run_recorded(handle, devs, rows) -> None:
    """Simulate the rows of ``devs`` from the recorded run ``handle`` into ``rows`` (a :class:`RowArrays`)."""
    if _LIB.ap_inc_run(handle, len(devs), devs.ctypes.data, ctypes.byref(struct(rows))) != 0:
        raise MemoryError("the simulator could not allocate its work space")


def rerecord(handle, dev, rows) -> None:
    """Record placement ``dev`` in place of ``handle``'s (its memory reused); its results into ``rows`` (one
    row)."""
    _LIB.ap_inc_reset(handle, dev.ctypes.data, ctypes.byref(struct(rows)))


def free_recorded(handle) -> None:
    _LIB.ap_inc_free(handle)
