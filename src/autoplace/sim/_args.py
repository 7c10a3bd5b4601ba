"""The simulator loops' arguments, named once: four structs.

Both loops (the numba kernel ``_kernel.simulate`` and the C ``ap_simulate``) take a batch of placements and
their schedules, the op times, and four structs: the graph (:class:`GraphArrays`), the cluster
(:class:`ClusterArrays`), the timeline they write (:class:`TraceArrays`) and the per-placement outputs
(:class:`RowArrays`). numba takes the named tuples as they are; the C loop takes C structs with the same
fields in the same order (sizes as 64-bit integers, arrays as pointers to their data of the type
:data:`C_TYPES` names), which ``_cbackend`` builds with ctypes. The C build lists its structs' fields with
their types (``ap_struct_fields``) and is refused when they differ from :data:`C_LISTING`.
"""

from __future__ import annotations

from typing import NamedTuple, get_type_hints

import numpy as np

__all__ = ["GraphArrays", "ClusterArrays", "TraceArrays", "RowArrays", "STRUCTS", "C_TYPES", "C_LISTING", "COMM"]

#: ``spos`` of a communication op (a collective's step, run by the communication library: never queued)
COMM = -2


class GraphArrays(NamedTuple):
    """The graph as the loops read it (index arrays int32 where ``Simulator`` says so)."""

    n_ops: int
    n_tensors: int
    n_pairs: int                  #: (tensor, reader) pairs: the graph's edges
    order: np.ndarray             #: a topological order of the ops
    tensor_src: np.ndarray        #: each tensor's producing op
    tensor_bytes: np.ndarray      #: each tensor's bytes (what a transfer moves)
    tensor_alloc: np.ndarray      #: what it allocates on its device (0 for a view)
    tensor_out: np.ndarray        #: its output index (-1: a control edge)
    op_tensor_ptr: np.ndarray     #: an op's tensors: ``op_tensor_ptr[i]:op_tensor_ptr[i+1]``
    tensor_pair_ptr: np.ndarray   #: a tensor's (tensor, reader) pairs
    pair_op: np.ndarray           #: each pair's reader
    pair_tensor: np.ndarray       #: each pair's tensor
    in_ptr: np.ndarray            #: an op's input pairs: ``in_pair[in_ptr[i]:in_ptr[i+1]]``
    in_pair: np.ndarray
    out_alloc_total: np.ndarray   #: what an op's outputs allocate when it starts
    unconsumed_alloc: np.ndarray  #: what of it no reader holds (freed when the op ends)
    param_bytes: np.ndarray       #: resident bytes per op (parameters, optimizer state)
    alias_pair: np.ndarray        #: a view's aliased input pair (-1: none)
    op_pair_ptr: np.ndarray       #: an op's first pair (``tensor_pair_ptr[op_tensor_ptr]``)
    op_group: np.ndarray          #: each op's launch group (-1: none)
    group_launch: np.ndarray      #: ``[groups, devices]`` launches a group pays per device


class ClusterArrays(NamedTuple):
    """The cluster as the loops read it."""

    n_devices: int
    n_segments: int
    n_launchers: int              #: host threads that launch asynchronous devices' ops
    bandwidth: np.ndarray         #: ``[D, D]`` bytes/s
    latency: np.ndarray           #: ``[D, D]`` seconds
    overhead: np.ndarray          #: ``[D, D]`` a copy's submit overhead, seconds
    route_ptr: np.ndarray         #: a link's segments: ``route_seg[route_ptr[l]:route_ptr[l+1]]``
    route_seg: np.ndarray
    seg_bw: np.ndarray            #: each segment's bytes/s
    send_cap: np.ndarray          #: send engines per device (0: none)
    recv_cap: np.ndarray          #: receive engines per device (0: none)
    concurrency: np.ndarray       #: ops a device runs at once
    launcher: np.ndarray          #: each device's launcher thread (-1: synchronous)
    launch_cost: np.ndarray       #: each device's per-op launch/overhead, seconds
    qdepth: np.ndarray            #: each device's launch queue depth


class TraceArrays(NamedTuple):
    """A run's timeline: scratch every row of a call writes (the last row's is left in it)."""

    start: np.ndarray             #: ``[n]`` each op's (kernel's) start
    finish: np.ndarray            #: ``[n]`` its end
    lstart: np.ndarray            #: ``[n]`` its launch's start (its start on a synchronous device)
    xf_tensor: np.ndarray         #: ``[P]`` each transfer's tensor (room for one per pair)
    xf_src: np.ndarray
    xf_dst: np.ndarray
    xf_start: np.ndarray          #: when it started moving
    xf_end: np.ndarray            #: when it moved its last byte
    xf_land: np.ndarray           #: when it landed (a latency later)


class RowArrays(NamedTuple):
    """Per-placement outputs with a leading row axis (zeroed where the loops add to them)."""

    step_time: np.ndarray         #: ``[B]``
    busy_time: np.ndarray         #: ``[B, D]`` seconds each device computed
    host_time: np.ndarray         #: ``[B, D]`` seconds its launcher spent on it
    peak: np.ndarray              #: ``[B, D]`` peak bytes
    link_time: np.ndarray         #: ``[B, D, D]`` seconds each link moved data
    link_bytes: np.ndarray        #: ``[B, D, D]``
    seg_time: np.ndarray          #: ``[B, S]`` seconds each shared segment carried a transfer
    n_transfers: np.ndarray       #: ``[B]``
    n_finished: np.ndarray        #: ``[B]`` ops finished (``n`` unless the loop stalled)


#: the C structs' names in ``ap_struct_fields``, and the named tuples whose fields they hold
STRUCTS = {"graph": GraphArrays, "cluster": ClusterArrays, "trace": TraceArrays, "rows": RowArrays}

#: the element type of each array the C loop reads as ``i32`` or ``double``; every other array, and every
#: size, is ``i64`` (``Simulator`` builds the arrays with these dtypes)
C_TYPES = {
    **dict.fromkeys(("op_tensor_ptr", "tensor_pair_ptr", "pair_op", "in_ptr", "in_pair", "alias_pair", "op_pair_ptr",
                     "op_group"), "i32"),
    **dict.fromkeys(("bandwidth", "latency", "overhead", "seg_bw", "launch_cost", "start", "finish", "lstart",
                     "xf_start", "xf_end", "xf_land", "step_time", "busy_time", "host_time", "link_time", "seg_time"),
                    "double")}


def c_fields(nt: type) -> list[str]:
    """``nt``'s fields as the C struct declares them: ``"i64 n_ops"``, ``"i32* op_tensor_ptr"``."""
    hints = get_type_hints(nt)
    return [f"{C_TYPES.get(f, 'i64')}{'' if hints[f] is int else '*'} {f}" for f in nt._fields]


#: what the C build's ``ap_struct_fields`` returns: each struct's fields with their C types
C_LISTING = ";".join(f"{name}:{','.join(c_fields(nt))}" for name, nt in STRUCTS.items())
