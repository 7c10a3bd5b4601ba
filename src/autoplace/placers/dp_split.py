"""``dp-split``: the best contiguous split of the graph's units onto an ordered set of devices, by dynamic
programming (in the manner of PipeDream's partitioner, Narayanan et al. SOSP 2019, and Tarnawski et al.,
"Efficient algorithms for device placement of DNN graph operators", NeurIPS 2020).

**Units.** The ops are grouped with TensorFlow's co-location rules and the model's structure
(:func:`autoplace.grouping.group_ops` with ``colocation``, ``gradient`` and ``structure``), so a unit holds
a layer's forward ops with their gradient ops and its parameters with their updates. Units are ordered
by where their forward work first appears (an op computed from parameters alone counts where its first
reader is); a second order takes the model's layers one after another (``layer`` metadata), so that a
contiguous split is a split by layers rather than by time steps. Long sequences are coarsened to at most
:data:`MAX_UNITS` consecutive runs of about equal work and memory.

**The split.** Devices are ordered fastest first, GPUs before other kinds; every unit goes to one stage,
stages follow the order and may be empty. A stage on device ``d`` holding units ``[a, b)`` costs
``W(a, b, d)`` (its ops' times on ``d``); the cut between consecutive stages on ``d`` and ``e`` costs
``C(p, d, e)``: every tensor crossing position ``p`` (forward activations one way, gradients the other)
at a lone transfer's time (:meth:`autoplace.cluster.Cluster.transfer_time`; a tensor crossing several
cuts is counted at each). Two objectives, each minimised exactly over all splits:

* ``step`` — the training step run stage after stage: ``sum_j W_j + sum_cuts C`` (the forward pass visits
  the stages in order and the backward pass in reverse, so the stages barely overlap);
* ``stage`` — the slowest stage, ``max_j (W_j + C_in(j))``, the throughput of a pipeline over the stages.

``best[p, k] = min over (q < p, k' < k) of best[q, k'] (+ or max) C(q, k', k) + W(q, p, k)`` over positions
``p`` and devices ``k``: ``O(U^2 K^2)`` for ``U`` units and ``K`` devices, vectorised over ``(q, p)``.

**Memory.** A stage fits when its parameters, the activations its forward ops keep for their backward
ops, and its largest output fit the device. That count is an estimate, so every split found is simulated;
where a device runs out of memory, the split is solved again with the capacities divided by the largest
``peak / count`` of the devices that ran out (2 % more headroom), up to :data:`MEMORY_TRIES` times. The
first factor comes from the whole graph on the first device; where a factor leaves no split that fits, the
next is halfway between it and the largest factor known too small (at first 1, the count itself), so a
tight graph is not declared infeasible for an estimate calibrated on another split.

The placer returns the fastest (simulated) of the optimal splits of both orders under both objectives that
fits. ``seed`` is unused; ``budget`` too (the program is exact and takes well under a second after
grouping). Meta: ``order``, ``objective``, ``model_step_s`` (the objective's value), ``stages`` (device,
units, ops), ``memory_tries``, ``candidates`` (every split tried and its simulated step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import op_time_matrix
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph, Phase
from autoplace.grouping import floating_ops, runnable_grouping
from autoplace.placement import Placement
from autoplace.placers.registry import register_placer
from autoplace.sim import Simulator

__all__ = ["dp_split", "solve_split", "unit_orders", "SplitProblem", "MAX_UNITS", "MEMORY_TRIES"]

MAX_UNITS = 384      #: longer unit sequences are coarsened to this many runs
MEMORY_TRIES = 8     #: splits solved per (order, objective), each with less room where the last ran out
UNIT_RULES = ("colocation", "gradient", "structure")


@dataclass(frozen=True)
class SplitProblem:
    """A unit sequence with what the program needs, in unit order (``U`` units, ``K`` ordered devices).

    ``work[u, k]`` seconds of unit ``u`` on device ``k`` of ``devices``; ``params``, ``saved``, ``largest``
    bytes per unit; ``fwd_bytes[p]``, ``fwd_count[p]`` (and ``bwd_*``) the bytes and tensors crossing
    position ``p`` (between units ``p - 1`` and ``p``) forwards and backwards; ``unit_of_group`` maps
    each group to its (coarsened) unit."""

    devices: np.ndarray
    work: np.ndarray
    params: np.ndarray
    saved: np.ndarray
    largest: np.ndarray
    fwd_bytes: np.ndarray
    fwd_count: np.ndarray
    bwd_bytes: np.ndarray
    bwd_count: np.ndarray
    unit_of_group: np.ndarray

    @property
    def n_units(self) -> int:
        return len(self.params)


def _positions(graph: Graph, floating: np.ndarray) -> np.ndarray:
    """Each op's place in the step: its topological rank, or for an op computed from parameters alone (and
    a source) the place of its first reader."""
    pos = graph.rank.astype(np.float64)
    for i in graph.topological_order[::-1].tolist():
        if floating[i]:
            readers = graph.successors(i)
            pos[i] = pos[readers].min() if len(readers) else pos[i]
    return pos


def unit_orders(graph: Graph, group: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Orders of the groups to split: ``("step", order)`` by where each group's work first appears, and
    ``("layers", order)`` layer after layer (stable within a layer) when ops carry ``layer`` metadata."""
    G = int(group.max()) + 1
    pos = _positions(graph, floating_ops(graph))
    first = np.full(G, np.inf)
    np.minimum.at(first, group, pos)
    by_step = np.argsort(first, kind="stable")
    orders = [("step", by_step)]
    layer = np.array([op.meta.get("layer") if isinstance(op.meta.get("layer"), int) else -1 for op in graph.ops])
    if (layer >= 0).any():
        g_layer = np.full(G, -1)
        np.maximum.at(g_layer, group, layer)
        # a group without a layer (a weight with its updates, placed where its first reader is; the loss)
        # takes the layer of the group after it, else of the one before it
        seq = g_layer[by_step].copy()
        for k in range(len(seq) - 2, -1, -1):
            if seq[k] < 0:
                seq[k] = seq[k + 1]
        for k in range(1, len(seq)):
            if seq[k] < 0:
                seq[k] = seq[k - 1]
        by_layer = by_step[np.argsort(seq, kind="stable")]
        if not np.array_equal(by_layer, by_step):
            orders.append(("layers", by_layer))
    return orders


