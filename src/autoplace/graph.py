"""The dataflow-graph IR that every part of autoplace reads.

A :class:`Graph` is an immutable list of :class:`Op` s (TensorFlow whitepaper §2: nodes with inputs,
outputs, control dependencies and device constraints). On construction it is linted and compiled once
into flat NumPy arrays (CSR adjacency, per-op size vectors) that the simulator and the placers use on
their hot paths:

* **tensors** — one per (producer, output index) that has at least one consumer, plus one zero-byte
  *control tensor* per op that has control consumers. A tensor crossing devices is what Send/Recv moves.
* **pairs** — one per distinct (tensor, consumer op); ``x + x`` reads its tensor once.

Names follow networkx: ``graph.successors(i)``, ``graph.topological_order``; ops are addressed by index
(``graph.index(name)``) on hot paths and by name at the boundary.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from autoplace.errors import GraphError
from autoplace.paths import longest_path
from autoplace.validation import MAX_BYTES, MAX_FLOPS, MAX_SECONDS, MAX_TOTAL_BYTES, check_name, check_number

__all__ = ["Vocabulary", "Phase", "OpRole", "PHASES", "STATE_ROLES", "DTYPE_SIZES", "dtype_size", "TensorSpec", "Op",
           "Graph", "parse_input"]



class Vocabulary(StrEnum):
    """A word of the IR's vocabulary: it compares, hashes, prints and ``repr``s as the plain string it stands
    for (files and generated code hold the string; code names the member)."""

    def __repr__(self) -> str:
        return repr(self.value)


class Phase(Vocabulary):
    """Which part of a training step an op belongs to (``op.phase``; None: not said)."""

    FORWARD = "forward"
    BACKWARD = "backward"
    UPDATE = "update"


class OpRole(Vocabulary):
    """The op types of a captured step that compute nothing: its resident state and its inputs (every
    other op's type is what it computes, ``aten.addmm``). Members are strings: ``op.type == OpRole.INPUT``."""

    PARAMETER = "parameter"
    BUFFER = "buffer"
    OPTIMIZER_STATE = "optimizer_state"
    HYPERPARAMETER = "hyperparameter"    #: a scheduled hyper-parameter taken as an input (a learning rate)
    INPUT = "input"


PHASES = tuple(Phase)
#: the roles that live on a device from step to step (the optimizer's and the model's state)
STATE_ROLES = (OpRole.PARAMETER, OpRole.BUFFER, OpRole.OPTIMIZER_STATE, OpRole.HYPERPARAMETER)

#: Bytes per element of the dtypes autoplace understands (names as numpy/torch print them).
DTYPE_SIZES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "complex128": 16, "complex64": 8, "complex32": 4,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
}
_DTYPE_ALIASES = {
    "double": "float64", "float": "float32", "half": "float16", "bf16": "bfloat16",
    "fp32": "float32", "fp16": "float16", "fp64": "float64", "long": "int64", "int": "int32",
    "short": "int16", "cfloat": "complex64", "cdouble": "complex128",
}


def dtype_size(dtype: str) -> int:
    """Bytes per element of ``dtype`` (``"float32"``, ``"torch.bfloat16"``, ``"fp16"`` ...)."""
    key = dtype.lower().removeprefix("torch.").removeprefix("np.")
    key = _DTYPE_ALIASES.get(key, key)
    try:
        return DTYPE_SIZES[key]
    except KeyError:
        raise GraphError(f"unknown dtype {dtype!r}") from None


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape and dtype of one op output."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * dtype_size(self.dtype)


@dataclass(frozen=True, slots=True)
class Op:
    """One node of the dataflow graph (the fields of ``autoplace.graph/v1``, see docs/formats.md).

    ``inputs`` name producers as ``"producer"`` (output 0) or ``"producer:k"``; ``meta`` keeps any extra
    fields a file carried (layer index, time step, role ...) so they survive a round trip.
    """

    name: str
    type: str
    inputs: tuple[str, ...] = ()
    control_inputs: tuple[str, ...] = ()
    outputs: tuple[TensorSpec, ...] | None = None
    output_bytes: tuple[int, ...] | None = None
    flops: float = 0.0
    param_bytes: int = 0
    cost: Mapping[str, float] = field(default_factory=dict)
    device_types: tuple[str, ...] | None = None
    colocation_group: str | None = None
    scope: str | None = None
    phase: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def out_bytes(self) -> tuple[int, ...]:
        """Bytes of each output: ``output_bytes`` if given, else from ``outputs``, else one empty output."""
        if self.output_bytes is not None:
            return tuple(self.output_bytes)
        if self.outputs is not None:
            return tuple(t.nbytes for t in self.outputs)
        return (0,)

    @property
    def declares_outputs(self) -> bool:
        return self.output_bytes is not None or self.outputs is not None


