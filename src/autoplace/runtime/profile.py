"""Measuring op costs: :func:`profile_graph` runs a captured graph on one worker of each device type, timing
every op inside the executor's own loop (so each op's cost includes the executor's per-op bookkeeping, and
the sum of the costs is the single-device step), and writes the medians into each op's ``cost`` — which the
cost model then prefers over the roofline estimate (``autoplace profile``). :func:`calibrate` measures a
machine and a model once each (:mod:`autoplace.runtime.detect` measures the devices and links).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from autoplace.cache import cached_graph, digest
from autoplace.cluster import Cluster
from autoplace.cost import LOADED
from autoplace.errors import AutoplaceError
from autoplace.formats import graph_to_dict
from autoplace.formats.state import cluster_hash
from autoplace.graph import Graph
from autoplace.grouping import group_ops
from autoplace.placement import Placement
from autoplace.runtime.backends import make_pool
from autoplace.runtime.detect import CALIBRATE_ROUNDS, CALIBRATE_STEPS, detected_cluster, host_mates, timed_run
from autoplace.runtime.shm.pool import WorkerPool

__all__ = ["profile_graph", "loaded_costs", "calibrate", "with_costs_of"]


def profile_graph(graph: Graph, cluster: Cluster, *, steps: int = 5, rounds: int = 3,
                  pool: WorkerPool | None = None, devices: Sequence[str] | None = None, loaded: bool = True,
                  progress: Callable[[str], None] | None = None, runtime: str = "auto") -> Graph:
    """A copy of ``graph`` whose ops carry measured ``cost`` (seconds) for each device type profiled.

    One device of each type in ``cluster`` (or the named ``devices``) runs the whole graph ``steps``
    times per round (at least 2); the first step of each run is dropped and each op's cost is the
    median over the rest of every round (``cost[type]``), scaled so that the costs add up to the median
    step measured without per-op timers. With ``loaded``, a CPU device with CPU host-mates (the other CPU
    workers of its host) is also profiled in a *split* run: the graph's co-location groups dealt at
    random over it and its host-mates (a new deal each round), every op timed wherever it ran, less the
    time it spent sending (the exchange is charged apart); :func:`loaded_costs` turns them into
    ``cost["<type>|loaded"]``. On this project's machine every op of a program split over two workers
    runs 10-30 % slower than in the whole program on one, while a second copy of the program running
    beside it slows it far less. The alone and split runs alternate for ``rounds`` rounds, so a machine
    whose speed drifts over seconds (a shared VM) biases neither their ratio nor their scale. Without a
    ``pool``, the runs are on ``runtime`` (:func:`~autoplace.runtime.make_pool`: the ranks of a cluster
    that spans hosts profile each host's devices where they are)."""
    if steps < 1 or rounds < 1:
        raise AutoplaceError(f"profile: steps and rounds must be positive (got {steps}, {rounds})")
    chosen: dict[str, int] = {}
    names = devices or [d.name for d in cluster.devices]
    for name in names:
        k = cluster.index(name)
        chosen.setdefault(cluster.devices[k].type, k)
    own = pool is None
    if pool is None:

        pool = make_pool(cluster, runtime=runtime)
    costs: dict[str, np.ndarray] = {}
    calibrated: dict[str, int] = {}
    busy_share: dict[str, float] = {}
    groups = group_ops(graph, rules=("colocation",))
    try:
        for dtype, k in chosen.items():
            alone = Placement.from_array(graph, cluster, np.full(graph.n_ops, k, dtype=np.int64), "profile")
            pool.load(graph)
            mates = [k, *host_mates(cluster, k)] if loaded else [k]
            timed: dict[str, list] = {dtype: []} | ({dtype + LOADED: []} if len(mates) > 1 else {})
            for rnd in range(rounds):
                if progress is not None:
                    progress(f"{cluster.devices[k].name} ({dtype}), round {rnd + 1}/{rounds}")
                timed[dtype].append(timed_run(pool, graph, alone, steps, k))
                if len(mates) > 1:
                    deal = np.random.default_rng(rnd).integers(0, len(mates), groups.n_groups)
                    split = Placement.from_array(graph, cluster, np.array(mates)[groups.expand(deal)], "profile split")
                    timed[dtype + LOADED].append(timed_run(pool, graph, split, steps, k))
            for key, runs in timed.items():
                costs[key], calibrated[key] = _costs_of([(t, s) for t, s, _ in runs])
            if dtype + LOADED in timed:
                costs[dtype + LOADED], busy_share[dtype + LOADED] = loaded_costs(
                    costs[dtype], costs[dtype + LOADED], timed[dtype], timed[dtype + LOADED])
    finally:
        if own:
            pool.close()
    ops = []
    for i, op in enumerate(graph.ops):
        cost = {k: v for k, v in op.cost.items() if k not in costs}
        for dtype, c in costs.items():
            cost[dtype] = float(c[i])
        ops.append(replace(op, cost=cost))
    meta = {**graph.meta, "profiled": {key: {"device": cluster.devices[chosen[key.split("|")[0]]].name,
                                            "steps": steps, "rounds": rounds, "step_s": float(c.sum()),
                                            "calibrated": calibrated[key] > 0, "untimed_runs": calibrated[key],
                                            **({"host_mates_busy": busy_share[key]} if busy_share.get(key) else {})}
                                       for key, c in costs.items()}}
    return Graph(ops, name=graph.name, meta=meta)


def loaded_costs(alone: np.ndarray, split: np.ndarray, alone_runs: list[tuple], split_runs: list[tuple]
                 ) -> tuple[np.ndarray, float]:
    """Each op's cost with its host-mates busy all step, from the split runs.

    ``alone`` / ``split`` are the per-op costs of the two conditions; ``*_runs`` the rounds' ``(timed,
    untimed op time, host-mates' busy share)``, the split run of a round just after its alone run. The
    split costs give each op's share; their total is the alone total times the median over rounds of
    split op time over alone step (a drifting machine moves both runs of a pair alike). The simulator
    blends alone and loaded costs per op by the share ``u`` of the op's run during which its host-mates
    are busy, so the loaded cost is the one at ``u = 1``: the split runs measured the host-mates busy a
    share ``u_p`` of their step, and ``loaded = max(0, alone + (split - alone) / u_p)`` — an
    approximation, taking the step's share for every op's (a split run's per-op overlaps are not
    recorded). Returns the costs and ``u_p`` (0 where no split run measured it: the split costs then stand
    as they are)."""
    ratios = [s / a for (_, a, _), (_, s, _) in zip(alone_runs, split_runs)
              if np.isfinite(a) and np.isfinite(s) and a > 0]
    if ratios and split.sum() > 0:
        split = split * (alone.sum() * float(np.median(ratios)) / split.sum())
    shares = [u for _, _, u in split_runs if np.isfinite(u)]
    u_p = float(np.median(shares)) if shares else 0.0
    if u_p <= 0:
        return split, 0.0
    return np.maximum(alone + (split - alone) / u_p, 0.0), u_p


def _costs_of(runs: list[tuple[np.ndarray, float]]) -> tuple[np.ndarray, int]:
    """Per-op medians over every timed step of ``runs``, scaled to their median untimed op time (timing
    every op costs time itself, and the executor's per-op overhead stays in the ops), and how many
    untimed runs that scale rests on: 0 when every untimed run failed, and the costs stay as timed."""
    cost = np.median(np.concatenate([t for t, _ in runs]), axis=0)
    plain = [s for _, s in runs if np.isfinite(s)]  # a failed untimed run is skipped
    if plain and cost.sum() > 0:
        cost *= np.median(plain) / cost.sum()
        return cost, len(plain)
    return cost, 0




def calibrate(graph: Graph, cluster: Cluster, *, pool: WorkerPool | None = None, folder=None, machine: str,
              progress: Callable[[str], None] | None = None) -> tuple[Graph, Cluster]:
    """``(graph with measured op costs, cluster with measured devices and links)`` on this machine: what
    ``autoplace cluster detect`` and ``autoplace profile`` measure, each kept in the cache folder (the
    cluster per machine, the profiled graph per machine and graph), so a model is profiled once
    (``folder=False``: neither is kept)."""

    measured = detected_cluster(cluster, folder=folder, machine=machine, progress=progress)
    key = {"graph": digest(graph_to_dict(graph)), "machine": machine, "cluster": cluster_hash(measured),
           "steps": CALIBRATE_STEPS, "rounds": CALIBRATE_ROUNDS}
    def profile() -> Graph:
        return profile_graph(graph, measured, steps=CALIBRATE_STEPS, rounds=CALIBRATE_ROUNDS, pool=pool,
                             progress=progress)

    profiled = profile() if folder is False else cached_graph(f"profiled-{graph.name}", key, profile, folder)
    return profiled, measured


def with_costs_of(graph: Graph, profiled: Graph) -> Graph:
    """``graph`` with the measured op costs of ``profiled`` (the same captured step profiled, by
    ``autoplace profile`` or :func:`calibrate`): one clear error where its ops are not the graph's."""
    costs = {op.name: op.cost for op in profiled.ops}
    missing = [op.name for op in graph.ops if op.name not in costs]
    if missing or len(costs) != graph.n_ops:
        extra = sorted(set(costs) - {op.name for op in graph.ops})
        why = f"it has no op {missing[0]!r}" if missing else f"it has op {extra[0]!r} the step lacks"
        raise AutoplaceError(f"profiled graph {profiled.name!r} is not this step's: {why}")
    if "profiled" not in profiled.meta:
        raise AutoplaceError(f"graph {profiled.name!r} carries no measured costs (profile it: autoplace profile)")
    ops = [replace(op, cost={**op.cost, **costs[op.name]}) for op in graph.ops]
    return Graph(ops, name=graph.name, meta={**graph.meta, "profiled": profiled.meta["profiled"]})
