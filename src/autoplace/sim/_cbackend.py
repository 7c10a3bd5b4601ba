"""ctypes binding of the C event loop (``_csim.c``); ``None`` when it was not built.

``AUTOPLACE_SIM_BACKEND=numba`` forces the numba kernel (the reference implementation).
"""

from __future__ import annotations

import ctypes
import os
import warnings
from pathlib import Path

from autoplace.sim._args import C_ARRAYS

__all__ = ["load", "BACKEND"]

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
