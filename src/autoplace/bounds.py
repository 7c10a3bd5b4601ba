"""Lower bounds on the simulated step time of any placement.

Every op's weight is its least time on its fastest feasible device, alone or loaded
(:func:`autoplace.cost.fastest_op_times`): the simulator never runs an op faster, whatever the contention.

* ``critical_path`` — the longest path with those weights and free transfers: dependencies alone forbid
  anything faster;
* ``load`` — the total work spread evenly: the devices' busy times add up to at least ``sum_i min_d
  t(i, d)``, and the busiest of ``D`` devices (each running ``concurrency`` ops at once) carries at least
  the average;
* ``cp_sat`` — CP-SAT's proven bound, where it solved the op-level model (a bound on every placement that
  honours the co-location groups and fits in memory; :mod:`autoplace.placers.cpsat`);
* ``best`` — the largest of these.

They bound the *simulated* step. A measured step is not bounded by them: a gap is reported only
against simulated steps.
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
    cp_sat: float | None = None  #: CP-SAT's proven bound, when it solved the op-level model

    @property
    def best(self) -> float:
        return max(self.critical_path, self.load, self.cp_sat or 0.0)

    def gap(self, step_time: float) -> float:
        """How far ``step_time`` is above the best bound, as a fraction (0 = provably optimal)."""
        return step_time / self.best - 1.0 if self.best > 0 else float("nan")


def lower_bounds(graph: Graph, cluster: Cluster, op_times: np.ndarray | None = None) -> Bounds:
    """The critical-path and load bounds of ``graph`` on ``cluster`` (``op_times``: the simulator's alone
    times, default the cost model; loaded costs are folded in by :func:`fastest_op_times`)."""
    fastest = fastest_op_times(graph, cluster, op_times)
    return Bounds(critical_path=graph.longest_path(fastest),
                  load=float(fastest.sum() / cluster.concurrency.sum()))
