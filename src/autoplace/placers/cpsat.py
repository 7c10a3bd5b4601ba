"""Exact placement and schedule with OR-Tools CP-SAT (issue #4).

Tasks are the graph's ops when there are at most ``max_tasks`` of them, else contiguous runs of the
topological order with about equal work (contracting contiguous runs keeps the task graph acyclic).
The model, in integer time units:

* ``x[k, d]`` — task ``k`` runs on device ``d`` (exactly one; only where all its ops can run there);
* an optional interval of length ``t(k, d)`` per (task, device); per device, ``NoOverlap`` (or
  ``Cumulative`` up to the device's ``concurrency``);
* for every data edge ``a -> b`` and devices ``da != db``:
  ``start[b] >= end[a] + latency(da, db) + bytes / bandwidth(da, db)`` if ``x[a, da] and x[b, db]``,
  and ``start[b] >= end[a]`` otherwise;
* memory: ``sum_k x[k, d] * (params + outputs of k) <= memory(d)`` (Baechi's static model);
* co-location: tasks holding ops of one ``colocation_group`` take the same device;
* minimise the makespan.

Links are not contended and ops may run in any order: every schedule the simulator produces for any
placement (of whole tasks) is feasible here, so on op-level models the proven optimum is a lower bound on
every placement's simulated step time. The result reports CP-SAT's status, objective, bound and gap.
"""

from __future__ import annotations

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices, op_time_matrix
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers import register_placer

__all__ = ["cp_sat", "solve_cp_sat", "CPSatResult", "task_partition"]

DEFAULT_BUDGET_S = 10.0
MAX_TASKS = 60


def task_partition(graph: Graph, max_tasks: int, times: np.ndarray) -> np.ndarray:
    """Task index per op: the ops themselves if few enough, else contiguous topological runs of equal work."""
    n = graph.n_ops
    if n <= max_tasks:
        return np.arange(n, dtype=np.int64)
    work = np.where(np.isfinite(times), times, np.nan)
    work = np.nan_to_num(np.nanmin(work, axis=1))
    cum = np.cumsum(work[graph.topological_order])
    total = cum[-1] if cum[-1] > 0 else 1.0
    chunk = np.minimum((cum - work[graph.topological_order] / 2) / total * max_tasks, max_tasks - 1).astype(np.int64)
    task = np.empty(n, dtype=np.int64)
    task[graph.topological_order] = chunk
    # renumber to 0..K-1 without gaps
    _, task = np.unique(task, return_inverse=True)
    return task.astype(np.int64)


class CPSatResult:
    """What the solver proved: ``status`` (OPTIMAL / FEASIBLE), ``objective_s``, ``bound_s``, ``gap``."""

    def __init__(self, status: str, objective_s: float, bound_s: float, devices: np.ndarray, tasks: int):
        self.status, self.objective_s, self.bound_s, self.devices, self.tasks = (
            status, objective_s, bound_s, devices, tasks)

    @property
    def optimal(self) -> bool:
        return self.status == "OPTIMAL"

    @property
    def gap(self) -> float:
        return (self.objective_s - self.bound_s) / self.objective_s if self.objective_s > 0 else 0.0


