"""``auto``: what a user runs first — every fast placer, the best of them refined, the best valid result,
judged by its worst case over the cost model's uncertainty.

1. Run the fast placers (:data:`FAST_PLACERS`: single device, the expert, the partitioners, ``dp-split``
   and the list schedulers), each scored by the simulator. A placer that finds no placement (no GPU,
   infeasible memory, Scotch not installed) is recorded with its reason.
2. Score every placement by its **robust step** (:mod:`autoplace.robust`): simulated in each corner
   scenario of the uncertain constants (per-op launch and overhead, achievable rates, bandwidth, per-copy
   overhead, host contention), each scenario rescaled to the ``single-gpu`` placement, the worst taken —
   a placement beats one GPU there only if it does in every scenario. Candidates within
   :data:`NEAR_TIE` of the best go to the one with the fewest cross-device edges.
3. Refine the best of them with the hierarchical local search
   (:func:`autoplace.placers.local_search.refine`) under the robust step (a failing placement scores its
   step penalised by its memory overflow, :func:`autoplace.placers.fast.score`).
4. On a graph small enough for CP-SAT's op-level model (at most
   :data:`autoplace.placers.cpsat.MAX_TASKS` ops), also solve it exactly (nominal figures), hinted with
   the refined placement (:func:`autoplace.placers.cpsat.improve_with_cp_sat`); the refine and CP-SAT
   split the budget there.
5. Take the best of the start, the stages and ``single-gpu`` (where it fits) by step 2's rule, then
   return stray ops to their
   neighbours' device wherever that costs nothing in the worst case
   (:func:`autoplace.placers.local_search.return_strays`). Where the result does not fit, raise
   :class:`InfeasibleError` naming the devices it runs out of memory on. Its meta says where it came
   from (``from``: the fast placer it started as, and the stage that improved it: ``refined``,
   ``cp-sat``), what every candidate scored (``candidates``: method, simulated step, robust step, whether
   it fits, its search time or why it has no placement) and its steps per scenario (``robust``).

6. On a micro-batched step (captured with ``micro_batches=M``), run the ``pipeline`` placer
   (:mod:`autoplace.placers.pipeline`: contiguous stages with a GPipe or 1F1B schedule) and return its
   placement, schedule included, where its robust step beats step 5's and it fits (meta ``from``:
   ``pipeline``, and ``pipeline``: its schedule, micro-batches and stages). ``M`` itself is the
   capture's: ``compile(..., micro_batches=M)``, ``autoplace capture --micro-batches M``.

7. Where the step can be re-captured with micro-batches (the zoo's models) and the cluster has two GPUs or
   more, weigh the strategies over the batch dimension (:data:`STRATEGIES`: ``data-parallel``, ``towers``,
   ``hybrid``, ``pipelined``, :mod:`autoplace.placers.replicated`) by the same robust step (each scenario
   rescaled by the same one-GPU baseline): the best that fits is returned where it beats step 6's (meta ``from``: the
   strategy; ``strategies``: each one's nominal and robust step). Its placement is of the replicated step
   (``meta["strategy"]``; :func:`autoplace.replicas.strategy_graph` rebuilds it).

So ``auto`` returns one GPU when nothing is robustly faster: where ``single-gpu`` fits, ``auto``'s robust
step is at most its nominal step (a near-tie chosen for fewer cuts can only be ``single-gpu`` itself or
below it), i.e. ``auto`` is at least as fast as ``single-gpu`` in every scenario.

``budget`` (default 60): 90 % for the refine (evaluations counted as in local search, each evaluation
simulating every scenario), shared with CP-SAT's deterministic time on small graphs, and 10 % for the
stray cleanup; the fast placers run with their defaults. ``seed`` goes to every placer. Deterministic for
a seed: every budget counts work, not the wall clock.
"""

from __future__ import annotations

import numpy as np

from autoplace.cluster import Cluster
from autoplace.errors import AutoplaceError, InfeasibleError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers.fast import _best, check_fits, ranks, run_fast_placers
from autoplace.placers.registry import place, register_placer
from autoplace.progress import report_progress
from autoplace.search import work

