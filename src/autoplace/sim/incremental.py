"""Incremental simulation (FlexFlow's delta simulation, exact): placements near a recorded one, each simulated
from the first event its moves can change (:class:`Incremental`; :meth:`Simulator.incremental`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import autoplace.sim._cbackend as _cbackend
from autoplace.errors import PlacementError
from autoplace.placement import Placement
from autoplace.sim.results import BatchResult, Outputs, placement_array

__all__ = ["Incremental", "SNAPSHOT_BYTES"]


#: an incremental recording's snapshots take about this many bytes at most, beside the transfers in flight
#: (32 snapshots for graphs of up to about 100k ops, 4 for a 1M-op DAG)
SNAPSHOT_BYTES = 2**26


class Incremental:
    """Placements near one recorded placement, each simulated from the first event its moves can change
    (FlexFlow's delta simulation, exact): ``Incremental(sim, placement).run_batch(placements)`` gives what
    ``sim.run_batch(placements)`` gives, bit for bit.

    The recorded run keeps up to ``snapshots`` snapshots of its state between events (evenly spread; by
    default 32, fewer where they would take over :data:`SNAPSHOT_BYTES`; at least 2) and,
    per op, the first event that reads its device (a delivery from one of its producers). A placement that
    moves a set of ops restores the latest snapshot before the first of those events, moves the ops (their
    parameters, resident from the start, shift each device's memory so far by a constant) and runs the loop
    on: the events before are the recorded run's (a placement whose snapshot would spare less than a quarter
    of the recorded run's events runs from the start). A move late in the step re-simulates little of it; one of
    an op that reads nothing (a parameter, an input) runs from the start. Memory: per snapshot about 4 bytes
    per op, tensor and transfer issued so far, plus the transfers in flight; beside them a work space and
    copies of what a run writes once (tens of bytes per op and edge).

    Where :attr:`Simulator.incremental_exact` is false (the numba loop; collectives, exchange charges or host
    contention), every placement runs from the start. No schedules: placements are arrays of device
    indices. ``sim``: the :class:`~autoplace.sim.Simulator` whose graph and cluster these are; ``result`` is the
    recorded placement's :class:`BatchResult`."""

    def __init__(self, sim: Any, placement: Placement | np.ndarray | Sequence[int], *,
                 snapshots: int | None = None):
        self._handle = None
        if snapshots is not None and (isinstance(snapshots, bool) or not isinstance(snapshots, (int, np.integer))
                                      or not 2 <= snapshots <= 1 << 20):
            raise ValueError(f"snapshots must be an integer in [2, 1048576], got {snapshots!r}")
        self.sim, self._snapshots = sim, snapshots
        self.placement = self._placement(placement)
        if not sim.incremental_exact:
            self.result = sim.run_batch(self.placement[None, :])
            return
        g, c = sim.graph, sim.cluster
        n, D, P, S = g.n_ops, c.n_devices, g.n_edges, len(c.segments)
        out = Outputs(1, n, D, P, S)
        if snapshots is None:   # about 4 bytes per op, tensor and transfer each: at most SNAPSHOT_BYTES in all
            snapshots = max(2, min(32, SNAPSHOT_BYTES // (4 * (n + g.n_tensors + P))))
        self._handle = _cbackend.record(int(snapshots), self.placement, sim.op_times, sim._graph_args,
                                        sim._cluster_args, out.trace, out.rows)
        self.result = self._result(out, self.placement[None, :])

    def _placement(self, placement: Placement | np.ndarray | Sequence[int]) -> np.ndarray:
        if isinstance(placement, Placement) and placement.schedule is not None:
            raise PlacementError("incremental simulation runs placements without a schedule")
        return np.ascontiguousarray(self.sim.as_array(placement), dtype=np.int64)

    def reset(self, placement: Placement | np.ndarray | Sequence[int]) -> None:
        """Record ``placement`` instead (the memory of the last recording reused)."""
        if self._handle is None:
            self.__init__(self.sim, placement, snapshots=self._snapshots)
            return
        sim = self.sim
        self.placement = self._placement(placement)
        out = Outputs(1, sim.graph.n_ops, sim.cluster.n_devices, 0, len(sim.cluster.segments), timeline=False)
        _cbackend.rerecord(self._handle, self.placement, out.rows)
        self.result = self._result(out, self.placement[None, :])

    def run_batch(self, placements: np.ndarray | Sequence[int]) -> BatchResult:
        """Simulate ``[B, n_ops]`` device indices: exactly ``Simulator.run_batch``'s result."""
        devs = placement_array(placements)
        if devs.ndim == 1:
            devs = devs[None, :]
        if self._handle is None:
            return self.sim.run_batch(devs)
        sim = self.sim
        sim._check_array(devs)
        B, n = devs.shape
        D, S = sim.cluster.n_devices, len(sim.cluster.segments)
        out = Outputs(B, n, D, 0, S, timeline=False)
        _cbackend.run_recorded(self._handle, devs, out.rows)
        return self._result(out, devs)

    def _result(self, out: Outputs, devs: np.ndarray) -> BatchResult:
        """The rows' :class:`BatchResult`, once every row has run every op."""
        self.sim._check_done(out.rows.n_finished, devs.shape[1], devs, np.full(devs.shape, -1, np.int64), None)
        return out.batch(self.sim.cluster)

    def close(self) -> None:
        """Free the recorded run (also done when the object is collected)."""
        if self._handle is not None:
            _cbackend.free_recorded(self._handle)
            self._handle = None

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()

    def __enter__(self) -> Incremental:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
