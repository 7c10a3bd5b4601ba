"""List-scheduling placers: the whitepaper's greedy placer, HEFT, and Baechi's m-TOPO, m-ETF and m-SCT.

All four walk the op graph and decide each op's device with a running schedule (:class:`_Schedule`):
per-device ready time, each placed op's finish time, and an op's earliest start on a device counting the
transfer of every input produced elsewhere (a lone transfer's ``overhead + bytes / bandwidth + latency``,
:meth:`autoplace.cluster.Cluster.transfer_time`; links, segments and copy engines are not contended in
this estimate — the simulator scores the result exactly). Co-location groups are honoured: the first
member of a group fixes the device of all members. The ``m-`` placers (Baechi, Jeon et al. 2020) also
keep each device's memory within capacity, counted as the ops are placed (in about execution order):
parameters stay resident (a group reserves all its members' parameters when its first member is
placed); an op's outputs are live from the op until their last reader is placed.
"""

from __future__ import annotations

import heapq

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices, op_time_matrix
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers import register_placer
from autoplace.validation import check_budget

__all__ = ["tf_greedy", "heft", "m_topo", "m_etf", "m_sct", "favourite_children"]


class _Schedule:
    """Running state shared by the list schedulers."""

    def __init__(self, graph: Graph, cluster: Cluster, *, memory: bool):
        self.g, self.c = graph, cluster
        self.times = op_time_matrix(graph, cluster)
        self.ok = feasible_devices(graph, cluster) & np.isfinite(self.times)
        n, D = graph.n_ops, cluster.n_devices
        self.dev = np.full(n, -1, dtype=np.int64)
        self.finish = np.zeros(n)
        self.free = np.zeros(D)
        self.memory = memory
        # Memory as the ops are placed in (roughly) execution order: parameters stay resident, an output
        # is live from its op until its last consumer is placed (then it is released on its device).
        self.used = np.zeros(D, dtype=np.int64)
        self.cap = cluster.memory_bytes
        self.need = graph.param_bytes + graph.out_alloc_total
        self.readers_left = np.diff(graph.tensor_pair_ptr).astype(np.int64)
        # co-location groups: ops sharing a colocation_group move together
        self.group_members: list[np.ndarray] = list(graph.colocation_groups().values())
        self.group_of = np.full(n, -1, dtype=np.int64)
        for k, members in enumerate(self.group_members):
            self.group_of[members] = k
        self.group_dev = np.full(len(self.group_members), -1, dtype=np.int64)
        self.group_need = np.array([graph.param_bytes[m].sum() for m in self.group_members], dtype=np.int64)
        self.group_ok = np.array([self.ok[m].all(axis=0) for m in self.group_members]).reshape(-1, D)
        # inputs of each op: (producer, bytes)
        self.inputs: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        src, dst, nbytes = graph.edges()
        for s, d, b in zip(src.tolist(), dst.tolist(), nbytes.tolist()):
            self.inputs[d].append((s, b))

    def candidates(self, i: int) -> np.ndarray:
        """Devices op ``i`` may go to: its group's device if fixed, else feasible (and with room)."""
        gi = self.group_of[i]
        if gi >= 0 and self.group_dev[gi] >= 0:
            return np.array([self.group_dev[gi]])
        ok = self.group_ok[gi] if gi >= 0 else self.ok[i]
        if self.memory:
            # a group reserves all its members' parameters when its first member is placed
            need = self.g.out_alloc_total[i] + (self.group_need[gi] if gi >= 0 else self.g.param_bytes[i])
            ok = ok & (self.used + need <= self.cap)
        return np.flatnonzero(ok)

    def ready_time(self, i: int, d: int) -> float:
        """When all of op ``i``'s inputs can be on device ``d``."""
        t = 0.0
        c = self.c
        for s, b in self.inputs[i]:
            ds = self.dev[s]
            # a lone transfer's time (Cluster.transfer_time): no contention for links, segments or engines
            arrive = self.finish[s] if ds == d else \
                self.finish[s] + c.overhead[ds, d] + b / c.transfer_bandwidth[ds, d] + c.latency[ds, d]
            if arrive > t:
                t = arrive
        return t

    def start_time(self, i: int, d: int) -> float:
        return max(self.free[d], self.ready_time(i, d))

    def assign(self, i: int, d: int, start: float | None = None) -> None:
        start = self.start_time(i, d) if start is None else start
        self.dev[i] = d
        self.finish[i] = start + self.times[i, d]
        self.free[d] = self.finish[i]
        g = self.g
        gi = self.group_of[i]
        if gi >= 0:
            if self.group_dev[gi] < 0:
                self.group_dev[gi] = d
                self.used[d] += self.group_need[gi]
        else:
            self.used[d] += g.param_bytes[i]
        self.used[d] += g.out_alloc_total[i] - g.unconsumed_alloc[i]  # outputs nobody reads die at once
        for q in g.in_pair[g.in_ptr[i]:g.in_ptr[i + 1]]:              # inputs whose last reader this is
            t = g.pair_tensor[q]
            self.readers_left[t] -= 1
            if self.readers_left[t] == 0:
                self.used[self.dev[g.tensor_src[t]]] -= g.tensor_alloc[t]

    def fail(self, i: int, method: str) -> InfeasibleError:
        op = self.g.ops[i]
        why = "memory" if self.memory else "device constraints"
        return InfeasibleError(f"{method}: no device can take op {op.name!r} ({why}; cluster {self.c.name!r})")

    def placement(self, method: str, **meta) -> Placement:
        return Placement.from_array(self.g, self.c, self.dev, method, **meta)


