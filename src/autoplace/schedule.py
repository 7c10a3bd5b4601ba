"""Schedules: the order in which each device runs its ops.

Without a schedule a device runs its ops in the order they become ready (first in, first out). A
*schedule* gives the ops of the devices it orders a priority (every op of such a device; the other devices'
ops have :data:`NO_SCHEDULE` and stay in ready order); each ordered device then runs its ops strictly in
the order of ``(priority, topological rank)``: an op that is ready waits until every op before it on its device has
started (a GPU's launcher launches in that order). That is how pipeline runtimes run a schedule
(``torch.distributed.pipelining``, DeepSpeed, Megatron: each stage runs a list of actions) and what lets a
placement say GPipe or 1F1B.

A schedule can deadlock (a device's next op waits for an op that its own device or another runs later):
:func:`deadlock` finds out, and :func:`linearize` gives an order in which all ops can run (the runtime
orders messages by it). The pipeline schedules built here never deadlock for a split into contiguous
stages.

Pipeline schedules over ``S`` stages and ``M`` micro-batches (the graph captured with ``micro_batches=M``:
ops carry ``meta["micro_batch"]``), as each stage's list of actions, ``F m`` (micro-batch ``m``'s forward)
and ``B m`` (its backward):

* ``gpipe`` (Huang et al. 2019): every stage runs ``F 0 .. F M-1`` then ``B 0 .. B M-1``; a uniform
  pipeline idles ``(S - 1) / (M + S - 1)`` of the step, and stage 0 holds ``M`` micro-batches' activations.
* ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's non-interleaved schedule): stage ``s``
  runs ``min(S - 1 - s, M)`` forwards, then alternates one forward and one backward, then the remaining
  backwards: the same idle share, and at most ``S - s`` micro-batches in flight on stage ``s``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from autoplace.errors import PlacementError
from autoplace.graph import Graph, Phase, Vocabulary

__all__ = ["PipelineSchedule", "Action", "FORWARD", "BACKWARD", "SCHEDULES", "NO_SCHEDULE", "positions", "linearize",
           "deadlock", "runnable_priorities", "stage_actions", "pipeline_priorities", "micro_batches"]



class PipelineSchedule(Vocabulary):
    """The order a pipeline stage runs its micro-batches' passes in: GPipe's (every forward, then every
    backward) or 1F1B's (PipeDream-Flush: a warm-up of forwards, then one forward and one backward in turn)."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"


SCHEDULES = tuple(PipelineSchedule)


class Action(NamedTuple):
    """One pass a pipeline stage runs: ``kind`` :data:`FORWARD` or :data:`BACKWARD` of micro-batch
    ``micro_batch``."""

    kind: str
    micro_batch: int


FORWARD, BACKWARD = "F", "B"  #: an :class:`Action`'s kinds
NO_SCHEDULE = np.iinfo(np.int64).min  #: the priority of an op on a device the schedule leaves in ready order


def _check_devices(graph: Graph, dev: np.ndarray, priority: np.ndarray, names) -> np.ndarray:
    """Which ops the schedule orders (a device's ops all or none: a :class:`PlacementError` naming one left
    out otherwise)."""
    sched = priority != NO_SCHEDULE
    mixed = np.flatnonzero(np.bincount(dev, weights=sched, minlength=len(names)) % np.maximum(
        np.bincount(dev, minlength=len(names)), 1) != 0)
    if len(mixed):
        d = int(mixed[0])
        left = int(np.flatnonzero((dev == d) & ~sched)[0])
        raise PlacementError(f"the schedule orders some of device {names[d]}'s ops but not all: op "
                             f"{graph.ops[left].name!r} has no priority")
    return sched


