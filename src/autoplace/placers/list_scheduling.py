"""List-scheduling placers: the whitepaper's greedy placer, HEFT, and Baechi's m-TOPO, m-ETF and m-SCT.

All five decide each op's device with a running model of what the simulator will do with their placement
(:class:`Schedule`): copies that queue for links, segments and copy engines and go to a device once; ops
that start in their device's earliest idle gap once their inputs are there; TensorFlow's co-location
(the graph's groups and gradients with their ops, :data:`GROUP_RULES`), a group fixed by its first member;
floating ops (sources, what resident state alone computes, views of these) placed with their group or
their first reader rather than at time 0; a choice cost for the work and traffic a group commits to, and
PEFT's one-step lookahead. The ``m-`` placers (Baechi, Jeon et al. 2020) keep each device's memory within
capacity — a group reserves its parameters and room for its largest output when fixed; outputs and
received copies live until their last reader is placed — and, since that count is an estimate, check the
placement by simulation and rebuild the schedule with less room where it runs out (:func:`fitting`).

Each placement's meta carries the scheduler's estimate of its step: its schedule model replayed in the
order the runtime runs ops (:func:`_replay`, ``estimated_step_time_s``), and the schedule as built in
the scheduler's own order (``decision_order_estimate_s``).
"""

from __future__ import annotations

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import op_time_matrix
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers.registry import register_placer
from autoplace.placers.schedule_model import GROUP_RULES, earliest_finish_in_order, topological_repair

__all__ = ["tf_greedy", "heft", "GROUP_RULES"]


@register_placer("tf-greedy", description="whitepaper's simulated greedy placer: each op, in topological order, "
                 "to the device where it finishes earliest counting transfers", paper="TensorFlow whitepaper §3.2.1")
def tf_greedy(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """The TensorFlow whitepaper's simulated greedy placer (§3.2.1): walk the ops in topological order and
    put each on the feasible device where it would finish earliest, in the schedule model of
    :class:`Schedule` (copies queue for links and engines; an op takes its device's earliest idle gap).
    Adapted: the whitepaper's cost model is :mod:`autoplace.cost`; the device choice also pays the choice
    cost (:meth:`Schedule.choice_cost`: a group's extra work and committed traffic, a one-step lookahead)
    and floating ops follow their readers, since the whitepaper's graphs carry TensorFlow's co-location
    of variables with their readers and gradients with their ops. No memory check. ``seed`` and
    ``budget`` are unused (deterministic). O((n + E) D) schedule probes."""
    return earliest_finish_in_order(graph, cluster, graph.topological_order, "tf-greedy", memory=False)


def _upward_rank(graph: Graph, cluster: Cluster, times: np.ndarray) -> np.ndarray:
    """HEFT's rank_u: mean op time plus the longest mean-cost path to an exit (Topcuoglu et al. 2002, eq. 8)."""
    finite = np.where(np.isfinite(times), times, np.nan)
    w = np.nanmean(finite, axis=1)
    rank = np.zeros(graph.n_ops)
    src, dst, nbytes = graph.edges()
    comm = cluster.mean_transfer_time(nbytes)
    succ: list[list[tuple[int, float]]] = [[] for _ in range(graph.n_ops)]
    for s_, d_, c in zip(src.tolist(), dst.tolist(), comm.tolist()):
        succ[s_].append((d_, c))
    for i in graph.topological_order[::-1]:
        i = int(i)
        rank[i] = w[i] + max((c + rank[j] for j, c in succ[i]), default=0.0)
    return rank


@register_placer("heft", description="HEFT: ops by decreasing upward rank, each to its earliest-finish device",
                 paper="Topcuoglu, Hariri & Wu 2002")
def heft(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """HEFT (Topcuoglu, Hariri & Wu 2002): order the ops by decreasing upward rank
    ``rank_u(i) = w̄_i + max_j (c̄_ij + rank_u(j))`` (eq. 8: mean op time over feasible devices, mean lone
    transfer time), then give each the device where it finishes earliest, with the paper's insertion
    policy (the earliest idle gap that fits), in the schedule model of :class:`Schedule`. Adapted: the
    device choice also pays the choice cost (:meth:`Schedule.choice_cost`) and floating ops follow their
    readers; ties and zero-time ops keep a topological order. No memory check. ``seed`` and ``budget``
    are unused. O((n + E) D + n log n) schedule probes."""
    rank = _upward_rank(graph, cluster, op_time_matrix(graph, cluster))
    # decreasing rank is a topological order when every op takes positive time; ties by topological rank
    order = np.lexsort((graph.rank, -rank))
    pos = np.empty(graph.n_ops, dtype=np.int64)
    pos[order] = np.arange(graph.n_ops)
    if any(pos[s] > pos[d] for s, d in zip(*graph.edges()[:2])):  # zero-time ops can break it
        order = graph.topological_order[np.argsort(-rank[graph.topological_order], kind="stable")]
        order = topological_repair(graph, order)
    return earliest_finish_in_order(graph, cluster, order, "heft", memory=False)