def _predecessor_counts(graph: Graph) -> np.ndarray:
    """Number of distinct producer ops of each op (an op reading two outputs of one producer counts it once)."""
    src, dst, _ = graph.edges()
    pairs = np.unique(src * graph.n_ops + dst)
    return np.bincount(pairs % graph.n_ops, minlength=graph.n_ops).astype(np.int64)


def _earliest_finish_in_order(graph: Graph, cluster: Cluster, order, method: str, memory: bool) -> Placement:
    s = _Schedule(graph, cluster, memory=memory)
    for i in order:
        i = int(i)
        best, best_d = np.inf, -1
        for d in s.candidates(i):
            f = s.start_time(i, int(d)) + s.times[i, d]
            if f < best:
                best, best_d = f, int(d)
        if best_d < 0:
            raise s.fail(i, method)
        s.assign(i, best_d)
    return s.placement(method, estimated_step_time_s=float(s.finish.max(initial=0.0)))


@register_placer("tf-greedy", description="whitepaper's simulated greedy placer: each op, in topological order, "
                 "to the device where it finishes earliest counting transfers", paper="TensorFlow whitepaper §3.2.1")
def tf_greedy(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """The TensorFlow whitepaper's simulated greedy placer (§3.2.1): walk the ops in topological order and
    put each on the feasible device where it would finish earliest — ``max(device free, inputs there) + op
    time``, inputs from other devices arriving a lone transfer's time after their producer ends.
    Adapted: the whitepaper's cost model is our :mod:`autoplace.cost`; co-location groups follow their
    first member. No memory check. ``seed`` and ``budget`` are unused (deterministic). O((n + E) D)."""
    return _earliest_finish_in_order(graph, cluster, graph.topological_order, "tf-greedy", memory=False)


def _upward_rank(graph: Graph, cluster: Cluster, times: np.ndarray) -> np.ndarray:
    """HEFT's rank_u: mean op time plus the longest mean-cost path to an exit (Topcuoglu et al. 2002, eq. 8)."""
    finite = np.where(np.isfinite(times), times, np.nan)
    w = np.nanmean(finite, axis=1)
    rank = np.zeros(graph.n_ops)
    src, dst, nbytes = graph.edges()
    comm = cluster.mean_transfer_time(nbytes)
    succ: list[list[tuple[int, float]]] = [[] for _ in range(graph.n_ops)]
    for s_, d_, c in zip(src.tolist(), dst.tolist(), comm.tolist()):
        succ[s_].append((d_, c))
    for i in graph.topological_order[::-1]:
        i = int(i)
        rank[i] = w[i] + max((c + rank[j] for j, c in succ[i]), default=0.0)
    return rank


@register_placer("heft", description="HEFT: ops by decreasing upward rank, each to its earliest-finish device",
                 paper="Topcuoglu, Hariri & Wu 2002")
def heft(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """HEFT (Topcuoglu, Hariri & Wu 2002): order the ops by decreasing upward rank
    ``rank_u(i) = w̄_i + max_j (c̄_ij + rank_u(j))`` (eq. 8: mean op time over feasible devices, mean transfer
    time), then give each the device where it finishes earliest. Adapted: append scheduling (an op starts
    after the device's last one) instead of the paper's insertion policy, since the simulator does not
    backfill; ties and zero-time ops keep a topological order. No memory check. ``seed`` and ``budget``
    are unused. O((n + E) D + n log n)."""
    rank = _upward_rank(graph, cluster, op_time_matrix(graph, cluster))
    # decreasing rank is a topological order when every op takes positive time; ties by topological rank
    order = np.lexsort((graph.rank, -rank))
    pos = np.empty(graph.n_ops, dtype=np.int64)
    pos[order] = np.arange(graph.n_ops)
    if any(pos[s] > pos[d] for s, d in zip(*graph.edges()[:2])):  # zero-time ops can break it
        order = graph.topological_order[np.argsort(-rank[graph.topological_order], kind="stable")]
        order = _topological_repair(graph, order)
    return _earliest_finish_in_order(graph, cluster, order, "heft", memory=False)


def _topological_repair(graph: Graph, priority_order: np.ndarray) -> np.ndarray:
    """A topological order that follows ``priority_order`` wherever dependencies allow."""
    prio = np.empty(graph.n_ops, dtype=np.int64)
    prio[priority_order] = np.arange(graph.n_ops)
    indeg = _predecessor_counts(graph)
    heap = [(int(prio[i]), i) for i in range(graph.n_ops) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(i)
        for c in graph.successors(i):
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(heap, (int(prio[c]), int(c)))
    return np.array(out, dtype=np.int64)


@register_placer("m-topo", description="Baechi m-TOPO: topological order, filling the fastest device first up "
                 "to its share of the work, never past a device's memory", paper="Jeon et al. 2020 (Baechi) §4.1", memory_aware=True)
def m_topo(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Walk the ops in topological order and fill devices one after another (fastest first). A device
    takes ops until it holds its share of the total work — in proportion to its speed — or its memory is
    full; ops that cannot run on the current device go to the first later device that can take them.
    Baechi's m-TOPO (Jeon et al. 2020 §4.1); ``seed`` and ``budget`` are unused. O(n D + E)."""
    s = _Schedule(graph, cluster, memory=True)
    order = sorted(range(cluster.n_devices), key=lambda d: (-cluster.achievable_flops[d], d))
    fastest = s.times.min(axis=1)
    speed = cluster.achievable_flops[order] / cluster.achievable_flops[order].sum()
    share = fastest.sum() * speed        # work each device should take, in device-fill order
    k, load = 0, 0.0
    for i in graph.topological_order:
        i = int(i)
        cands = set(s.candidates(i).tolist())
        if not cands:
            raise s.fail(i, "m-topo")
        while order[k] in cands and load >= share[k] and k + 1 < len(order):
            k, load = k + 1, 0.0           # this device has its share: move on
        if order[k] in cands:
            d = order[k]
        else:                              # e.g. a CPU-only op, or the device is full
            later = [x for x in order[k:] if x in cands] or [x for x in order if x in cands]
            d = later[0]
            if d != order[k] and d in order[k:] and s.used[order[k]] + s.need[i] > s.cap[order[k]]:
                k, load = order.index(d), 0.0
        s.assign(i, d)
        if d == order[k]:
            load += fastest[i]
    return s.placement("m-topo")


def _m_etf(graph: Graph, cluster: Cluster, method: str, favourite_parent: np.ndarray | None = None,
           **meta) -> Placement:
    """Earliest Task First with memory. One heap per device holds the ready ops keyed by when their inputs
    can be there; the next (op, device) is the pair with the earliest start ``max(device free, inputs
    there)``, ties to the smaller data-ready time, then topological rank. Memory only grows, so an op that
    no longer fits a device is dropped from that device's heap for good. O(n D log n).

    With ``favourite_parent`` (m-SCT), an op whose favourite parent is placed goes to that parent's device
    when it has room there, hiding the transfer between them."""
    s = _Schedule(graph, cluster, memory=True)
    D = cluster.n_devices
    indeg = _predecessor_counts(graph)
    heaps: list[list[tuple[float, int, int]]] = [[] for _ in range(D)]
    rank = graph.rank
    waiting = np.zeros(graph.n_ops, dtype=np.int64)  # devices an op is still queued on

    pinned = np.zeros(graph.n_ops, dtype=bool)

    def release(i: int, pin: bool = True) -> None:
        cands = s.candidates(i)
        if len(cands) == 0:
            raise s.fail(i, method)
        if pin and favourite_parent is not None and favourite_parent[i] >= 0:
            home = s.dev[favourite_parent[i]]
            if home in cands and len(cands) > 1:
                cands, pinned[i] = np.array([home]), True
        for d in cands:
            heapq.heappush(heaps[d], (s.ready_time(i, int(d)), int(rank[i]), i))
        waiting[i] = len(cands)

    for i in graph.topological_order:
        if indeg[i] == 0:
            release(int(i))
    placed = 0
    while placed < graph.n_ops:
        best = None
        for d in range(D):
            h = heaps[d]
            while h:
                r, rk, i = h[0]
                if s.dev[i] >= 0:                      # placed elsewhere already
                    heapq.heappop(h)
                    continue
                if d not in s.candidates(i):           # no room left (or its group went elsewhere)
                    heapq.heappop(h)
                    waiting[i] -= 1
                    if waiting[i] == 0:
                        if not pinned[i]:
                            raise s.fail(i, method)
                        pinned[i] = False   # the favourite parent's device filled up: go anywhere
                        release(i, pin=False)
                    continue
                key = (max(s.free[d], r), r, rk, d)
                if best is None or key < best[0]:
                    best = (key, i)
                break
        if best is None:
            raise InfeasibleError(f"{method}: {graph.n_ops - placed} ops could not be scheduled on cluster "
                                  f"{cluster.name!r}")
        (start, _, _, d), i = best
        heapq.heappop(heaps[d])
        s.assign(i, d, start)
        placed += 1
        for c in graph.successors(i):
            indeg[c] -= 1
            if indeg[c] == 0:
                release(int(c))
    return s.placement(method, estimated_step_time_s=float(s.finish.max(initial=0.0)), **meta)


@register_placer("m-etf", description="Baechi m-ETF: repeatedly start the ready op that can start earliest "
                 "on any device with memory left", paper="Jeon et al. 2020 (Baechi) §4.2", memory_aware=True)
def m_etf(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Baechi's m-ETF (Jeon et al. 2020 §4.2; ETF by Hwang et al. 1989): repeatedly start the ready
    (op, device) pair with the earliest start among devices whose memory still has room for the op,
    counting parameters as resident and outputs as live until their last reader is placed. Raises
    :class:`InfeasibleError` when no device has room. ``seed`` and ``budget`` are unused.
    O(n D log n + E D)."""
    return _m_etf(graph, cluster, "m-etf")


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
    parent's device when that device has room, hiding the transfer between them. ``budget``: half of it
    (default 60) is GLOP's deterministic-time limit for the LP; ``seed`` is unused. Meta: ``favourites``
    (``lp`` or ``greedy``) and ``favourites_reason``."""
    fav_parent, how, why = favourite_children(graph, cluster, budget=check_budget(budget))
    return _m_etf(graph, cluster, "m-sct", fav_parent, favourites=how, favourites_reason=why)
