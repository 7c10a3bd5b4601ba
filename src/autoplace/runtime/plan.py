"""A placement's plan per device: the ops a device runs, in what order, what it sends and receives
(:func:`plan_device`, :func:`plan_all`), which both runtimes' workers run (:mod:`autoplace.runtime.device`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autoplace.errors import PlacementError
from autoplace.graph import Phase
from autoplace.runtime.program import Program, TRef, all_reduce, bucket_view
from autoplace.schedule import NO_SCHEDULE, linearize

__all__ = ["DevicePlan", "plan_device", "plan_all"]


@dataclass
class DevicePlan:
    """What one device runs in a placed step.

    ``ops``: its ops in program order; ``deps[i]``: the local ops op ``i`` waits for (data and
    write-after-read); ``recv``: the tensors it receives (ref -> source device; each tensor once per
    destination device, Send/Recv — the senders' side follows from the receivers'); ``recv_users``:
    the local ops reading each received tensor; ``order``: under a schedule, the order it runs its ops in
    (None: as they become ready); ``sequence``: under a schedule, each op's place in one order in which
    every op of the program can run (:func:`autoplace.schedule.linearize`: what orders the messages)."""

    device: int
    ops: list[int]
    deps: dict[int, list[int]]
    recv: dict[TRef, int]
    recv_users: dict[TRef, list[int]]
    order: list[int] | None = None
    sequence: np.ndarray | None = None


def plan_device(program: Program, assignment: np.ndarray, device: int,
                priority: np.ndarray | None = None, sequence: np.ndarray | None = None) -> DevicePlan:
    """Cut ``program`` for ``device`` under ``assignment`` (op index -> device index) and, if given, the
    schedule ``priority`` (per op: the device runs its ops in (priority, topological rank) order; an order
    that runs an op before one it must follow here is a :class:`PlacementError`)."""
    g = program.graph
    ops = [i for i in range(g.n_ops) if assignment[i] == device]
    local = set(ops)
    deps: dict[int, list[int]] = {}
    recv: dict[TRef, int] = {}
    recv_users: dict[TRef, list[int]] = {}
    readers: dict[Any, list[int]] = {}   # storage root -> local readers so far (program order)
    writer: dict[Any, int] = {}          # storage root -> its last local in-place writer so far
    root: dict[Any, Any] = {}

    def root_of(r: TRef) -> Any:
        if r.op in local:
            return root.get(r.op, ("op", r.op))
        return ("recv", r)

    for i in ops:
        c = program.calls[i]
        if c is None:
            deps[i] = []
            continue
        mine: list[int] = []
        for r in c.tensor_refs:
            src = int(assignment[r.op])
            if src == device:
                mine.append(r.op)
            else:
                rr = TRef(r.op, r.k)
                recv.setdefault(rr, src)
                recv_users.setdefault(rr, []).append(i)
        for r in c.tensor_refs:     # read through any view: after the last local write of that storage
            w = writer.get(root_of(r))
            if w is not None and w != i:
                mine.append(w)
        for w in c.writes_lists:    # written in place: after every earlier local reader of that storage
            mine += [j for j in readers.get(root_of(w), []) if j != i]
            writer[root_of(w)] = i
        if c.mutates is not None:
            rt = root_of(c.mutates)
            mine += [j for j in readers.get(rt, []) if j != i]
            root[i] = rt
            writer[rt] = i
        elif g.ops[i].meta.get("view") and c.args and isinstance(c.args[0], TRef):
            root[i] = root_of(c.args[0])
        for r in c.tensor_refs:
            readers.setdefault(root_of(r), []).append(i)
        deps[i] = sorted(set(mine) - {i})
    if priority is None or not ops or priority[ops[0]] == NO_SCHEDULE:
        _synchronised(program, assignment, device, ops, deps)
    order = None
    if priority is not None and ops and priority[ops[0]] != NO_SCHEDULE:
        rank = g.rank
        order = sorted(ops, key=lambda i: (int(priority[i]), int(rank[i])))
        place = {i: k for k, i in enumerate(order)}
        for i in order:
            late = [j for j in deps[i] if place[j] > place[i]]
            if late:
                raise PlacementError(f"the schedule runs op {g.ops[i].name!r} before op {g.ops[late[0]].name!r} on "
                                     f"its device, but it must follow it (it reads its result or overwrites what it "
                                     f"reads)")
    return DevicePlan(device, ops, deps, recv, recv_users, order, sequence)


def _synchronised(program: Program, assignment: np.ndarray, device: int, ops: list[int],
                  deps: dict[int, list[int]]) -> None:
    """On a device running its ops as they become ready, order its collectives as every participant does:
    each after the one before it in the program (a process group takes its collectives in one order on every
    rank), and the views of a reduced bucket after the device's last collective and after every op of the
    step before the update that another device reads — as DDP waits for its buckets once backward is done, so
    a rank waits for a bucket only when it has posted all its own and sent what other ranks need for theirs."""
    calls = program.calls
    posts = [i for i in ops if calls[i] is not None and calls[i].fn is all_reduce]
    if not posts:
        return
    for a, b in zip(posts, posts[1:]):
        deps[b] = sorted({*deps[b], a})
    local = set(ops)
    phase = [op.phase for op in program.graph.ops]
    read_elsewhere = sorted({r.op for j, c in enumerate(calls) if c is not None and int(assignment[j]) != device
                             for r in c.tensor_refs if r.op in local and phase[r.op] != Phase.UPDATE
                             and calls[r.op] is not None and calls[r.op].fn is not bucket_view})
    for i in ops:
        if calls[i] is not None and calls[i].fn is bucket_view:
            deps[i] = sorted({*deps[i], posts[-1], *read_elsewhere})


def plan_all(program: Program, assignment: np.ndarray, n_devices: int,
             priority: np.ndarray | None = None) -> list[DevicePlan]:
    """Plans for every device (under schedule ``priority`` if given: their ``sequence`` then also keeps each
    in-place write after the earlier local readers it must follow, on devices left in ready order too)."""
    plans = [plan_device(program, assignment, d, priority) for d in range(n_devices)]
    if priority is None:
        return plans
    pairs = [(j, i) for p in plans for i, deps in p.deps.items() for j in deps]
    extra = (np.array([a for a, _ in pairs], np.int64), np.array([b for _, b in pairs], np.int64))
    sequence, _ = linearize(program.graph, assignment, priority, extra)
    if (sequence < 0).any():
        op = program.graph.ops[int(np.flatnonzero(sequence < 0)[0])].name
        raise PlacementError(f"the schedule cannot run with the program's in-place writes: op {op!r} and "
                             f"{int((sequence < 0).sum()) - 1} others would wait for each other")
    for p in plans:
        p.sequence = sequence
    return plans
