"""Cost model: how long each op takes on each device.

Op time on a device (whitepaper §3.2.1 "cost model"):

1. the graph's measured ``cost`` for that device, looked up by device name, then by device type
   (case-insensitive) — a measured time is the whole time, no overhead is added;
2. otherwise a roofline estimate (Williams et al. 2009) at the device's achievable rates (a large GEMM's
   FLOP/s and a STREAM-style copy's bytes/s; the vendor peaks where a device gives none)::

       t = op_overhead_s + max(flops / achievable_flops, bytes_touched / achievable_bandwidth)

   where ``bytes_touched`` is the op's explicit ``bytes_touched`` field, else its input plus output
   bytes.

An op whose ``device_types`` exclude a device's type cannot run there: its time is ``inf`` and
:func:`feasible_devices` is False. Unless measured, an op of type ``hyperparameter`` (a captured step's
learning-rate input: a scalar already on its device when the step starts, read by no kernel of its own)
takes no time.
"""

from __future__ import annotations

import numpy as np

from autoplace.cluster import Cluster
from autoplace.collectives import COMMUNICATION_TYPES
from autoplace.errors import InfeasibleError, PlacementError
from autoplace.graph import Graph, OpRole

__all__ = ["feasible_devices", "check_device_types", "op_time_matrix", "least_op_times", "fastest_op_times",
           "check_runnable", "launch_times", "device_times", "group_launch_matrix"]


def feasible_devices(graph: Graph, cluster: Cluster) -> np.ndarray:
    """Boolean ``[n_ops, n_devices]``: may op ``i`` run on device ``d`` (its ``device_types``)."""
    kinds = np.array([d.kind for d in cluster.devices])
    ok = np.ones((graph.n_ops, cluster.n_devices), dtype=bool)
    for i, op in enumerate(graph.ops):
        if op.device_types is not None:
            allowed = {t.lower() for t in op.device_types}
            ok[i] = [k in allowed for k in kinds]
    return ok


def check_device_types(graph: Graph, cluster: Cluster, devs: np.ndarray, ok: np.ndarray | None = None) -> None:
    """Raise :class:`PlacementError` naming the first op that ``devs`` (a device index per op, or ``[B,
    n_ops]`` rows of them) puts on a device its ``device_types`` exclude. ``ok``: :func:`feasible_devices`,
    if already computed."""
    ok = feasible_devices(graph, cluster) if ok is None else ok
    rows = np.atleast_2d(devs)
    bad = ~np.take_along_axis(ok.T, rows, axis=0)
    if bad.any():
        i = int(np.argwhere(bad)[0][1])
        op, dev = graph.ops[i], cluster.devices[int(rows[np.argwhere(bad)[0][0], i])]
        raise PlacementError(f"op {op.name!r} cannot run on {dev.name!r} (type {dev.type}); "
                             f"allowed types: {', '.join(op.device_types or ())}")


LOADED = "|loaded"  #: suffix of ``cost`` keys measured with the host's other devices busy


def op_time_matrix(graph: Graph, cluster: Cluster, *, loaded: bool = False) -> np.ndarray:
    """Seconds ``[n_ops, n_devices]`` for every op on every device; ``inf`` where it cannot run.

    ``loaded=True`` prefers costs measured while the other devices of the host were busy
    (``cost["cpu|loaded"]``, written by ``autoplace profile``) and falls back to the plain ones."""
    roofline = np.maximum(graph.flops[:, None] / cluster.achievable_flops[None, :],
                          graph.bytes_touched[:, None] / cluster.achievable_bandwidth[None, :])
    times = roofline + cluster.op_overhead[None, :]
    # a hyperparameter is a value, a collective runs in the communication library (its steps are transfers)
    free = [i for i, op in enumerate(graph.ops) if op.type == OpRole.HYPERPARAMETER or op.type in COMMUNICATION_TYPES]
    times[free] = 0.0
    names = [d.name for d in cluster.devices]
    kinds = [d.kind for d in cluster.devices]
    for i, op in enumerate(graph.ops):
        if op.cost:
            lowered = {k.lower(): float(v) for k, v in op.cost.items()}
            for d, (name, kind) in enumerate(zip(names, kinds)):
                for key in ((name + LOADED, kind + LOADED) if loaded else ()) + (name, kind):
                    if key in lowered:
                        times[i, d] = lowered[key]
                        break
    times[~feasible_devices(graph, cluster)] = np.inf
    return times