__all__ = ["auto", "robust_simulator", "pick_robust", "uncertainty", "NEAR_TIE", "CLEANUP_SHARE", "STRATEGIES"]

#: candidates whose robust scores are within this fraction of the best are near-ties: the one with the
#: fewest cross-device edges wins (every cut is a transfer the cost model may undercount)
NEAR_TIE = 0.01
#: the share of ``budget`` the stray cleanup may spend (evaluations counted as in local search)
CLEANUP_SHARE = 0.1


_PLACE = object()


def robust_simulator(graph: Graph, cluster: Cluster, one_gpu: Placement | None = _PLACE):
    """A :class:`~autoplace.robust.RobustSimulator` scaled to one GPU: ``one_gpu`` (by default the
    ``single-gpu`` placer's placement) where it fits, else (or for ``None``) plain worst cases."""
    from autoplace.robust import RobustSimulator
    from autoplace.sim import Simulator

    if one_gpu is _PLACE:
        try:
            one_gpu = place(graph, cluster, "single-gpu") if cluster.devices_of_kind("gpu") else None
        except AutoplaceError:
            one_gpu = None
    sim = Simulator(graph, cluster)
    baseline = None
    if one_gpu is not None:
        devs = one_gpu.to_array(graph, cluster)
        baseline = devs if not sim.run_batch(devs[None, :]).oom[0] else None
    return RobustSimulator(graph, cluster, baseline=baseline)


def uncertainty(graph: Graph, cluster: Cluster, placements: list[Placement], one_gpu: Placement | None = _PLACE
                ) -> list:
    """Each placement's :class:`~autoplace.robust.StepRange` (against one GPU: ``one_gpu``, by default the
    ``single-gpu`` placer's, where it fits)."""
    from autoplace.robust import step_ranges
    from autoplace.schedule import NO_SCHEDULE

    robust = robust_simulator(graph, cluster, one_gpu)
    prios = [p.priorities(graph) for p in placements]
    schedules = None if all(p is None for p in prios) else np.stack(
        [np.full(graph.n_ops, NO_SCHEDULE) if p is None else p for p in prios])
    return step_ranges(robust, np.stack([p.to_array(graph, cluster) for p in placements]), schedules)


def pick_robust(graph: Graph, cluster: Cluster, placements: list[Placement], robust) -> tuple[int, list]:
    """Index of the best of ``placements`` by ``robust`` (a :class:`~autoplace.robust.RobustSimulator`):
    the lowest ``(out of memory, robust score)``, near-ties (:data:`NEAR_TIE`) going to the fewest
    cross-device edges; and each placement's rank."""
    from autoplace.robust import cross_edges

    devs = np.stack([p.to_array(graph, cluster) for p in placements])
    r = ranks(robust.run_batch(devs))
    best = min(r)
    near = [i for i, x in enumerate(r) if x[0] == best[0] and x[1] <= best[1] * (1 + NEAR_TIE)]
    cuts = cross_edges(graph, devs)
    return min(near, key=lambda i: (cuts[i], r[i])), r


@register_placer("auto", description="every fast placer, the best refined by hierarchical local search "
                 "(and CP-SAT on small graphs), ranked by the worst case over the cost model's uncertainty; "
                 "the best valid placement", paper="", memory_aware=True)
