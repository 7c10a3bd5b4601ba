"""Schedules: the order in which each device runs its ops.

Without a schedule a device runs its ops in the order they become ready (first in, first out). A
*schedule* gives every op a priority; each device then runs its ops strictly in the order of
``(priority, topological rank)``: an op that is ready waits until every op before it on its device has
started (a GPU's launcher launches in that order). That is how pipeline runtimes run a schedule
(``torch.distributed.pipelining``, DeepSpeed, Megatron: each stage runs a list of actions) and what lets a
placement say GPipe or 1F1B.

A schedule can deadlock (a device's next op waits for an op that its own device or another runs later):
:func:`deadlock` finds out. The pipeline schedules built here never do for a split into contiguous stages.

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

from collections.abc import Sequence

import numpy as np

from autoplace.errors import PlacementError
from autoplace.graph import Graph

__all__ = ["SCHEDULES", "positions", "deadlock", "runnable_priorities", "stage_actions", "pipeline_priorities",
           "micro_batches"]

SCHEDULES = ("gpipe", "1f1b")


def positions(graph: Graph, dev: np.ndarray, priority: np.ndarray, n_devices: int) -> np.ndarray:
    """Each op's place in its device's order (0 first): the device's ops sorted by (priority, topological
    rank)."""
    order = np.lexsort((graph.rank, priority, dev))
    first = np.concatenate([[0], np.cumsum(np.bincount(dev, minlength=n_devices))[:-1]])
    out = np.empty(len(dev), np.int64)
    out[order] = np.arange(len(dev)) - first[dev[order]]
    return out


def deadlock(graph: Graph, dev: np.ndarray, priority: np.ndarray) -> str | None:
    """Why the schedule cannot run, or None when it can: every op's inputs and the op before it on its device
    must be able to run before it (the graph with those "runs after" edges added has no cycle)."""
    n = graph.n_ops
    order = np.lexsort((graph.rank, priority, dev))
    same = dev[order[1:]] == dev[order[:-1]]
    seq_src, seq_dst = order[:-1][same], order[1:][same]
    data_src = graph.tensor_src[graph.pair_tensor]
    src = np.concatenate([data_src, seq_src])
    dst = np.concatenate([graph.pair_op, seq_dst])
    keep = src != dst
    src, dst = src[keep], dst[keep]
    indeg = np.bincount(dst, minlength=n)
    by = np.argsort(src, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
    nxt = dst[by]
    stack = list(np.flatnonzero(indeg == 0))
    done = 0
    while stack:
        u = stack.pop()
        done += 1
        for v in nxt[ptr[u]:ptr[u + 1]]:
            indeg[v] -= 1
            if indeg[v] == 0:
                stack.append(v)
    if done == n:
        return None
    # walk back from a stuck op through stuck predecessors until an op repeats: that loop is a cycle
    stuck = indeg > 0
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


def runnable_priorities(graph: Graph, dev: np.ndarray, placement) -> np.ndarray | None:
    """``placement``'s schedule as priorities per op (None: it has none), checked not to deadlock under
    device indices ``dev`` (a :class:`PlacementError` saying why otherwise)."""
    prio = placement.priorities(graph)
    if prio is not None:
        why = deadlock(graph, dev, prio)
        if why:
            raise PlacementError(why)
    return prio


def micro_batches(graph: Graph) -> int:
    """How many micro-batches the graph's step runs (1 when its ops carry no ``meta["micro_batch"]``)."""
    tags = [op.meta.get("micro_batch") for op in graph.ops]
    found = [m for m in tags if isinstance(m, int) and not isinstance(m, bool)]
    return max(found) + 1 if found else 1


def stage_actions(kind: str, stage: int, n_stages: int, n_micro: int) -> list[tuple[str, int]]:
    """Stage ``stage``'s actions under schedule ``kind``: ``("F", m)`` and ``("B", m)`` in the order it runs them."""
    if kind == "gpipe":
        return [("F", m) for m in range(n_micro)] + [("B", m) for m in range(n_micro)]
    if kind == "1f1b":
        warm = min(n_stages - 1 - stage, n_micro)
        out = [("F", m) for m in range(warm)]
        for m in range(n_micro - warm):
            out += [("F", warm + m), ("B", m)]
        return out + [("B", m) for m in range(n_micro - warm, n_micro)]
    raise PlacementError(f"unknown pipeline schedule {kind!r} (known: {', '.join(SCHEDULES)})")


def pipeline_priorities(graph: Graph, dev: np.ndarray, stages: Sequence[int], kind: str) -> np.ndarray:
    """Per-op priorities that run schedule ``kind`` on a pipeline whose stage ``s`` is device ``stages[s]``.

    An op of micro-batch ``m`` (``meta["micro_batch"]``) in the forward phase belongs to action ``F m`` of
    its device's stage, one in the backward phase to ``B m``; any other op (parameters, gradient sums, the
    update, the mean loss) to the latest action among its inputs' (none: before every action). Its priority
    is that action's place in its stage's list. Ops on devices that are no stage run in ready order among
    themselves (priority 0)."""
    n_micro = micro_batches(graph)
    stage_of = {int(d): s for s, d in enumerate(stages)}
    index: dict[int, dict[tuple[str, int], int]] = {
        d: {a: k for k, a in enumerate(stage_actions(kind, s, len(stages), n_micro))} for d, s in stage_of.items()}
    action: list[tuple[str, int] | None] = [None] * graph.n_ops
    prio = np.zeros(graph.n_ops, np.int64)
    for i in graph.topological_order:
        op = graph.ops[i]
        d = int(dev[i])
        mine = index.get(d)
        if mine is None:
            continue
        m = op.meta.get("micro_batch")
        if isinstance(m, int) and op.phase in ("forward", "backward"):
            a: tuple[str, int] | None = ("F" if op.phase == "forward" else "B", m)
        else:
            a = None
            for p in graph.predecessors(i):
                b = action[p]
                if b is not None and (a is None or mine[b] > mine[a]):
                    a = b
        action[i] = a
        prio[i] = -1 if a is None else mine[a]
    return prio
