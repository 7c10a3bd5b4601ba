"""The simulator loops' arguments, named once.

Both loops (the numba kernel ``_kernel.simulate_one`` and the C ``ap_simulate``) take the graph's and the
cluster's arrays in the order of :class:`GraphArrays` and :class:`ClusterArrays`; :class:`Simulator`
builds them by name. The C build states its argument list (``ap_arg_names``) and is refused when it differs
from :data:`C_ARRAYS`; ``tests/test_sim_backends.py`` holds the numba kernel's parameters to the same names.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["GraphArrays", "ClusterArrays", "C_ARRAYS", "COMM"]

#: ``spos`` of a communication op (a collective's step, run by the communication library: never queued)
COMM = -2


class GraphArrays(NamedTuple):
    """The graph as the loops read it (index arrays int32 where ``Simulator`` says so)."""

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


#: ``ap_simulate``'s array arguments, in order (after the sizes ``B, n, T, P, D, S, H``)
C_ARRAYS = ("devs", "spos", "optime", *GraphArrays._fields, *ClusterArrays._fields,
            "start", "finish", "lstart", "step_time", "busy_time", "host_time", "peak", "link_time", "link_bytes",
            "seg_time", "n_transfers", "xf_tensor", "xf_src", "xf_dst", "xf_start", "xf_end", "xf_land",
            "n_finished")