def auto(graph: Graph, cluster: Cluster, *, seed=None, budget=None,
         strategies: bool | tuple[str, ...] = True, distinct: bool = False) -> Placement:
    """See the module docstring (``strategies=False`` leaves out step 7: placements of ``graph`` only; a tuple
    of names of :data:`STRATEGIES` weighs those alone; ``distinct``: replicas on devices of their own, as the
    distributed runtime runs them — ``hybrid``'s option)."""
    if not isinstance(strategies, bool) and not set(strategies) <= set(STRATEGIES):
        raise AutoplaceError(f"auto: unknown strategies {sorted(set(strategies) - set(STRATEGIES))} "
                             f"(known: {', '.join(STRATEGIES)})")
    from autoplace.placers.cpsat import MAX_TASKS, improve_with_cp_sat
    from autoplace.placers.local_search import refine, return_strays

    budget = work.nominal_budget(budget, "auto")
    cands = run_fast_placers(graph, cluster, seed=seed,
                             progress=lambda m: report_progress(f"auto: fast placers ({m})", None))
    placed = [c for c in cands if c.placement is not None]
    if not placed:
        _best(cands)  # raises, naming each placer's reason
    one = next((c for c in cands if c.method == "single-gpu"), None)
    robust = robust_simulator(graph, cluster, one.placement if one is not None and one.ok else None)
    k, fast_ranks = pick_robust(graph, cluster, [c.placement for c in placed], robust)
    start = placed[k].placement
    small = graph.n_ops <= MAX_TASKS
    search = budget * (1 - CLEANUP_SHARE)
    stages = [("refined", refine(graph, cluster, start, seed=seed, budget=search / 2 if small else search,
                                 method=start.method, simulator=robust))]
    if small:
        report_progress("auto: CP-SAT", None)
        try:
            stages.append(("cp-sat", improve_with_cp_sat(graph, cluster, stages[0][1], seed=seed, budget=search / 2)))
        except InfeasibleError:
            pass
    # one GPU competes again at the end: a near-tie chosen for fewer cuts can then never be slower than it
    ones = [one.placement] if robust.baseline is not None else []
    pool = [start, *(p for _, p in stages), *ones]
    k, pool_ranks = pick_robust(graph, cluster, pool, robust)
    best = pool[k]
    # the stages that improved on everything before them, up to the one kept
    origin = [name for i, (name, _) in enumerate(stages[:k], 1) if pool_ranks[i] < min(pool_ranks[:i])]
    came_from = start.method
    if ones and k == len(pool) - 1:
        came_from, origin = "single-gpu", []
    report_progress("auto: returning stray ops", None)
    cleanup = work.evaluations(budget * CLEANUP_SHARE, graph.n_ops, len(robust.sims))
    dev, moves = return_strays(graph, cluster, best.to_array(graph, cluster), robust.run_batch,
                               max_evaluations=cleanup)
    steps = robust.steps(dev[None, :])[:, 0]
    prio, pipe = _pipelined(graph, cluster, robust, steps, seed)
    if pipe is not None:
        dev, steps, came_from, origin = pipe.to_array(graph, cluster), robust.steps(
            pipe.to_array(graph, cluster)[None, :], prio[None, :])[:, 0], "pipeline", []
    refined = stages[0][1]
    meta = {"from": came_from, "improved_by": origin,
            "candidates": [{**c.to_dict(), **({"robust_step_s": fast_ranks[placed.index(c)][1]}
                                              if c in placed else {})} for c in cands],
            "refine": {k: refined.meta[k] for k in ("evaluations", "stop_reason", "converged", "levels")},
            "stages": [{"stage": name, "robust_step_s": r[1], "fits": not r[0]}
                       for name, r in zip(["start", *(n for n, _ in stages), *(["single-gpu"] if ones else [])],
                                          pool_ranks)],
            "robust": {"scenarios": [s.name for s in robust.scenarios], "step_s": steps.tolist(),
                       "robust_step_s": float(robust.robust_steps(steps[:, None])[0]),
                       "baseline": "single-gpu" if robust.baseline is not None else None,
                       "stray_evaluations": moves}}
    if pipe is not None:
        meta["pipeline"] = {k: pipe.meta[k] for k in ("pipeline_schedule", "micro_batches", "stages")}
    out = Placement.from_array(graph, cluster, dev, "auto", prio if pipe is not None else None, **meta)
    out = check_fits(graph, cluster, out)
    if strategies:
        out = _strategies(graph, cluster, robust, out, float(robust.robust_steps(steps[:, None])[0]), seed,
                          STRATEGIES if strategies is True else tuple(strategies), distinct)
    return out