def parse_input(ref: str, names: Mapping[str, int]) -> tuple[str, int]:
    """Split ``"producer:k"`` into ``("producer", k)``; an exact op name wins over the split."""
    if ref in names:
        return ref, 0
    base, sep, k = ref.rpartition(":")
    if sep and k.isascii() and k.isdigit():
        return base, int(k)
    return ref, 0


def _check_op(op: Op) -> None:
    """Field checks of one op (names, sizes, costs, phase, dtypes); raise GraphError naming it."""
    check_name(op.name, "an op's name", GraphError)
    where = f"op {op.name!r}:"
    check_name(op.type, f"{where} type", GraphError)
    for key in ("colocation_group", "scope", "phase"):
        if getattr(op, key) is not None:
            check_name(getattr(op, key), f"{where} {key}", GraphError)
    for ref in (*op.inputs, *op.control_inputs):
        check_name(ref, f"{where} input", GraphError)
    if op.outputs is not None:
        for k, t in enumerate(op.outputs):
            if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in t.shape):
                raise GraphError(f"{where} output {k} has a bad shape {list(t.shape)}")
            if not isinstance(t.dtype, str):
                raise GraphError(f"{where} output {k} has a dtype that is not a name: {t.dtype!r}")
            try:
                dtype_size(t.dtype)
            except GraphError:
                raise GraphError(f"{where} output {k} has unknown dtype {t.dtype!r}") from None
            if math.prod(t.shape) > MAX_BYTES:
                raise GraphError(f"{where} output {k} has {math.prod(t.shape):,} elements (at most {MAX_BYTES:,})")
    check_number(op.flops, f"{where} flops", GraphError, hi=MAX_FLOPS)
    check_number(op.param_bytes, f"{where} param_bytes", GraphError, hi=MAX_BYTES, integer=True)
    for k, b in enumerate(op.out_bytes):
        check_number(b, f"{where} output {k} bytes", GraphError, hi=MAX_BYTES, integer=True)
    if op.meta.get("bytes_touched") is not None:
        check_number(op.meta["bytes_touched"], f"{where} bytes_touched", GraphError, hi=MAX_BYTES)
    for dev, sec in op.cost.items():
        check_name(dev, f"{where} a cost's device", GraphError)
        check_number(sec, f"{where} cost[{dev!r}]", GraphError, hi=MAX_SECONDS)
    if op.phase is not None and op.phase not in PHASES:
        raise GraphError(f"{where} phase {op.phase!r} is not one of {', '.join(PHASES)}")
    if op.device_types is not None:
        if len(op.device_types) == 0:
            raise GraphError(f"{where} device_types is empty (no device could run it)")
        for t in op.device_types:
            check_name(t, f"{where} device type", GraphError)


