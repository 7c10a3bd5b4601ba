"""Local search under the simulator: moves and swaps of co-location groups (issue #4).

``refine(graph, cluster, placement)`` improves any placement (``autoplace place --refine``); the
``local-search`` placer refines single-GPU (or m-ETF where single-GPU runs out of memory).

Each pass visits the groups (co-location groups, so every move keeps the constraints) in a seeded order;
for the current group it simulates, in one batch, the placement with the group moved to every other
feasible device and swapped with one group from each other device, and takes the best if it improves the
score. The score is the simulated step time, multiplied by ``1 + 10 * overflow`` where a device's peak
exceeds its memory (``overflow`` = the largest relative excess), so a search can climb out of OOM.
The search stops at a local optimum (a pass without improvement) or when the budget (seconds, default
10) is spent; it is deterministic for a seed whenever it converges within the budget.
"""

from __future__ import annotations

import time

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.graph import Graph
from autoplace.grouping import group_ops
from autoplace.placement import Placement
from autoplace.placers import register_placer
from autoplace.sim import BatchResult, Simulator

__all__ = ["refine", "local_search", "score"]

DEFAULT_BUDGET_S = 10.0


def score(batch: BatchResult) -> np.ndarray:
    """Step time, penalised by memory overflow (0 overflow: the step time itself)."""
    over = np.max(batch.peak_memory / batch.memory_capacity[None, :] - 1.0, axis=1)
    return batch.step_time * (1.0 + 10.0 * np.maximum(over, 0.0))


def refine(graph: Graph, cluster: Cluster, placement: Placement, *, seed=None, budget: float | None = None,
           method: str | None = None, env=None) -> Placement:
    """Improve ``placement`` by group moves and swaps (see the module docstring), scored by ``env``
    (default: the simulator; a :class:`~autoplace.env.MeasuredEnv` scores by real runs)."""
    t_end = time.perf_counter() + (DEFAULT_BUDGET_S if budget is None else float(budget))
    rng = np.random.default_rng(seed if isinstance(seed, (int, np.integer)) else 0)
    run_batch = Simulator(graph, cluster).run_batch if env is None else env.evaluate_batch
    dev = placement.to_array(graph, cluster)
    grouping = group_ops(graph, rules=("colocation",))
    G = grouping.n_groups
    # a group's device: its members' (they agree when the placement honours co-location)
    gdev = np.zeros(G, dtype=np.int64)
    gdev[grouping.group] = dev
    ok = np.ones((G, cluster.n_devices), dtype=bool)
    np.logical_and.at(ok, grouping.group, feasible_devices(graph, cluster))
    best = float(score(run_batch(grouping.expand(gdev)[None, :]))[0])
    start_score, evaluations, passes, improved = best, 1, 0, True
    while improved and time.perf_counter() < t_end:
        improved, passes = False, passes + 1
        for g in rng.permutation(G):
            if time.perf_counter() >= t_end:
                break
            cands = []
            for d in np.flatnonzero(ok[g]):
                if d != gdev[g]:
                    c = gdev.copy()
                    c[g] = d
                    cands.append(c)
            for d in range(cluster.n_devices):  # swap with one random group living on device d
                others = np.flatnonzero((gdev == d) & ok[:, gdev[g]])
                if d != gdev[g] and len(others) and ok[g, d]:
                    h = int(others[rng.integers(len(others))])
                    c = gdev.copy()
                    c[g], c[h] = d, gdev[g]
                    cands.append(c)
            if not cands:
                continue
            batch = np.stack(cands)
            s = score(run_batch(grouping.expand_many(batch)))
            evaluations += len(cands)
            k = int(np.argmin(s))
            if s[k] < best * (1 - 1e-9):
                best, gdev, improved = float(s[k]), batch[k], True
    meta = {**placement.meta, "refined_from": placement.method, "start_score_s": start_score,
            "score_s": best, "evaluations": evaluations, "passes": passes,
            "converged": not improved}
    return Placement.from_array(graph, cluster, grouping.expand(gdev), method or f"{placement.method}+ls", **meta)


@register_placer("local-search", description="moves and swaps of co-location groups under the simulator, "
                 "from single-GPU (m-ETF if that runs out of memory)", paper="")
def local_search(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    from autoplace.placers import get_placer
    from autoplace.sim import simulate

    start = get_placer("single-gpu" if cluster.devices_of_kind("gpu") else "single-cpu").fn(graph, cluster)
    if not simulate(graph, cluster, start).ok:
        start = get_placer("m-etf").fn(graph, cluster)
    return refine(graph, cluster, start, seed=seed, budget=budget, method="local-search")
