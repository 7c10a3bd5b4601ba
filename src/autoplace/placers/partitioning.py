"""Graph-partitioning placers: Scotch's static mapper, MinCut, and METIS.

All three partition the op graph contracted by its co-location groups (partitioners cannot express
"these ops must share a device"), weighted as Mirhoseini et al. 2017 §4.2 describe: a group's vertex
weight is its compute time (microseconds on its fastest feasible device), an edge's weight the bytes that
cross it (KiB, both directions summed). Groups that land on a device that cannot run them move to their
fastest feasible device. None of them looks at memory: a placement that does not fit is reported OOM.

* ``scotch`` — the Scotch static mapper (Pellegrini 2009) through its command-line tools: the target
  architecture is a complete graph of the cluster's devices, vertex weights = relative speed, edge
  weights = relative communication cost (the inverse of link bandwidth), turned into a
  decomposition-defined target by ``amk_grf`` and mapped onto by ``scotch_gmap``;
* ``mincut`` — the same without the CPU in the target (ops that need the CPU go there afterwards);
* ``metis`` — METIS k-way partitioning (Karypis & Kumar 1998, through pymetis) into one part per GPU,
  compute-balanced; the most loaded part goes to the fastest device.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.errors import AutoplaceError, InfeasibleError, UnavailableError
from autoplace.graph import Graph
from autoplace.grouping import GroupGraph, grouped_graph, part_graph, runnable_grouping, weighted_csr
from autoplace.placement import Placement
from autoplace.placers.registry import register_placer
from autoplace.validation import seed_int

__all__ = ["scotch", "mincut", "metis", "ScotchMissingError"]


class ScotchMissingError(UnavailableError):
    """The Scotch command-line tools are not installed (Debian package ``scotch``)."""


#: Mirhoseini et al. 2017's baselines partition TensorFlow graphs, whose gradients are co-located with
#: their ops: the ``gradient`` grouping rule on top of the co-location constraints
MIRHOSEINI_RULES = ("colocation", "gradient")


def _finish(graph: Graph, cluster: Cluster, gg: GroupGraph, group_dev: np.ndarray, method: str, **meta) -> Placement:
    """Move groups off devices that cannot run them (to their fastest feasible device) and expand to ops."""
    bad = ~gg.feasible[np.arange(gg.n_groups), group_dev]
    for g in np.flatnonzero(bad):
        group_dev[g] = int(np.argmin(np.where(gg.feasible[g], gg.times[g], np.inf)))
    return Placement.from_array(graph, cluster, gg.grouping.expand(group_dev), method,
                                groups=gg.n_groups, moved_for_constraints=int(bad.sum()), **meta)


def _group(graph: Graph, cluster: Cluster, rules: tuple[str, ...] = ("colocation",)) -> GroupGraph:
    return grouped_graph(graph, runnable_grouping(graph, rules, feasible_devices(graph, cluster)), cluster)


# ---------------------------------------------------------------------- Scotch
def _scotch_tools() -> tuple[str, str]:
    gmap, amk = shutil.which("scotch_gmap") or shutil.which("gmap"), shutil.which("amk_grf")
    if not gmap or not amk:
        raise ScotchMissingError("the Scotch tools (scotch_gmap, amk_grf) are not installed: "
                                 "apt-get install scotch (make test/demo do this)")
    return gmap, amk


def _write_grf(path: Path, xadj, adjncy, vw, ew) -> None:
    """Scotch source graph format: version, sizes, base + flags ('011': edge and vertex weights), vertices."""
    n = len(xadj) - 1
    lines = ["0", f"{n} {len(adjncy)}", "0 011"]
    for i in range(n):
        lo, hi = xadj[i], xadj[i + 1]
        pairs = " ".join(f"{ew[k]} {adjncy[k]}" for k in range(lo, hi))
        lines.append(f"{vw[i]} {hi - lo} {pairs}".rstrip())
    path.write_text("\n".join(lines) + "\n")


def _relabel(xadj, adjncy, vw, ew, perm: np.ndarray):
    """The same CSR graph with vertex ``v`` renamed ``perm[v]`` (neighbour lists keep their order)."""
    n = len(xadj) - 1
    inv = np.argsort(perm)                      # inv[new] = old
    deg = np.diff(xadj)[inv]
    new_xadj = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    idx = np.concatenate([np.arange(xadj[v], xadj[v + 1]) for v in inv]) if n else np.zeros(0, np.int64)
    return new_xadj, perm[adjncy[idx]], vw[inv], ew[idx]


def _scotch_map(gg: GroupGraph, cluster: Cluster, devices: list[int], seed) -> np.ndarray:
    """Map the group graph onto ``devices`` with scotch_gmap; device index per group.

    Scotch's command-line tools take no seed: they run in deterministic mode (``-Cd``), and ``seed``
    renames the vertices by a seeded permutation (seed 0: no renaming), which changes Scotch's
    tie-breaking and so gives a different, still reproducible, mapping per seed."""
    gmap, amk = _scotch_tools()
    D = len(devices)
    speed = cluster.achievable_flops[devices]
    arch_vw = np.maximum(1, np.round(speed / speed.min())).astype(np.int64)
    bw = cluster.transfer_bandwidth[np.ix_(devices, devices)]
    fastest = bw[~np.eye(D, dtype=bool)].max() if D > 1 else 1.0
    arch_adj, arch_ew, arch_xadj = [], [], [0]
    for a in range(D):
        for b in range(D):
            if a != b:
                # a link's cost: how many times slower than the fastest link (symmetrised)
                arch_adj.append(b)
                arch_ew.append(max(1, int(round(fastest / min(bw[a, b], bw[b, a])))))
        arch_xadj.append(len(arch_adj))
    xadj, adjncy, vw, ew = weighted_csr(gg)
    s = seed_int(seed)
    perm = np.arange(gg.n_groups) if s == 0 else np.random.default_rng(s).permutation(gg.n_groups)
    xadj, adjncy, vw, ew = _relabel(xadj, adjncy, vw, ew, perm)
    with tempfile.TemporaryDirectory(prefix="autoplace-scotch-") as tmp:
        t = Path(tmp)
        _write_grf(t / "arch.grf", np.array(arch_xadj), np.array(arch_adj), arch_vw, np.array(arch_ew))
        _write_grf(t / "graph.grf", xadj, adjncy, vw, ew)
        run = dict(capture_output=True, text=True, timeout=600)
        r = subprocess.run([amk, str(t / "arch.grf"), str(t / "arch.tgt")], **run)
        if r.returncode != 0:
            raise AutoplaceError(f"amk_grf failed: {' '.join(r.stderr.split())[:200]}")
        r = subprocess.run([gmap, "-Cd", str(t / "graph.grf"), str(t / "arch.tgt"), str(t / "out.map")], **run)
        if r.returncode != 0:
            raise AutoplaceError(f"scotch_gmap failed: {' '.join(r.stderr.split())[:200]}")
        rows = (t / "out.map").read_text().split()
    n = int(rows[0])
    pairs = np.array(rows[1:1 + 2 * n], dtype=np.int64).reshape(n, 2)
    out = np.empty(gg.n_groups, dtype=np.int64)
    out[pairs[:, 0]] = np.array(devices)[pairs[:, 1]]
    return out[perm]


@register_placer("scotch", description="Scotch static mapping onto the devices weighted by speed and link "
                 "bandwidth", paper="Pellegrini 2009; Mirhoseini et al. 2017 §4.2")
def scotch(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Scotch's static mapping (Pellegrini 2009; Mirhoseini et al. 2017's baseline) of the co-location
    group graph onto every device: vertex weights are compute microseconds, edge weights KiB crossing;
    the target weighs devices by speed and links by relative cost (module docstring). Adapted: groups
    are contracted first (Scotch cannot express co-location) and moved afterwards where their device
    cannot run them. No memory check. ``seed`` relabels the vertices (deterministic per seed);
    ``budget`` is unused. Scotch's multilevel mapping is about O(E log V)."""
    gg = _group(graph, cluster, MIRHOSEINI_RULES)
    return _finish(graph, cluster, gg, _scotch_map(gg, cluster, list(range(cluster.n_devices)), seed), "scotch")


