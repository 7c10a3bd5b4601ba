"""Baechi's memory-aware list schedulers (Jeon et al. 2020): m-TOPO, m-ETF and m-SCT, on the schedule model
of :mod:`autoplace.placers.schedule_model` (see :mod:`autoplace.placers.list_scheduling` for what it models
and what each placement's meta carries)."""

from __future__ import annotations

import heapq

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import op_time_matrix
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers.registry import register_placer
from autoplace.placers.schedule_model import Schedule, fitting, predecessor_counts
from autoplace.validation import check_budget

__all__ = ["m_topo", "m_etf", "m_sct", "favourite_children"]


@register_placer("m-topo", description="Baechi m-TOPO: topological order, filling the fastest device first up "
                 "to its share of the work, never past a device's memory", paper="Jeon et al. 2020 (Baechi) §4.1",
                 memory_aware=True)
def m_topo(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Baechi's m-TOPO (Jeon et al. 2020 §4.1): walk the ops in topological order and fill the devices one
    after another, fastest first. A device takes ops until it holds its share of the total work — in
    proportion to its speed — or its memory is full; an op that cannot go to the current device goes to
    the first later device that can take it.

    Adapted: the devices filled are the GPUs (Baechi places on GPUs); the CPU takes only what no GPU can
    run or hold. As in Baechi's m-TOPO with co-location, a group goes whole to the device of its first
    member, and its whole work counts towards that device's share then; sources follow their first reader
    (:class:`Schedule`). ``seed`` and ``budget`` are unused. O((n + E) D)."""
    return fitting(graph, cluster, "m-topo", lambda cap: _m_topo(graph, cluster, cap))


def _m_topo(graph: Graph, cluster: Cluster, capacity: np.ndarray) -> Placement:
    s = Schedule(graph, cluster, memory=True, capacity=capacity)
    by_speed = sorted(range(cluster.n_devices), key=lambda d: (-cluster.achievable_flops[d], d))
    gpus = set(cluster.devices_of_kind("gpu"))
    fill = [d for d in by_speed if d in gpus] or by_speed
    fallback = fill + [d for d in by_speed if d not in fill]
    speed = cluster.achievable_flops[fill] / cluster.achievable_flops[fill].sum()
    share = s.times.min(axis=1).sum() * speed        # work each device should take, in fill order
    k = 0
    for i in graph.topological_order.tolist():
        if s.deferred(i):
            continue
        cands = set(s.candidates(i).tolist())
        if not cands:
            raise s.fail(i, "m-topo")
        while k + 1 < len(fill) and (s.work_on[fill[k]] >= share[k] or (
                fill[k] not in cands and s.used[fill[k]] + s.need(i)[fill[k]] > s.cap[fill[k]])):
            k += 1                         # this device has its share (or is full): move on
        d = fill[k] if fill[k] in cands else next(
            x for x in fallback[k:] + fallback[:k] if x in cands)
        _, start, plan = s.evaluate(i, d)
        s.assign(i, plan, start)
    s.place_leftover("m-topo")
    return s.placement("m-topo")


def _m_etf(graph: Graph, cluster: Cluster, method: str, capacity: np.ndarray,
           favourite_parent: np.ndarray | None = None, **meta) -> Placement:
    """Earliest Task First with memory. One heap per device holds the ready ops keyed by when their inputs
    can be there; the next (op, device) is the pair with the earliest start (the earliest idle gap from
    its data-ready time; plus :meth:`Schedule.choice_cost`), ties to the smaller data-ready time, then
    topological rank. A heap's key can go stale as links fill up: the top is re-timed before it is
    compared, and re-queued if its inputs now arrive later. Memory only grows while an op waits, so an op
    that no longer fits a device is dropped from that device's heap for good. O(n D log n) heap work.

    With ``favourite_parent`` (m-SCT), an op whose favourite parent is placed goes to that parent's device
    when it has room there, hiding the transfer between them."""
    s = Schedule(graph, cluster, memory=True, capacity=capacity)
    D = cluster.n_devices
    indeg = predecessor_counts(graph)
    heaps: list[list[tuple[float, int, int]]] = [[] for _ in range(D)]
    rank = graph.rank.tolist()
    waiting = np.zeros(graph.n_ops, dtype=np.int64)  # devices an op is still queued on
    pinned = np.zeros(graph.n_ops, dtype=bool)

    def release(i: int, pin: bool = True) -> None:
        cands = s.candidates(i)
        if len(cands) == 0:
            raise s.fail(i, method)
        if pin and favourite_parent is not None and favourite_parent[i] >= 0:
            home = s.dev[favourite_parent[i]]
            if home in cands and len(cands) > 1 and len(s.group_members[s.group_of[i]]) == 1:
                cands, pinned[i] = np.array([home]), True
        for d in cands.tolist():
            heapq.heappush(heaps[d], (s.ready_time(i, d)[0], rank[i], i))
        waiting[i] = len(cands)

    for i in np.flatnonzero(s.floating).tolist():    # floating ops are deferred: they follow their readers
        for c in graph.successors(i).tolist():
            indeg[c] -= 1
    for i in graph.topological_order.tolist():
        if indeg[i] == 0 and not s.floating[i]:
            release(i)
    placed, to_place = 0, int((~s.floating).sum())
    while placed < to_place:
        best = None
        for d in range(D):
            h = heaps[d]
            while h:
                r, rk, i = h[0]
                if s.dev[i] >= 0:                      # placed elsewhere already
                    heapq.heappop(h)
                    continue
                if not s.allowed(i, d):                # no room left (or its group went elsewhere)
                    heapq.heappop(h)
                    waiting[i] -= 1
                    if waiting[i] == 0:
                        if not pinned[i]:
                            raise s.fail(i, method)
                        pinned[i] = False   # the favourite parent's device filled up: go anywhere
                        release(i, pin=False)
                    continue
                finish, start, plan = s.evaluate(i, d)
                ready = min(start, r)
                if plan[3] and plan[3][-1][2] > r * (1 + 1e-12) + 1e-15:   # its inputs now land later
                    heapq.heapreplace(h, (max(x[2] for x in plan[3]), rk, i))
                    continue
                key = (start + s.choice_cost(i, d), ready, rk, d)
                if best is None or key < best[0]:
                    best = (key, i, start, plan)
                break
        if best is None:
            raise InfeasibleError(f"{method}: {to_place - placed} ops could not be scheduled on cluster "
                                  f"{cluster.name!r}")
        _, i, start, plan = best
        s.assign(i, plan, start)                       # its heap entries go lazily (placed already)
        placed += 1
        for c in graph.successors(i).tolist():
            indeg[c] -= 1
            if indeg[c] == 0:
                release(c)
    s.place_leftover(method)
    return s.placement(method, **meta)


@register_placer("m-etf", description="Baechi m-ETF: repeatedly start the ready op that can start earliest "
                 "on any device with memory left", paper="Jeon et al. 2020 (Baechi) §4.2", memory_aware=True)
def m_etf(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Baechi's m-ETF (Jeon et al. 2020 §4.2; ETF by Hwang et al. 1989): repeatedly start the ready
    (op, device) pair with the earliest start among devices whose memory still has room for the op, in the
    schedule model of :class:`Schedule`. Adapted: the start also pays the choice cost
    (:meth:`Schedule.choice_cost`), floating ops follow their readers, and the placement is checked by
    simulation and rebuilt with less room where it runs out (:func:`fitting`, meta ``memory_tries``).
    Raises :class:`InfeasibleError` when no device has room. ``seed`` and ``budget`` are unused.
    O(n D log n) heap work and schedule probes per try."""
    return fitting(graph, cluster, "m-etf", lambda cap: _m_etf(graph, cluster, "m-etf", cap))


def favourite_children(graph: Graph, cluster: Cluster, *,
                       budget: float | None = None) -> tuple[np.ndarray, str, str]:
    """Each op's favourite parent (or -1) for m-SCT, how it was found (``"lp"`` or ``"greedy"``) and why.

    The SCT relaxation (Hanen & Munier 1995, as in Baechi §4.3): for every data edge i->j a variable
    ``x_ij`` in [0, 1] (0: j is i's favourite child, the transfer is hidden), with at most one favourite
    child per op and one favourite parent per op (``sum_j x_ij >= |succ(i)| - 1``,
    ``sum_i x_ij >= |pred(j)| - 1``), ``s_j >= s_i + p_i + c_ij x_ij`` and ``w >= s_i + p_i``; minimise
    ``w``; ``x_ij < 1/2`` makes j the favourite. Solved with GLOP within half the budget, counted in GLOP's
    *deterministic* time (its work units, about 1.6 s each on this project's machine), so the outcome does
    not depend on the machine's load; a wall-clock cap of ``4 * limit + 10`` s guards against stalls.
    Where the LP has more than ``SCT_LP_MAX_EDGES`` edges or is not solved within that limit, the
    favourites are a greedy matching of the edges by decreasing transfer time under the same
    one-child/one-parent limits; the reason is returned (and recorded in the placement's meta).
    """
    times = op_time_matrix(graph, cluster)
    p = np.nanmean(np.where(np.isfinite(times), times, np.nan), axis=1)
    src, dst, nbytes = graph.edges()
    n = graph.n_ops
    key, inv = np.unique(src * n + dst, return_inverse=True)
    es, ed = key // n, key % n
    eb = np.zeros(len(key))
    np.add.at(eb, inv.ravel(), nbytes)
    comm = cluster.mean_transfer_time(eb)
    fav_parent = np.full(n, -1, dtype=np.int64)
    limit = 0.5 * (budget if budget is not None else 60.0)
    how, why = "lp", f"SCT LP solved ({len(es):,} edges)"
    if len(es) > SCT_LP_MAX_EDGES:
        x, why = None, f"SCT LP not tried: {len(es):,} edges > {SCT_LP_MAX_EDGES:,}"
    else:
        x = _sct_lp(n, es, ed, p, comm, deterministic_limit=limit)
        if x is None:
            why = f"SCT LP ({len(es):,} edges) not solved within {limit:g} units of deterministic time"
    if x is None:
        how = "greedy"
    if x is not None:
        order = np.argsort(x, kind="stable")
        chosen = order[x[order] < 0.5]
    else:
        chosen = np.argsort(-comm, kind="stable")
    has_child = np.zeros(n, dtype=bool)
    for e in chosen:
        a, b = int(es[e]), int(ed[e])
        if not has_child[a] and fav_parent[b] < 0:
            has_child[a], fav_parent[b] = True, a
    return fav_parent, how, why


SCT_LP_MAX_EDGES = 20000  #: larger SCT LPs are not tried (GLOP's memory and time grow fast beyond)


def _sct_lp(n, es, ed, p, comm, *, deterministic_limit: float) -> np.ndarray | None:
    """The SCT LP with GLOP; None if unsolved within ``deterministic_limit`` units of GLOP's deterministic
    time (or the wall-clock cap)."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    inf = solver.infinity()
    S = [solver.NumVar(0, inf, "") for _ in range(n)]
    X = [solver.NumVar(0, 1, "") for _ in range(len(es))]
    W = solver.NumVar(0, inf, "w")
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for e, (a, b) in enumerate(zip(es.tolist(), ed.tolist())):
        ct = solver.Constraint(float(p[a]), inf)
        ct.SetCoefficient(S[b], 1)
        ct.SetCoefficient(S[a], -1)
        ct.SetCoefficient(X[e], -float(comm[e]))
        succ[a].append(e)
        pred[b].append(e)
    for i in range(n):
        for edges in (succ[i], pred[i]):
            if edges:
                ct = solver.Constraint(len(edges) - 1, inf)
                for e in edges:
                    ct.SetCoefficient(X[e], 1)
        ct = solver.Constraint(float(p[i]), inf)
        ct.SetCoefficient(W, 1)
        ct.SetCoefficient(S[i], -1)
    solver.Minimize(W)
    limit = max(deterministic_limit, 0.05)
    solver.SetSolverSpecificParametersAsString(f"max_deterministic_time: {limit}")
    solver.SetTimeLimit(int((4 * limit + 10) * 1000))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return np.array([v.solution_value() for v in X])


@register_placer("m-sct", description="Baechi m-SCT: m-ETF where each op's favourite child (from the SCT LP) "
                 "joins its device", paper="Jeon et al. 2020 (Baechi) §4.3; Hanen & Munier 1995", memory_aware=True)
def m_sct(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Baechi's m-SCT (Jeon et al. 2020 §4.3, after Hanen & Munier 1995): m-ETF in which each op's
    favourite child — from the SCT linear relaxation, :func:`favourite_children` — is placed on its
    parent's device when that device has room, hiding the transfer between them. Adapted as m-ETF, and
    only an op in no multi-op co-location group is pinned to its favourite parent: a group's device is
    chosen for the group's whole work and traffic, which the op-level SCT relaxation does not see.
    ``budget``: half of it (default 60) is GLOP's deterministic-time limit for the LP; ``seed`` is unused.
    Meta: ``favourites`` (``lp`` or ``greedy``), ``favourites_reason``, ``memory_tries``."""
    fav_parent, how, why = favourite_children(graph, cluster, budget=check_budget(budget))
    return fitting(graph, cluster, "m-sct", lambda cap: _m_etf(graph, cluster, "m-sct", cap, fav_parent,
                                                                favourites=how, favourites_reason=why))
