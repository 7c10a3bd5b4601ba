"""Local search under the simulator: moves and swaps of groups, coarse groups first.

``refine(graph, cluster, placement)`` improves any placement (``autoplace place --refine``); the
``local-search`` placer refines the best of the fast placers (:func:`autoplace.placers.fast.best_fast`).

**A hierarchy of groups.** The search climbs over :func:`group_levels`: the model's structural groups
(co-location, gradient and structure rules: a layer with its gradient ops, an LSTM cell, an Inception
branch — coarsened further with METIS to about :data:`COARSE_GROUPS` where there are over twice as many), then the
co-location groups with the gradient rule, then the graph's own co-location groups. Every level is a union
of co-location groups, so every move keeps the constraints. A level is searched until a whole pass finds no
improvement, then the next, finer level starts from the result; on a graph of tens of thousands of ops the
coarse levels take few evaluations and move most of the work.

**Coarse everywhere, fine on the cut.** A pass of the first (coarsest) level, or of any level of at most
:data:`WHOLE_LEVEL_GROUPS` groups, visits every group and tries every device; a pass of a larger finer
level visits only the groups on the cut — those with an edge to an op on another device — and tries only
the devices of their neighbour ops, as the refinement of a multilevel partitioner does (METIS's
uncoarsening, Karypis & Kumar 1998): the coarse level has balanced the work, and a fine group gains little
by opening new cuts. Moves change the cut, so it is recomputed at the start of every pass; such a level
has converged when a pass over its cut improves nothing.

**A pass.** The groups of the level are visited in a seeded order; for the current group the search
simulates, in one batch, the placement with all of its ops moved to every other device that can run them
all, and swapped with one group of each other device (the group's device is where most of its ops are),
and takes the best if it improves the score. Under the simulator the batch is simulated incrementally
(:class:`~autoplace.sim.Incremental`): the current placement's run is recorded once, and each candidate
runs on from the last snapshot before the first event its moved ops change, with the same results as a
run from the start. The score is the simulated step time, multiplied by
``1 + 10 * overflow`` where a device's peak exceeds its memory (``overflow`` = the largest relative
excess), so a search can climb out of OOM; a fitting placement always ranks before a failing one
(:func:`ranks`), so a move never trades a fitting placement for a faster one that runs out of memory. The
result is never worse than the start: from a fitting start it fits and runs no slower; from a failing one
it returns a fitting placement where it finds one (at any score), else one of no higher score.

**Budget.** Under the simulator the budget counts work, not the wall clock: ``budget`` seconds allow
``budget * OPS_PER_SECOND / n_ops`` evaluations (placements simulated), ``OPS_PER_SECOND`` being a
nominal simulator speed (:mod:`autoplace.search.work`), so a search is reproducible for a seed on a busy
machine as on an idle one
(default 10). A wall-clock cap of ``10 * budget + 30`` seconds guards against a machine far slower than
that. Scored by real runs (a measured env), the budget is wall-clock seconds. The placement's meta says
how the search ended (``stop_reason``: ``converged`` — at the finest level —, ``evaluation budget``,
``wall-clock budget`` or ``wall-clock cap``) and how far it got (``evaluations``, ``levels``: per level its
groups, passes, whether it converged, its evaluations and the groups its last pass visited; ``passes`` and
``groups_visited`` of the last).
Cost per evaluation: one simulation, ``O((n + E) log n)``.
"""

from __future__ import annotations

import time

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.errors import InfeasibleError, PlacementError
from autoplace.graph import Graph
from autoplace.grouping import Grouping, coarsen, runnable_grouping
from autoplace.placement import Placement
from autoplace.placers.fast import best_fast, check_fits, ranks
from autoplace.placers.registry import register_placer
from autoplace.progress import report_progress
from autoplace.search import work
from autoplace.search.budget import TIME_LIMIT, time_left
from autoplace.sim import Simulator
from autoplace.validation import check_random_state, seed_int

