"""Exact placement and schedule with OR-Tools CP-SAT.

Tasks are the graph's ops when there are at most ``max_tasks`` of them (the *op-level model*), else
contiguous runs of the topological order with about equal work (a *coarse model*: contracting contiguous
runs keeps the task graph acyclic). The model, in integer time units ``u``:

* ``x[k, d]`` — task ``k`` runs on device ``d`` (exactly one; only where all its ops can run there);
* an optional interval of length ``floor(t(k, d) / u)`` per (task, device); per device, ``NoOverlap``
  (or ``Cumulative`` up to the device's ``concurrency``);
* for every data edge ``a -> b`` and devices ``da != db``:
  ``start[b] >= end[a] + floor(transfer_time(bytes)[da, db] / u)`` if ``x[a, da] and x[b, db]``, and
  ``start[b] >= end[a]`` otherwise, where ``transfer_time`` (:meth:`autoplace.cluster.Cluster.transfer_time`)
  is a lone transfer's ``overhead + bytes / bandwidth + latency``, the least a simulated one takes;
* memory, relaxed to what every simulated step must hold: the parameters placed on a device are resident
  all step, and an op's outputs are allocated beside them while it runs, so
  ``sum_k x[k, d] * params(k) <= memory(d)`` and no task goes where ``params(k) + outputs of its largest
  op`` alone exceed the memory;
* co-location: tasks holding ops of one ``colocation_group`` take the same device;
* minimise the makespan.

``t(k, d)`` is the least time the task's ops take on ``d`` under any contention (alone or loaded costs,
:func:`autoplace.cost.least_op_times`). Durations and delays are rounded *down* to whole units, links are
engines and segments are not contended and ops may run in any order, so every schedule the simulator produces
for a placement of whole tasks maps to a feasible schedule of the model no longer than it. On the op-level model,
CP-SAT's proven bound (``BestObjectiveBound * u``) is therefore a lower bound on the simulated step of **every**
placement that honours the co-location groups and fits in memory; on a coarse model it bounds only
placements of whole tasks, so it is reported as ``model_bound_s``, never as ``bound_s``.

The relaxed memory constraint can admit a placement that runs out of memory when simulated (outputs and
received copies pile up). Then the placement is re-solved under Baechi's static model — every output
counted as held all step, ``sum_k x[k, d] * (params(k) + outputs(k)) <= memory(d)`` — with the rest of the
budget; the bound still comes from the relaxed model.

**Budget.** ``budget`` is CP-SAT's *deterministic* time (its own work units; default 10), so a result
is the same on a busy machine as on an idle one. A unit's wall time depends on the model: 0.5 units on
the 60-task model of a 400-op layered DAG took 4.9 s on one idle core of this project's machine and
10.5 s beside two test suites. A wall-clock cap of ``30 * budget + 30`` seconds guards against stalls; a
solve stopped by it says so in ``meta["stopped_by"]`` and is then not reproducible. ``seed`` is CP-SAT's
``random_seed`` (one worker). Complexity: NP-hard; the model has ``O(K D)`` literals and ``O(E D^2)`` edge constraints.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices, least_op_times
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph
from autoplace.grouping import runnable_grouping
from autoplace.placement import Placement
from autoplace.placers.fast import best_fast, check_fits, ranks
from autoplace.placers.registry import register_placer
from autoplace.search.budget import TIME_LIMIT, time_left
from autoplace.sim import Simulator
from autoplace.validation import check_budget, seed_int

__all__ = ["cp_sat", "solve_cp_sat", "improve_with_cp_sat", "CPSatResult", "NoSolutionInBudget", "task_partition"]

DEFAULT_BUDGET = 10.0
MAX_TASKS = 60
WALL_CAP_PER_UNIT, WALL_CAP_S = 30.0, 30.0   # the wall-clock guard: 30 s per unit of deterministic time + 30 s


class NoSolutionInBudget(InfeasibleError):
    """CP-SAT found no placement within its budget (the model is not proven infeasible); ``stopped_by``:
    ``"deterministic budget"`` or ``"wall-clock cap"``."""

    def __init__(self, message: str, stopped_by: str):
        super().__init__(message)
        self.stopped_by = stopped_by


def task_partition(graph: Graph, max_tasks: int, times: np.ndarray, group: np.ndarray | None = None) -> np.ndarray:
    """Task index per op: the ops themselves if few enough, else contiguous runs of about equal work of a
    topological order. With ``group`` (a structural group per op) the order keeps each group's ops
    together where dependencies allow (:func:`structured_order`) and the cuts move to the nearest group
    boundary, so tasks follow the model's layers and cells; contiguous runs of a topological order
    always contract to an acyclic task graph."""
    n = graph.n_ops
    if n <= max_tasks:
        return np.arange(n, dtype=np.int64)
    work = np.where(np.isfinite(times), times, np.nan)
    work = np.nan_to_num(np.nanmin(work, axis=1))
    order = graph.topological_order if group is None else structured_order(graph, group)
    cum = np.cumsum(work[order])
    total = cum[-1] if cum[-1] > 0 else 1.0
    if group is None:
        chunk = np.minimum((cum - work[order] / 2) / total * max_tasks, max_tasks - 1).astype(np.int64)
    else:
        # cut where the group changes, nearest to each equal-work target
        boundary = np.flatnonzero(group[order][1:] != group[order][:-1]) + 1    # a run may start here
        targets = np.searchsorted(cum, total * np.arange(1, max_tasks) / max_tasks)
        if len(boundary):
            k = np.clip(np.searchsorted(boundary, targets), 1, len(boundary)) - 1
            nxt = np.minimum(k + 1, len(boundary) - 1)
            cuts = np.where(np.abs(boundary[nxt] - targets) < np.abs(boundary[k] - targets), boundary[nxt],
                            boundary[k])
        else:
            cuts = targets
        cuts = np.unique(cuts[(cuts > 0) & (cuts < n)])
        chunk = np.searchsorted(cuts, np.arange(n), side="right")
    task = np.empty(n, dtype=np.int64)
    task[order] = chunk
    _, task = np.unique(task, return_inverse=True)   # renumber to 0..K-1 without gaps
    return task.astype(np.int64)


def structured_order(graph: Graph, group: np.ndarray) -> np.ndarray:
    """A topological order that finishes the group of the op it last took before starting another (the
    lowest-ranked ready op starts the next group): Kahn's algorithm with a heap per group."""

    n = graph.n_ops
    indeg = np.diff(graph.in_ptr).copy()
    ready_in: dict[int, list[int]] = {}
    ready_all: list[int] = []
    done = np.zeros(n, dtype=bool)
    rank = graph.rank

    def push(i: int) -> None:
        heapq.heappush(ready_in.setdefault(int(group[i]), []), int(rank[i]))
        heapq.heappush(ready_all, int(rank[i]))

    for i in np.flatnonzero(indeg == 0).tolist():
        push(i)
    out, current = [], -1
    topo = graph.topological_order
    tptr, pptr, pair_op = graph.op_tensor_ptr, graph.tensor_pair_ptr, graph.pair_op
    while len(out) < n:
        mine = ready_in.get(current, [])
        while mine and done[topo[mine[0]]]:
            heapq.heappop(mine)
        if mine:
            i = int(topo[heapq.heappop(mine)])
        else:
            while done[topo[ready_all[0]]]:
                heapq.heappop(ready_all)
            i = int(topo[heapq.heappop(ready_all)])
            current = int(group[i])
        done[i] = True
        out.append(i)
        for c in pair_op[pptr[tptr[i]]:pptr[tptr[i + 1]]].tolist():   # one per input pair, as indeg counts
            indeg[c] -= 1
            if indeg[c] == 0:
                push(c)
    return np.array(out, dtype=np.int64)


