"""The execution simulator: step time, transfers and peak memory of a placement.

The whitepaper's simulated execution with Send/Recv (§3.2.1-3.2.2), as a discrete-event simulation
(semantics in :mod:`autoplace.sim._kernel`). Entry points::

    simulate(graph, cluster, placement, trace=False) -> SimResult
    simulate_batch(graph, cluster, placements)        -> BatchResult   # many placements, one call
    Simulator(graph, cluster)                          # reuses the op-time matrix across calls

A placement with a schedule (:mod:`autoplace.schedule`) runs each device's ops in its order; arrays of
device indices take their schedules as priorities beside them (``schedule=``, ``schedules=``).

Collectives (:mod:`autoplace.collectives`) are lowered to their steps between the devices a placement gives
their participants (one lowering per distinct set of those devices, kept); the steps run as communication
ops of the loop.

A placement whose peak memory exceeds a device's capacity is a *failing placement*: reported in
``SimResult.oom_devices``, never raised.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from autoplace.cluster import Cluster
from autoplace.collectives import Lowered, groups, lower
from autoplace.cost import (
    check_device_types,
    check_runnable,
    fastest_op_times,
    group_launch_matrix,
    op_time_matrix,
)
from autoplace.errors import PlacementError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.replicas import strategy_graph
from autoplace.schedule import NO_SCHEDULE, deadlock, positions
from autoplace.sim import _cbackend
from autoplace.sim._args import COMM, ClusterArrays, GraphArrays
from autoplace.sim.incremental import Incremental
from autoplace.sim.results import BatchResult, Outputs, SimResult, Timeline, host_busy_share, placement_array

__all__ = ["Simulator", "Incremental", "SimResult", "BatchResult", "Timeline", "simulate", "simulate_batch",
           "host_busy_share", "BACKEND", "NO_SCHEDULE"]

BACKEND = _cbackend.BACKEND  # "c" (the built extension) or "numba" (the reference kernel)


class Simulator:
    """A simulator bound to one graph and cluster; the op-time matrix is computed once.

    ``op_times`` overrides the cost model (``[n_ops, n_devices]`` seconds), e.g. for calibration;
    ``time_scale`` (``[n_devices]``) multiplies each device's op times, alone and loaded alike (the
    uncertainty scenarios' host contention, :mod:`autoplace.robust`).
    """

    def __init__(self, graph: Graph, cluster: Cluster, op_times: np.ndarray | None = None, *,
                 time_scale: np.ndarray | None = None):
        self.graph = graph
        self.cluster = cluster
        self.op_times = np.ascontiguousarray(op_time_matrix(graph, cluster) if op_times is None else op_times,
                                             dtype=np.float64)
        if self.op_times.shape != (graph.n_ops, cluster.n_devices):
            raise ValueError(f"op_times has shape {self.op_times.shape}, expected "
                             f"{(graph.n_ops, cluster.n_devices)}")
        check_runnable(graph, cluster, self.op_times)
        self._all_feasible = bool(np.isfinite(self.op_times).all())
        c = cluster
        f64 = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731
        self._graph_args = _graph_arrays(graph, cluster)
        # collectives: their participants, and a lowering per distinct set of the devices placements give them
        self._collectives = groups(graph)
        self._members = (np.concatenate(list(self._collectives.values())) if self._collectives
                         else np.zeros(0, np.int64))
        self._lowered: dict[bytes, tuple[Lowered, GraphArrays]] = {}
        self._cluster_args = ClusterArrays(
            n_devices=c.n_devices, n_segments=len(c.segments), n_launchers=len(c.launcher_names),
            bandwidth=f64(c.bandwidth), latency=f64(c.latency), overhead=f64(c.overhead), route_ptr=c.route_ptr,
            route_seg=c.route_seg, seg_bw=f64(c.segment_bandwidth), send_cap=c.send_engines,
            recv_cap=c.recv_engines, concurrency=c.concurrency, launcher=c.launcher, launch_cost=f64(c.op_overhead),
            qdepth=c.launch_queue_depth)
        self._charges = bool((c.send_cost > 0).any() or (c.send_overhead > 0).any() or (c.recv_overhead > 0).any())
        # contention: devices of one host slow each other; ops profiled both ways carry it
        hosts = np.array([d.meta.get("host") or "" for d in c.devices], dtype=object)
        self._shares_host = ((hosts[:, None] == hosts[None, :]) & (hosts[:, None] != "")
                             & ~np.eye(c.n_devices, dtype=bool))
        self._loaded_times = None
        if op_times is None and self._shares_host.any() and any(
                k.endswith("|loaded") for op in graph.ops if op.cost for k in op.cost):
            self._loaded_times = op_time_matrix(graph, c, loaded=True)
        if time_scale is not None:
            scale = np.asarray(time_scale, dtype=np.float64)[None, :]
            self.op_times = np.ascontiguousarray(self.op_times * scale)
            if self._loaded_times is not None:
                self._loaded_times = self._loaded_times * scale

    # ------------------------------------------------------------------ placements as arrays
    def as_array(self, placement: Placement | np.ndarray | Sequence[int]) -> np.ndarray:
        """Device index per op, validated (range, device constraints)."""
        if isinstance(placement, Placement):
            return placement.to_array(self.graph, self.cluster)
        dev = placement_array(placement)
        self._check_array(dev[None, :] if dev.ndim == 1 else dev)
        return dev

    def _check_array(self, devs: np.ndarray) -> None:
        n, D = self.graph.n_ops, self.cluster.n_devices
        if devs.ndim != 2 or devs.shape[1] != n:
            raise PlacementError(f"placement array has shape {devs.shape[1:]}, expected ({n},) for graph "
                                 f"{self.graph.name!r}")
        if devs.size and (devs.min() < 0 or devs.max() >= D):
            raise PlacementError(f"placement array has device indices outside 0..{D - 1}")
        if not self._all_feasible:
            check_device_types(self.graph, self.cluster, devs, np.isfinite(self.op_times))

    # ------------------------------------------------------------------ evaluation
    def exchange_charges(self, dev: np.ndarray) -> np.ndarray:
        """Seconds of compute each op gains from the transfers of placement ``dev``. For every
        (tensor, destination device) transfer, the producer pays ``send_overhead_s + bytes *
        send_cost_s_per_byte`` of its device, and the tensor's first consumer (in topological order) on
        the destination pays that device's ``recv_overhead_s``."""
        g, c = self.graph, self.cluster
        D = c.n_devices
        src_op = g.tensor_src[g.pair_tensor]
        cross = np.flatnonzero(dev[src_op] != dev[g.pair_op])
        keys = g.pair_tensor[cross] * D + dev[g.pair_op[cross]]
        # one row per transfer; its first consumer is the pair with the lowest topological rank
        order = np.lexsort((g.rank[g.pair_op[cross]], keys))
        keys, consumers = keys[order], g.pair_op[cross][order]
        first = np.ones(len(keys), dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        keys, consumers = keys[first], consumers[first]
        t = keys // D
        producers = g.tensor_src[t]
        pdev = dev[producers]
        charge = np.bincount(producers, weights=c.send_overhead[pdev] + g.tensor_bytes[t] * c.send_cost[pdev],
                             minlength=g.n_ops)
        charge += np.bincount(consumers, weights=c.recv_overhead[keys % D], minlength=g.n_ops)
        return charge

    def _schedules(self, devs: np.ndarray, prios) -> np.ndarray | None:
        """``prios`` as a ``[B, n]`` int64 array shaped like ``devs`` (None stays None)."""
        if prios is None:
            return None
        arr = placement_array(prios)
        if arr.size != devs.size:
            raise PlacementError(f"schedules have shape {arr.shape}, expected {devs.shape}")
        return arr.reshape(devs.shape)

    def _positions(self, devs: np.ndarray, prios: np.ndarray | None) -> np.ndarray:
        """``[B, n]``: each op's place in its device's schedule; -1 on a device a row's schedule leaves in
        ready order."""
        spos = np.full(devs.shape, -1, np.int64)
        if prios is not None:
            for b in range(len(devs)):
                if (prios[b] != NO_SCHEDULE).any():
                    spos[b] = positions(self.graph, devs[b], prios[b], self.cluster.n_devices,
                                        self.cluster.device_names)
        return spos

    def _execute(self, devs: np.ndarray, prios: np.ndarray | None = None) -> tuple[BatchResult, Timeline]:
        """Run the event loop on every row of ``devs`` (C if built, else numba) under its schedule (``prios``,
        priorities per op; None: none); the timeline is the last row's.

        Where devices pay for their transfers (``send_cost_s_per_byte``, ``send_overhead_s``,
        ``recv_overhead_s``), each row runs with op times that include its exchange charges; where ops
        carry loaded costs and devices share a host, a second pass blends in contention."""
        prios = self._schedules(devs, prios)
        spos = self._positions(devs, prios)
        if not (self._charges or self._loaded_times is not None) or not len(devs):
            return self._execute_rows(devs, spos, self.op_times, prios)
        base = self.op_times
        rows = []
        for b, dev in enumerate(devs):
            ops = np.arange(len(dev))
            extra = self.exchange_charges(dev) if self._charges else 0.0
            times = base.copy()
            times[ops, dev] += extra
            row_prio = None if prios is None else prios[b:b + 1]
            row = self._execute_rows(dev[None, :], spos[b:b + 1], times, row_prio)
            if self._loaded_times is not None:
                # contention: an op whose host-mates were busy a share u of its run (in this first pass)
                # runs at (1 - u) * alone + u * loaded; one more pass with those times
                tl = row[1]
                u = host_busy_share(tl.start, tl.finish, dev, self._shares_host)
                times[ops, dev] = (1 - u) * base[ops, dev] + u * self._loaded_times[ops, dev] + extra
                row = self._execute_rows(dev[None, :], spos[b:b + 1], times, row_prio)
            rows.append(row)
        cat = lambda f: np.concatenate([getattr(r[0], f) for r in rows])  # noqa: E731
        return BatchResult(cat("step_time"), cat("busy_time"), cat("peak_memory"),
                           self.cluster.memory_bytes.copy(), cat("link_time"), cat("link_bytes"),
                           cat("n_transfers"), cat("segment_time"), cat("host_time")), rows[-1][1]

    def _execute_rows(self, devs: np.ndarray, spos: np.ndarray, op_times: np.ndarray,
                      prios: np.ndarray | None) -> tuple[BatchResult, Timeline]:
        if self._collectives and len(devs):
            return self._execute_lowered(devs, spos, op_times, prios)
        batch, timeline, done = self._loop(self.graph, self._graph_args, devs, spos, op_times)
        self._check_done(done, self.graph.n_ops, devs, spos, prios)
        return batch, timeline

    def lowering(self, dev: np.ndarray) -> Lowered:
        """The graph with its collectives lowered for the devices placement ``dev`` gives their participants."""
        return self._lowering(np.asarray(dev, np.int64))[0]

    def _lowering(self, dev: np.ndarray) -> tuple[Lowered, GraphArrays]:
        key = dev[self._members].tobytes()
        if key not in self._lowered:
            low = lower(self.graph, self.cluster, dev, self._collectives)
            self._lowered[key] = (low, _graph_arrays(low.graph, self.cluster))
        return self._lowered[key]

    def _execute_lowered(self, devs: np.ndarray, spos: np.ndarray, op_times: np.ndarray,
                         prios: np.ndarray | None) -> tuple[BatchResult, Timeline]:
        """Run each row on its lowering (rows whose participants sit on the same devices share one); the
        results per device are the rows', the timeline (the last row's) is mapped back to the graph's ops and
        tensors (a participant's start is its first step's)."""
        B, n = devs.shape
        keys = [devs[b, self._members].tobytes() for b in range(B)]
        order = [k for k in dict.fromkeys(keys) if k != keys[-1]] + keys[-1:]   # the last row's last: its timeline
        parts: list[tuple[list[int], BatchResult]] = []
        timeline = None
        for key in order:
            rows = [b for b in range(B) if keys[b] == key]
            low, args = self._lowering(devs[rows[0]])
            m = low.graph.n_ops
            edevs = np.ascontiguousarray(devs[rows][:, low.origin])
            espos = np.ascontiguousarray(_comm_positions(spos[rows], devs[rows], low.comm[:n], m))
            times = np.zeros((m, self.cluster.n_devices))
            times[:n] = op_times
            batch, tl, done = self._loop(low.graph, args, edevs, espos, times)
            if (done != m).any() and (spos[rows] >= 0).any():
                # the steps' ranks wait for each other: an order the graph alone allows can stall them
                raise PlacementError(f"the schedule deadlocks once the collectives' steps run between their ranks "
                                     f"({', '.join(sorted(self._collectives))[:200]}): order each device's "
                                     "collectives as every rank reaches them")
            self._check_done(done, m, devs[rows], spos[rows], None if prios is None else prios[rows])
            parts.append((rows, batch))
            start = tl.start[:n].copy()
            np.minimum.at(start, low.origin[n:], tl.start[n:])
            lstart = tl.launch_start[:n].copy()
            np.minimum.at(lstart, low.origin[n:], tl.launch_start[n:])
            timeline = Timeline(start, tl.finish[:n].copy(), devs[rows[-1]], low.tensor_origin[tl.transfer_tensor],
                                tl.transfer_src, tl.transfer_dst, tl.transfer_start, tl.transfer_end,
                                tl.transfer_arrival, lstart)
        fields = {}
        for f in ("step_time", "busy_time", "peak_memory", "link_time", "link_bytes", "n_transfers", "segment_time",
                  "host_time"):
            first = getattr(parts[0][1], f)
            arr = np.empty((B, *first.shape[1:]), first.dtype)
            for rows, batch in parts:
                arr[rows] = getattr(batch, f)
            fields[f] = arr
        return BatchResult(memory_capacity=self.cluster.memory_bytes.copy(), **fields), timeline

    def _check_done(self, done: np.ndarray, n: int, devs: np.ndarray, spos: np.ndarray,
                    prios: np.ndarray | None) -> None:
        if (done != n).any():   # every op runs in any placement of a DAG: a stall is a schedule's or a bug
            b = int(np.flatnonzero(done != n)[0])
            if (spos[b] >= 0).any():
                why = deadlock(self.graph, devs[b], prios[b])
                if why:
                    raise PlacementError(why + (f" (placement {b})" if len(devs) > 1 else ""))
            raise RuntimeError(f"the simulator stopped after {int(done[b])} of {n} ops of placement {b}")

    def _loop(self, graph: Graph, graph_args: GraphArrays, devs: np.ndarray, spos: np.ndarray,
              op_times: np.ndarray) -> tuple[BatchResult, Timeline, np.ndarray]:
        """The event loop (C if built, else numba) on every row of ``devs``; also each row's ops finished."""
        B, n = devs.shape
        D, P, S = self.cluster.n_devices, graph.n_edges, len(self.cluster.segments)
        out = Outputs(B, n, D, P, S)
        if _cbackend.BACKEND == "c":
            _cbackend.simulate(devs, spos, op_times, graph_args, self._cluster_args, out.trace, out.rows)
        else:                           # the numba kernel (numba imported here: only where the C loop is not)
            from autoplace.sim import _kernel

            _kernel.simulate(devs, spos, op_times, graph_args, self._cluster_args, out.trace, out.rows)
        timeline = out.timeline(devs[-1] if B else devs)
        return out.batch(self.cluster), timeline, out.rows.n_finished

    def run(self, placement: Placement | np.ndarray | Sequence[int], *, trace: bool = False,
            schedule: np.ndarray | Sequence[int] | None = None) -> SimResult:
        """Simulate one placement; ``trace=True`` keeps the full :class:`Timeline`. A :class:`Placement`
        brings its own schedule; for an array of device indices, ``schedule`` gives a priority per op."""
        dev = self.as_array(placement)
        if isinstance(placement, Placement):
            if schedule is not None:
                raise ValueError("a Placement brings its own schedule: pass schedule= with device indices only")
            schedule = placement.priorities(self.graph)
        batch, timeline = self._execute(dev[None, :], None if schedule is None else np.asarray(schedule)[None, :])
        return SimResult(float(batch.step_time[0]), tuple(self.cluster.device_names), batch.busy_time[0],
                         batch.peak_memory[0], batch.memory_capacity, batch.link_time[0], batch.link_bytes[0],
                         int(batch.n_transfers[0]), timeline if trace else None,
                         tuple(seg.name for seg in self.cluster.segments), batch.segment_time[0], batch.host_time[0])

    def run_batch(self, placements: np.ndarray | Sequence[Placement],
                  schedules: np.ndarray | None = None) -> BatchResult:
        """Simulate ``B`` placements (``[B, n_ops]`` device indices, or Placement objects with their own
        schedules) in one call; ``schedules``: ``[B, n_ops]`` priorities beside device indices
        (:data:`NO_SCHEDULE` on the devices a row leaves in ready order)."""
        if len(placements) and isinstance(placements[0], Placement):
            devs = np.stack([p.to_array(self.graph, self.cluster) for p in placements])
            given = [p.priorities(self.graph) for p in placements]
            if any(g is not None for g in given):
                schedules = np.stack([np.full(self.graph.n_ops, NO_SCHEDULE) if g is None else g for g in given])
        else:
            devs = placement_array(placements)
            self._check_array(devs)
        return self._execute(devs, schedules)[0]

    def incremental(self, placement: Placement | np.ndarray | Sequence[int], *,
                    snapshots: int | None = None) -> Incremental:
        """:class:`Incremental`: placements near ``placement`` simulated from the first event their moves change."""
        return Incremental(self, placement, snapshots=snapshots)

    @property
    def incremental_exact(self) -> bool:
        """Can :class:`Incremental` re-simulate from a snapshot here (the C loop built; no collectives, no
        exchange charges or host contention, whose op times depend on the whole placement)? Elsewhere it
        runs every placement from the start, with the same results."""
        return (_cbackend.BACKEND == "c" and not self._collectives and not self._charges
                and self._loaded_times is None)

    # ------------------------------------------------------------------ bounds
    def critical_path(self) -> float:
        """Longest path with every op on its fastest feasible device and free transfers."""
        return self.graph.longest_path(fastest_op_times(self.graph, self.cluster, self.op_times))


def _graph_arrays(g: Graph, c: Cluster) -> GraphArrays:
    """The graph's argument bundle for both loops (index arrays as int32: half the memory traffic)."""
    i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)  # noqa: E731
    return GraphArrays(
        n_ops=g.n_ops, n_tensors=g.n_tensors, n_pairs=g.n_edges, order=g.topological_order,
        tensor_src=g.tensor_src, tensor_bytes=g.tensor_bytes,
        tensor_alloc=g.tensor_alloc, tensor_out=g.tensor_out, op_tensor_ptr=i32(g.op_tensor_ptr),
        tensor_pair_ptr=i32(g.tensor_pair_ptr), pair_op=i32(g.pair_op), pair_tensor=g.pair_tensor,
        in_ptr=i32(g.in_ptr), in_pair=i32(g.in_pair), out_alloc_total=g.out_alloc_total,
        unconsumed_alloc=g.unconsumed_alloc, param_bytes=g.param_bytes, alias_pair=i32(g.alias_pair),
        op_pair_ptr=i32(g.tensor_pair_ptr[g.op_tensor_ptr]), op_group=i32(g.op_group),
        group_launch=np.ascontiguousarray(group_launch_matrix(g, c).ravel()))


