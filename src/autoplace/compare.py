"""Compare placers on one graph and cluster: the papers' table (Mirhoseini et al. 2017, Table 2).

``compare(graph, cluster, methods)`` places with each method, simulates every placement, and returns
one :class:`ComparisonRow` per method; a method that finds no feasible placement gets a row saying
why instead of a step time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from autoplace.bounds import Bounds, lower_bounds
from autoplace.cluster import Cluster
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers import available_placers, place
from autoplace.sim import SimResult, Simulator

__all__ = ["ComparisonRow", "Comparison", "compare", "speedup"]


@dataclass(frozen=True)
class ComparisonRow:
    """One method's outcome: its placement and simulated step, or the reason it has none."""

    method: str
    placement: Placement | None
    result: SimResult | None
    search_time_s: float
    error: str | None = None

    @property
    def step_time(self) -> float:
        """Simulated step time; ``inf`` for a failing placement (OOM) or a method that found none."""
        if self.result is None or not self.result.ok:
            return float("inf")
        return self.result.step_time


def speedup(baseline: float, value: float) -> float:
    """``baseline / value`` (how many times faster than the baseline); nan when either is unusable."""
    if not np.isfinite(baseline) or not np.isfinite(value) or value <= 0:
        return float("nan")
    return baseline / value


@dataclass(frozen=True)
class Comparison:
    """The rows of a comparison and the step-time lower bounds they are measured against."""

    rows: list[ComparisonRow]
    bounds: Bounds

    def step_time(self, method: str) -> float:
        return next((r.step_time for r in self.rows if r.method == method), float("nan"))

    def __iter__(self):
        return iter(self.rows)


def compare(graph: Graph, cluster: Cluster, methods: Iterable[str] | None = None, *, seed: int = 0,
            budget: float | None = None, progress=None) -> Comparison:
    """Place ``graph`` on ``cluster`` with each method (default: every registered placer) and simulate.

    ``progress(method)`` is called before each method (the CLI shows a progress bar with it)."""
    sim = Simulator(graph, cluster)
    bounds = lower_bounds(graph, cluster, sim.op_times)
    rows = []
    for method in methods or available_placers():
        if progress is not None:
            progress(method)
        t0 = time.perf_counter()
        try:
            placement = place(graph, cluster, method, seed=seed, budget=budget)
        except InfeasibleError as e:
            rows.append(ComparisonRow(method, None, None, time.perf_counter() - t0, str(e)))
            continue
        elapsed = float(placement.meta.get("search_time_s", time.perf_counter() - t0))
        rows.append(ComparisonRow(method, placement, sim.run(placement), elapsed))
        if placement.meta.get("tasks") == graph.n_ops and "bound_s" in placement.meta:
            # CP-SAT on the ops themselves: its proven bound holds for every placement
            bounds = Bounds(bounds.critical_path, bounds.load, float(placement.meta["bound_s"]))
    return Comparison(rows, bounds)