#: the strategies over the batch dimension ``auto`` weighs against its placement (:mod:`.replicated`)
STRATEGIES = ("data-parallel", "towers", "hybrid", "pipelined")


def _row(prio):
    return None if prio is None else prio[None, :]


def _strategies(graph: Graph, cluster: Cluster, robust, best: Placement, best_robust: float, seed,
                names: tuple[str, ...] = STRATEGIES, distinct: bool = False) -> Placement:
    """Step 7: where the step can be re-captured with micro-batches and the cluster has two GPUs or more, each
    strategy of :data:`STRATEGIES`, its robust step taken against the same one-GPU baseline (each scenario's
    step rescaled as ``best``'s); the strategy with the lowest robust step that fits replaces ``best`` where
    it beats it. ``meta["strategies"]`` records each (its nominal and robust step, whether it fits, or why it
    has none)."""
    from autoplace.placers.replicated import replica_devices
    from autoplace.replicas import can_replicate, strategy_graph
    from autoplace.robust import RobustSimulator

    if not can_replicate(graph) or len(replica_devices(cluster)) < 2:
        return best
    rows, found = [], []
    for method in names:
        report_progress(f"auto: {method}", None)
        try:
            p = place(graph, cluster, method, seed=seed, **({"distinct": True} if distinct and method == "hybrid"
                                                              else {}))
        except AutoplaceError as e:          # no such strategy here (a step it cannot split, no capture ...)
            rows.append({"method": method, "error": str(e)})
            continue
        big = strategy_graph(graph, p)
        rs = RobustSimulator(big, cluster, scenarios=robust.scenarios)
        devs = p.to_array(big, cluster)[None, :]
        prio = _row(p.priorities(big))
        steps = rs.steps(devs, prio)
        worst = float(robust.robust_steps(steps)[0])
        fits = not bool(rs.nominal.run_batch(devs, prio).oom[0])
        rows.append({"method": method, "step_time_s": float(steps[0, 0]), "robust_step_s": worst, "fits": fits,
                     "replicas": p.meta["strategy"]["replicas"]})
        if fits:
            found.append((worst, p))
    rows.insert(0, {"method": "placement", "from": best.meta.get("from"),
                    "step_time_s": float(robust.nominal.run_batch(best.to_array(graph, cluster)[None, :],
                                                                  _row(best.priorities(graph))).step_time[0]),
                    "robust_step_s": best_robust, "fits": True, "replicas": 1})
    meta = {**best.meta, "strategies": rows}
    if found and min(found, key=lambda f: f[0])[0] < best_robust:
        worst, p = min(found, key=lambda f: f[0])
        # what describes the placement it replaces (its refine, stages, scenarios) goes; the candidates stay
        kept = {k: best.meta[k] for k in ("candidates",) if k in best.meta}
        return Placement(p.assignment, p.graph, p.cluster, "auto",
                         {**p.meta, **kept, "strategies": rows, "from": p.method, "improved_by": [],
                          "robust_step_s": worst}, p.schedule)
    return Placement(best.assignment, best.graph, best.cluster, best.method, meta, best.schedule)


def _pipelined(graph: Graph, cluster: Cluster, robust, steps: np.ndarray, seed) -> tuple:
    """On a micro-batched step (``meta["micro_batch"]``), the ``pipeline`` placer's placement and its
    priorities where its robust step beats ``steps``' (the placement found so far, per scenario) and it
    fits; else ``(None, None)``."""
    from autoplace.schedule import micro_batches

    if micro_batches(graph) < 2 or cluster.n_devices < 2:
        return None, None
    report_progress("auto: pipeline", None)
    try:
        pipe = place(graph, cluster, "pipeline", seed=seed)
    except InfeasibleError:
        return None, None
    prio = pipe.priorities(graph)
    devs = pipe.to_array(graph, cluster)[None, :]
    batch = robust.sims[0].run_batch(devs, prio[None, :])
    mine = robust.robust_steps(robust.steps(devs, prio[None, :]))[0]
    if batch.oom[0] or mine >= robust.robust_steps(steps[:, None])[0]:
        return None, None
    return prio, pipe