def solve_cp_sat(graph: Graph, cluster: Cluster, *, budget: float | None = None, seed: int = 0,
                 max_tasks: int = MAX_TASKS) -> CPSatResult:
    from ortools.sat.python import cp_model

    times = op_time_matrix(graph, cluster)
    ok = feasible_devices(graph, cluster) & np.isfinite(times)
    task = task_partition(graph, max_tasks, times)
    K, D = int(task.max()) + 1, cluster.n_devices
    t_task = np.zeros((K, D))
    np.add.at(t_task, task, np.where(ok, times, 0.0))
    ok_task = np.ones((K, D), dtype=bool)
    np.logical_and.at(ok_task, task, ok)
    need = np.bincount(task, weights=graph.param_bytes + graph.out_alloc_total, minlength=K)
    src, dst, nbytes = graph.edges()
    ts, td = task[src], task[dst]
    edges: dict[tuple[int, int], int] = {}
    for a, b, nb in zip(ts.tolist(), td.tolist(), nbytes.tolist()):
        if a != b:
            edges[(a, b)] = edges.get((a, b), 0) + nb
    comm = {(a, b): cluster.latency + nb / cluster.bandwidth for (a, b), nb in edges.items()}
    # integer time: the horizon (everything serial on the slowest feasible device, plus all transfers) in ~1e6 units
    horizon_s = float(np.where(ok_task, t_task, 0).max(axis=1).sum()
                      + sum(np.where(np.isfinite(c), c, 0).max() for c in comm.values()))
    unit = max(horizon_s, 1e-9) / 1e6

    def q(x: float) -> int:
        return int(np.ceil(x / unit - 1e-9))

    m = cp_model.CpModel()
    H = q(horizon_s) + 1
    start = [m.NewIntVar(0, H, f"s{k}") for k in range(K)]
    end = [m.NewIntVar(0, H, f"e{k}") for k in range(K)]
    x = {}
    per_dev: list[list] = [[] for _ in range(D)]
    for k in range(K):
        devs = np.flatnonzero(ok_task[k])
        if len(devs) == 0:
            raise InfeasibleError(f"cp-sat: no device can run task {k} (op {graph.ops[int(np.flatnonzero(task == k)[0])].name!r})")
        lits = []
        for d in devs:
            lit = m.NewBoolVar(f"x{k}_{d}")
            dur = q(t_task[k, d])
            iv = m.NewOptionalIntervalVar(start[k], dur, end[k], lit, f"i{k}_{d}")
            per_dev[d].append((iv, lit))
            x[k, int(d)] = lit
            lits.append(lit)
        m.AddExactlyOne(lits)
    for d in range(D):
        ivs = [iv for iv, _ in per_dev[d]]
        if cluster.concurrency[d] <= 1:
            m.AddNoOverlap(ivs)
        else:
            m.AddCumulative(ivs, [1] * len(ivs), int(cluster.concurrency[d]))
        if per_dev[d]:
            ks = [k for k in range(K) if (k, d) in x]
            m.Add(sum(int(need[k]) * x[k, d] for k in ks) <= int(cluster.memory_bytes[d]))
    for (a, b), c in comm.items():
        m.Add(start[b] >= end[a])
        for da in range(D):
            for db in range(D):
                if da != db and (a, da) in x and (b, db) in x:
                    m.Add(start[b] >= end[a] + q(c[da, db])).OnlyEnforceIf([x[a, da], x[b, db]])
    for ops_of_group in graph.colocation_groups().values():
        members = sorted(set(task[ops_of_group].tolist()))
        for k in members[1:]:
            for d in range(D):
                a, b = x.get((members[0], d)), x.get((k, d))
                if a is None and b is None:
                    continue
                if a is None or b is None:
                    m.Add((b if a is None else a) == 0)
                else:
                    m.Add(a == b)
    makespan = m.NewIntVar(0, H, "makespan")
    m.AddMaxEquality(makespan, end)
    m.Minimize(makespan)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(budget if budget is not None else DEFAULT_BUDGET_S)
    solver.parameters.num_workers = 1          # deterministic for a seed
    solver.parameters.random_seed = int(seed)
    status = solver.Solve(m)
    name = solver.StatusName(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise InfeasibleError(f"cp-sat: {name.lower()} within {solver.parameters.max_time_in_seconds:g} s "
                              f"(memory too small, or no solution found in time)")
    task_dev = np.array([next(d for d in range(D) if (k, d) in x and solver.Value(x[k, d])) for k in range(K)])
    # durations and delays were rounded up to whole units: a path of K tasks (and K transfers) can gain up
    # to 2K units, so the reported bound gives them back to stay a valid lower bound in seconds
    bound = max(0.0, (solver.BestObjectiveBound() - 2 * K) * unit)
    return CPSatResult(name, solver.ObjectiveValue() * unit, bound, task_dev[task], K)


@register_placer("cp-sat", description="exact placement and schedule with OR-Tools CP-SAT (ops, or up to 60 "
                 "contiguous task groups), time-limited", paper="OR-Tools CP-SAT", memory_aware=True)
def cp_sat(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    seed = int(seed) if isinstance(seed, (int, np.integer)) else 0
    r = solve_cp_sat(graph, cluster, budget=budget, seed=seed)
    return Placement.from_array(graph, cluster, r.devices, "cp-sat", cp_sat_status=r.status,
                                model_step_time_s=r.objective_s, bound_s=r.bound_s, gap=r.gap, tasks=r.tasks)
