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
from autoplace.placers import register_placer

__all__ = ["single_device", "single_cpu", "single_gpu"]


def single_device(graph: Graph, cluster: Cluster, kind: str, method: str) -> Placement:
    """Every op on the first device of type ``kind``; ops that cannot run there go to a CPU (else the
    first device that can run them)."""
    primary = cluster.devices_of_kind(kind)
    if not primary:
        raise InfeasibleError(f"cluster {cluster.name!r} has no {kind} device for {method}")
    ok = feasible_devices(graph, cluster)
    fallbacks = [primary[0], *cluster.devices_of_kind("cpu"), *range(cluster.n_devices)]
    dev = np.full(graph.n_ops, primary[0], dtype=np.int64)
    for i in np.flatnonzero(~ok[:, primary[0]]):
        choice = next((d for d in fallbacks if ok[i, d]), None)
        if choice is None:
            raise InfeasibleError(f"no device of cluster {cluster.name!r} can run op {graph.ops[i].name!r}")
        dev[i] = choice
    return Placement.from_array(graph, cluster, dev, method)


@register_placer("single-cpu", description="everything on the CPU", paper="Mirhoseini et al. 2017 §4.2")
def single_cpu(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    return single_device(graph, cluster, "cpu", "single-cpu")


@register_placer("single-gpu", description="everything on one GPU; ops without a GPU kernel on the CPU",
                 paper="Mirhoseini et al. 2017 §4.2")
def single_gpu(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    return single_device(graph, cluster, "gpu", "single-gpu")
