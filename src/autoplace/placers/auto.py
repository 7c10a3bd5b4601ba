"""``auto``: what a user runs first — every fast placer, the best of them refined, the best valid result.

1. Run the fast placers (:data:`FAST_PLACERS`: single device, the expert, the partitioners, ``dp-split``
   and the list schedulers), each scored by the simulator. A placer that finds no placement (no GPU,
   infeasible memory, Scotch not installed) is recorded with its reason.
2. Refine the best of them (a failing placement scores its step penalised by its memory overflow, see
   :func:`autoplace.placers.local_search.score`) with the hierarchical local search
   (:func:`autoplace.placers.local_search.refine`).
3. On a graph small enough for CP-SAT's op-level model (at most
   :data:`autoplace.placers.cpsat.MAX_TASKS` ops), also solve it exactly, hinted with the best placement
   so far (the refined one; :func:`autoplace.placers.cpsat.improve_with_cp_sat`); the refine and CP-SAT
   split the budget there.
4. Return the best valid placement found (the lowest score; a fitting placement always beats a failing
   one); where none fits, raise :class:`InfeasibleError` naming the devices the best runs out of memory
   on. Its meta says where it came from (``from``: the fast placer it started as, and the stages that
   improved it: ``refined``, ``cp-sat``) and what every candidate scored (``candidates``: method, simulated
   step, whether it fits, its search time or why it has no placement).

``budget`` (default 60) is the refine's budget (evaluations counted as in local search), shared with
CP-SAT's deterministic time on small graphs; the fast placers run with their defaults. ``seed`` goes to
every placer. Deterministic for a seed: every budget counts work, not the wall clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.errors import AutoplaceError, InfeasibleError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers import place, register_placer, report_progress
from autoplace.validation import check_budget

__all__ = ["auto", "best_fast", "check_fits", "run_fast_placers", "Candidate", "FAST_PLACERS", "DEFAULT_BUDGET_S"]

#: the placers ``auto`` and ``local-search`` start from: each takes seconds at most on a 50k-op graph
FAST_PLACERS = ("single-gpu", "single-cpu", "expert", "metis", "mincut", "scotch", "dp-split", "tf-greedy", "heft",
                "m-topo", "m-etf", "m-sct")
DEFAULT_BUDGET_S = 60.0


@dataclass(frozen=True)
class Candidate:
    """One placer's result as ``auto`` saw it: its placement and simulated step, or why it has none."""

    method: str
    placement: Placement | None
    step_time: float
    ok: bool
    score: float
    search_time_s: float
    error: str | None = None

    def to_dict(self) -> dict:
        out = {"method": self.method, "step_time_s": self.step_time if np.isfinite(self.step_time) else None,
               "ok": self.ok, "search_time_s": self.search_time_s}
        if self.error:
            out["error"] = self.error
        return out


def run_fast_placers(graph: Graph, cluster: Cluster, *, seed=None, methods=FAST_PLACERS, progress=None
                     ) -> list[Candidate]:
    """Every method of ``methods`` on ``graph``, simulated (``progress(method)`` is called before each)."""
    from autoplace.placers.local_search import score
    from autoplace.sim import Simulator

    sim = Simulator(graph, cluster)
    out = []
    for method in methods:
        if progress is not None:
            progress(method)
        t0 = time.perf_counter()
        try:
            p = place(graph, cluster, method, seed=seed)
        except (InfeasibleError, AutoplaceError) as e:      # no placement, or a tool missing (Scotch)
            out.append(Candidate(method, None, float("inf"), False, float("inf"), time.perf_counter() - t0, str(e)))
            continue
        batch = sim.run_batch(p.to_array(graph, cluster)[None, :])
        out.append(Candidate(method, p, float(batch.step_time[0]), not bool(batch.oom[0]),
                             float(score(batch)[0]), float(p.meta["search_time_s"])))
    return out


def _best(cands: list[Candidate]) -> Candidate:
    """The fitting candidate with the lowest step, else the failing one with the lowest score."""
    placed = [c for c in cands if c.placement is not None]
    if not placed:
        reasons = "; ".join(f"{c.method}: {c.error}" for c in cands)
        raise InfeasibleError(f"no placer found a placement ({reasons})")
    return min(placed, key=lambda c: (not c.ok, c.score))


def check_fits(graph: Graph, cluster: Cluster, placement: Placement) -> Placement:
    """``placement`` if it fits in memory (simulated); else :class:`InfeasibleError` naming the devices it
    runs out of memory on."""
    from autoplace.report import fmt_bytes
    from autoplace.sim import simulate

    r = simulate(graph, cluster, placement)
    if not r.ok:
        over = ", ".join(f"{d} ({fmt_bytes(p)} of {fmt_bytes(c)})" for d, p, c in
                         zip(r.device_names, r.peak_memory, r.memory_capacity) if p > c)
        raise InfeasibleError(f"{placement.method}: no placement found fits the memory of cluster "
                              f"{cluster.name!r} (the best runs out of memory on {over})")
    return placement


def best_fast(graph: Graph, cluster: Cluster, *, seed=None, progress=None) -> tuple[Placement, list[Candidate]]:
    """The best placement of the fast placers (:func:`run_fast_placers`) and every candidate."""
    cands = run_fast_placers(graph, cluster, seed=seed, progress=progress)
    return _best(cands).placement, cands


@register_placer("auto", description="every fast placer, the best refined by hierarchical local search "
                 "(and CP-SAT on small graphs); the best valid placement", paper="", memory_aware=True)
def auto(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring."""
    from autoplace.placers.cpsat import MAX_TASKS, improve_with_cp_sat
    from autoplace.placers.local_search import ranks, refine
    from autoplace.sim import Simulator

    budget = DEFAULT_BUDGET_S if check_budget(budget) is None else budget
    start, cands = best_fast(graph, cluster, seed=seed,
                             progress=lambda m: report_progress(f"auto: fast placers ({m})", None))
    sim = Simulator(graph, cluster)
    small = graph.n_ops <= MAX_TASKS
    stages = []
    refined = refine(graph, cluster, start, seed=seed, budget=budget / 2 if small else budget,
                     method=start.method)
    stages.append(("refined", refined))
    if small:
        report_progress("auto: CP-SAT", None)
        hint = refined if ranks(sim.run_batch(refined.to_array(graph, cluster)[None, :]))[0] <= \
            ranks(sim.run_batch(start.to_array(graph, cluster)[None, :]))[0] else start
        try:
            stages.append(("cp-sat", improve_with_cp_sat(graph, cluster, hint, seed=seed, budget=budget / 2)))
        except InfeasibleError:
            pass

    def rank(p: Placement) -> tuple[bool, float]:
        return ranks(sim.run_batch(p.to_array(graph, cluster)[None, :]))[0]

    best, best_rank, origin = start, rank(start), []
    for name, p in stages:
        r = rank(p)
        if r < best_rank:
            best, best_rank = p, r
            origin.append(name)
    meta = {"from": start.method, "improved_by": origin,
            "candidates": [c.to_dict() for c in cands],
            "refine": {k: refined.meta[k] for k in ("evaluations", "stop_reason", "converged", "levels")}}
    return check_fits(graph, cluster, Placement(best.assignment, best.graph, best.cluster, "auto", meta))
