"""Local search under the simulator: moves and swaps of co-location groups.

``refine(graph, cluster, placement)`` improves any placement (``autoplace place --refine``); the
``local-search`` placer refines single-GPU (or m-ETF where single-GPU runs out of memory).

Each pass visits the groups (co-location groups, so every move keeps the constraints) in a seeded order;
for the current group it simulates, in one batch, the placement with the group moved to every other
feasible device and swapped with one group from each other device, and takes the best if it improves the
score. The score is the simulated step time, multiplied by ``1 + 10 * overflow`` where a device's peak
exceeds its memory (``overflow`` = the largest relative excess), so a search can climb out of OOM.

**Budget.** Under the simulator the budget counts work, not the wall clock: ``budget`` seconds allow
``budget * OPS_PER_SECOND / n_ops`` evaluations (placements simulated), ``OPS_PER_SECOND`` being a
nominal simulator speed, so a search is reproducible for a seed on a busy machine as on an idle one
(default 10). A wall-clock cap of ``10 * budget + 30`` seconds guards against a machine far slower than
that (beside two test suites on this project's 2-core machine, a budget of 10 on inception-v3 took
28–42 s). Scored by real runs (a measured env), the budget is wall-clock seconds. The search stops at a local
optimum (a whole pass without improvement: ``converged``) or when the budget is spent; the placement's
meta says which (``stop_reason``: ``converged``, ``evaluation budget``, ``wall-clock budget`` or
``wall-clock cap``) and how far it got (``evaluations``, ``passes``, ``groups_visited`` in the last pass).
Cost per evaluation: one simulation, ``O((n + E) log n)``.
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
from autoplace.validation import check_budget, check_random_state

__all__ = ["refine", "local_search", "score"]

DEFAULT_BUDGET_S = 10.0
OPS_PER_SECOND = 1e7  #: nominal simulator speed (batched local search ran 10-18 M ops/s here) turning seconds into evaluations


def score(batch: BatchResult) -> np.ndarray:
    """Step time, penalised by memory overflow (0 overflow: the step time itself)."""
    over = np.max(batch.peak_memory / batch.memory_capacity[None, :] - 1.0, axis=1)
    return batch.step_time * (1.0 + 10.0 * np.maximum(over, 0.0))


def refine(graph: Graph, cluster: Cluster, placement: Placement, *, seed=None, budget: float | None = None,
           method: str | None = None, env=None) -> Placement:
    """Improve ``placement`` by group moves and swaps (see the module docstring), scored by ``env``
    (default: the simulator; a :class:`~autoplace.env.MeasuredEnv` scores by real runs)."""
    budget = DEFAULT_BUDGET_S if check_budget(budget) is None else budget
    if env is None:
        run_batch = Simulator(graph, cluster).run_batch
        max_evaluations = max(1, int(budget * OPS_PER_SECOND / max(graph.n_ops, 1)))
        wall, wall_reason = 10.0 * budget + 30.0, "wall-clock cap"
    else:
        run_batch = env.evaluate_batch
        max_evaluations, wall, wall_reason = None, budget, "wall-clock budget"
    t_end = time.perf_counter() + wall
    rng = check_random_state(seed)
    dev = placement.to_array(graph, cluster)
    grouping = group_ops(graph, rules=("colocation",))
    G = grouping.n_groups
    # a group's device: its members' (they agree when the placement honours co-location)
    gdev = np.zeros(G, dtype=np.int64)
    gdev[grouping.group] = dev
    ok = np.ones((G, cluster.n_devices), dtype=bool)
    np.logical_and.at(ok, grouping.group, feasible_devices(graph, cluster))
    best = float(score(run_batch(grouping.expand(gdev)[None, :]))[0])
    start_score, evaluations, passes, visited = best, 1, 0, 0
    stop_reason = None
    while stop_reason is None:
        improved, passes, visited = False, passes + 1, 0
        for g in rng.permutation(G):
            cands = _neighbours(int(g), gdev, ok, rng)
            if not cands:
                visited += 1
                continue
            if max_evaluations is not None and evaluations + len(cands) > max_evaluations:
                stop_reason = "evaluation budget"
            elif time.perf_counter() >= t_end:
                stop_reason = wall_reason
            if stop_reason is not None:
                break
            batch = np.stack(cands)
            s = score(run_batch(grouping.expand_many(batch)))
            evaluations += len(cands)
            visited += 1
            k = int(np.argmin(s))
            if s[k] < best * (1 - 1e-9):
                best, gdev, improved = float(s[k]), batch[k], True
        if stop_reason is None and not improved:
            stop_reason = "converged"
    meta = {**placement.meta, "refined_from": placement.method, "start_score_s": start_score,
            "score_s": best, "evaluations": evaluations, "passes": passes, "groups_visited": visited,
            "groups": G, "converged": stop_reason == "converged", "stop_reason": stop_reason}
    return Placement.from_array(graph, cluster, grouping.expand(gdev), method or f"{placement.method}+ls", **meta)


def _neighbours(g: int, gdev: np.ndarray, ok: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Group ``g`` moved to every other feasible device, and swapped with one random group of each other
    device that can take ``g``'s device."""
    cands = []
    for d in np.flatnonzero(ok[g]):
        if d != gdev[g]:
            c = gdev.copy()
            c[g] = d
            cands.append(c)
    for d in range(ok.shape[1]):
        others = np.flatnonzero((gdev == d) & ok[:, gdev[g]])
        if d != gdev[g] and len(others) and ok[g, d]:
            h = int(others[rng.integers(len(others))])
            c = gdev.copy()
            c[g], c[h] = d, gdev[g]
            cands.append(c)
    return cands


@register_placer("local-search", description="moves and swaps of co-location groups under the simulator, "
                 "from single-GPU (m-ETF if that runs out of memory)", paper="")
def local_search(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """:func:`refine` started from single-GPU (single-CPU without a GPU), or from m-ETF where that runs out
    of memory. ``seed`` orders the groups and picks swap partners; ``budget`` as in :func:`refine`."""
    from autoplace.placers import place
    from autoplace.sim import simulate

    start = place(graph, cluster, "single-gpu" if cluster.devices_of_kind("gpu") else "single-cpu")
    if not simulate(graph, cluster, start).ok:
        start = place(graph, cluster, "m-etf")
    return refine(graph, cluster, start, seed=seed, budget=budget, method="local-search")