def _comm_positions(spos: np.ndarray, devs: np.ndarray, participant: np.ndarray, m: int) -> np.ndarray:
    """``[B, m]`` loop schedules of a lowering: the communication ops :data:`COMM`; every other op keeps its
    place in its device's order among the ops that are no participant (renumbered from 0)."""
    B, n = spos.shape
    out = np.full((B, m), COMM, np.int64)
    out[:, :n] = spos
    for b in range(B):
        row = out[b, :n]
        row[participant] = COMM
        sel = np.flatnonzero((spos[b] >= 0) & ~participant)
        if len(sel) < int((spos[b] >= 0).sum()):
            order = sel[np.lexsort((spos[b, sel], devs[b, sel]))]
            d = devs[b, order]
            first = np.r_[0, np.flatnonzero(d[1:] != d[:-1]) + 1]
            rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
            row[order] = rank
    return out


def simulate(graph: Graph, cluster: Cluster, placement: Placement | np.ndarray | Sequence[int], *,
             trace: bool = False) -> SimResult:
    """Simulate one training step of ``graph`` on ``cluster`` under ``placement`` (a warning where the
    placement was made for another cluster: its device names may mean other devices here). A strategy's
    placement (``meta["strategy"]``: replicas, towers) runs the step it was made for
    (:func:`autoplace.replicas.strategy_graph`).

    Arguments:

    - ``graph``, ``cluster``: the step and the devices it runs on.
    - ``placement``: a :class:`~autoplace.placement.Placement`, or each op's device index in graph order.
    - ``trace``: also keep the full :class:`Timeline` (``result.timeline``: every op's and copy's start and
      end, for the Chrome-trace export)."""
    if isinstance(placement, Placement):
        if placement.cluster != cluster.name:

            warnings.warn(f"placement made for cluster {placement.cluster!r}, simulated on {cluster.name!r}",
                          stacklevel=2)
        graph = strategy_graph(graph, placement)
    return Simulator(graph, cluster).run(placement, trace=trace)


def simulate_batch(graph: Graph, cluster: Cluster, placements: np.ndarray | Sequence[Placement]) -> BatchResult:
    """Simulate many placements of one graph in one call (see :meth:`Simulator.run_batch`)."""
    return Simulator(graph, cluster).run_batch(placements)
