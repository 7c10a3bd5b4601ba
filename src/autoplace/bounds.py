"""Lower bounds on the simulated step time of any placement.

Every op's weight is its least time on its fastest feasible device, alone or loaded
(:func:`autoplace.cost.least_op_times`): the simulator never runs an op faster, whatever the contention.
An input that a consumer can never share a device with its producer (their ``device_types`` have no
device in common) must cross a link: it arrives no sooner than the least lone transfer between their
devices (:meth:`autoplace.cluster.Cluster.transfer_time`), a delay every bound below adds to that edge.

* ``critical_path`` — the longest path with those weights and delays: dependencies alone forbid anything
  faster;
* ``load`` — the least time in which the devices can get through the work, memory permitting: a device
  running ``concurrency`` ops at once is busy at least ``sum of its ops' times / concurrency``, so the step
  is at least the optimum of the linear program "spread every op's work over the devices that can run it,
  each at its own speed for that op, with the parameters placed on a device within its memory; minimise
  the busiest device's time". Ops are pooled into classes whose speed ratios across devices and whose
  parameter bytes per second of work are rounded *down* to 2 % bins, which only relaxes the program, so
  it stays a bound; solved with GLOP in well under a second. It bounds every placement that fits in
  memory (if the parameters cannot be spread at all, the memory rows are dropped). Where the devices are
  alike and memory is loose it is ``sum_i min_d t(i, d) / m`` for ``m`` slots in all; a CPU that is
  several times slower than the GPUs adds little to ``m``;
* ``cp_sat`` — CP-SAT's proven bound, where it solved the op-level model (a bound on every placement that
  honours the co-location groups and fits in memory; :mod:`autoplace.placers.cpsat`);
* ``best`` — the largest of these.

They leave out launch overhead (a launcher's share of an op, :func:`autoplace.cost.launch_times`).
``launches`` is the least of it any placement pays: every op outside a launch group launched at its
cheapest, spread evenly over every device's launcher. Where that alone exceeds ``best`` (a small model,
dominated by launches), a gap to ``best`` would say nothing about the placement: :meth:`Bounds.gap` is
then nan, and :attr:`Bounds.meaningless` says why.

They bound the *simulated* step. A measured step is not bounded by them: a gap is reported only
against simulated steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices, launch_times, least_op_times, op_time_matrix
from autoplace.graph import Graph
from autoplace.paths import earliest_starts

__all__ = ["Bounds", "lower_bounds", "unavoidable_delays", "critical_path", "load_bound"]


@dataclass(frozen=True)
class Bounds:
    critical_path: float
    load: float
    cp_sat: float | None = None  #: CP-SAT's proven bound, when it solved the op-level model
    launches: float = 0.0  #: the least launch overhead any placement pays, which the bounds leave out

    @property
    def best(self) -> float:
        return max(self.critical_path, self.load, self.cp_sat or 0.0)

    @property
    def meaningless(self) -> str | None:
        """Why a gap to :attr:`best` says nothing here (launch overhead the bounds leave out exceeds it),
        or None."""
        if self.launches > self.best:
            return (f"the bounds leave out launch overhead, at least {self.launches * 1e3:.3g} ms here, more "
                    f"than the best bound ({self.best * 1e3:.3g} ms)")
        return None

    def gap(self, step_time: float) -> float:
        """How far ``step_time`` is above the best bound, as a fraction (0 = provably optimal); nan where
        the bound is :attr:`meaningless`."""
        return step_time / self.best - 1.0 if self.best > 0 and self.meaningless is None else float("nan")


def unavoidable_delays(graph: Graph, cluster: Cluster) -> np.ndarray:
    """Per input pair, the least time its tensor takes to arrive when producer and consumer can never share
    a device (the least lone transfer between devices each may run on), else 0."""
    ok = feasible_devices(graph, cluster)
    src, dst, nbytes = graph.edges()
    delay = np.zeros(len(src))
    apart = ~(ok[src] & ok[dst]).any(axis=1)
    control = graph.tensor_out[graph.pair_tensor] < 0
    for q in np.flatnonzero(apart).tolist():
        t = cluster.latency if control[q] else cluster.transfer_time(float(nbytes[q]))
        delay[q] = t[np.ix_(ok[src[q]], ok[dst[q]])].min()
    return delay


def critical_path(graph: Graph, fastest: np.ndarray, delay: np.ndarray) -> float:
    """The longest path with op weights ``fastest`` and per-input-pair ``delay``."""

    g = graph
    start = earliest_starts(g.topological_order, g.in_ptr, g.in_pair, g.pair_tensor, g.tensor_src, fastest, delay)
    return float((start + fastest).max(initial=0.0))


def load_bound(graph: Graph, cluster: Cluster, least: np.ndarray) -> float:
    """The memory-aware load bound (module docstring) for per-device least op times ``least``."""
    from ortools.linear_solver import pywraplp

    D = cluster.n_devices
    fastest = least.min(axis=1)
    slots = cluster.concurrency.astype(np.float64)
    if D == 1:
        return float(fastest.sum() / slots[0])
    bins = np.log(1.02)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isfinite(least) & (fastest[:, None] > 0), least / fastest[:, None], np.inf)
        r_bin = np.where(np.isfinite(ratio), np.floor(np.log(np.maximum(ratio, 1.0)) / bins), -1)
        density = np.where(fastest > 0, graph.param_bytes / fastest, 0.0)
        p_bin = np.where(density > 0, np.floor(np.log(np.maximum(density, 1e-300)) / bins), -10**6)
    keys, cls = np.unique(np.column_stack([r_bin, p_bin]), axis=0, return_inverse=True)
    cls = cls.ravel()
    work = np.bincount(cls, weights=fastest, minlength=len(keys))
    rate = np.where(keys[:, :D] >= 0, np.exp(keys[:, :D] * bins), np.inf)        # rounded-down ratios
    rho = np.where(keys[:, D] > -10**6, np.exp(keys[:, D] * bins), 0.0)          # rounded-down bytes per second
    zero = work <= 0
    for memory in (True, False):
        solver = pywraplp.Solver.CreateSolver("GLOP")
        T = solver.NumVar(0.0, solver.infinity(), "T")
        y = {}
        for c in np.flatnonzero(~zero).tolist():
            row = solver.Constraint(1.0, 1.0)
            for d in np.flatnonzero(np.isfinite(rate[c])).tolist():
                y[c, d] = solver.NumVar(0.0, 1.0, "")
                row.SetCoefficient(y[c, d], 1.0)
        for d in range(D):
            busy = solver.Constraint(-solver.infinity(), 0.0)
            busy.SetCoefficient(T, -float(slots[d]))
            mem = solver.Constraint(-solver.infinity(), float(cluster.memory_bytes[d])) if memory else None
            for (c, dd), var in y.items():
                if dd == d:
                    busy.SetCoefficient(var, float(work[c] * rate[c, d]))
                    if mem is not None and rho[c] > 0:
                        mem.SetCoefficient(var, float(work[c] * rho[c]))
        solver.Minimize(T)
        if solver.Solve() == pywraplp.Solver.OPTIMAL:
            # GLOP's tolerances: the bound is shaved by one part in a million so it never exceeds the optimum
            return float(T.solution_value()) * (1 - 1e-6)
    return float(fastest.sum() / slots.sum())


def lower_bounds(graph: Graph, cluster: Cluster, op_times: np.ndarray | None = None) -> Bounds:
    """The critical-path and load bounds of ``graph`` on ``cluster`` (``op_times``: the simulator's alone
    times, default the cost model; loaded costs are folded in by :func:`least_op_times`)."""

    least = least_op_times(graph, cluster, op_times)
    alone = op_time_matrix(graph, cluster) if op_times is None else op_times
    ok = feasible_devices(graph, cluster)
    launch = np.where(ok, launch_times(graph, cluster, alone), np.inf).min(axis=1)
    launch = launch[(graph.op_group < 0) & np.isfinite(launch)]
    return Bounds(critical_path=critical_path(graph, least.min(axis=1), unavoidable_delays(graph, cluster)),
                  load=load_bound(graph, cluster, least), launches=float(launch.sum()) / cluster.n_devices)
