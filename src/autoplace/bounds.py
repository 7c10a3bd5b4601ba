"""Lower bounds on the step time of any placement (issue #4).

* ``critical_path`` — the longest path when every op runs on its fastest feasible device and transfers are
  free: dependencies alone forbid anything faster;
* ``load`` — the total work spread evenly: every op takes at least its fastest time, so the devices' busy
  times add up to at least ``sum_i min_d t(i, d)``, and the busiest of ``D`` devices (each running
  ``concurrency`` ops at once) carries at least the average;
* ``best`` — the larger of the two (CP-SAT's proven bound joins it where available, issue #4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import fastest_op_times
from autoplace.graph import Graph

__all__ = ["Bounds", "lower_bounds"]


@dataclass(frozen=True)
class Bounds:
    critical_path: float
    load: float
    cp_sat: float | None = None  # CP-SAT's proven bound, when it solved an op-level model

    @property
    def best(self) -> float:
        return max(self.critical_path, self.load, self.cp_sat or 0.0)

    def gap(self, step_time: float) -> float:
        """How far ``step_time`` is above the best bound, as a fraction (0 = provably optimal)."""
        return step_time / self.best - 1.0 if self.best > 0 else float("nan")


def lower_bounds(graph: Graph, cluster: Cluster, op_times: np.ndarray | None = None) -> Bounds:
    fastest = fastest_op_times(graph, cluster, op_times)
    return Bounds(critical_path=graph.longest_path(fastest),
                  load=float(fastest.sum() / cluster.concurrency.sum()))
