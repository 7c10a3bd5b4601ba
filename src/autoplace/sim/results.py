"""What the simulator returns: a step's timeline, its result (:class:`SimResult`), a batch's results
(:class:`BatchResult`), and the arrays the loops fill (:class:`Outputs`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autoplace.cluster import Cluster
from autoplace.errors import PlacementError
from autoplace.result import StepResult
from autoplace.sim._args import RowArrays, TraceArrays

__all__ = ["Timeline", "SimResult", "BatchResult", "Outputs", "host_busy_share", "placement_array"]


@dataclass(frozen=True)
class Timeline:
    """Per-op start/finish times (of the kernel, on an asynchronous device; ``launch_start``: when its
    launch began, the start on a synchronous one) and every transfer: its tensor, source and destination
    device, when it moved (``transfer_start`` to ``transfer_end``: from taking its copy engine to its last
    byte) and when it landed (``transfer_arrival``: ``transfer_end`` plus the link's latency)."""

    start: np.ndarray
    finish: np.ndarray
    device: np.ndarray
    transfer_tensor: np.ndarray
    transfer_src: np.ndarray
    transfer_dst: np.ndarray
    transfer_start: np.ndarray
    transfer_end: np.ndarray
    transfer_arrival: np.ndarray
    launch_start: np.ndarray | None = None

    @property
    def n_transfers(self) -> int:
        return len(self.transfer_tensor)


@dataclass(frozen=True)
class SimResult(StepResult):
    """What one simulated training step of a placement costs."""

    ENV = "simulated"

    step_time: float
    device_names: tuple[str, ...]
    busy_time: np.ndarray
    peak_memory: np.ndarray
    memory_capacity: np.ndarray
    link_time: np.ndarray
    link_bytes: np.ndarray
    n_transfers: int
    timeline: Timeline | None = field(default=None, repr=False)
    segment_names: tuple[str, ...] = ()
    segment_time: np.ndarray = field(default_factory=lambda: np.zeros(0))
    host_time: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def transfer_bytes(self) -> int:
        return int(self.link_bytes.sum())

    @property
    def transfer_time(self) -> float:
        return float(self.link_time.sum())

    def _links(self) -> list[dict]:
        names = self.device_names
        return [{"src": names[s], "dst": names[d], "bytes": int(self.link_bytes[s, d]),
                 "busy_s": float(self.link_time[s, d])}
                for s, d in zip(*np.nonzero(self.link_bytes + self.link_time))]

    def to_dict(self) -> dict:
        """Plain-JSON summary (what placement files and ``--json`` carry: :meth:`StepResult.to_dict`, and
        the shared segments' busy time where the cluster has segments)."""
        out = super().to_dict()
        if self.segment_names:
            out["segments"] = [{"name": n, "busy_s": float(b)} for n, b in zip(self.segment_names, self.segment_time)]
        return out


@dataclass(frozen=True)
class BatchResult:
    """Summaries of ``B`` placements of one graph: arrays with a leading batch axis."""

    step_time: np.ndarray
    busy_time: np.ndarray
    peak_memory: np.ndarray
    memory_capacity: np.ndarray
    link_time: np.ndarray
    link_bytes: np.ndarray
    n_transfers: np.ndarray
    segment_time: np.ndarray
    host_time: np.ndarray

    @property
    def oom(self) -> np.ndarray:
        """``[B]`` bool: does placement ``b`` exceed some device's memory."""
        return (self.peak_memory > self.memory_capacity[None, :]).any(axis=1)

    def __len__(self) -> int:
        return len(self.step_time)


class Outputs:
    """The loops' output structs for ``B`` rows: ``rows`` (:class:`RowArrays`) and ``trace``
    (:class:`TraceArrays`, the last row's timeline; ``None`` where none is kept)."""

    def __init__(self, B: int, n: int, D: int, P: int, S: int, *, timeline: bool = True):
        self.rows = RowArrays(
            step_time=np.zeros(B), busy_time=np.zeros((B, D)), host_time=np.zeros((B, D)),
            peak=np.zeros((B, D), np.int64), link_time=np.zeros((B, D, D)), link_bytes=np.zeros((B, D, D), np.int64),
            seg_time=np.zeros((B, S)), n_transfers=np.zeros(B, np.int64), n_finished=np.zeros(B, np.int64))
        self.trace = TraceArrays(
            start=np.empty(n), finish=np.empty(n), lstart=np.empty(n), xf_tensor=np.empty(P, np.int64),
            xf_src=np.empty(P, np.int64), xf_dst=np.empty(P, np.int64), xf_start=np.empty(P), xf_end=np.empty(P),
            xf_land=np.empty(P)) if timeline else None

    def timeline(self, device: np.ndarray) -> Timeline:
        """The last row's :class:`Timeline` (``device``: its placement)."""
        tr = self.trace
        k = int(self.rows.n_transfers[-1]) if len(self.rows.n_transfers) else 0
        return Timeline(tr.start, tr.finish, device, tr.xf_tensor[:k], tr.xf_src[:k], tr.xf_dst[:k],
                        tr.xf_start[:k], tr.xf_end[:k], tr.xf_land[:k], tr.lstart)

    def batch(self, cluster: Cluster) -> BatchResult:
        r = self.rows
        return BatchResult(r.step_time, r.busy_time, r.peak, cluster.memory_bytes.copy(), r.link_time, r.link_bytes,
                           r.n_transfers, r.seg_time, r.host_time)


def _busy_curve(start: np.ndarray, finish: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A device's cumulative busy time as a piecewise-linear curve ``(times, busy so far)`` for
    :func:`numpy.interp`, from its ops' run intervals (overlapping ones merged)."""
    keep = finish > start
    order = np.argsort(start[keep], kind="stable")
    s, f = start[keep][order], finish[keep][order]
    if not len(s):
        return np.zeros(1), np.zeros(1)
    reach = np.maximum.accumulate(f)
    first = np.ones(len(s), dtype=bool)
    first[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(first)
    lo, hi = s[idx], reach[np.r_[idx[1:] - 1, len(s) - 1]]
    total = np.concatenate([[0.0], np.cumsum(hi - lo)])
    x, y = np.empty(2 * len(lo)), np.empty(2 * len(lo))
    x[0::2], x[1::2], y[0::2], y[1::2] = lo, hi, total[:-1], total[1:]
    return x, y


def host_busy_share(start: np.ndarray, finish: np.ndarray, dev: np.ndarray, shares_host: np.ndarray) -> np.ndarray:
    """Per op, the share of its run ``[start, finish)`` during which the other devices of its host were busy
    (summed over them, at most 1; 0 for an op that takes no time)."""
    over = np.zeros(len(dev))
    for e in np.flatnonzero(shares_host.any(axis=0)):
        x, y = _busy_curve(start[dev == e], finish[dev == e])
        sel = shares_host[dev, e]
        over[sel] += np.interp(finish[sel], x, y) - np.interp(start[sel], x, y)
    run = finish - start
    return np.minimum(1.0, np.divide(over, run, out=np.zeros_like(over), where=run > 0))


def placement_array(placement) -> np.ndarray:
    """Device indices as an int64 array; one clear error for anything that is not a Placement or integers."""
    try:
        arr = np.asarray(placement)
        if arr.dtype.kind not in "iub" and not (arr.dtype.kind == "f" and np.all(np.mod(arr, 1) == 0)):
            raise TypeError(arr.dtype)
        return np.ascontiguousarray(arr, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise PlacementError(f"a placement must be a Placement or device indices per op, got "
                             f"{type(placement).__name__}") from None