class Graph:
    """An immutable, linted dataflow graph compiled to arrays.

    Array attributes (all NumPy, indexed by op index = position in :attr:`ops`):

    ``flops``, ``param_bytes``, ``bytes_touched``, ``out_bytes_total``
        per-op vectors (float64 / int64).
    ``out_alloc_total``, ``unconsumed_alloc``, ``is_view``
        device memory an op's outputs take (0 for views), and the part no op reads.
    ``alias_pair``
        for a view, the pair of the input its outputs alias (its first data input), else ``-1``.
    ``op_group``, ``group_launches``, ``group_device_types``, ``launch_groups``
        each op's launch group (``meta["launch_group"]``: ops one multi-tensor kernel runs, such as a
        foreach optimizer step), ``-1`` for none; per group, the launches it takes on each device it
        touches (``meta["group_launches"]``), the device types it applies on (``None``: all), and the
        groups' names.
    ``tensor_src``, ``tensor_out``, ``tensor_bytes``, ``tensor_alloc``
        per tensor: producer op, output index (``-1`` = control tensor), bytes moved, bytes allocated.
    ``op_tensor_ptr``
        tensors of op ``i`` are ``op_tensor_ptr[i]:op_tensor_ptr[i+1]``.
    ``tensor_pair_ptr``, ``pair_tensor``, ``pair_op``
        consumers of tensor ``t`` are ``pair_op[tensor_pair_ptr[t]:tensor_pair_ptr[t+1]]``.
    ``in_ptr``, ``in_pair``
        pairs read by op ``c`` are ``in_pair[in_ptr[c]:in_ptr[c+1]]``.
    ``topological_order``, ``rank``
        a deterministic topological order (file order where it allows) and each op's position in it.
    """

    def __init__(self, ops: Iterable[Op], name: str = "graph", meta: Mapping[str, Any] | None = None):
        self.name = check_name(name, "the graph's name", GraphError)
        self.ops: tuple[Op, ...] = tuple(ops)
        if not self.ops:
            raise GraphError(f"graph {self.name!r} has no ops")
        self.meta: dict[str, Any] = dict(meta or {})
        self._index: dict[str, int] = {}
        for i, op in enumerate(self.ops):
            if op.name in self._index:
                raise GraphError(f"duplicate op name {op.name!r} (ops #{self._index[op.name]} and #{i})")
            self._index[op.name] = i
            _check_op(op)
        self._compile()

    # ------------------------------------------------------------------ construction
    def _compile(self) -> None:
        ops, index = self.ops, self._index
        n = len(ops)
        out_bytes = [op.out_bytes for op in ops]
        consumers = self._consumers(out_bytes)
        keys = sorted(consumers, key=lambda pk: (pk[0], pk[1] if pk[1] >= 0 else 1 << 30))
        T = len(keys)
        self.tensor_src = np.fromiter((p for p, _ in keys), np.int64, T)
        self.tensor_out = np.fromiter((k for _, k in keys), np.int64, T)
        self.tensor_bytes = np.fromiter((out_bytes[p][k] if k >= 0 else 0 for p, k in keys), np.int64, T)
        self.op_tensor_ptr = np.searchsorted(self.tensor_src, np.arange(n + 1)).astype(np.int64)
        counts = np.fromiter((len(consumers[key]) for key in keys), np.int64, T)
        self.tensor_pair_ptr = np.zeros(T + 1, np.int64)
        np.cumsum(counts, out=self.tensor_pair_ptr[1:])
        P = int(self.tensor_pair_ptr[-1])
        self.pair_op = np.fromiter((c for key in keys for c in consumers[key]), np.int64, P)
        self.pair_tensor = np.repeat(np.arange(T, dtype=np.int64), counts)
        order = np.argsort(self.pair_op, kind="stable")
        self.in_pair = order.astype(np.int64)
        self.in_ptr = np.searchsorted(self.pair_op[order], np.arange(n + 1)).astype(np.int64)

        total = sum(op.param_bytes for op in ops) + sum(sum(b) for b in out_bytes)
        if total > MAX_TOTAL_BYTES:
            raise GraphError(f"graph {self.name!r}: parameters and outputs add up to {total:,} bytes "
                             f"(at most {MAX_TOTAL_BYTES:,})")
        self.flops = np.array([op.flops for op in ops], dtype=np.float64)
        self.param_bytes = np.array([op.param_bytes for op in ops], dtype=np.int64)
        self.out_bytes_total = np.array([sum(b) for b in out_bytes], dtype=np.int64)
        # Memory an op's outputs take on its device: nothing for views (``"view": true``), which alias
        # their input; a view sent to another device still moves (and lands as) its full bytes.
        self.is_view = np.array([bool(op.meta.get("view", False)) for op in ops], dtype=bool)
        self.tensor_alloc = np.where(self.is_view[self.tensor_src], 0, self.tensor_bytes).astype(np.int64)
        self.out_alloc_total = np.where(self.is_view, 0, self.out_bytes_total).astype(np.int64)
        # a view's outputs alias the buffer of its first data input: that pair keeps the buffer alive
        tensor_of = {(int(p), int(k)): t for t, (p, k) in enumerate(zip(self.tensor_src, self.tensor_out))}
        self.alias_pair = np.full(n, -1, np.int64)
        for i in np.flatnonzero(self.is_view):
            if ops[i].inputs:
                pname, k = parse_input(ops[i].inputs[0], index)
                t = tensor_of[(index[pname], k)]
                pairs = self.in_pair[self.in_ptr[i]:self.in_ptr[i + 1]]
                self.alias_pair[i] = pairs[self.pair_tensor[pairs] == t][0]
        self._launch_groups()
        consumed = np.zeros(n, np.int64)
        np.add.at(consumed, self.tensor_src, self.tensor_alloc)
        self.unconsumed_alloc = self.out_alloc_total - consumed
        in_bytes = np.zeros(n, np.int64)
        np.add.at(in_bytes, self.pair_op, self.tensor_bytes[self.pair_tensor])
        touched = [op.meta.get("bytes_touched") for op in ops]
        self.bytes_touched = np.array(
            [float(t) if t is not None else float(ib + ob)
             for t, ib, ob in zip(touched, in_bytes, self.out_bytes_total)], dtype=np.float64)
        self._toposort()

    def _consumers(self, out_bytes: list[tuple[int, ...]]) -> dict[tuple[int, int], list[int]]:
        """``(producer, k) -> consumers`` (``k = -1``: a control edge), each in first-seen order, once; an
        input naming an unknown op or output is an error."""
        ops, index = self.ops, self._index
        consumers: dict[tuple[int, int], list[int]] = {}
        for c, op in enumerate(ops):
            seen: set[tuple[int, int]] = set()
            for ref in op.inputs:
                pname, k = parse_input(ref, index)
                p = index.get(pname)
                if p is None:
                    raise GraphError(f"op {op.name!r}: input {ref!r} names an unknown op {pname!r}")
                if k >= len(out_bytes[p]) or (k > 0 and not ops[p].declares_outputs):
                    raise GraphError(
                        f"op {op.name!r}: input {ref!r} names output {k} but {pname!r} has "
                        f"{len(out_bytes[p])} output(s)")
                if (p, k) not in seen:
                    seen.add((p, k))
                    consumers.setdefault((p, k), []).append(c)
            for ref in op.control_inputs:
                p = index.get(ref)
                if p is None:
                    raise GraphError(f"op {op.name!r}: control input {ref!r} names an unknown op")
                if (p, -1) not in seen:
                    seen.add((p, -1))
                    consumers.setdefault((p, -1), []).append(c)
        return consumers

    def _launch_groups(self) -> None:
        """Launch groups: ops one multi-tensor kernel runs together (a foreach optimizer update); on each
        device they cost ``group_launches`` launches in all, however many of them it runs."""
        ops, n = self.ops, len(self.ops)
        group_index: dict[str, int] = {}
        launches: list[int] = []
        types: list[tuple[str, ...] | None] = []
        self.op_group = np.full(n, -1, np.int64)
        for i, op in enumerate(ops):
            name = op.meta.get("launch_group")
            if name is None:
                continue
            k = op.meta.get("group_launches", 1)
            if not isinstance(name, str) or not name:
                raise GraphError(f"op {op.name!r}: launch_group must be a non-empty string")
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 10**6:
                raise GraphError(f"op {op.name!r}: group_launches must be an integer from 1 to 1000000, got {k!r}")
            kinds = op.meta.get("group_device_types")
            if kinds is not None:
                if isinstance(kinds, str) or not isinstance(kinds, (list, tuple)) or not kinds or \
                        not all(isinstance(t, str) and t for t in kinds):
                    raise GraphError(f"op {op.name!r}: group_device_types must be a non-empty list of device types")
                kinds = tuple(kinds)
            g = group_index.setdefault(name, len(group_index))
            if g == len(launches):
                launches.append(k)
                types.append(kinds)
            elif launches[g] != k or types[g] != kinds:
                raise GraphError(f"op {op.name!r}: launch group {name!r} has group_launches {launches[g]} and "
                                 f"group_device_types {types[g]} on another op, {k} and {kinds} here")
            self.op_group[i] = g
        self.group_launches = np.array(launches, np.int64)
        self.launch_groups: tuple[str, ...] = tuple(group_index)
        self.group_device_types: tuple[tuple[str, ...] | None, ...] = tuple(types)

    def _toposort(self) -> None:
        n = self.n_ops
        indeg = np.diff(self.in_ptr).copy()
        heap = [i for i in range(n) if indeg[i] == 0]
        heapq.heapify(heap)
        order: list[int] = []
        tptr, pptr, pop_ = self.op_tensor_ptr, self.tensor_pair_ptr, self.pair_op
        while heap:
            i = heapq.heappop(heap)
            order.append(i)
            for p in range(pptr[tptr[i]], pptr[tptr[i + 1]]):
                c = int(pop_[p])
                indeg[c] -= 1
                if indeg[c] == 0:
                    heapq.heappush(heap, c)
        if len(order) < n:
            raise GraphError(f"graph {self.name!r} has a cycle: {self._find_cycle(indeg)}")
        self.topological_order = np.array(order, dtype=np.int64)
        self.rank = np.empty(n, np.int64)
        self.rank[self.topological_order] = np.arange(n)

    def _find_cycle(self, indeg: np.ndarray) -> str:
        """Walk predecessors among the ops Kahn's algorithm could not order until one repeats."""
        left = set(np.flatnonzero(indeg > 0).tolist())
        node = min(left)
        path: list[int] = []
        pos: dict[int, int] = {}
        while node not in pos:
            pos[node] = len(path)
            path.append(node)
            preds = [int(self.tensor_src[self.pair_tensor[q]])
                     for q in self.in_pair[self.in_ptr[node]:self.in_ptr[node + 1]]]
            node = min(p for p in preds if p in left)
        cycle = path[pos[node]:][::-1]
        k = cycle.index(min(cycle))  # start the report at the cycle's first op in file order
        cycle = cycle[k:] + cycle[:k]
        names = [self.ops[i].name for i in cycle + cycle[:1]]
        return " -> ".join(names)

    # ------------------------------------------------------------------ queries
    @property
    def n_ops(self) -> int:
        return len(self.ops)

    @property
    def n_tensors(self) -> int:
        return len(self.tensor_src)

    @property
    def n_edges(self) -> int:
        """Number of distinct (tensor, consumer) pairs, control dependencies included."""
        return len(self.pair_op)

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, ops={self.n_ops}, edges={self.n_edges})"

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no op {name!r}") from None

    def op(self, name: str) -> Op:
        return self.ops[self.index(name)]

    @property
    def names(self) -> list[str]:
        return [op.name for op in self.ops]

    def successors(self, i: int) -> np.ndarray:
        """Distinct consumer ops of op ``i`` (data and control)."""
        tptr, pptr = self.op_tensor_ptr, self.tensor_pair_ptr
        return np.unique(self.pair_op[pptr[tptr[i]]:pptr[tptr[i + 1]]])

    def predecessors(self, i: int) -> np.ndarray:
        """Distinct producer ops read by op ``i`` (data and control)."""
        pairs = self.in_pair[self.in_ptr[i]:self.in_ptr[i + 1]]
        return np.unique(self.tensor_src[self.pair_tensor[pairs]])

    def colocation_groups(self) -> dict[str, np.ndarray]:
        """Each ``colocation_group`` name and its member ops (indices, in file order)."""
        groups: dict[str, list[int]] = {}
        for i, op in enumerate(self.ops):
            if op.colocation_group is not None:
                groups.setdefault(op.colocation_group, []).append(i)
        return {name: np.array(members, dtype=np.int64) for name, members in groups.items()}

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, bytes)`` arrays, one row per (tensor, consumer) pair."""
        return self.tensor_src[self.pair_tensor], self.pair_op.copy(), self.tensor_bytes[self.pair_tensor]

    def longest_path(self, op_time: np.ndarray) -> float:
        """Length of the longest path when op ``i`` takes ``op_time[i]`` and transfers are free."""

        return float(longest_path(self.topological_order, self.in_ptr, self.in_pair, self.pair_tensor,
                                  self.tensor_src, np.asarray(op_time, dtype=np.float64)))

    @property
    def total_param_bytes(self) -> int:
        return int(self.param_bytes.sum())

    @property
    def total_flops(self) -> float:
        return float(self.flops.sum())