__all__ = ["refine", "return_strays", "local_search", "group_levels", "LEVEL_RULES", "COARSE_GROUPS",
           "WHOLE_LEVEL_GROUPS"]

LEVEL_RULES = (("colocation", "gradient", "structure"), ("colocation", "gradient"), ("colocation",))
COARSE_GROUPS = 256   #: a structural level with more than twice as many groups gets a METIS-coarsened level of
                      #: this many above it
WHOLE_LEVEL_GROUPS = 2 * COARSE_GROUPS   #: a finer level with more groups than this is searched on its cut only


def group_levels(graph: Graph, cluster: Cluster, *, seed: int = 0) -> list[Grouping]:
    """The groupings :func:`refine` climbs over, coarsest first (levels with the same groups as the one
    before them are dropped)."""
    levels: list[Grouping] = []
    ok = feasible_devices(graph, cluster)
    for rules in LEVEL_RULES:
        grouping = runnable_grouping(graph, rules, ok)
        if not levels or grouping.n_groups != levels[-1].n_groups:
            levels.append(grouping)
    if levels[0].n_groups > 2 * COARSE_GROUPS:
        try:
            levels.insert(0, coarsen(graph, levels[0], COARSE_GROUPS, cluster, seed=seed))
        except InfeasibleError:   # a structural group no device can run whole: no coarser level
            pass
    return levels


