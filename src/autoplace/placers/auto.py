"""``auto``: what a user runs first — every fast placer, the best of them refined, the best valid result,
chosen by its regret over the cost model's uncertainty.

1. Run the fast placers (:data:`FAST_PLACERS`: single device, the expert, the partitioners, ``dp-split``
   and the list schedulers), each scored by the simulator. A placer that finds no placement (no GPU,
   infeasible memory, Scotch not installed) is recorded with its reason.
2. Simulate every placement in each corner scenario of the uncertain constants (:mod:`autoplace.robust`:
   per-op launch and overhead, achievable rates, bandwidth, per-copy overhead, host contention) and choose
   by **regret**: a candidate's step in each scenario over the best candidate's step there, the worst
   taken (:func:`autoplace.robust.regret_scale`). Every choice below is made against all the candidates
   weighed so far (:class:`Field`): the least regret that fits, candidates within :data:`NEAR_TIE` of it
   going to the one with the fewest cross-device edges.
3. Refine the chosen one with the hierarchical local search
   (:func:`autoplace.placers.local_search.refine`) under the same regret (a failing placement scores its
   step penalised by its memory overflow, :func:`autoplace.placers.fast.score`).
4. On a graph small enough for CP-SAT's op-level model (at most
   :data:`autoplace.placers.cpsat.MAX_TASKS` ops), also solve it exactly (nominal figures), hinted with
   the refined placement (:func:`autoplace.placers.cpsat.improve_with_cp_sat`); the refine and CP-SAT
   split the budget there.
5. Take the least regret of the start, the stages and every other fast placement that fits, then return
   stray ops to their neighbours' device wherever that costs nothing in regret
   (:func:`autoplace.placers.local_search.return_strays`). Where the result does not fit, raise
   :class:`InfeasibleError` naming the devices it runs out of memory on. Its meta says where it came
   from (``from``: the fast placer it started as, and the stage that improved it: ``refined``,
   ``cp-sat``), what its regret is taken against (``weighed``: the methods and stages that fit), what every
   candidate scored (``candidates``: method, simulated step, worst case against
   one GPU ``robust_step_s``, ``regret``, whether it fits, its search time or why it has no placement)
   and its steps per scenario (``robust``, with the best step per scenario, ``reference_s``).

6. On a micro-batched step (captured with ``micro_batches=M``), run the ``pipeline`` placer
   (:mod:`autoplace.placers.pipeline`: contiguous stages with a GPipe or 1F1B schedule) and return its
   placement, schedule included, where it fits and its regret is lower (meta ``from``: ``pipeline``, and
   ``pipeline``: its schedule, micro-batches and stages). ``M`` itself is the capture's:
   ``compile(..., micro_batches=M)``, ``autoplace capture --micro-batches M``.

7. Where the step can be re-captured with micro-batches (the zoo's models) and the cluster has two GPUs or
   more, weigh the strategies over the batch dimension (:data:`STRATEGIES`: ``data-parallel``, ``towers``,
   ``hybrid``, ``pipelined``, :mod:`autoplace.placers.replicated`) by the same regret: the least that fits
   is returned where it is lower than step 6's (meta ``from``: the strategy; ``strategies``: each one's
   nominal step, worst case against one GPU and regret). Its placement is of the replicated step
   (``meta["strategy"]``; :func:`autoplace.replicas.strategy_graph` rebuilds it).

So ``auto`` is slower nominally than a candidate it weighed only where that candidate is slower than the
best by at least as much in some scenario: with ``r`` its regret, ``auto``'s nominal step is at most ``r``
times the fastest candidate's, and its step in every scenario at most ``r`` times the best there; every
candidate it weighed has a regret of at least ``r / (1 + NEAR_TIE)``. Where one GPU fits it is a candidate,
so ``auto`` is never slower than one GPU by more than one GPU's own regret.

``budget`` (default 60): 90 % for the refine (evaluations counted as in local search, each evaluation
simulating every scenario), shared with CP-SAT's deterministic time on small graphs, and 10 % for the
stray cleanup; the fast placers run with their defaults. ``seed`` goes to every placer. Deterministic for
a seed: every budget counts work, not the wall clock. Under a caller's time limit
(:func:`~autoplace.search.budget.time_limit`: ``place(..., time_limit=)``, ``--time-limit``) the searches
stop with the best they have, and the fixed steps the limit finds passed (CP-SAT, the pipeline, the
strategies) are left out (meta ``time_limit_skipped``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.errors import AutoplaceError, InfeasibleError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers.cpsat import MAX_TASKS, improve_with_cp_sat
from autoplace.placers.fast import _best, check_fits, ranks, run_fast_placers
from autoplace.placers.local_search import refine, return_strays
from autoplace.placers.registry import place, register_placer
from autoplace.placers.replicated import replica_devices
from autoplace.progress import report_progress
from autoplace.replicas import can_replicate, strategy_graph
from autoplace.robust import RobustSimulator, cross_edges, step_ranges
from autoplace.schedule import NO_SCHEDULE, micro_batches
from autoplace.search import work
from autoplace.search.budget import time_left
from autoplace.sim import Simulator

__all__ = ["auto", "robust_simulator", "pick_robust", "uncertainty", "Field", "NEAR_TIE", "CLEANUP_SHARE",
           "STRATEGIES"]

#: candidates whose regrets are within this fraction of the least are near-ties: the one with the
#: fewest cross-device edges wins (every cut is a transfer the cost model may undercount)
NEAR_TIE = 0.01
#: the share of ``budget`` the stray cleanup may spend (evaluations counted as in local search)
CLEANUP_SHARE = 0.1


_PLACE = object()


def robust_simulator(graph: Graph, cluster: Cluster, one_gpu: Placement | None = _PLACE):
    """A :class:`~autoplace.robust.RobustSimulator` scaled to one GPU: ``one_gpu`` (by default the
    ``single-gpu`` placer's placement) where it fits, else (or for ``None``) plain worst cases."""

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

    robust = robust_simulator(graph, cluster, one_gpu)
    prios = [p.priorities(graph) for p in placements]
    schedules = None if all(p is None for p in prios) else np.stack(
        [np.full(graph.n_ops, NO_SCHEDULE) if p is None else p for p in prios])
    return step_ranges(robust, np.stack([p.to_array(graph, cluster) for p in placements]), schedules)


def pick_robust(graph: Graph, cluster: Cluster, placements: list[Placement], robust, simulated=None
                ) -> tuple[int, list]:
    """Index of the best of ``placements`` by ``robust`` (a :class:`~autoplace.robust.RobustSimulator`):
    the lowest ``(out of memory, robust score)``, near-ties (:data:`NEAR_TIE`) going to the fewest
    cross-device edges; and each placement's rank. ``simulated``: what ``robust.simulate`` gave for them,
    where already run."""

    devs = np.stack([p.to_array(graph, cluster) for p in placements])
    r = ranks(robust.judged(*simulated) if simulated is not None else robust.run_batch(devs))
    best = min(r)
    near = [i for i, x in enumerate(r) if x[0] == best[0] and x[1] <= best[1] * (1 + NEAR_TIE)]
    cuts = cross_edges(graph, devs)
    return min(near, key=lambda i: (cuts[i], r[i])), r


@register_placer("auto", description="every fast placer, the best refined by hierarchical local search "
                 "(and CP-SAT on small graphs), chosen by regret over the cost model's uncertainty; "
                 "the best valid placement", paper="", memory_aware=True)
def auto(graph: Graph, cluster: Cluster, *, seed=None, budget=None,
         strategies: bool | tuple[str, ...] = True, distinct: bool = False) -> Placement:
    """See the module docstring (``strategies=False`` leaves out step 7: placements of ``graph`` only; a tuple
    of names of :data:`STRATEGIES` weighs those alone; ``distinct``: replicas on devices of their own, as the
    distributed runtime runs them — ``hybrid``'s option)."""
    if not isinstance(strategies, bool) and not set(strategies) <= set(STRATEGIES):
        raise AutoplaceError(f"auto: unknown strategies {sorted(set(strategies) - set(STRATEGIES))} "
                             f"(known: {', '.join(STRATEGIES)})")

    budget = work.nominal_budget(budget, "auto")
    cands = run_fast_placers(graph, cluster, seed=seed,
                             progress=lambda m: report_progress(f"auto: fast placers ({m})", None))
    placed = [c for c in cands if c.placement is not None]
    if not placed:
        _best(cands)  # raises, naming each placer's reason
    one = next((c for c in cands if c.method == "single-gpu"), None)
    robust = robust_simulator(graph, cluster, one.placement if one is not None and one.ok else None)
    field = Field(robust)
    fast_steps, fast_nominal = robust.simulate(np.stack([c.placement.to_array(graph, cluster) for c in placed]))
    fast_oom = fast_nominal.oom
    field.add(fast_steps, fast_oom)
    k, _ = pick_robust(graph, cluster, [c.placement for c in placed], field.judge(), (fast_steps, fast_nominal))
    start = placed[k].placement
    small = graph.n_ops <= MAX_TASKS
    search = budget * (1 - CLEANUP_SHARE)
    skipped: list[str] = []          # the steps a caller's time limit left out
    stages = [("refined", refine(graph, cluster, start, seed=seed, budget=search / 2 if small else search,
                                 method=start.method, simulator=field.judge()))]
    if small and not _out_of_time(skipped, "cp-sat"):
        report_progress("auto: CP-SAT", None)
        try:
            stages.append(("cp-sat", improve_with_cp_sat(graph, cluster, stages[0][1], seed=seed, budget=search / 2)))
        except InfeasibleError:
            pass
    # every other fast placer that fits competes again (one GPU among them)
    others = [c for i, c in enumerate(placed) if i != k and not fast_oom[i]]
    pool = [start, *(p for _, p in stages), *(c.placement for c in others)]
    pool_devs = np.stack([p.to_array(graph, cluster) for p in pool])
    pool_steps, pool_nominal = robust.simulate(pool_devs)
    pool_oom = pool_nominal.oom
    field.add(pool_steps, pool_oom)
    judge = field.judge()
    k, pool_ranks = pick_robust(graph, cluster, pool, judge, (pool_steps, pool_nominal))
    # where each of the pool came from: the stages say which of them improved on everything before them
    origins = [(start.method, [])]
    for i, (name, _) in enumerate(stages, 1):
        better = pool_ranks[i] < min(pool_ranks[:i])
        origins.append((start.method, [*origins[-1][1], *([name] if better else [])]))
    origins += [(c.method, []) for c in others]
    weighed = [Weighed(pool_devs[i], None, pool_steps[:, i], *origins[i]) for i in range(len(pool))
               if not pool_oom[i]]
    report_progress("auto: returning stray ops", None)
    cleanup = work.evaluations(budget * CLEANUP_SHARE, graph.n_ops, len(robust.sims))
    dev, moves = return_strays(graph, cluster, pool_devs[k], judge.run_batch, max_evaluations=cleanup)
    steps, nominal = robust.simulate(dev[None, :])
    oom = nominal.oom
    field.add(steps, oom)
    strays = Weighed(dev, None, steps[:, 0], *origins[k])
    weighed += [strays] if not oom[0] else []
    if not weighed:              # nothing fits: say so (no strategy is weighed against nothing)
        check_fits(graph, cluster, Placement.from_array(graph, cluster, dev, "auto"))
    pipe = None if _out_of_time(skipped, "pipeline") else _pipelined(graph, cluster, field, seed)
    weighed += [pipe] if pipe is not None else []
    found = (_strategies(graph, cluster, field, seed, STRATEGIES if strategies is True else tuple(strategies),
                         distinct) if strategies and not _out_of_time(skipped, "strategies") else None)
    # the choice, against everything weighed: the least regret of the placements (fewest cuts among near-ties)
    pick = weighed[_least(field, weighed, graph)] if weighed else strays
    refined = stages[0][1]
    # regrets against everything weighed; worst cases against one GPU (what tables report)
    fast_regret, fast_robust = field.regret(fast_steps), robust.robust_steps(fast_steps)
    pool_regret, pool_robust = field.regret(pool_steps), robust.robust_steps(pool_steps)
    fits = {id(c) for i, c in enumerate(placed) if not fast_oom[i]}
    meta = {"from": pick.came_from, "improved_by": pick.improved_by,
            "candidates": [{**c.to_dict(), **({"robust_step_s": float(fast_robust[placed.index(c)]),
                                               "regret": float(fast_regret[placed.index(c)])}
                                              if id(c) in fits else {})} for c in cands],
            # what the regret was taken against: the methods and stages that fit, each with its steps per scenario
            **_weighed([*((c.method, fast_steps[:, i]) for i, c in enumerate(placed) if id(c) in fits),
                        *((name, pool_steps[:, i]) for i, (name, _) in enumerate(stages, 1) if not pool_oom[i]),
                        *([("cleaned", strays.steps)] if any(w is strays for w in weighed) else []),
                        *([("pipeline", pipe.steps)] if pipe is not None else []),
                        *((row["method"], steps) for steps, row, _ in (found[1] if found else ()))]),
            "refine": {k: refined.meta[k] for k in ("evaluations", "stop_reason", "converged", "levels")},
            "stages": [{"stage": name, "robust_step_s": float(pool_robust[i]), "regret": float(pool_regret[i]),
                        "fits": not pool_oom[i]}
                       for i, name in enumerate(["start", *(n for n, _ in stages)])],
            "robust": {"scenarios": [s.name for s in robust.scenarios], "step_s": pick.steps.tolist(),
                       "robust_step_s": float(robust.robust_steps(pick.steps[:, None])[0]),
                       "baseline": "single-gpu" if robust.baseline is not None else None,
                       "regret": float(field.regret(pick.steps[:, None])[0]),
                       "reference_s": field.steps.min(axis=1).tolist() if field.steps.shape[1] else None,
                       "stray_evaluations": moves}}
    if pick.came_from == "pipeline":
        meta["pipeline"] = pipe.pipeline
    if skipped:
        meta["time_limit_skipped"] = skipped
    out = check_fits(graph, cluster, Placement.from_array(graph, cluster, pick.dev, "auto", pick.prio, **meta))
    if found is None:
        return out
    return _chosen_strategy(field, out, pick.steps, *found)


def _out_of_time(skipped: list[str], step: str) -> bool:
    """Whether a caller's time limit (:func:`~autoplace.search.budget.time_limit`) has run out before
    ``step``, which then joins ``skipped``: ``auto`` returns the best it has by the limit, its fixed steps
    (CP-SAT, the pipeline, the strategies) left out as its searches stop."""
    left = time_left()
    if left is not None and left <= 0:
        skipped.append(step)
        return True
    return False


def _weighed(entries: list) -> dict:
    """Meta ``weighed`` (the names of what the regret was taken against) and ``weighed_steps_s`` (each one's
    steps per scenario, in the same order: what a rule other than regret can be replayed on)."""
    return {"weighed": [name for name, _ in entries],
            "weighed_steps_s": [[float(x) for x in steps] for _, steps in entries]}


#: the strategies over the batch dimension ``auto`` weighs against its placement (:mod:`.replicated`)
STRATEGIES = ("data-parallel", "towers", "hybrid", "pipelined")


@dataclass
class Weighed:
    """A placement of the graph ``auto`` weighed: its devices, priorities (``None``: ready order), steps per
    scenario, the fast placer it came from and the stages that improved it."""

    dev: np.ndarray
    prio: np.ndarray | None
    steps: np.ndarray
    came_from: str
    improved_by: list
    pipeline: dict | None = None


class Field:
    """Every candidate ``auto`` has weighed, by its steps per scenario (those that fit): the reference of
    the regret its choices are made by (:func:`autoplace.robust.regret_scale`). ``robust`` simulates the
    scenarios and keeps the worst case against one GPU that ``auto`` reports."""

    def __init__(self, robust):
        self.robust = robust
        self.steps = np.empty((len(robust.sims), 0))

    def add(self, steps: np.ndarray, oom: np.ndarray) -> np.ndarray:
        """Take in placements' ``steps`` (``[S, B]``; those out of memory, ``oom``, set no reference);
        returns ``steps``."""
        self.steps = np.hstack([self.steps, steps[:, ~np.asarray(oom, dtype=bool)]])
        return steps

    def judge(self):
        """``robust`` judging by regret against the field (as it was while nothing fits, or where the best
        step of some scenario is no time at all)."""
        best = self.steps.min(axis=1) if self.steps.shape[1] else None
        return self.robust if best is None or not (best > 0).all() else self.robust.against(self.steps)

    def regret(self, steps: np.ndarray) -> np.ndarray:
        """``[B]``: the regret of placements whose per-scenario ``steps`` (``[S, B]``) are given (where the
        best of a scenario takes no time: 1 for no time, infinite for any)."""
        if not self.steps.shape[1]:
            return np.full(steps.shape[1], np.nan)
        best = self.steps.min(axis=1)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(best > 0, steps / best, np.where(steps > 0, np.inf, 1.0))
        return ratio.max(axis=0)


def _least(field: Field, weighed: list[Weighed], graph: Graph) -> int:
    """Index of the least regret of ``weighed`` (all fit), near-ties (:data:`NEAR_TIE`) going to the fewest
    cross-device edges."""

    r = field.regret(np.stack([w.steps for w in weighed], axis=1))
    near = [i for i in range(len(r)) if r[i] <= r.min() * (1 + NEAR_TIE)]
    cuts = cross_edges(graph, np.stack([w.dev for w in weighed]))
    return min(near, key=lambda i: (cuts[i], r[i], i))


def _row(prio):
    return None if prio is None else prio[None, :]


def _strategies(graph: Graph, cluster: Cluster, field: Field, seed, names: tuple[str, ...] = STRATEGIES,
                distinct: bool = False) -> tuple[list, list] | None:
    """Step 7: where the step can be re-captured with micro-batches and the cluster has two GPUs or more, each
    strategy of ``names`` placed and simulated in every scenario, taken into ``field``: ``(rows, found)``,
    each one's row for ``meta["strategies"]`` (its nominal step, its worst case against one GPU, whether it
    fits, or why it has none) and those that fit with their steps; ``None`` where none applies."""

    if not can_replicate(graph) or len(replica_devices(cluster)) < 2:
        return None
    robust = field.robust
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
        steps, nominal = rs.simulate(p.to_array(big, cluster)[None, :], _row(p.priorities(big)))
        oom = nominal.oom
        field.add(steps, oom)
        rows.append({"method": method, "step_time_s": float(steps[0, 0]),
                     "robust_step_s": float(robust.robust_steps(steps)[0]), "fits": not bool(oom[0]),
                     "replicas": p.meta["strategy"]["replicas"]})
        if not oom[0]:
            found.append((steps[:, 0], rows[-1], p))
    return rows, found


def _chosen_strategy(field: Field, best: Placement, best_steps: np.ndarray, rows: list, found: list) -> Placement:
    """``best`` (the placement chosen, its steps per scenario ``best_steps``) or the strategy of least regret
    of ``found`` where its regret is lower; ``meta["strategies"]`` records every strategy with its regret."""
    robust = field.robust
    rows.insert(0, {"method": "placement", "from": best.meta.get("from"), "step_time_s": float(best_steps[0]),
                    "robust_step_s": float(robust.robust_steps(best_steps[:, None])[0]), "fits": True,
                    "replicas": 1, "regret": float(field.regret(best_steps[:, None])[0])})
    for steps, row, _ in found:
        row["regret"] = float(field.regret(steps[:, None])[0])
    if found and min(row["regret"] for _, row, _ in found) < rows[0]["regret"]:
        _, row, p = min(found, key=lambda f: f[1]["regret"])
        # what describes the placement it replaces (its refine, stages, scenarios) goes; the candidates stay
        kept = {k: best.meta[k] for k in ("candidates", "weighed", "weighed_steps_s") if k in best.meta}
        return Placement(p.assignment, p.graph, p.cluster, "auto",
                         {**p.meta, **kept, "strategies": rows, "from": p.method, "improved_by": [],
                          "robust_step_s": row["robust_step_s"], "regret": row["regret"]}, p.schedule)
    return Placement(best.assignment, best.graph, best.cluster, best.method, {**best.meta, "strategies": rows},
                     best.schedule)


def _pipelined(graph: Graph, cluster: Cluster, field: Field, seed) -> Weighed | None:
    """On a micro-batched step (``meta["micro_batch"]``), the ``pipeline`` placer's placement with its
    priorities, taken into ``field``, where it fits; else ``None``."""

    if micro_batches(graph) < 2 or cluster.n_devices < 2:
        return None
    report_progress("auto: pipeline", None)
    try:
        pipe = place(graph, cluster, "pipeline", seed=seed)
    except InfeasibleError:
        return None
    prio, dev = pipe.priorities(graph), pipe.to_array(graph, cluster)
    steps, nominal = field.robust.simulate(dev[None, :], prio[None, :])
    oom = nominal.oom
    field.add(steps, oom)
    if oom[0]:
        return None
    return Weighed(dev, prio, steps[:, 0], "pipeline", [],
                   {k: pipe.meta[k] for k in ("pipeline_schedule", "micro_batches", "stages")})