@dataclass(frozen=True)
class CPSatResult:
    """What the solver found and proved.

    ``status`` is CP-SAT's (OPTIMAL / FEASIBLE) for the model that produced ``devices``; ``objective_s`` that
    model's makespan; ``model_bound_s`` the relaxed model's proven bound; ``bound_s`` the same when it is a
    bound on every placement (the op-level model), else None; ``model`` is ``"ops"`` or ``"K tasks"``;
    ``memory_model`` ``"relaxed"`` or ``"static"`` (the re-solve after a simulated OOM); ``stopped_by`` why
    the last solve ended (``"optimal"``, ``"deterministic budget"``, ``"wall-clock cap"``)."""

    status: str
    objective_s: float
    model_bound_s: float
    bound_s: float | None
    devices: np.ndarray
    tasks: int
    model: str
    memory_model: str
    stopped_by: str

    @property
    def optimal(self) -> bool:
        return self.status == "OPTIMAL"

    @property
    def gap(self) -> float:
        """The solver's own gap between its objective and the relaxed model's bound."""
        return (self.objective_s - self.model_bound_s) / self.objective_s if self.objective_s > 0 else 0.0


class _Model:
    """The CP-SAT model of one graph and cluster in integer time units (see the module docstring)."""

    def __init__(self, graph: Graph, cluster: Cluster, max_tasks: int, op_times: np.ndarray | None,
                 group: np.ndarray | None = None):
        times = least_op_times(graph, cluster, op_times)
        ok = feasible_devices(graph, cluster) & np.isfinite(times)
        self.task = task = task_partition(graph, max_tasks, times, group)
        self.times = np.where(ok, times, 0.0)
        K, D = int(task.max()) + 1 if len(task) else 0, cluster.n_devices
        self.K, self.D = K, D
        t_task = np.zeros((K, D))
        np.add.at(t_task, task, np.where(ok, times, 0.0))
        self.ok_task = np.ones((K, D), dtype=bool)
        np.logical_and.at(self.ok_task, task, ok)
        for k in np.flatnonzero(~self.ok_task.any(axis=1)):
            op = graph.ops[int(np.flatnonzero(task == k)[0])]
            raise InfeasibleError(f"cp-sat: no single device can run all ops of task {k} (first op {op.name!r})")
        self.params = np.bincount(task, weights=graph.param_bytes, minlength=K).astype(np.int64)
        self.static_need = np.bincount(task, weights=graph.param_bytes + graph.out_alloc_total,
                                       minlength=K).astype(np.int64)
        self.largest_out = np.zeros(K, dtype=np.int64)
        np.maximum.at(self.largest_out, task, graph.out_alloc_total.astype(np.int64))
        src, dst, nbytes = graph.edges()
        data = (graph.tensor_out[graph.pair_tensor] >= 0).tolist()
        edges: dict[tuple[int, int], int] = {}
        carries_data: set[tuple[int, int]] = set()
        for a, b, nb, is_data in zip(task[src].tolist(), task[dst].tolist(), nbytes.tolist(), data):
            if a != b:
                edges[(a, b)] = edges.get((a, b), 0) + nb
                if is_data:
                    carries_data.add((a, b))
        # the least a transfer can take (only control edges: one latency)
        comm = {e: cluster.transfer_time(nb) if e in carries_data else cluster.latency for e, nb in edges.items()}
        # the unit: about 1e6 units over a serial schedule on the slowest feasible devices
        worst = float(np.where(self.ok_task, t_task, 0).max(axis=1).sum()
                      + sum(float(np.where(np.isfinite(c), c, 0).max()) for c in comm.values()))
        self.unit = max(worst, 1e-9) / 1e6
        self.dur = np.floor(np.where(self.ok_task, t_task, 0) / self.unit).astype(np.int64)
        self.delay = {e: np.floor(np.where(np.isfinite(c), c, 0) / self.unit).astype(np.int64)
                      for e, c in comm.items()}
        # the horizon in units: a serial schedule of the rounded durations and delays always fits
        self.horizon = int(self.dur.max(axis=1).sum() + sum(int(c.max()) for c in self.delay.values())) + 1
        self.groups = [sorted(set(task[m].tolist())) for m in graph.colocation_groups().values()]
        self.concurrency = cluster.concurrency
        self.memory = cluster.memory_bytes

    def solve(self, *, static_memory: bool, budget: float, seed: int, hint: np.ndarray | None):
        from ortools.sat.python import cp_model

        K, D, H = self.K, self.D, self.horizon
        m = cp_model.CpModel()
        start = [m.NewIntVar(0, H, f"s{k}") for k in range(K)]
        end = [m.NewIntVar(0, H, f"e{k}") for k in range(K)]
        x: dict[tuple[int, int], object] = {}
        per_dev: list[list] = [[] for _ in range(D)]
        for k in range(K):
            lits = []
            for d in np.flatnonzero(self.ok_task[k]).tolist():
                if self.params[k] + self.largest_out[k] > self.memory[d]:
                    continue  # this task alone cannot fit there
                lit = m.NewBoolVar(f"x{k}_{d}")
                per_dev[d].append(m.NewOptionalIntervalVar(start[k], int(self.dur[k, d]), end[k], lit, f"i{k}_{d}"))
                x[k, d] = lit
                lits.append(lit)
            if not lits:
                return None
            m.AddExactlyOne(lits)
        need = self.static_need if static_memory else self.params
        for d in range(D):
            if self.concurrency[d] <= 1:
                m.AddNoOverlap(per_dev[d])
            else:
                m.AddCumulative(per_dev[d], [1] * len(per_dev[d]), int(self.concurrency[d]))
            ks = [k for k in range(K) if (k, d) in x]
            if ks and need[ks].sum() > self.memory[d]:
                m.Add(sum(int(need[k]) * x[k, d] for k in ks) <= int(self.memory[d]))
        for (a, b), c in self.delay.items():
            m.Add(start[b] >= end[a])
            for da in range(D):
                for db in range(D):
                    if da != db and (a, da) in x and (b, db) in x and c[da, db] > 0:
                        m.Add(start[b] >= end[a] + int(c[da, db])).OnlyEnforceIf([x[a, da], x[b, db]])
        for members in self.groups:
            for k in members[1:]:
                for d in range(D):
                    a, b = x.get((members[0], d)), x.get((k, d))
                    if a is None and b is None:
                        continue
                    if a is None or b is None:
                        m.Add((b if a is None else a) == 0)
                    else:
                        m.Add(a == b)
        if hint is not None:
            for k in range(K):
                for d in range(D):
                    if (k, d) in x:
                        m.AddHint(x[k, d], int(hint[k] == d))
        makespan = m.NewIntVar(0, H, "makespan")
        m.AddMaxEquality(makespan, end)
        m.Minimize(makespan)
        solver = cp_model.CpSolver()
        solver.parameters.max_deterministic_time = float(budget)
        cap, cap_reason = WALL_CAP_PER_UNIT * float(budget) + WALL_CAP_S, "wall-clock cap"
        left = time_left()                         # a caller's --time-limit, sooner than the cap
        if left is not None and left < cap:
            cap, cap_reason = max(left, 0.01), TIME_LIMIT
        solver.parameters.max_time_in_seconds = cap
        solver.parameters.num_workers = 1          # deterministic for a seed
        solver.parameters.random_seed = int(seed)
        status = solver.Solve(m)
        name = solver.StatusName(status)
        capped = solver.WallTime() >= solver.parameters.max_time_in_seconds * 0.99 or \
            (cap_reason == TIME_LIMIT and time_left() == 0.0)        # the caller's deadline has passed
        stopped = "optimal" if status == cp_model.OPTIMAL else cap_reason if capped else "deterministic budget"
        if status == cp_model.INFEASIBLE:
            return None
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            raise NoSolutionInBudget(f"cp-sat: no placement found within its budget ({budget:g} units of "
                                     f"deterministic time, stopped by the {stopped}); give it a larger --budget",
                                     stopped)
        devs = np.array([next(d for d in range(D) if (k, d) in x and solver.Value(x[k, d])) for k in range(K)])
        return (name, solver.ObjectiveValue() * self.unit, solver.BestObjectiveBound() * self.unit, devs,
                solver.deterministic_time, stopped)