class _Level:
    """One grouping's members and the devices each group can run on whole."""

    def __init__(self, grouping: Grouping, ok_ops: np.ndarray, src: np.ndarray, dst: np.ndarray):
        G = grouping.n_groups
        order = np.argsort(grouping.group, kind="stable")
        self.members = np.split(order, np.cumsum(np.bincount(grouping.group, minlength=G))[:-1])
        self.ok = np.ones((G, ok_ops.shape[1]), dtype=bool)
        np.logical_and.at(self.ok, grouping.group, ok_ops)
        self.n_groups = G
        self.group = grouping.group
        # each group's neighbour ops (either end of an edge leaving the group)
        g_end, other = np.concatenate([self.group[src], self.group[dst]]), np.concatenate([dst, src])
        keep = g_end != self.group[other]
        g_end, other = g_end[keep], other[keep]
        by = np.argsort(g_end, kind="stable")
        self.adjacent = np.split(other[by], np.cumsum(np.bincount(g_end, minlength=G))[:-1])

    def cut(self, dev: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The groups with an edge to an op on another device."""
        c = dev[src] != dev[dst]
        return np.union1d(self.group[src[c]], self.group[dst[c]])

    def neighbour_devices(self, g: int, dev: np.ndarray) -> np.ndarray:
        """Boolean ``[D]``: the devices of group ``g``'s neighbour ops."""
        mask = np.zeros(self.ok.shape[1], dtype=bool)
        mask[dev[self.adjacent[g]]] = True
        return mask

    def homes(self, dev: np.ndarray) -> np.ndarray:
        """Each group's device: where most of its ops are."""
        counts = np.zeros(self.ok.shape, dtype=np.int64)
        np.add.at(counts, (self.group, dev), 1)
        return counts.argmax(axis=1)

    def neighbours(self, g: int, dev: np.ndarray, homes: np.ndarray, rng: np.random.Generator,
                   targets: np.ndarray | None = None) -> list[np.ndarray]:
        """Group ``g`` moved whole to every other device that can run it, and swapped with one random group
        of each other device that can take ``g``'s device; ``targets`` (boolean ``[D]``) limits the other
        devices (``g``'s own device is always a move target where its ops are split)."""
        m, here = self.members[g], int(homes[g])
        allowed = self.ok[g] if targets is None else self.ok[g] & targets
        cands = []
        for d in np.flatnonzero(self.ok[g]).tolist():
            if (d != here and allowed[d]) or (d == here and (dev[m] != d).any()):
                c = dev.copy()
                c[m] = d
                cands.append(c)
        for d in range(self.ok.shape[1]):
            if d == here or not allowed[d]:
                continue
            others = np.flatnonzero((homes == d) & self.ok[:, here])
            if len(others):
                h = int(others[rng.integers(len(others))])
                c = dev.copy()
                c[m], c[self.members[h]] = d, here
                cands.append(c)
        return cands


def refine(graph: Graph, cluster: Cluster, placement: Placement, *, seed=None, budget: float | None = None,
           method: str | None = None, env=None, simulator=None) -> Placement:
    """Improve ``placement`` by moves and swaps of groups, coarse levels first (see the module docstring),
    scored by ``env`` (default: the simulator; a :class:`~autoplace.env.MeasuredEnv` scores by real runs)
    or by ``simulator`` (anything with ``run_batch``: a :class:`~autoplace.robust.RobustSimulator` scores
    by the worst case over the cost model's uncertainty, its scenarios counted in the budget)."""
    if placement.schedule is not None:
        raise PlacementError(f"refine moves ops between devices, and {placement.method!r}'s schedule is its "
                             "stages' order: a scheduled placement cannot be refined")
    budget = work.nominal_budget(budget, "local-search")
    near = None     # placements near the current one: simulated from the first event a move changes
    if env is None:
        sim = Simulator(graph, cluster) if simulator is None else simulator
        run_batch = sim.run_batch
        near = sim.incremental if getattr(sim, "incremental_exact", False) else None
        max_evaluations = work.evaluations(budget, graph.n_ops, len(getattr(sim, "sims", (0,))))
        wall, wall_reason = 10.0 * budget + 30.0, "wall-clock cap"
    else:
        run_batch = env.evaluate_batch
        max_evaluations, wall, wall_reason = None, budget, "wall-clock budget"
    left = time_left()                              # a caller's --time-limit, sooner than the cap
    if left is not None and left < wall:
        wall, wall_reason = left, TIME_LIMIT
    t_end = time.perf_counter() + wall
    rng = check_random_state(seed)
    dev = placement.to_array(graph, cluster).copy()
    best = ranks(run_batch(dev[None, :]))[0]
    start_score, evaluations = best[1], 1
    ok_ops = feasible_devices(graph, cluster)
    levels = group_levels(graph, cluster, seed=seed_int(seed) if not isinstance(seed, np.random.Generator) else 0)
    src, dst, _ = graph.edges()
    report: list[dict] = []
    stop_reason = None
    passes = visited = 0
    moves = None    # the incremental simulation near the current placement, recorded when first needed
    moved = False   # the current placement has changed since it was recorded
    for li, grouping in enumerate(levels):
        level = _Level(grouping, ok_ops, src, dst)
        info = {"groups": level.n_groups, "passes": 0, "converged": False, "evaluations": 0}
        report.append(info)
        while stop_reason is None:
            improved, visited = False, 0
            info["passes"] += 1
            passes = info["passes"]
            homes = level.homes(dev)
            # a small or the coarsest level: every group, anywhere; a larger finer one: the groups on the
            # cut, to their neighbours' devices (in a seeded order)
            whole = li == 0 or level.n_groups <= WHOLE_LEVEL_GROUPS
            visit = rng.permutation(level.n_groups if whole else level.cut(dev, src, dst))
            info["visited"] = len(visit)
            for g in visit.tolist():
                cands = level.neighbours(g, dev, homes, rng, None if whole else level.neighbour_devices(g, dev))
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
                if near is not None and moves is None:
                    moves = near(dev)
                elif moves is not None and moved:
                    moves.reset(dev)
                moved = False
                r = ranks((run_batch if moves is None else moves.run_batch)(batch))
                evaluations += len(cands)
                if max_evaluations is not None and visited % 16 == 0:
                    report_progress(f"local search, level {len(report)} of {len(levels)}: step "
                                    f"{best[1] * 1e3:.1f} ms", evaluations / max_evaluations)
                info["evaluations"] += len(cands)
                visited += 1
                k = min(range(len(r)), key=r.__getitem__)
                if r[k][0] < best[0] or (r[k][0] == best[0] and r[k][1] < best[1] * (1 - 1e-9)):
                    best, dev, improved = r[k], batch[k], True
                    homes = level.homes(dev)
                    moved = True
            if stop_reason is None and not improved:
                info["converged"] = True
                break
        if stop_reason is not None:
            break
    if moves is not None:
        moves.close()
    if stop_reason is None:
        stop_reason = "converged"
    meta = {**placement.meta, "refined_from": placement.method, "start_score_s": start_score,
            "score_s": best[1], "out_of_memory": best[0], "evaluations": evaluations, "passes": passes,
            "groups_visited": visited,
            "groups": report[-1]["groups"] if report else 0, "levels": report,
            "converged": stop_reason == "converged", "stop_reason": stop_reason}
    return Placement.from_array(graph, cluster, dev, method or f"{placement.method}+ls", **meta)


def return_strays(graph: Graph, cluster: Cluster, dev: np.ndarray, run_batch, *, max_evaluations: int
                  ) -> tuple[np.ndarray, int]:
    """Move each co-location group whose neighbours mostly sit on another device (weighted by the bytes
    of the edges to them, one more per edge so that control edges count) to that device, wherever that
    costs nothing: the move is kept when its rank under ``run_batch`` (a robust simulator's worst case)
    is no worse. Cheapest groups first (their least time where they are), up to ``max_evaluations``
    simulations. Returns the placement and the simulations run."""
    ok = feasible_devices(graph, cluster)
    grouping = runnable_grouping(graph, ("colocation",), ok)
    group = grouping.group
    src, dst, nbytes = graph.edges()
    weight = nbytes.astype(np.float64) + 1.0
    across = group[src] != group[dst]
    # each group's edges to other groups, both ways: (the group, the op at the other end, weight)
    ends = np.concatenate([np.stack([group[src[across]], dst[across]]), np.stack([group[dst[across]], src[across]])],
                          axis=1)
    w_end = np.concatenate([weight[across], weight[across]])
    order_e = np.argsort(ends[0], kind="stable")
    ptr = np.searchsorted(ends[0][order_e], np.arange(grouping.n_groups + 1))
    other, w_end = ends[1][order_e], w_end[order_e]
    times = Simulator(graph, cluster).op_times
    dev = dev.copy()
    work = np.bincount(group, weights=times[np.arange(graph.n_ops), dev], minlength=grouping.n_groups)
    runs = np.ones((grouping.n_groups, cluster.n_devices), dtype=bool)
    np.logical_and.at(runs, group, ok)
    current = ranks(run_batch(dev[None, :]))[0]
    evaluations = 1
    for g in np.lexsort((np.arange(grouping.n_groups), work)).tolist():
        if evaluations >= max_evaluations:
            break
        lo, hi = ptr[g], ptr[g + 1]
        if lo == hi:
            continue
        members = grouping.members(g)
        here = dev[members[0]]
        w = np.bincount(dev[other[lo:hi]], weights=w_end[lo:hi], minlength=cluster.n_devices)
        target = int(np.argmax(w))
        if target == here or w[target] <= w[here] or not runs[g, target]:
            continue
        cand = dev.copy()
        cand[members] = target
        r = ranks(run_batch(cand[None, :]))[0]
        evaluations += 1
        if not r[0] and r <= current:
            dev, current = cand, r
    return dev, evaluations


@register_placer("local-search", description="moves and swaps of groups under the simulator, coarse to fine, "
                 "from the best of the fast placers", paper="", memory_aware=True)
def local_search(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """:func:`refine` started from the best of the fast placers (:func:`autoplace.placers.fast.best_fast`).
    ``seed`` orders the groups and picks swap partners; ``budget`` as in :func:`refine`. Raises
    :class:`InfeasibleError` where the result does not fit (:func:`refine` itself returns it, marked
    ``out_of_memory``)."""

    start, _ = best_fast(graph, cluster, seed=seed)
    return check_fits(graph, cluster, refine(graph, cluster, start, seed=seed, budget=budget, method="local-search"))