@register_placer("mincut", description="Scotch static mapping onto the GPUs only (the CPU left out)",
                 paper="Mirhoseini et al. 2017 §4.2")
def mincut(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Mirhoseini et al. 2017's MinCut baseline: :func:`scotch` onto the GPUs only (the CPU left out of
    the target), ops that need the CPU moved there afterwards. ``seed`` and ``budget`` as for scotch."""
    gpus = cluster.devices_of_kind("gpu")
    if not gpus:
        raise InfeasibleError(f"mincut: cluster {cluster.name!r} has no GPU")
    gg = _group(graph, cluster, MIRHOSEINI_RULES)
    return _finish(graph, cluster, gg, _scotch_map(gg, cluster, gpus, seed), "mincut")


# ---------------------------------------------------------------------- METIS
@register_placer("metis", description="METIS k-way partition into one compute-balanced part per GPU",
                 paper="Karypis & Kumar 1998; GDP §4")
def metis(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """METIS k-way partitioning (Karypis & Kumar 1998, through pymetis; GDP's TensorFlow-METIS baseline)
    of the co-location group graph into one compute-balanced part per GPU, minimising the KiB cut; the
    most loaded part goes to the fastest GPU. No memory check. ``seed`` is METIS's seed; ``budget`` is
    unused. About O(E) (multilevel)."""
    targets = cluster.devices_of_kind("gpu") or list(range(cluster.n_devices))
    gg = _group(graph, cluster)
    if len(targets) == 1 or gg.n_groups < 2:
        return _finish(graph, cluster, gg, np.full(gg.n_groups, targets[0], dtype=np.int64), "metis")
    xadj, adjncy, vw, ew = weighted_csr(gg)
    parts = part_graph(len(targets), xadj, adjncy, vw, ew, seed_int(seed))
    load = np.bincount(parts, weights=vw, minlength=len(targets))
    by_speed = sorted(targets, key=lambda d: (-cluster.achievable_flops[d], d))
    part_to_dev = np.empty(len(targets), dtype=np.int64)
    part_to_dev[np.argsort(-load, kind="stable")] = by_speed
    return _finish(graph, cluster, gg, part_to_dev[parts], "metis")