def positions(graph: Graph, dev: np.ndarray, priority: np.ndarray, n_devices: int,
              names: Sequence[str] | None = None) -> np.ndarray:
    """Each op's place in its device's order (0 first): the device's ops sorted by (priority, topological
    rank); -1 on the devices the schedule leaves in ready order (their ops' priority :data:`NO_SCHEDULE`)."""
    sched = _check_devices(graph, dev, priority, names or [str(d) for d in range(n_devices)])
    order = np.lexsort((graph.rank, priority, dev))
    first = np.concatenate([[0], np.cumsum(np.bincount(dev, minlength=n_devices))[:-1]])
    out = np.empty(len(dev), np.int64)
    out[order] = np.arange(len(dev)) - first[dev[order]]
    out[~sched] = -1
    return out


def _runs_after(graph: Graph, dev: np.ndarray, priority: np.ndarray) -> tuple:
    """The "runs after" edges of a schedule: data edges and, on each ordered device, each op after the one
    before it; ``(src, dst, sequence pairs)``."""
    order = np.lexsort((graph.rank, priority, dev))
    ordered = priority != NO_SCHEDULE
    same = (dev[order[1:]] == dev[order[:-1]]) & ordered[order[1:]]
    seq_src, seq_dst = order[:-1][same], order[1:][same]
    src = np.concatenate([graph.tensor_src[graph.pair_tensor], seq_src])
    dst = np.concatenate([graph.pair_op, seq_dst])
    keep = src != dst
    return src[keep], dst[keep], (seq_src, seq_dst)


