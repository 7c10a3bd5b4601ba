"""The batch dimension: a step run as ``R`` data-parallel replicas, gradients synchronised as DDP does.

A step captured with ``micro_batches=M`` (gradient accumulation over ``M`` slices of the batch: its forward
and backward ops carry ``meta["micro_batch"]``, their gradients are summed, one update follows) can run as
``R`` replicas for any ``R`` dividing ``M``, with the same math (the same global batch): replica ``r`` runs
micro-batches ``r k .. r k + k - 1`` (``k = M / R``) on its own devices with its own copy of the parameters,
buffers and optimizer state, and the replicas' summed gradients are all-reduced before every replica applies
the same update.

* :func:`replica_graph` — one replica's step (``G1``): its ``k`` micro-batches, its copy of the state, its
  gradient sums over them and the update; its inputs are ``1 / R`` of the batch.
* :func:`expand` — ``R`` copies of ``G1`` (ops named ``r{r}/...``), each on its group of devices (a slot of
  ``G1``'s placement maps to the same slot of every group), and the gradient synchronisation of PyTorch's
  ``DistributedDataParallel`` (torch/nn/parallel/distributed.py; ``Reducer``): gradients in the order they
  become ready (backward's order) fill *buckets* per device, the first of 1 MiB
  (``dist._DEFAULT_FIRST_BUCKET_BYTES``) and the others of 25 MiB (``bucket_cap_mb=25``); a bucket is copied
  into a flat buffer (a memory-bound copy on its device; the buffers are resident, as DDP allocates them once)
  as soon as its last gradient is ready and all-reduced (:mod:`autoplace.collectives`) while backward goes
  on; each replica's update reads the reduced bucket. The captured gradients already carry the capture's
  ``1 / M`` (each micro-batch's loss is scaled so), so the all-reduce sums them; DDP divides by ``R`` instead,
  the same gradient.

:func:`micro_batched` gives the ``M``-micro-batch capture of a step where one is known (the zoo's models
register theirs with :func:`set_micro_batched`; a step that is itself micro-batched serves every ``R``
dividing its ``M``; a graph read from a file has none).
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from autoplace.collectives import BUCKET_VIEW, collective
from autoplace.errors import GraphError, InfeasibleError, PlacementError
from autoplace.graph import Graph, Op, OpRole, Phase, TensorSpec, parse_input
from autoplace.schedule import NO_SCHEDULE, micro_batches

__all__ = ["STATE_TYPES", "SHARED_TYPES", "FIRST_BUCKET_BYTES", "BUCKET_BYTES", "set_micro_batched",
           "micro_batched", "replica_graph", "expand", "towers_graph", "gradients", "replica_of", "Expanded",
           "strategy_graph", "remember", "can_replicate"]

#: op types that hold state or data rather than compute (each replica has its own copy)
STATE_TYPES = frozenset((OpRole.PARAMETER, OpRole.BUFFER, OpRole.OPTIMIZER_STATE, OpRole.HYPERPARAMETER, OpRole.INPUT))
#: what synchronous towers keep once, on the parameter server (with the update-phase ops)
SHARED_TYPES = frozenset((OpRole.PARAMETER, OpRole.OPTIMIZER_STATE, OpRole.HYPERPARAMETER))
#: DDP's first bucket (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES) and the rest (bucket_cap_mb=25)
FIRST_BUCKET_BYTES = 1024 * 1024
BUCKET_BYTES = 25 * 1024 * 1024

_BUILT: weakref.WeakKeyDictionary[Graph, dict[str, Graph]] = weakref.WeakKeyDictionary()
_MICRO: weakref.WeakKeyDictionary[Graph, Callable[[int], Graph]] = weakref.WeakKeyDictionary()


def set_micro_batched(graph: Graph, fn: Callable[[int], Graph]) -> Graph:
    """Say that ``fn(M)`` captures ``graph``'s step with ``micro_batches=M``; returns ``graph``."""
    _MICRO[graph] = fn
    return graph