def solve_cp_sat(graph: Graph, cluster: Cluster, *, budget: float | None = None, seed: int = 0,
                 max_tasks: int = MAX_TASKS, op_times: np.ndarray | None = None, hint: np.ndarray | None = None,
                 group: np.ndarray | None = None) -> CPSatResult:
    """Solve the model (see the module docstring); raises :class:`InfeasibleError` when the relaxed model
    is proven infeasible or no placement is found within the budget. ``hint``: a device per op to start
    from (each task takes the device holding most of its ops' work; default: every task on the device
    that runs them all fastest); ``group``: structural groups the tasks should follow
    (:func:`task_partition`)."""

    budget = DEFAULT_BUDGET if check_budget(budget) is None else budget
    model = _Model(graph, cluster, max_tasks, op_times, group)
    hint = _single_device_hint(model) if hint is None else _task_hint(model, np.asarray(hint), cluster.n_devices)
    first = model.solve(static_memory=False, budget=budget, seed=seed, hint=hint)
    if first is None:
        raise InfeasibleError(f"cp-sat: proven infeasible: the parameters cannot be spread over the devices "
                              f"of cluster {cluster.name!r} within their memory")
    status, objective, bound, devs, used, stopped = first
    memory_model = "relaxed"
    sim = Simulator(graph, cluster, op_times)
    if not sim.run(devs[model.task]).ok:
        second = model.solve(static_memory=True, budget=max(budget - used, 0.1 * budget), seed=seed, hint=devs)
        if second is not None:
            status, objective, _, devs, _, stopped = second
            memory_model = "static"
    ops_model = model.K == graph.n_ops
    return CPSatResult(status, objective, bound, bound if ops_model else None, devs[model.task], model.K,
                       "ops" if ops_model else f"{model.K} tasks", memory_model, stopped)


