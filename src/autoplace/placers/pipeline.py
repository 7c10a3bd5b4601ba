"""``pipeline``: contiguous stages run as a pipeline of micro-batches, with a GPipe or 1F1B schedule.

The graph is a step captured with ``micro_batches=M`` (ops carry ``meta["micro_batch"]``; with none, M is
1 and the stages simply run one after another). Its units are ``dp-split``'s groups
(:mod:`autoplace.placers.dp_split`: co-location, gradients, structure) joined across micro-batches — ops of
one module (``scope``) are one unit, so a unit holds a layer's work for every micro-batch, its parameters
and their updates; their orders and the cost of cutting between them are ``dp-split``'s.

**The split.** Over ``S`` stages on ordered devices, a pipeline of ``M`` micro-batches takes about
``sum_j t_j + (M - 1) max_j t_j``, where ``t_j`` is stage ``j``'s time per micro-batch (its work and the
tensors it receives, over ``M``) (Huang et al. 2019; Narayanan et al. 2019): the first micro-batch's trip
through every stage, then one bottleneck stage per further micro-batch. For each bound ``B`` on the
bottleneck the exact dynamic program of ``dp-split`` (:func:`~autoplace.placers.dp_split.solve_split`)
finds the split of least ``sum_j t_j`` whose every stage costs at most ``B``; the bounds run from the least
bottleneck any split has (the ``stage`` objective's optimum) up through :data:`BOUND_STEPS` steps to no
bound, and the best of those values of ``sum + (M - 1) max`` over all bounds is the program's optimum.

**Memory.** A stage holds its parameters, optimizer state and largest output, and the activations its
forward ops keep for their backward ops — for as many micro-batches as are in flight on it: all ``M``
under GPipe, ``min(S - s, M)`` on the ``s``-th of ``S`` devices under 1F1B (counted on the ordered
devices, an upper bound when stages are left empty). As in ``dp-split`` the count is calibrated against
the simulator (the whole graph on the first device), and a split that still runs out of memory is solved
again with less room, up to :data:`MEMORY_TRIES` times.

Every split found is simulated with its schedule (:func:`autoplace.schedule.pipeline_priorities`), GPipe
and 1F1B alike, and the fastest that fits is returned, its schedule in the placement. ``seed`` and
``budget`` are unused (the program is exact per bound). Meta: ``pipeline_schedule`` (``gpipe`` or ``1f1b``),
``micro_batches``, ``stages`` (device, units, ops), ``model_step_s`` (the program's estimate),
``candidates`` (each split tried: schedule, bound, estimate, simulated step, whether it fits).
"""

from __future__ import annotations

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import op_time_matrix
from autoplace.errors import InfeasibleError, PlacementError
from autoplace.graph import Graph
from autoplace.grouping import runnable_grouping
from autoplace.placement import Placement
from autoplace.placers.dp_split import (
    UNIT_RULES,
    _memory_factor,
    ordered_devices,
    solve_split,
    split_problem,
    unit_orders,
)
from autoplace.placers.registry import register_placer
from autoplace.schedule import SCHEDULES, PipelineSchedule, deadlock, micro_batches, pipeline_priorities
from autoplace.sim import Simulator

__all__ = ["pipeline", "even_split", "in_flight", "BOUND_STEPS", "MEMORY_TRIES"]

BOUND_STEPS = (1.0, 1.05, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, np.inf)  #: bounds, x the least bottleneck
MEMORY_TRIES = 3  #: solves per (order, schedule, bound), each with less room where the last ran out


def in_flight(kind: str, n_devices: int, n_micro: int) -> np.ndarray:
    """Micro-batches whose activations the ``k``-th of ``n_devices`` ordered devices holds at once under
    schedule ``kind``."""
    k = np.arange(n_devices)
    return np.full(n_devices, n_micro) if kind == PipelineSchedule.GPIPE else np.minimum(n_devices - k, n_micro)