def micro_batched(graph: Graph, m: int) -> Graph:
    """``graph``'s step captured with ``m`` micro-batches: ``graph`` itself where it has ``m``; else its
    registered capture (:func:`set_micro_batched`); else :class:`InfeasibleError`."""
    if micro_batches(graph) == m:
        return graph
    fn = _MICRO.get(graph)
    if fn is None:
        raise InfeasibleError(f"graph {graph.name!r} has {micro_batches(graph)} micro-batch(es) and no capture "
                              f"with {m}: replicas need the step captured with micro_batches={m} "
                              "(compile(..., micro_batches=...), autoplace capture --micro-batches)")
    return fn(m)


def can_replicate(graph: Graph) -> bool:
    """Can :func:`micro_batched` give ``graph``'s step with other micro-batch counts (a registered capture), or
    is it micro-batched itself?"""
    return graph in _MICRO or micro_batches(graph) > 1


def _tag(op: Op) -> int | None:
    m = op.meta.get("micro_batch")
    return m if isinstance(m, int) and not isinstance(m, bool) else None


def gradients(graph: Graph) -> list[tuple[int, str]]:
    """The gradients the update reads: ``(producer op, input reference)`` of each tensor an update-phase op
    reads from an op that is neither an update nor state, in the order they become ready (their producers'
    topological ranks: backward produces the last layer's first)."""
    seen: dict[tuple[int, int], str] = {}
    for op in graph.ops:
        if op.phase != Phase.UPDATE:
            continue
        for ref in op.inputs:
            pname, k = parse_input(ref, graph._index)
            p = graph.index(pname)
            src = graph.ops[p]
            if src.phase != Phase.UPDATE and src.type not in STATE_TYPES:
                seen.setdefault((p, k), ref)
    return sorted(((p, ref) for (p, _), ref in seen.items()), key=lambda pr: (_ready(graph, pr[0]), pr[1]))


def _ready(graph: Graph, p: int) -> int:
    """When op ``p``'s gradient is ready in backward's order: its own topological rank, or for a gradient sum
    over micro-batches (an op of no phase tagged with a micro-batch) the latest of what it adds."""
    op = graph.ops[p]
    if op.phase is not None or _tag(op) is None or not op.inputs:
        return int(graph.rank[p])
    return max(_ready(graph, graph.index(parse_input(ref, graph._index)[0])) for ref in op.inputs)


def _accumulated(graph: Graph, ref: str, k: int) -> str:
    """The reference that sums the gradient ``ref`` (the sum over all micro-batches) over micro-batches
    ``0 .. k - 1`` only: walk the sums (ops of no phase tagged with the micro-batch they add) back to the one
    tagged ``k - 1``, or to micro-batch 0's gradient."""
    while True:
        pname, _ = parse_input(ref, graph._index)
        op = graph.op(pname)
        m = _tag(op)
        if op.phase is not None or m is None or m == 0:
            if m is not None and m >= k:
                raise GraphError(f"gradient {ref!r} comes from micro-batch {m}, not a sum over micro-batches")
            return ref
        if m < k:
            return ref
        earlier = [r for r in op.inputs if (_tag(graph.op(parse_input(r, graph._index)[0])) or 0) < m]
        if len(earlier) != 1:
            raise GraphError(f"op {op.name!r} adds micro-batch {m}'s gradient but reads {len(earlier)} earlier "
                             "sums: not a gradient accumulation")
        ref = earlier[0]


