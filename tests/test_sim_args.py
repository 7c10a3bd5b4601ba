"""The simulator loops' arguments are named once (``sim/_args.py``), whichever backend runs here: the C loop's
argument structs declare the named tuples' fields in their order and of the dtypes ``Simulator`` gives them,
and both loops' entry points take the same arguments."""

from __future__ import annotations

import ctypes
import inspect
import re
from pathlib import Path
from typing import get_type_hints

import numpy as np

from autoplace.cluster import get_cluster
from autoplace.sim import Simulator, _cbackend, _kernel
from autoplace.sim._args import C_LISTING, C_TYPES, STRUCTS, c_fields
from autoplace.sim.results import Outputs
from autoplace.zoo import build_graph

C_SOURCE = (Path(_kernel.__file__).parent / "_csim.c").read_text()
DTYPES = {"i64": np.int64, "i32": np.int32, "double": np.float64}


def c_struct(name: str) -> list[tuple[str, str, bool]]:
    """``(field, C type, is a pointer)`` of ``typedef struct {...} name;`` in ``_csim.c``, in order."""
    body = re.search(r"typedef struct \{([^}]*)\} " + name + ";", C_SOURCE).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = []
    for decl in body.split(";"):
        m = re.match(r"\s*(?:const\s+)?(i64|i32|double)\s+(.*)", decl.strip(), re.S)
        if not m:
            continue
        for name_ in m.group(2).split(","):
            fields.append((name_.strip().lstrip("*"), m.group(1), "*" in name_))
    return fields


def c_params(function: str) -> list[str]:
    sig = re.search(function + r"\(([^)]*)\) \{", C_SOURCE).group(1)
    return [" ".join(p.split()) for p in sig.split(",")]


def test_the_c_structs_are_the_named_tuples():
    """Each C struct holds its named tuple's fields in order, of the C types ``_args.C_TYPES`` names: sizes as
    int64, arrays as pointers (the C loop's ``ap_struct_fields`` lists them with their types, and
    ``_cbackend`` builds its ctypes structs from the tuples)."""
    for key, nt in STRUCTS.items():
        fields, hints = c_struct("Ap" + key.title()), get_type_hints(nt)
        assert [f for f, _, _ in fields] == list(nt._fields), key
        for f, ctype, pointer in fields:
            assert pointer == (hints[f] is not int), f
            assert ctype == C_TYPES.get(f, "i64"), f
        assert [f"{ctype}{'*' if pointer else ''} {f}" for f, ctype, pointer in fields] == c_fields(nt)
        assert [t for _, t in _cbackend._C_STRUCTS[nt]._fields_] == [
            ctypes.c_void_p if pointer else ctypes.c_int64 for _, _, pointer in fields], key
    listed = "".join(re.findall(r'"([^"]*)"', re.search(r"ap_struct_fields\(void\) \{(.*?)\}", C_SOURCE,
                                                       re.S).group(1)))
    assert listed == C_LISTING


def test_the_arrays_have_the_dtypes_the_c_structs_declare():
    """What ``Simulator`` passes is what the C loop reads: each array's dtype is its C field's type, each size
    the array's length, and every array contiguous."""
    graph, cluster = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x4")
    sim = Simulator(graph, cluster)
    out = Outputs(2, graph.n_ops, cluster.n_devices, graph.n_edges, len(cluster.segments))
    for key, values in (("graph", sim._graph_args), ("cluster", sim._cluster_args), ("trace", out.trace),
                        ("rows", out.rows)):
        for f, ctype, pointer in c_struct("Ap" + key.title()):
            v = getattr(values, f)
            if pointer:
                assert v.dtype == DTYPES[ctype] and v.flags.c_contiguous, f
            else:
                assert isinstance(v, int), f
    g, c = sim._graph_args, sim._cluster_args
    assert (g.n_ops, g.n_tensors, g.n_pairs) == (len(g.order), len(g.tensor_src), len(g.pair_op))
    assert (c.n_devices, c.n_segments, c.n_launchers) == (len(c.concurrency), len(c.seg_bw),
                                                          len(cluster.launcher_names))


def test_both_loops_take_the_same_arguments():
    """``ap_simulate`` and the numba ``simulate``: the rows, their schedules, the op times and the four
    structs, in that order."""
    assert c_params("int ap_simulate") == [
        "i64 B", "const i64 *devs", "const i64 *spos", "const double *optime", "const ApGraph *g",
        "const ApCluster *c", "const ApTrace *tr", "const ApRows *rows"]
    assert list(inspect.signature(_kernel.simulate.py_func).parameters) == [
        "devs", "spos", "optime", *STRUCTS]