def _by_module(graph: Graph, group: np.ndarray) -> np.ndarray:
    """``group`` with the groups that share a module (an op's ``scope``) joined, and an op of no module (in a
    group of no module) that reads another op joined with the last op (in topological order) it reads — a
    residual's gradient sum goes with its layer's, a loss's detached copy with the loss — so no stage holds
    a scattering of every other stage's ops; numbered 0.. in op order."""
    parent = list(range(int(group.max()) + 1))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def join(a: int, b: int) -> None:
        a, b = find(a), find(b)
        if a != b:
            parent[max(a, b)] = min(a, b)

    first: dict[str, int] = {}
    gl = group.tolist()
    placed = {g for op, g in zip(graph.ops, gl) if op.scope}   # groups a module already holds
    for i in graph.topological_order.tolist():
        op = graph.ops[i]
        if op.scope:
            join(gl[i], first.setdefault(op.scope, gl[i]))
        elif gl[i] not in placed:
            preds = graph.predecessors(i)
            if len(preds):
                join(gl[i], gl[int(preds[np.argmax(graph.rank[preds])])])
    root = np.array([find(g) for g in group.tolist()])
    _, out = np.unique(root, return_inverse=True)
    return out.astype(np.int64)


def _stage_costs(prob, cluster: Cluster, unit_dev: np.ndarray) -> list[float]:
    """Each stage's work and incoming cut, in unit order (for the pipeline estimate)."""
    lone = cluster.overhead + cluster.latency
    bw = cluster.transfer_bandwidth
    where = {int(d): k for k, d in enumerate(prob.devices)}
    out, prev, q = [], None, 0
    for p in range(1, len(unit_dev) + 1):
        if p == len(unit_dev) or unit_dev[p] != unit_dev[q]:
            d = int(unit_dev[q])
            cost = float(prob.work[q:p, where[d]].sum())
            if prev is not None:
                cost += (prob.fwd_bytes[q] / bw[prev, d] + prob.fwd_count[q] * lone[prev, d]
                         + prob.bwd_bytes[q] / bw[d, prev] + prob.bwd_count[q] * lone[d, prev])
            out.append(cost)
            prev, q = d, p
    return out


class _Units:
    """A graph's pipeline units (``group[i]``: op ``i``'s, joined across micro-batches by module), the
    devices stages go on, in order, and how a device per group becomes a device per op."""

    def __init__(self, graph: Graph, cluster: Cluster):
        self.times = op_time_matrix(graph, cluster)
        ok = np.isfinite(self.times)
        base = runnable_grouping(graph, UNIT_RULES, ok).group
        group = _by_module(graph, base)
        runs = np.ones((int(group.max()) + 1, cluster.n_devices), dtype=bool)
        np.logical_and.at(runs, group, ok)
        if not runs.any(axis=1).all():  # a module whose ops no one device runs all of stays in its groups
            _, group = np.unique(np.where(runs.any(axis=1)[group], group, group.max() + 1 + base),
                                 return_inverse=True)
        self.group = group
        self.G = G = int(group.max()) + 1
        devices = ordered_devices(cluster)
        gpus = set(cluster.devices_of_kind("gpu"))
        if len(gpus) >= 2:                      # stages on the GPUs where there are several
            devices = [d for d in devices if d in gpus]
        self.devices = devices
        self.g_ok = np.ones((G, cluster.n_devices), dtype=bool)
        np.logical_and.at(self.g_ok, group, ok)
        g_time = np.zeros((G, cluster.n_devices))
        np.add.at(g_time, group, np.where(ok, self.times, 0.0))
        self.g_fallback = np.argmin(np.where(self.g_ok, g_time, np.inf), axis=1)

    def expand(self, prob, order: np.ndarray, unit_dev: np.ndarray) -> np.ndarray:
        """Device per op from a device per (coarsened) unit of ``prob`` in ``order``."""
        g_dev = unit_dev[prob.unit_of_group][np.argsort(order)]
        return np.where(self.g_ok[np.arange(self.G), g_dev], g_dev, self.g_fallback)[self.group]


def _stages_meta(cluster: Cluster, stages: list[int], unit_dev: np.ndarray, dev: np.ndarray) -> list[dict]:
    return [{"device": cluster.devices[d].name, "units": int((unit_dev == d).sum()), "ops": int((dev == d).sum())}
            for d in stages]