def _task_hint(model: _Model, dev: np.ndarray, D: int) -> np.ndarray:
    """Each task on the device that holds most of its ops' work under the op placement ``dev``."""
    share = np.zeros((model.K, D))
    np.add.at(share, (model.task, dev), model.times.min(axis=1) + 1e-12)
    return share.argmax(axis=1)


def _single_device_hint(model: _Model) -> np.ndarray | None:
    """Every task on the device that runs them all fastest, if one can run them all (a feasible start)."""
    runs_all = model.ok_task.all(axis=0)
    if not runs_all.any():
        return None
    total = np.where(runs_all, model.dur.sum(axis=0), np.iinfo(np.int64).max)
    return np.full(model.K, int(np.argmin(total)))


def improve_with_cp_sat(graph: Graph, cluster: Cluster, start: Placement, *, seed=None, budget=None,
                        method: str = "cp-sat") -> Placement:
    """Solve the CP-SAT model hinted with ``start`` and return the solution, or ``start`` itself where it
    simulates faster, fits where the solution does not, or the budget ends before any solution
    (``returned: "hint"``). On graphs of more than ``MAX_TASKS`` ops the tasks follow the model's
    structural groups. Raises :class:`InfeasibleError` only when the model is proven infeasible (the
    parameters cannot be spread within the memory), where no placement fits. Meta as :func:`cp_sat`."""

    start_dev = start.to_array(graph, cluster)
    group = (runnable_grouping(graph, ("colocation", "gradient", "structure"), feasible_devices(graph, cluster)).group
             if graph.n_ops > MAX_TASKS else None)
    sim = Simulator(graph, cluster)
    try:
        r = solve_cp_sat(graph, cluster, budget=budget, seed=seed_int(seed), hint=start_dev, group=group)
    except NoSolutionInBudget as e:
        hint_step = float(sim.run_batch(start_dev[None, :]).step_time[0])
        return Placement.from_array(graph, cluster, start_dev, method, cp_sat_status="UNKNOWN",
                                    stopped_by=e.stopped_by, hint=start.method, hint_step_s=hint_step,
                                    returned="hint")
    mine = sim.run_batch(np.stack([r.devices, start_dev]))
    solution, hint = ranks(mine)
    use_hint = hint < solution
    meta = dict(cp_sat_status=r.status, model=r.model, model_step_time_s=r.objective_s,
                model_bound_s=r.model_bound_s, gap=r.gap, tasks=r.tasks, memory_model=r.memory_model,
                stopped_by=r.stopped_by, hint=start.method, hint_step_s=float(mine.step_time[1]),
                returned="hint" if use_hint else "cp-sat")
    if r.bound_s is not None:
        meta["bound_s"] = r.bound_s
    return Placement.from_array(graph, cluster, start_dev if use_hint else r.devices, method, **meta)


@register_placer("cp-sat", description="exact placement and schedule with OR-Tools CP-SAT (ops, or up to 60 "
                 "contiguous task groups), deterministic-time budget", paper="OR-Tools CP-SAT", memory_aware=True)
def cp_sat(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """Place by solving the CP-SAT model of the module docstring, hinted with the best of the fast placers
    (:func:`autoplace.placers.fast.best_fast`), through :func:`improve_with_cp_sat`: never worse than its
    hint. Meta: ``cp_sat_status``, ``model`` (``"ops"`` or ``"K tasks"``), ``model_step_time_s``,
    ``model_bound_s``, ``bound_s`` (op-level model only: a bound on every placement), ``gap``,
    ``memory_model``, ``stopped_by``, ``tasks``, ``hint`` (the fast placer) and ``hint_step_s``,
    ``returned`` (``"cp-sat"`` or ``"hint"``). Raises :class:`InfeasibleError` where nothing it found fits."""

    start, _ = best_fast(graph, cluster, seed=seed)
    return check_fits(graph, cluster, improve_with_cp_sat(graph, cluster, start, seed=seed, budget=budget))
