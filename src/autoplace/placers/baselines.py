"""Single-device baselines (Mirhoseini et al. 2017, §4.2).

*Single-CPU* runs the whole graph on the CPU; *Single-GPU* runs it on one GPU, and an op without a GPU
implementation (``device_types`` excluding ``gpu``) goes to the CPU. Neither checks memory: a graph
that does not fit is reported as OOM by the simulator, as in the paper's Table 2.
"""

from __future__ import annotations

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers.registry import register_placer

__all__ = ["single_device", "single_cpu", "single_gpu"]


def single_device(graph: Graph, cluster: Cluster, kind: str, method: str) -> Placement:
    """Every op on the first device of type ``kind``. An op that cannot run there goes to a CPU (else the
    first device that can run it), and so does its whole co-location group: a group goes to the first of
    those devices that every member can run on."""
    primary = cluster.devices_of_kind(kind)
    if not primary:
        raise InfeasibleError(f"cluster {cluster.name!r} has no {kind} device for {method}")
    ok = feasible_devices(graph, cluster)
    fallbacks = [primary[0], *cluster.devices_of_kind("cpu"), *range(cluster.n_devices)]
    units = [np.array([i]) for i in range(graph.n_ops) if graph.ops[i].colocation_group is None]
    groups = graph.colocation_groups()
    dev = np.full(graph.n_ops, primary[0], dtype=np.int64)
    for name, members in [*((None, u) for u in units), *groups.items()]:
        runs_all = ok[members].all(axis=0)
        if runs_all[primary[0]]:
            continue
        choice = next((d for d in fallbacks if runs_all[d]), None)
        if choice is None:
            what = f"co-location group {name!r}" if name is not None else f"op {graph.ops[int(members[0])].name!r}"
            raise InfeasibleError(f"no device of cluster {cluster.name!r} can run all of {what}")
        dev[members] = choice
    return Placement.from_array(graph, cluster, dev, method)


@register_placer("single-cpu", description="everything on the CPU", paper="Mirhoseini et al. 2017 §4.2")
def single_cpu(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Every op on the first CPU (:func:`single_device`); ``seed`` and ``budget`` are unused. O(n)."""
    return single_device(graph, cluster, "cpu", "single-cpu")


@register_placer("single-gpu", description="everything on one GPU; ops without a GPU kernel on the CPU",
                 paper="Mirhoseini et al. 2017 §4.2")
def single_gpu(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Every op on the first GPU, ops (and their co-location groups) without a GPU kernel on the CPU
    (:func:`single_device`); ``seed`` and ``budget`` are unused. O(n)."""
    return single_device(graph, cluster, "gpu", "single-gpu")