def even_split(graph: Graph, cluster: Cluster, kind: str = PipelineSchedule.GPIPE) -> Placement:
    """The pipeline a person would write first: the units in order cut into one contiguous stage per device
    of about equal parameter bytes (each stage's share starts where the running total passes ``s/S`` of
    the whole), run with schedule ``kind``. No memory check: the simulator says whether it fits."""
    units = _Units(graph, cluster)
    _, order = unit_orders(graph, units.group)[0]
    prob = split_problem(graph, cluster, units.group, order, units.devices, units.times)
    S = len(units.devices)
    cum = np.cumsum(prob.params) - prob.params / 2
    stage = np.minimum((cum / max(cum[-1], 1.0) * S).astype(np.int64), S - 1)
    unit_dev = np.asarray(units.devices)[stage]
    dev = units.expand(prob, order, unit_dev)
    stages = list(dict.fromkeys(int(d) for d in unit_dev))
    prio = pipeline_priorities(graph, dev, stages, kind)
    why = deadlock(graph, dev, prio)
    if why:
        raise PlacementError(f"even_split of {graph.name!r}: {why}")
    return Placement.from_array(graph, cluster, dev, "even-split", prio, pipeline_schedule=kind,
                                micro_batches=micro_batches(graph), stages=_stages_meta(cluster, stages, unit_dev, dev))


@register_placer("pipeline", description="contiguous stages as a pipeline of micro-batches (GPipe or 1F1B "
                 "schedule): exact dynamic program per bottleneck bound, memory for the micro-batches in flight",
                 paper="Huang et al. 2019 (GPipe); Narayanan et al. 2019/2021 (PipeDream, 1F1B)",
                 memory_aware=True)
def pipeline(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring."""

    M = micro_batches(graph)
    sim = Simulator(graph, cluster)
    units = _Units(graph, cluster)
    times, devices, expand = units.times, units.devices, units.expand
    K = len(devices)
    mem = cluster.memory_bytes.astype(np.float64)

    candidates: list[dict] = []
    best = None
    seen: set[tuple] = set()
    factor = None
    for order_name, order in unit_orders(graph, units.group):
        prob = split_problem(graph, cluster, units.group, order, devices, times)
        if factor is None:
            whole = np.full(prob.n_units, devices[0])
            factor = _memory_factor(prob, sim.run(expand(prob, order, whole)), whole, 1.0)
        least, _ = solve_split(prob, cluster, mem / factor, "stage")
        if not np.isfinite(least):
            continue
        for kind in SCHEDULES:
            scale = in_flight(kind, K, M) / M
            for step in BOUND_STEPS:
                f = factor
                for _attempt in range(MEMORY_TRIES):
                    value, unit_dev = solve_split(prob, cluster, mem / f, "step", bound=least * step,
                                                  saved_scale=scale)
                    if not np.isfinite(value):
                        break
                    stage = _stage_costs(prob, cluster, unit_dev)
                    estimate = (sum(stage) + (M - 1) * max(stage)) / M
                    key = (kind, tuple(unit_dev.tolist()), order_name)
                    if key in seen:
                        break
                    seen.add(key)
                    dev = expand(prob, order, unit_dev)
                    stages = list(dict.fromkeys(int(d) for d in unit_dev))
                    prio = pipeline_priorities(graph, dev, stages, kind)
                    try:        # the simulator names a schedule that deadlocks (ops that skip stages)
                        r = sim.run(dev, schedule=prio)
                    except PlacementError:
                        candidates.append({"order": order_name, "schedule": kind, "bound": float(step),
                                           "model_step_s": estimate, "step_s": None, "fits": False,
                                           "deadlocks": True})
                        break
                    candidates.append({"order": order_name, "schedule": kind, "bound": float(step),
                                       "model_step_s": estimate, "step_s": r.step_time, "fits": r.ok})
                    if r.ok:
                        if best is None or r.step_time < best[0]:
                            best = (r.step_time, dev, prio, kind, estimate, stages, prob, unit_dev)
                        break
                    f = _memory_factor(prob, r, unit_dev, f)
    if best is None:
        stuck = sum(1 for c in candidates if c.get("deadlocks"))
        raise InfeasibleError(f"pipeline: no contiguous split of {graph.name!r} fits the memory of cluster "
                              f"{cluster.name!r} with a GPipe or 1F1B schedule ({len(candidates)} splits tried: "
                              f"{len(candidates) - stuck} out of memory, {stuck} deadlocking)")
    _, dev, prio, kind, estimate, stages, prob, unit_dev = best
    return Placement.from_array(graph, cluster, dev, "pipeline", prio, pipeline_schedule=kind, micro_batches=M,
                                model_step_s=estimate, stages=_stages_meta(cluster, stages, unit_dev, dev),
                                candidates=candidates)