def split_problem(graph: Graph, cluster: Cluster, group: np.ndarray, order: np.ndarray, devices: list[int],
                  times: np.ndarray, max_units: int = MAX_UNITS) -> SplitProblem:
    """The :class:`SplitProblem` of groups ``group`` in ``order`` onto ``devices``, coarsened to at most
    ``max_units`` runs of consecutive groups with about equal work plus memory."""
    G = len(order)
    rank_of = np.empty(G, dtype=np.int64)
    rank_of[order] = np.arange(G)
    t = np.where(np.isfinite(times), times, np.nan)
    fallback = np.nanmin(t, axis=1)                # a unit that cannot run on a device is moved off it
    op_work = np.where(np.isfinite(times), times, fallback[:, None])[:, devices]
    phase = np.array([op.phase or "" for op in graph.ops])
    src, dst, _ = graph.edges()
    saved_op = np.zeros(graph.n_ops, dtype=bool)
    saved_op[src[(phase[src] == Phase.FORWARD) & (phase[dst] == Phase.BACKWARD)]] = True
    by_rank = rank_of[group]                       # each op's position in the group order
    g_work = np.zeros((G, len(devices)))
    np.add.at(g_work, by_rank, op_work)
    g_params = np.bincount(by_rank, weights=graph.param_bytes, minlength=G)
    g_saved = np.bincount(by_rank, weights=np.where(saved_op, graph.out_alloc_total, 0), minlength=G)
    g_largest = np.zeros(G)
    np.maximum.at(g_largest, by_rank, graph.out_alloc_total)
    # coarsen: consecutive groups into at most max_units runs of about equal (work + memory) share
    weight = g_work.min(axis=1) / max(g_work.min(axis=1).sum(), 1e-30) + \
        (g_params + g_saved) / max((g_params + g_saved).sum(), 1.0)
    if G > max_units:
        cum = np.cumsum(weight) - weight / 2
        unit = np.minimum((cum / cum[-1] * max_units).astype(np.int64), max_units - 1)
        _, unit = np.unique(unit, return_inverse=True)
    else:
        unit = np.arange(G)
    U = int(unit.max()) + 1
    work = np.zeros((U, len(devices)))
    np.add.at(work, unit, g_work)
    largest = np.zeros(U)
    np.maximum.at(largest, unit, g_largest)
    # tensors crossing each position, once per (tensor, reading unit) — forwards and backwards
    op_unit = unit[by_rank]
    rows = np.unique(np.stack([graph.pair_tensor, op_unit[graph.pair_op]]), axis=1)
    a, b = op_unit[graph.tensor_src[rows[0]]], rows[1]
    nb = graph.tensor_bytes[rows[0]].astype(np.float64)
    fwd_b, fwd_c, bwd_b, bwd_c = (np.zeros(U + 1) for _ in range(4))
    f, k = a < b, a > b
    # a tensor from unit a read in unit b > a crosses positions a+1..b: a difference array
    np.add.at(fwd_b, a[f] + 1, nb[f]); np.add.at(fwd_b, b[f] + 1, -nb[f])      # noqa: E702
    np.add.at(fwd_c, a[f] + 1, 1.0); np.add.at(fwd_c, b[f] + 1, -1.0)          # noqa: E702
    np.add.at(bwd_b, b[k] + 1, nb[k]); np.add.at(bwd_b, a[k] + 1, -nb[k])      # noqa: E702
    np.add.at(bwd_c, b[k] + 1, 1.0); np.add.at(bwd_c, a[k] + 1, -1.0)          # noqa: E702
    return SplitProblem(np.array(devices), work, np.bincount(unit, weights=g_params, minlength=U),
                        np.bincount(unit, weights=g_saved, minlength=U), largest,
                        np.cumsum(fwd_b)[:U], np.cumsum(fwd_c)[:U], np.cumsum(bwd_b)[:U], np.cumsum(bwd_c)[:U],
                        unit)