def replica_graph(graph: Graph, replicas: int) -> Graph:
    """One replica's step of ``graph`` (captured with ``M`` micro-batches, ``replicas`` dividing ``M``): the
    ops of micro-batches ``0 .. k - 1``, the untagged ones (state, the update, the loss's mean: reading only
    those micro-batches' outputs), gradient sums over those micro-batches only, inputs of ``1 / replicas`` of
    the batch."""
    M = micro_batches(graph)
    if replicas < 1 or M % replicas:
        raise InfeasibleError(f"{replicas} replicas do not divide graph {graph.name!r}'s {M} micro-batch(es)")
    if replicas == 1:
        return graph
    k = M // replicas
    keep = [i for i, op in enumerate(graph.ops) if (_tag(op) is None or _tag(op) < k)]
    kept = {graph.ops[i].name for i in keep}
    grads = {ref: _accumulated(graph, ref, k) for _, ref in gradients(graph)}

    def own(ref: str) -> str | None:
        """A reference in one replica's step: a gradient's sum over its micro-batches; None for another's."""
        if ref in grads:
            return grads[ref]
        return ref if parse_input(ref, graph._index)[0] in kept else None

    ops = []
    for i in keep:
        op = graph.ops[i]
        changes: dict = {}
        if op.phase == Phase.UPDATE and any(r in grads for r in op.inputs):
            changes["inputs"] = tuple(grads.get(r, r) for r in op.inputs)
        elif any(parse_input(r, graph._index)[0] not in kept for r in op.inputs):
            changes["inputs"] = tuple(r for r in op.inputs if parse_input(r, graph._index)[0] in kept)
        if op.type == OpRole.INPUT:
            changes.update(_sharded(op, replicas, int(graph.meta.get("batch_dim", 0))))
        if "call" in op.meta:
            changes["meta"] = {**op.meta, "call": _renamed(op.meta["call"], own, _same)}
        if any(c not in kept for c in op.control_inputs):
            changes["control_inputs"] = tuple(c for c in op.control_inputs if c in kept)
        ops.append(replace(op, **changes) if changes else op)
    meta = {**graph.meta, "replicas": replicas, "micro_batches_per_replica": k}
    program = graph.meta.get("program")
    if isinstance(program, dict):   # its outputs: the replica's loss, its gradient sums
        meta["program"] = {**program, "outputs": _renamed(program.get("outputs", []), own, _same)}
    return Graph(ops, name=f"{graph.name}.replica{replicas}", meta=meta)


def _same(name: str) -> str:
    return name