def check_runnable(graph: Graph, cluster: Cluster, times: np.ndarray | None = None) -> None:
    """Raise :class:`InfeasibleError` naming the first op no device of ``cluster`` can run, or the first
    co-location group no single device can run whole."""
    times = op_time_matrix(graph, cluster) if times is None else times
    ok = np.isfinite(times)
    bad = np.flatnonzero(~ok.any(axis=1))
    if len(bad):
        op = graph.ops[int(bad[0])]
        raise InfeasibleError(
            f"op {op.name!r} needs a device of type {'/'.join(op.device_types or ())} but cluster "
            f"{cluster.name!r} has none ({len(bad)} such op(s))")
    for name, members in graph.colocation_groups().items():
        if not ok[members].all(axis=0).any():
            kinds = sorted({t for i in members.tolist() for t in (graph.ops[i].device_types or ())})
            raise InfeasibleError(f"no device of cluster {cluster.name!r} can run all of co-location group "
                                  f"{name!r} (its ops need {' and '.join(kinds) or 'different devices'})")


def least_op_times(graph: Graph, cluster: Cluster, times: np.ndarray | None = None) -> np.ndarray:
    """``[n_ops, n_devices]``: the least time each op can take on each device under any contention — the
    smaller of its alone cost (``times``, default the cost model) and its loaded cost where it has one, less
    what its launcher or launch group pays (:func:`device_times`).
    Profiling can measure an op faster with the host's other cores busy, and the simulator blends the two
    (docs/algorithms.md, Simulator step 7), so bounds must start from the smaller."""
    times = op_time_matrix(graph, cluster) if times is None else times
    if any(k.endswith(LOADED) for op in graph.ops if op.cost for k in op.cost):
        times = np.minimum(times, op_time_matrix(graph, cluster, loaded=True))
    return device_times(graph, cluster, times)


def launch_times(graph: Graph, cluster: Cluster, times: np.ndarray) -> np.ndarray:
    """``[n_ops, n_devices]``: the part of each op's time that is its launch or dispatch overhead,
    ``min(op_overhead_s, time)`` — on an asynchronous device its launcher's share, which overlaps earlier
    kernels; for an op of a launch group, the share a group launch on that device replaces."""
    return np.minimum(cluster.op_overhead[None, :], times)


def group_launch_matrix(graph: Graph, cluster: Cluster) -> np.ndarray:
    """``[n_groups, n_devices]`` int64: the launches each launch group takes on each device it runs on (its
    ``group_launches``), 0 where the group does not apply (a device type outside its
    ``group_device_types``: a foreach update left at PyTorch's default runs per parameter on a CPU)."""
    kinds = np.array([d.kind for d in cluster.devices])
    out = np.zeros((len(graph.launch_groups), cluster.n_devices), dtype=np.int64)
    for g, types in enumerate(graph.group_device_types):
        applies = np.ones(cluster.n_devices, bool) if types is None else np.isin(kinds, [t.lower() for t in types])
        out[g, applies] = graph.group_launches[g]
    return out


def device_times(graph: Graph, cluster: Cluster, times: np.ndarray) -> np.ndarray:
    """``times`` less what the device itself need not spend: the launch on an asynchronous device (its
    launcher pays it, overlapping earlier kernels), and for an op of a launch group the per-op overhead
    (the group pays its launches once per device). What a bound may charge an op on each device."""
    lean = np.zeros(times.shape, dtype=bool)
    lean[:, cluster.launcher >= 0] = True
    grouped = graph.op_group >= 0
    if grouped.any():
        lean[grouped] |= group_launch_matrix(graph, cluster)[graph.op_group[grouped]] > 0
    if not lean.any():
        return times
    with np.errstate(invalid="ignore"):
        return np.where(lean, times - launch_times(graph, cluster, times), times)


def fastest_op_times(graph: Graph, cluster: Cluster, times: np.ndarray | None = None) -> np.ndarray:
    """Each op's least time on its fastest feasible device (:func:`least_op_times`): the weights of the
    critical-path and load bounds."""
    return least_op_times(graph, cluster, times).min(axis=1)