def solve_split(prob: SplitProblem, cluster: Cluster, capacity: np.ndarray, objective: str = "step", *,
                bound: float = np.inf, saved_scale: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """The optimal split of ``prob`` under ``objective`` (``"step"`` or ``"stage"``) with each device's
    memory ``capacity`` (bytes, by cluster device index): ``(value, device index per unit)``; value ``inf``
    when no contiguous split fits. ``bound``: no stage may cost more (its work and incoming cut);
    ``saved_scale[k]``: the share of its saved activations the ``k``-th ordered device holds at once (a
    pipeline's micro-batches in flight over all of them; default 1)."""
    U, K = prob.work.shape
    devs = prob.devices
    Wc = np.vstack([np.zeros(K), np.cumsum(prob.work, axis=0)])            # [U+1, K]
    Pc = np.concatenate([[0.0], np.cumsum(prob.params)])
    Sc = np.concatenate([[0.0], np.cumsum(prob.saved)])
    scale = np.ones(K) if saved_scale is None else np.asarray(saved_scale, dtype=np.float64)
    # fits[k][q, p]: units [q, p) fit device k (largest output: range maximum, via a cumulative max per row)
    q_idx, p_idx = np.meshgrid(np.arange(U + 1), np.arange(U + 1), indexing="ij")
    big = np.full((U + 1, U + 1), -np.inf)
    for q in range(U):
        big[q, q + 1:] = np.maximum.accumulate(prob.largest[q:])
    mem0 = Pc[p_idx] - Pc[q_idx] + np.where(np.isfinite(big), big, 0.0)
    saved = Sc[p_idx] - Sc[q_idx]
    valid = p_idx > q_idx
    cap = np.asarray(capacity, dtype=np.float64)[devs]
    lone_ovh = cluster.overhead + cluster.latency
    bw = cluster.transfer_bandwidth
    INF = np.inf
    best = np.full((U + 1, K), INF)
    choice = np.full((U + 1, K, 2), -1, dtype=np.int64)                   # (q, previous device)
    for k in range(K):
        fits = valid & (mem0 + scale[k] * saved <= cap[k])
        stage = np.where(fits, Wc[p_idx, k] - Wc[q_idx, k], INF)           # [q, p]
        # the first stage: units [0, p) on k
        best[1:, k] = np.where(stage[0, 1:] <= bound, stage[0, 1:], INF)
        choice[1:, k, 0], choice[1:, k, 1] = 0, -1
        for kp in range(k):
            d, e = int(devs[kp]), int(devs[k])
            cut = (prob.fwd_bytes / bw[d, e] + prob.fwd_count * lone_ovh[d, e]
                   + prob.bwd_bytes / bw[e, d] + prob.bwd_count * lone_ovh[e, d])   # [U] cost of cutting at q
            cut = np.concatenate([cut, [INF]])
            prev = best[:, kp] + cut                                          # [q]
            if objective == "step":
                cand = prev[:, None] + stage
            else:
                cand = np.maximum(best[:, kp][:, None], cut[:, None] + stage)
            if bound < INF:
                cand = np.where(cut[:, None] + stage <= bound, cand, INF)
            cand[0, :] = INF                                                  # a later stage starts past 0
            q_best = np.argmin(cand, axis=0)
            val = cand[q_best, np.arange(U + 1)]
            better = val < best[:, k]
            best[better, k] = val[better]
            choice[better, k, 0], choice[better, k, 1] = q_best[better], kp
    k = int(np.argmin(best[U]))
    value = float(best[U, k])
    if not np.isfinite(value):
        return value, np.full(U, -1, dtype=np.int64)
    out = np.empty(U, dtype=np.int64)
    p = U
    while p > 0:
        q, kp = int(choice[p, k, 0]), int(choice[p, k, 1])
        out[q:p] = devs[k]
        p, k = q, kp
        if k < 0:
            break
    return value, out


def _memory_factor(prob: SplitProblem, result, unit_dev: np.ndarray, factor: float) -> float:
    """How far the stage memory count falls short of the simulated peak: the largest ``peak / count`` over
    the devices that ran out of memory (all used devices if none did), with 2 % headroom, never below
    ``factor``."""
    worst = factor
    for d in np.unique(unit_dev).tolist():
        on = unit_dev == d
        count = float((prob.params + prob.saved)[on].sum() + prob.largest[on].max())
        if count > 0 and (result.peak_memory[d] > result.memory_capacity[d] or result.ok):
            worst = max(worst, float(result.peak_memory[d]) / count * 1.02)
    return worst


def ordered_devices(cluster: Cluster) -> list[int]:
    """The devices a split fills, in order: GPUs fastest first, then the other devices fastest first."""
    gpus = set(cluster.devices_of_kind("gpu"))
    key = lambda d: (d not in gpus, -cluster.achievable_flops[d], d)  # noqa: E731
    return sorted(range(cluster.n_devices), key=key)


@register_placer("dp-split", description="exact dynamic program over contiguous splits of the layers onto "
                 "ordered devices, within memory (step or pipeline-stage objective)",
                 paper="Tarnawski et al. 2020; Narayanan et al. 2019 (PipeDream)", memory_aware=True)
def dp_split(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring."""

    sim = Simulator(graph, cluster)
    times = op_time_matrix(graph, cluster)
    ok = np.isfinite(times)
    grouping = runnable_grouping(graph, UNIT_RULES, ok)
    devices = ordered_devices(cluster)
    g_ok = np.ones((grouping.n_groups, cluster.n_devices), dtype=bool)
    np.logical_and.at(g_ok, grouping.group, ok)
    g_time = np.zeros((grouping.n_groups, cluster.n_devices))
    np.add.at(g_time, grouping.group, np.where(ok, times, 0.0))
    g_fallback = np.argmin(np.where(g_ok, g_time, np.inf), axis=1)
    mem = cluster.memory_bytes.astype(np.float64)

    def expand(prob: SplitProblem, order: np.ndarray, unit_dev: np.ndarray) -> np.ndarray:
        g_dev = unit_dev[prob.unit_of_group][np.argsort(order)]          # group index -> device
        return grouping.expand(np.where(g_ok[np.arange(grouping.n_groups), g_dev], g_dev, g_fallback))

    candidates, best, factor = [], None, None
    for order_name, order in unit_orders(graph, grouping.group):
        prob = split_problem(graph, cluster, grouping.group, order, devices, times)
        if factor is None:      # calibrate the memory count on the whole graph on the first device
            factor = _memory_factor(prob, sim.run(expand(prob, order, np.full(prob.n_units, devices[0]))),
                                    np.full(prob.n_units, devices[0]), 1.0)
        for objective in ("step", "stage"):
            f, too_small, no_split = factor, 1.0, np.inf   # factors known to run out / to leave no split
            for attempt in range(1, MEMORY_TRIES + 1):
                value, unit_dev = solve_split(prob, cluster, mem / f, objective)
                if not np.isfinite(value):
                    no_split = f
                    if f <= too_small * 1.001:
                        break
                    f = (too_small + f) / 2
                    continue
                dev = expand(prob, order, unit_dev)
                r = sim.run(dev)
                if r.ok:
                    candidates.append({"order": order_name, "objective": objective, "model_step_s": value,
                                       "step_s": r.step_time, "memory_tries": attempt, "memory_factor": f})
                    if best is None or r.step_time < best[0]:
                        best = (r.step_time, dev, order_name, objective, value, attempt, prob, unit_dev)
                    break
                too_small = f
                f = _memory_factor(prob, r, unit_dev, f)
                if f >= no_split:
                    f = (too_small + no_split) / 2
    if best is None:
        raise InfeasibleError(f"dp-split: no contiguous split of {graph.name!r} fits the memory of cluster "
                              f"{cluster.name!r}")
    _, dev, order_name, objective, value, attempt, prob, unit_dev = best
    stages = []
    for d in dict.fromkeys(unit_dev.tolist()):
        stages.append({"device": cluster.devices[d].name, "units": int((unit_dev == d).sum()),
                       "ops": int((dev == d).sum())})
    return Placement.from_array(graph, cluster, dev, "dp-split", order=order_name, objective=objective,
                                model_step_s=value, memory_tries=attempt, units=prob.n_units, stages=stages,
                                candidates=candidates)