def linearize(graph: Graph, dev: np.ndarray, priority: np.ndarray,
              extra: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One order in which every op can run under the schedule (its inputs, the op before it on its device
    and the ``extra`` edges' sources first; ties to the lower topological rank): ``(place of each op in it,
    in-degrees left)`` — an op left with in-degree above 0 never runs (the schedule deadlocks) and has
    place -1."""

    n = graph.n_ops
    src, dst, _ = _runs_after(graph, dev, priority)
    if extra is not None:
        src, dst = np.concatenate([src, extra[0]]), np.concatenate([dst, extra[1]])
    indeg = np.bincount(dst, minlength=n)
    by = np.argsort(src, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).tolist()
    nxt = dst[by].tolist()
    rank = graph.rank.tolist()
    left = indeg.tolist()
    heap = [(rank[i], i) for i in np.flatnonzero(indeg == 0).tolist()]
    heapq.heapify(heap)
    place = np.full(n, -1, np.int64)
    k = 0
    while heap:
        _, u = heapq.heappop(heap)
        place[u] = k
        k += 1
        for v in nxt[ptr[u]:ptr[u + 1]]:
            left[v] -= 1
            if left[v] == 0:
                heapq.heappush(heap, (rank[v], v))
    return place, np.asarray(left)


def deadlock(graph: Graph, dev: np.ndarray, priority: np.ndarray) -> str | None:
    """Why the schedule cannot run, or None when it can: every op's inputs and the op before it on its device
    must be able to run before it (the graph with those "runs after" edges added has no cycle)."""
    n = graph.n_ops
    place, left = linearize(graph, dev, priority)
    if (place >= 0).all():
        return None
    src, dst, (seq_src, seq_dst) = _runs_after(graph, dev, priority)
    # walk back from a stuck op through stuck predecessors until an op repeats: that loop is a cycle
    stuck = left > 0
    back = np.argsort(dst, kind="stable")
    bptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
    prev = src[back]
    seen: dict[int, int] = {}
    path: list[int] = []
    u = int(np.flatnonzero(stuck)[0])
    while u not in seen:
        seen[u] = len(path)
        path.append(u)
        u = next(int(p) for p in prev[bptr[u]:bptr[u + 1]] if stuck[p])
    cycle = path[seen[u]:][::-1]            # in "runs before" order, closing back on its first op
    seq = set(zip(seq_src.tolist(), seq_dst.tolist()))
    names = [op.name for op in graph.ops]
    loop = " -> ".join(names[i] for i in cycle[:6]) + (" -> ..." if len(cycle) > 6 else f" -> {names[cycle[0]]}")
    a, b = next(((a, b) for a, b in zip(cycle, cycle[1:] + cycle[:1]) if (a, b) not in seq), (cycle[-1], cycle[0]))
    return (f"the schedule deadlocks: op {names[b]!r} needs op {names[a]!r}, which cannot run before "
            f"it in the devices' orders ({loop}; {int(stuck.sum())} ops never run)")


def runnable_priorities(graph: Graph, dev: np.ndarray, placement, names: Sequence[str] | None = None
                        ) -> np.ndarray | None:
    """``placement``'s schedule as priorities per op (None: it has none), checked not to deadlock under
    device indices ``dev`` (a :class:`PlacementError` saying why otherwise)."""
    prio = placement.priorities(graph)
    if prio is not None:
        n_devices = len(names) if names is not None else int(dev.max()) + 1 if len(dev) else 0
        positions(graph, dev, prio, n_devices, names)   # a device's ops: all or none
        why = deadlock(graph, dev, prio)
        if why:
            raise PlacementError(why)
    return prio


def micro_batches(graph: Graph) -> int:
    """How many micro-batches the graph's step runs (1 when its ops carry no ``meta["micro_batch"]``)."""
    tags = [op.meta.get("micro_batch") for op in graph.ops]
    found = [m for m in tags if isinstance(m, int) and not isinstance(m, bool)]
    return max(found) + 1 if found else 1


def stage_actions(kind: str, stage: int, n_stages: int, n_micro: int) -> list[Action]:
    """Stage ``stage``'s actions under schedule ``kind``: the forward and backward :class:`Action` of each
    micro-batch, in the order it runs them."""
    if kind == PipelineSchedule.GPIPE:
        return [Action(FORWARD, m) for m in range(n_micro)] + [Action(BACKWARD, m) for m in range(n_micro)]
    if kind == PipelineSchedule.ONE_F_ONE_B:
        warm = min(n_stages - 1 - stage, n_micro)
        out = [Action(FORWARD, m) for m in range(warm)]
        for m in range(n_micro - warm):
            out += [Action(FORWARD, warm + m), Action(BACKWARD, m)]
        return out + [Action(BACKWARD, m) for m in range(n_micro - warm, n_micro)]
    raise PlacementError(f"unknown pipeline schedule {kind!r} (known: {', '.join(SCHEDULES)})")


def pipeline_priorities(graph: Graph, dev: np.ndarray, stages: Sequence[int], kind: str) -> np.ndarray:
    """Per-op priorities that run schedule ``kind`` on a pipeline whose stage ``s`` is device ``stages[s]``.

    An op of micro-batch ``m`` (``meta["micro_batch"]``) in the forward phase belongs to action ``F m`` of
    its device's stage, one in the backward phase to ``B m``; any other op (parameters, gradient sums, the
    update, the mean loss) to the latest action among its inputs' (none: before every action). Its priority
    is that action's place in its stage's list. Devices that are no stage are left in ready order
    (:data:`NO_SCHEDULE`)."""
    n_micro = micro_batches(graph)
    stage_of = {int(d): s for s, d in enumerate(stages)}
    index: dict[int, dict[Action, int]] = {
        d: {a: k for k, a in enumerate(stage_actions(kind, s, len(stages), n_micro))} for d, s in stage_of.items()}
    action: list[Action | None] = [None] * graph.n_ops
    prio = np.full(graph.n_ops, NO_SCHEDULE, np.int64)
    for i in graph.topological_order:
        op = graph.ops[i]
        d = int(dev[i])
        mine = index.get(d)
        if mine is None:
            continue
        m = op.meta.get("micro_batch")
        if isinstance(m, int) and op.phase in (Phase.FORWARD, Phase.BACKWARD):
            a: Action | None = Action(FORWARD if op.phase == Phase.FORWARD else BACKWARD, m)
        else:
            a = None
            for p in graph.predecessors(i):
                b = action[p]
                if b is not None and (a is None or mine[b] > mine[a]):
                    a = b
        action[i] = a
        prio[i] = -1 if a is None else mine[a]
    return prio
