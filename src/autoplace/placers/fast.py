"""The fast placers ``auto``, ``local-search`` and CP-SAT's hint start from, and how placements rank.

A placement ranks by ``(out of memory, score)``: a fitting placement before any failing one, then the
lowest :func:`score`, the simulated step penalised by its memory overflow.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.errors import AutoplaceError, InfeasibleError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers.registry import place
from autoplace.search.budget import time_left
from autoplace.sim import BatchResult, Simulator, simulate
from autoplace.units import fmt_bytes

__all__ = ["FAST_PLACERS", "LIST_SCHEDULERS", "LIST_MAX_OP_DEVICES", "Candidate", "run_fast_placers", "best_fast",
           "check_fits", "score", "ranks"]


def score(batch: BatchResult) -> np.ndarray:
    """Step time, penalised by memory overflow (0 overflow: the step time itself)."""
    over = np.max(batch.peak_memory / batch.memory_capacity[None, :] - 1.0, axis=1)
    return batch.step_time * (1.0 + 10.0 * np.maximum(over, 0.0))


def ranks(batch: BatchResult) -> list[tuple[bool, float]]:
    """``(out of memory, score)`` per placement: the smallest is the best, a fitting placement before any
    failing one, then the lowest :func:`score`."""
    return list(zip(batch.oom.tolist(), score(batch).tolist()))


#: the placers ``auto`` and ``local-search`` start from
FAST_PLACERS = ("single-gpu", "single-cpu", "expert", "metis", "mincut", "scotch", "dp-split", "tf-greedy", "heft",
                "m-topo", "m-etf", "m-sct")

#: the list schedulers among them: each builds a schedule op by op, trying every device (in Python, tens of
#: microseconds per op and device: docs/benchmarks.md, "Placing 200k and 1M ops")
LIST_SCHEDULERS = ("tf-greedy", "heft", "m-topo", "m-etf", "m-sct")

#: :func:`run_fast_placers` leaves the list schedulers out where ops x devices exceeds this (500k ops on 8
#: devices): together they take 7½ minutes for 200k ops on 9 devices, and over an hour beyond this;
#: the partitioners, linear or near it, place any size
LIST_MAX_OP_DEVICES = 4_000_000


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
    """Every method of ``methods`` on ``graph``, simulated (``progress(method)`` is called before each); under
    a :func:`~autoplace.search.budget.time_limit` that has run out, no more once one has placed it."""

    sim = Simulator(graph, cluster)
    out = []
    too_large = graph.n_ops * cluster.n_devices > LIST_MAX_OP_DEVICES
    for method in methods:
        if time_left() == 0.0 and any(c.placement is not None for c in out):
            break
        if too_large and method in LIST_SCHEDULERS:
            out.append(Candidate(method, None, float("inf"), False, float("inf"), 0.0,
                                 f"left out: {graph.n_ops:,} ops on {cluster.n_devices} devices is over "
                                 f"{LIST_MAX_OP_DEVICES:,} op-device pairs for a list scheduler"))
            continue
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