def _sharded(op: Op, replicas: int, dim: int) -> dict:
    """The fields of input op ``op`` holding ``1 / replicas`` of its batch (along ``dim`` where its shapes are
    known and divide, else its bytes alone)."""
    specs = op.outputs or ()
    if specs and all(len(t.shape) > dim and t.shape[dim] % replicas == 0 for t in specs):
        cut = lambda t: replace(t, shape=(*t.shape[:dim], t.shape[dim] // replicas, *t.shape[dim + 1:]))  # noqa: E731
        return {"outputs": tuple(cut(t) for t in specs), "output_bytes": None}
    return {"output_bytes": tuple(b // replicas for b in op.out_bytes), "outputs": None}


_DROPPED = object()


def _renamed(a, ref: Callable[[str], str], scalar: Callable[[str], str]):
    """An aten call's argument template (``meta["call"]``, a program's scalar node) with its tensor references
    and scalar nodes renamed."""
    if isinstance(a, list):   # a reference renamed to None is left out (a tensor list's dropped micro-batch)
        return [y for y in (_renamed(x, ref, scalar) for x in a) if y is not _DROPPED]
    if isinstance(a, dict):
        if "ref" in a and isinstance(a["ref"], str):
            new = ref(a["ref"])
            return _DROPPED if new is None else {**a, "ref": new}
        if "scalar" in a and isinstance(a["scalar"], str):
            return {**a, "scalar": scalar(a["scalar"])}
        return {k: _renamed(v, ref, scalar) for k, v in a.items()}
    return a


def _flat_spec(graph: Graph, tensors: list[tuple[int, int | None]]) -> tuple[TensorSpec]:
    """The spec of a bucket: the tensors flattened one after another (their first one's dtype)."""
    specs = [graph.ops[p].outputs[k or 0] for p, k in tensors]
    return (TensorSpec((sum(math.prod(t.shape) for t in specs),), specs[0].dtype),)


class Expanded:
    """The result of :func:`expand`: the replicated ``graph``, each op's device (``devices``) and schedule
    priority (``priorities``, or None), and its ``buckets`` (per bucket: its slot and the gradients'
    references in ``G1``)."""

    def __init__(self, graph: Graph, devices: np.ndarray, priorities: np.ndarray | None,
                 buckets: list[tuple[int, list[str]]]):
        self.graph, self.devices, self.priorities, self.buckets = graph, devices, priorities, buckets


def replica_of(name: str) -> tuple[int | None, str]:
    """``(replica, name in G1)`` of an op of an expanded graph (``None`` for a collective's op)."""
    head, sep, rest = name.partition("/")
    if sep and head.startswith("r") and head[1:].isdigit():
        return int(head[1:]), rest
    return None, name


def _buckets(graph: Graph, slot: np.ndarray, first: int, cap: int) -> list[tuple[int, list[str]]]:
    """DDP's buckets: gradients in ready order, per slot, a bucket closed once it holds ``first`` bytes (the
    slot's first bucket) or ``cap`` (the others)."""
    out: list[tuple[int, list[str]]] = []
    open_: dict[int, tuple[int, list[str], int]] = {}   # slot -> (bytes, refs, limit)
    n_closed: dict[int, int] = {}
    for p, ref in gradients(graph):
        s = int(slot[p])
        nbytes, refs, limit = open_.get(s, (0, [], first if n_closed.get(s, 0) == 0 else cap))
        _, k = parse_input(ref, graph._index)
        refs = refs + [ref]
        nbytes += int(graph.ops[p].out_bytes[k])
        if nbytes >= limit:
            out.append((s, refs))
            n_closed[s] = n_closed.get(s, 0) + 1
            open_.pop(s, None)
        else:
            open_[s] = (nbytes, refs, limit)
    out += [(s, refs) for s, (_, refs, _) in sorted(open_.items(), key=lambda kv: kv[0])]
    return out


def expand(replica: Graph, slots: np.ndarray, groups: Sequence[Sequence[int]], *,
           priorities: np.ndarray | None = None, first_bucket_bytes: int = FIRST_BUCKET_BYTES,
           bucket_bytes: int = BUCKET_BYTES) -> Expanded:
    """``len(groups)`` copies of ``replica`` (:func:`replica_graph`) with DDP's gradient synchronisation (module
    docstring). ``slots[i]`` is the slot of op ``i`` of ``replica``; copy ``r``'s op runs on device
    ``groups[r][slots[i]]`` (a device may be in several groups: a shared CPU, say). ``priorities`` (one
    replica's schedule, or None) are copied to every replica; a bucket's copy runs right after its last
    gradient."""
    R = len(groups)
    slots = np.asarray(slots, np.int64)
    if slots.shape != (replica.n_ops,):
        raise ValueError(f"slots has shape {slots.shape}, expected ({replica.n_ops},)")
    if R == 1:                          # one replica: the step itself, nothing to synchronise
        return Expanded(replica, np.asarray(groups[0], np.int64)[slots], priorities, [])
    width = {len(g) for g in groups}
    if len(width) != 1 or (len(slots) and slots.max() >= min(width)):
        raise ValueError("every group needs a device for each slot the replica's placement uses")
    buckets = _buckets(replica, slots, first_bucket_bytes, bucket_bytes)
    program = replica.meta.get("program") if isinstance(replica.meta.get("program"), dict) else None
    index = replica._index
    tensor = lambda ref: (index[parse_input(ref, index)[0]], parse_input(ref, index)[1])  # noqa: E731
    of_tensor = {tensor(ref): b for b, (_, refs) in enumerate(buckets) for ref in refs}
    view = {tensor(ref): j for _, refs in buckets for j, ref in enumerate(refs)}   # a gradient's place in its bucket
    ops: list[Op] = []
    dev: list[int] = []
    prio: list[int] = []
    pre = lambda r, ref: f"r{r}/{ref}"  # noqa: E731

    def read(r: int, ref: str, update: bool) -> str:
        """What replica ``r``'s op reads for ``ref``: an update's gradient is its bucket's view."""
        t = tensor(ref) if update else None
        return f"r{r}/bucket{of_tensor[t]}.{view[t]}" if t in of_tensor else pre(r, ref)
    for r in range(R):
        for i, op in enumerate(replica.ops):
            meta = {**op.meta, "replica": r}
            if "launch_group" in meta:     # replicas run separate kernels (separate processes)
                meta["launch_group"] = f"r{r}/{meta['launch_group']}"
            update = op.phase == Phase.UPDATE
            inputs = tuple(read(r, ref, update) for ref in op.inputs)
            if "call" in meta:      # its aten call reads the same tensors
                meta["call"] = _renamed(meta["call"], lambda ref, r=r, u=update: read(r, ref, u),
                                        lambda name, r=r: pre(r, name))
            ops.append(replace(op, name=pre(r, op.name), inputs=inputs,
                             control_inputs=tuple(pre(r, c) for c in op.control_inputs),
                             colocation_group=None if op.colocation_group is None else pre(r, op.colocation_group),
                             meta=meta))
            dev.append(groups[r][slots[i]])
            prio.append(NO_SCHEDULE if priorities is None else int(priorities[i]))
        for b, (s, refs) in enumerate(buckets):
            nbytes = sum(int(replica.ops[tensor(ref)[0]].out_bytes[tensor(ref)[1]]) for ref in refs)
            bmeta = {"view": True, "replica": r, "bucket": b, "bytes_touched": 2.0 * nbytes}
            if program:
                bmeta["call"] = {"target": "autoplace.bucket", "args": [[{"ref": pre(r, ref)} for ref in refs]]}
            ops.append(Op(f"r{r}/bucket{b}", "ddp_bucket", inputs=tuple(pre(r, ref) for ref in refs),
                          outputs=_flat_spec(replica, [tensor(ref) for ref in refs]) if program else None,
                          output_bytes=(nbytes,), param_bytes=nbytes, phase=Phase.BACKWARD, meta=bmeta))
            dev.append(groups[r][s])
            prio.append(NO_SCHEDULE if priorities is None else
                        max(int(priorities[tensor(ref)[0]]) for ref in refs))
    for b, (s, refs) in enumerate(buckets):
        nbytes = int(ops[replica.n_ops + b].output_bytes[0])
        for r, op in enumerate(collective("all_reduce", f"bucket{b}", [f"r{rr}/bucket{b}" for rr in range(R)],
                                          nbytes, phase=Phase.BACKWARD)):
            cmeta = {**op.meta, "replica": r}
            if program:
                cmeta["call"] = {"target": "autoplace.all_reduce", "args": [{"ref": op.inputs[0]}, f"bucket{b}"]}
                op = replace(op, outputs=_flat_spec(replica, [tensor(ref) for ref in refs]))
            ops.append(replace(op, meta=cmeta))
            dev.append(groups[r][s])
            # the simulator leaves collectives out of a schedule; a priority keeps their devices' all-or-none
            last = prio[r * (replica.n_ops + len(buckets)) + replica.n_ops + b]
            prio.append(last)
            # each gradient a view of the reduced bucket, where its readers are (DDP's gradient_as_bucket_view)
            offset = 0
            for j, ref in enumerate(refs):
                p, k = tensor(ref)
                grad = int(replica.ops[p].out_bytes[k])
                vmeta = {"view": True, "replica": r, "bucket": b}
                if program:       # elements from ``offset`` of the reduced bucket, as the gradient's shape
                    spec = replica.ops[p].outputs[k or 0]
                    vmeta["call"] = {"target": "autoplace.bucket_view",
                                     "args": [{"ref": f"bucket{b}/{r}"}, offset, list(spec.shape), spec.dtype]}
                    offset += math.prod(spec.shape)
                ops.append(Op(f"r{r}/bucket{b}.{j}", BUCKET_VIEW, inputs=(f"bucket{b}/{r}",), output_bytes=(grad,),
                              outputs=(spec,) if program else None, phase=Phase.BACKWARD, meta=vmeta))
                dev.append(groups[r][s])
                prio.append(last)
    meta = {**replica.meta, "replicas": R}
    if program:             # every replica's outputs (the loss first) and scalar nodes, in replica order
        meta["program"] = {
            "outputs": [_renamed(o, lambda ref, r=r: pre(r, ref), None) for r in range(R)
                        for o in program.get("outputs", [])],
            "scalars": {pre(r, name): _renamed(spec, lambda ref, r=r: pre(r, ref), lambda n, r=r: pre(r, n))
                        for r in range(R) for name, spec in program.get("scalars", {}).items()}}
    graph = Graph(ops, name=f"{replica.name}x{R}", meta=meta)
    prios = None if priorities is None else np.array(prio, np.int64)
    return Expanded(graph, np.array(dev, np.int64), prios, buckets)


def towers_graph(graph: Graph, towers: int, *, asynchronous: bool = False) -> Graph:
    """Synchronous towers (Mirhoseini et al. 2017 sec. 4.4; the TensorFlow whitepaper's synchronous data
    parallelism) of ``graph`` (captured with ``M`` micro-batches, ``towers`` dividing ``M``): ``towers``
    copies of one replica's forward and backward (ops ``t{r}/...``, ``meta["replica"] = r``, each with its own
    buffers and inputs), one copy of the parameters, optimizer state, hyperparameters and update, and per
    gradient one sum over the towers (``gradsum{k}``) that the update reads.

    ``asynchronous``: the paper's asynchronous towers — no sum: each tower applies its own gradients to the
    shared parameters with its own copy of the update (``t{r}/...``), waiting for no other tower. Different
    math (every update reads a tower's gradients alone); a step of it is each tower's one update."""
    replica = replica_graph(graph, towers)
    shared = {op.name for op in replica.ops if op.type in SHARED_TYPES or op.phase == Phase.UPDATE}
    grads = gradients(replica)
    index = replica._index
    key = lambda ref: (index[parse_input(ref, index)[0]], parse_input(ref, index)[1])  # noqa: E731
    of_tensor = {key(ref): k for k, (_, ref) in enumerate(grads)}
    ren = lambda r, ref: ref if parse_input(ref, index)[0] in shared else f"t{r}/{ref}"  # noqa: E731
    ops: list[Op] = [op for op in replica.ops if op.name in shared and op.phase != Phase.UPDATE]
    for r in range(towers):
        for op in replica.ops:
            if op.name in shared:
                continue
            meta = {**op.meta, "replica": r}
            if "launch_group" in meta:
                meta["launch_group"] = f"t{r}/{meta['launch_group']}"
            group = op.colocation_group
            ops.append(replace(op, name=f"t{r}/{op.name}", inputs=tuple(ren(r, ref) for ref in op.inputs),
                             control_inputs=tuple(ren(r, c) for c in op.control_inputs),
                             colocation_group=None if group is None else f"t{r}/{group}", meta=meta))
    if asynchronous:
        state = [op for op in replica.ops if op.phase == Phase.UPDATE and op.type in SHARED_TYPES]
        ops += state                                          # the optimizer's state and hyperparameters, once
        kept = {op.name for op in ops if op.name in shared}   # the shared state every tower's update reads
        mine = lambda r, ref: ref if parse_input(ref, index)[0] in kept else f"t{r}/{ref}"  # noqa: E731
        for r in range(towers):
            for op in replica.ops:
                if op.phase == Phase.UPDATE and op.type not in SHARED_TYPES:
                    meta = {**op.meta, "replica": r}
                    if "launch_group" in meta:
                        meta["launch_group"] = f"t{r}/{meta['launch_group']}"
                    ops.append(replace(op, name=f"t{r}/{op.name}", meta=meta,
                                     inputs=tuple(mine(r, ref) for ref in op.inputs),
                                     control_inputs=tuple(mine(r, c) for c in op.control_inputs),
                                     colocation_group=None if op.colocation_group is None
                                     else f"t{r}/{op.colocation_group}"))
        return Graph(ops, name=f"{graph.name}.async-towers{towers}", meta={**graph.meta, "replicas": towers})
    for k, (p, ref) in enumerate(grads):
        nbytes = int(replica.ops[p].out_bytes[key(ref)[1]])
        ops.append(Op(f"gradsum{k}", "aten.add", inputs=tuple(ren(r, ref) for r in range(towers)),
                      output_bytes=(nbytes,), phase=Phase.BACKWARD, flops=float((towers - 1) * nbytes // 4),
                      meta={"bytes_touched": float((towers + 1) * nbytes)}))
    for i, op in enumerate(replica.ops):
        if op.phase == Phase.UPDATE:
            meta = dict(op.meta)
            if any(key(ref) in of_tensor for ref in op.inputs):
                meta.setdefault("bytes_touched", float(replica.bytes_touched[i]))
            ops.append(replace(op, inputs=tuple(f"gradsum{of_tensor[key(ref)]}" if key(ref) in of_tensor else ref
                                              for ref in op.inputs), meta=meta))
    return Graph(ops, name=f"{graph.name}.towers{towers}", meta={**graph.meta, "replicas": towers})


def _key(strategy: dict) -> str:
    return json.dumps(strategy, sort_keys=True)


def remember(graph: Graph, strategy: dict, built: Graph) -> None:
    """Keep ``built`` as the step of ``strategy`` on ``graph`` (:func:`strategy_graph` returns it)."""
    _BUILT.setdefault(graph, {})[_key(strategy)] = built


def strategy_graph(graph: Graph, placement) -> Graph:
    """The step ``placement`` runs: ``graph`` itself, or for a strategy (``meta["strategy"]``) the replicated
    step rebuilt from ``graph``'s micro-batch capture."""
    strategy = placement.meta.get("strategy")
    R = graph.meta.get("replicas", 1)
    if strategy is None or (placement.graph == graph.name and R == strategy.get("replicas")
                            and R * micro_batches(graph) == strategy.get("micro_batches")):
        return graph                                        # no strategy, or its step already
    key = _key(strategy)
    built = _BUILT.setdefault(graph, {})
    if key in built:
        return built[key]
    try:
        kind, R, M = strategy["kind"], int(strategy["replicas"]), int(strategy["micro_batches"])
        if kind in ("towers", "towers-async"):
            out = towers_graph(micro_batched(graph, M), R, asynchronous=kind == "towers-async")
        elif kind == "replicas":
            replica = replica_graph(micro_batched(graph, M), R)
            slots = np.array([strategy["slots"][op.name] for op in replica.ops], np.int64)
            schedule = strategy.get("schedule")
            prio = None if schedule is None else np.array([schedule[op.name] for op in replica.ops], np.int64)
            groups = [list(range(len(g))) for g in strategy["groups"]]   # device indices do not change the graph
            out = expand(replica, slots, groups, priorities=prio).graph
        else:
            raise PlacementError(f"unknown strategy kind {kind!r}")
    except (KeyError, TypeError, ValueError) as e:
        raise PlacementError(f"placement {placement.method!r} has a malformed strategy ({type(e).__name__}: {e})"
                             ) from None
    except InfeasibleError as e:        # a graph file: no capture to rebuild the replicated step from
        raise PlacementError(f"placement {placement.method!r} runs replicas of the step: {e}") from None
    built[key] = out
    return out
