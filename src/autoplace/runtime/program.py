"""The executable form of a captured graph: decoded aten calls and synthetic inputs.

A graph captured from PyTorch carries its aten program: every ``aten.*`` op has
``meta["call"]`` (the overload and its arguments, tensors named by op reference) and the graph has
``meta["program"]`` (its outputs and the Python-number nodes, e.g. Adam's bias corrections, that the
program computes from tensors). :class:`Program` decodes that once; :func:`~autoplace.runtime.plan.plan_device`
cuts it into the part one device runs (its ops, what it receives and sends, and the write-after-read order
that in-place updates need); :func:`run_reference` runs the whole program unplaced in this process.

Values: parameters, buffers, optimizer state and inputs are not stored in graph files, so they are
synthesised from a seed (:meth:`Program.make_input`): parameters uniform in ±1/sqrt(fan-in), variances
one, optimizer state zero, float inputs normal, integer inputs (token ids, class labels) uniform below
the bound their consumers imply (an embedding's rows, a loss's classes).
"""

from __future__ import annotations

import math
import operator
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoplace.errors import AutoplaceError
from autoplace.graph import Graph, OpRole, parse_input

__all__ = ["ExecutionError", "Program", "run_reference", "torch_device"]

PLACEHOLDER_TYPES = (OpRole.PARAMETER, OpRole.BUFFER, OpRole.OPTIMIZER_STATE, OpRole.HYPERPARAMETER, OpRole.INPUT)
_SCALAR_FUNCS: dict[str, Callable] = {
    **{f"operator.{n}": getattr(operator, n) for n in (
        "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs", "eq", "ne", "lt", "le",
        "gt", "ge", "and_", "or_", "not_")},
    **{f"math.{n}": getattr(math, n) for n in ("sqrt", "exp", "log", "ceil", "floor", "pow")},
    "builtins.abs": abs, "builtins.min": min, "builtins.max": max, "builtins.round": round,
    "builtins.int": int, "builtins.float": float,
}


class ExecutionError(AutoplaceError):
    """A graph cannot be executed (no aten program, an unknown op, a device this machine lacks)."""


@dataclass(frozen=True, slots=True)
class TRef:
    """A tensor argument: output ``k`` of op ``op`` (``k`` None: the op's single value)."""

    op: int
    k: int | None


@dataclass(frozen=True, slots=True)
class SRef:
    """A Python-number argument computed by scalar node ``name``."""

    name: str


class _Device:
    """Placeholder for a ``device=`` argument: the device the op runs on."""


DEVICE = _Device()


@dataclass
class Call:
    """One decoded aten call: the overload, its argument template and which argument it writes."""

    fn: Any
    args: list
    kwargs: dict
    tensor_refs: tuple[TRef, ...]  # every tensor the call reads (directly or through scalar nodes)
    scalar_refs: tuple[str, ...]
    mutates: TRef | None           # the argument an in-place op writes (aten ``add_`` ...)
    writes_lists: tuple[TRef, ...] = ()  # tensors a multi-tensor op writes in place (``_fused_adam_``'s lists)


def torch_device(name: str) -> str:
    """The torch device a cluster device runs on: ``cpu:1`` -> ``cpu`` (a worker process), ``cuda:1``; a
    host's name before a slash (``nodeB/cuda:0``) is not part of it."""
    kind, _, idx = name.rsplit("/", 1)[-1].partition(":")
    kind = kind.lower()
    if kind in ("gpu", "cuda"):
        return f"cuda:{idx or 0}"
    if kind == "cpu":
        return "cpu"
    raise ExecutionError(f"device {name!r} cannot run here: real execution supports cpu:i and cuda:i devices")


class Program:
    """A captured graph decoded for execution (see the module docstring)."""

    def __init__(self, graph: Graph):
        prog = graph.meta.get("program")
        if not isinstance(prog, dict):
            raise ExecutionError(f"graph {graph.name!r} has no aten program (only graphs captured from PyTorch "
                                 "carry one: capture the model with 'autoplace capture')")
        self.graph = graph
        self._index = {op.name: i for i, op in enumerate(graph.ops)}
        self.scalars: dict[str, tuple[Callable, list, dict]] = {}
        self._scalar_json = prog.get("scalars", {})
        for name in self._scalar_json:
            self._decode_scalar(name)
        self.calls: list[Call | None] = []
        self.placeholders: list[int] = []
        for i, op in enumerate(graph.ops):
            call = op.meta.get("call")
            if call is None:
                if op.type not in PLACEHOLDER_TYPES:
                    raise ExecutionError(f"op {op.name!r} ({op.type}) has no aten call to execute")
                self.placeholders.append(i)
                self.calls.append(None)
            else:
                self.calls.append(self._decode_call(op.name, call))
        outputs = prog.get("outputs", [])
        if not isinstance(outputs, list):
            raise ExecutionError(f"graph {graph.name!r}: program outputs must be a list, got {outputs!r:.60}")
        self.outputs: list[TRef] = []
        for o in outputs:
            ref = self._decode(o, "program outputs")
            if not isinstance(ref, TRef):
                raise ExecutionError(f"graph {graph.name!r}: program output {o!r:.60} is not a tensor")
            self.outputs.append(ref)
        self.final_versions = self._final_versions()
        self._int_high = self._integer_bounds()
        #: the ops that draw from a random generator (dropout's ``bernoulli_``), in program order
        self.random = [i for i in graph.topological_order if self.calls[i] is not None
                       and _op_name(self.calls[i].fn) in RANDOM_OPS]

    # ------------------------------------------------------------------ decoding
    def _decode(self, a: Any, where: str) -> Any:
        import torch

        if isinstance(a, list):
            return [self._decode(x, where) for x in a]
        if isinstance(a, dict):
            if "ref" in a:
                ref = a["ref"]
                if not isinstance(ref, str):
                    raise ExecutionError(f"{where}: tensor reference {ref!r:.60} is not a name")
                name, k = parse_input(ref, self._index) if ":" in ref else (ref, None)
                if name not in self._index:
                    raise ExecutionError(f"{where}: unknown tensor {ref!r}")
                n_out = len(self.graph.ops[self._index[name]].out_bytes)
                if k is not None and not 0 <= k < n_out:
                    raise ExecutionError(f"{where}: tensor {ref!r} names output {k} of an op with {n_out}")
                return TRef(self._index[name], k)
            if "scalar" in a:
                return SRef(a["scalar"])
            if "float" in a:
                try:
                    return float(a["float"])
                except (TypeError, ValueError):
                    raise ExecutionError(f"{where}: {a!r:.60} is not a number") from None
            for key, kind in (("dtype", torch.dtype), ("layout", torch.layout), ("memory_format", torch.memory_format)):
                if key in a:
                    name = a[key]
                    value = getattr(torch, name.removeprefix("torch."), None) if isinstance(name, str) else None
                    if not isinstance(value, kind):
                        raise ExecutionError(f"{where}: unknown {key} {name!r:.60}")
                    return value
            if "device" in a:
                return DEVICE
            if "opaque" in a and str(a["opaque"]).startswith("_tensor_constant"):
                raise ExecutionError(f"{where} reads a tensor constant made during the step, which the executor "
                                     "cannot run: if the model makes it (torch.tensor(...) in forward), register it as "
                                     "a buffer; Adagrad and Rprop make one in their update and cannot be used here")
            raise ExecutionError(f"{where}: argument {a!r} cannot be executed")
        return a

    def _decode_kwargs(self, kw: dict, where: str) -> dict:
        return {k: self._decode(v, where) for k, v in kw.items()}

    def _decode_scalar(self, name: str) -> None:
        spec = self._scalar_json[name]
        fn = _resolve_target(spec["target"], f"scalar {name!r}")
        self.scalars[name] = (fn, self._decode(spec["args"], f"scalar {name!r}"),
                              self._decode_kwargs(spec.get("kwargs", {}), f"scalar {name!r}"))

    def _decode_call(self, opname: str, call: dict) -> Call:
        where = f"op {opname!r}"
        if not isinstance(call, dict) or not isinstance(call.get("target"), str):
            raise ExecutionError(f"{where}: call must be an object with a 'target' name, got {call!r:.60}")
        if not isinstance(call.get("args", []), list) or not isinstance(call.get("kwargs", {}), dict):
            raise ExecutionError(f"{where}: call's args must be a list and its kwargs an object")
        fn = _resolve_target(call["target"], where)
        args = self._decode(call.get("args", []), where)
        kwargs = self._decode_kwargs(call.get("kwargs", {}), where)
        trefs: list[TRef] = []
        srefs: list[str] = []
        self._collect([args, kwargs], trefs, srefs)
        mutates = None
        lists: list[TRef] = []
        schema = getattr(fn, "_schema", None)
        if schema is not None and schema.is_mutable:
            first = True
            for j, arg in enumerate(schema.arguments):
                if arg.alias_info is not None and arg.alias_info.is_write:
                    val = args[j] if j < len(args) else kwargs.get(arg.name)
                    if isinstance(val, list):   # a multi-tensor op writes every tensor of its written lists
                        lists += [v for v in val if isinstance(v, TRef)]
                    elif first and isinstance(val, TRef):
                        mutates = val
                    first = False
        return Call(fn, args, kwargs, tuple(dict.fromkeys(trefs)), tuple(dict.fromkeys(srefs)), mutates,
                    tuple(dict.fromkeys(lists)))

    def _collect(self, a: Any, trefs: list, srefs: list) -> None:
        if isinstance(a, TRef):
            trefs.append(a)
        elif isinstance(a, SRef):
            if a.name not in self.scalars:
                raise ExecutionError(f"unknown scalar node {a.name!r}")
            srefs.append(a.name)
            _, sargs, skw = self.scalars[a.name]
            self._collect([sargs, skw], trefs, srefs)
        elif isinstance(a, list):
            for x in a:
                self._collect(x, trefs, srefs)
        elif isinstance(a, dict):
            for x in a.values():
                self._collect(x, trefs, srefs)

    def _final_versions(self) -> dict[str, TRef]:
        """Each placeholder's value after the step: the last in-place op writing it (or itself)."""
        root: dict[TRef, int] = {}
        final = {self.graph.ops[i].name: TRef(i, None) for i in self.placeholders}
        for i, c in enumerate(self.calls):
            if c is None:
                continue
            base = None
            if c.mutates is not None:
                base = root.get(c.mutates, c.mutates.op if self.calls[c.mutates.op] is None else None)
            if base is not None:
                root[TRef(i, None)] = base
                final[self.graph.ops[base].name] = TRef(i, None)
        return final

    def _integer_bounds(self) -> dict[int, int]:
        """For integer placeholders: the exclusive upper bound their consumers allow."""
        g = self.graph
        high: dict[int, int] = {}
        alias: dict[int, int] = {i: i for i in self.placeholders}  # views of placeholders -> placeholder
        for i, c in enumerate(self.calls):
            if c is None:
                continue
            name = g.ops[i].type.removeprefix("aten.")
            args = c.args
            if g.ops[i].meta.get("view") and args and isinstance(args[0], TRef) and args[0].op in alias:
                alias[i] = alias[args[0].op]
                continue
            bound = None
            if name == "embedding" and len(args) > 1 and isinstance(args[1], TRef):
                bound = (args[1], self._shape(args[0])[0])
            elif name in ("nll_loss_forward", "nll_loss2d_forward") and len(args) > 1 and isinstance(args[1], TRef):
                shape = self._shape(args[0]) or (1,)
                bound = (args[1], shape[1] if len(shape) > 1 else shape[0])
            elif name in ("index_select", "gather") and len(args) > 2 and isinstance(args[2], TRef):
                bound = (args[2], self._shape(args[0])[int(args[1])])
            if bound is not None and bound[0].op in alias:
                p = alias[bound[0].op]
                high[p] = min(high.get(p, bound[1]), bound[1])
        return high

    def _shape(self, r: Any) -> tuple[int, ...]:
        if not isinstance(r, TRef):
            return (1,)
        op = self.graph.ops[r.op]
        return tuple(op.outputs[r.k or 0].shape) if op.outputs else (1,)

    # ------------------------------------------------------------------ values
    def make_input(self, i: int, seed: int, device: str = "cpu"):
        """The synthetic initial value of placeholder op ``i`` (deterministic for ``seed``)."""
        import torch

        op = self.graph.ops[i]
        spec = op.outputs[0]
        dtype = getattr(torch, spec.dtype)
        shape = tuple(spec.shape)
        gen = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(op.name.encode())) % 2**63)
        if dtype.is_floating_point:
            if op.type == OpRole.HYPERPARAMETER:                  # a learning rate: the value it was captured with
                t = torch.full(shape, float(op.meta.get("value", 0.0)), dtype=dtype)
            elif op.type == OpRole.OPTIMIZER_STATE:
                t = torch.zeros(shape, dtype=dtype)
            elif op.type == OpRole.BUFFER:
                t = torch.ones(shape, dtype=dtype) if op.name.endswith("var") else torch.zeros(shape, dtype=dtype)
            elif op.type == OpRole.PARAMETER:
                bound = 1.0 / math.sqrt(shape[-1]) if len(shape) >= 2 and shape[-1] else 0.1
                t = (torch.rand(shape, generator=gen, dtype=dtype) * 2 - 1) * bound
            else:
                t = torch.randn(shape, generator=gen, dtype=dtype)
        elif dtype == torch.bool:
            t = torch.zeros(shape, dtype=dtype)
        else:
            high = self._int_high.get(i, 1) if op.type == OpRole.INPUT else 1
            t = torch.randint(0, max(1, high), shape, generator=gen, dtype=dtype) if op.type == OpRole.INPUT \
                else torch.zeros(shape, dtype=dtype)
        return t.to(device)

    def check_drawn_ahead(self) -> None:
        """One clear error naming the first random op whose draws cannot be made ahead of the step (they
        depend on a tensor's values: ``multinomial``, ``bernoulli(probs)``, ``normal(mean_tensor)``)."""
        for i in self.random:
            c = self.calls[i]
            if _overload(c.fn) not in DRAWN_AHEAD or c.scalar_refs:
                raise ExecutionError(f"eager_rng: random op {self.graph.ops[i].name!r} (aten.{_overload(c.fn)}) "
                                     "draws from values computed in the step, so its draws cannot be made ahead "
                                     "of it: compile without eager_rng")

    def draw(self, i: int):
        """What random op ``i`` draws, made here from this process's generator: its call on fresh tensors of
        its inputs' shapes (``bernoulli_`` fills the tensor it is given, ``rand_like`` reads only a shape).
        Drawn for every random op in program order, this is the draws eager PyTorch makes in a step, in
        its order: a placed step fed them (:meth:`replay`) draws as eager does."""
        import torch

        c = self.calls[i]

        def fresh(r: TRef):
            spec = self.graph.ops[r.op].outputs[r.k or 0]
            return torch.empty(tuple(spec.shape), dtype=getattr(torch, spec.dtype))

        val = c.fn(*self.resolve(c.args, fresh, None, "cpu"), **self.resolve(c.kwargs, fresh, None, "cpu"))
        return val

    def replay(self, i: int, drawn, get: Callable[[TRef], Any], device: str):
        """Random op ``i``'s result from ``drawn`` (:meth:`draw`) instead of the device's generator; an
        in-place op writes it into the tensor it fills, as it would."""
        c = self.calls[i]
        if c.mutates is not None:
            target = get(c.mutates)
            target.copy_(drawn)
            return target
        return drawn.to(device)

    def scalar_fn(self, get: Callable[[TRef], Any], device: str) -> Callable[[str], Any]:
        """An evaluator of the program's scalar nodes for one step (cached), reading tensors with ``get``."""
        cache: dict[str, Any] = {}

        def scalar(name: str) -> Any:
            if name not in cache:
                fn, a, kw = self.scalars[name]
                cache[name] = fn(*self.resolve(a, get, scalar, device), **self.resolve(kw, get, scalar, device))
            return cache[name]

        return scalar

    def call(self, i: int, get: Callable[[TRef], Any], scalar: Callable[[str], Any], device: str) -> Any:
        """Run op ``i``'s aten call with its arguments resolved."""
        c = self.calls[i]
        return c.fn(*self.resolve(c.args, get, scalar, device), **self.resolve(c.kwargs, get, scalar, device))

    def run_step(self, env: dict[int, Any], device: str, stop: Callable[[], bool] | None = None) -> bool:
        """One unplaced step in program order, values kept in ``env`` (op index -> value, placeholders
        already there); False if ``stop()`` cut it short."""
        get = lambda r: get_value(env, r)  # noqa: E731
        scalar = self.scalar_fn(get, device)
        for i in self.graph.topological_order:
            if self.calls[i] is not None:
                env[i] = self.call(i, get, scalar, device)
            if stop is not None and stop():
                return False
        return True

    def resolve(self, a: Any, get: Callable[[TRef], Any], scalar: Callable[[str], Any], device: str) -> Any:
        t = type(a)
        if t is TRef:
            return get(a)
        if t is list:
            return [self.resolve(x, get, scalar, device) for x in a]
        if t is SRef:
            return scalar(a.name)
        if a is DEVICE:
            import torch

            return torch.device(device)
        if t is dict:
            return {k: self.resolve(v, get, scalar, device) for k, v in a.items()}
        return a


#: aten ops that draw from a random generator (by overload packet name)
RANDOM_OPS = frozenset({"bernoulli", "bernoulli_", "rand", "rand_like", "randn", "randn_like", "randint",
                        "randint_like", "normal", "normal_", "uniform_", "exponential_", "geometric_",
                        "log_normal_", "cauchy_", "random_", "randperm", "multinomial", "native_dropout", "poisson",
                        "binomial", "_standard_gamma", "_sample_dirichlet", "rrelu_with_noise"})
#: the random overloads whose draws depend on no tensor's values, only on shapes and numbers: they can be
#: made ahead of the step (:meth:`Program.draw`); dropout's ``bernoulli_(p)`` on an empty tensor is one
DRAWN_AHEAD = frozenset({"bernoulli_.float", "uniform_.default", "normal_.default", "exponential_.default",
                         "geometric_.default", "log_normal_.default", "cauchy_.default", "random_.default",
                         "random_.from", "random_.to", "rand.default", "rand_like.default", "randn.default",
                         "randn_like.default", "randint.default", "randint.low", "randint_like.default",
                         "randint_like.low_dtype", "randperm.default"})


def _op_name(fn) -> str:
    """An aten overload's packet name (``bernoulli_`` for ``aten.bernoulli_.float``), else ``""``."""
    schema = getattr(fn, "_schema", None)
    return schema.name.split("::")[-1] if schema is not None and hasattr(fn, "overloadpacket") else ""


def _overload(fn) -> str:
    """``packet.overload`` of an aten overload (``bernoulli_.float``)."""
    schema = fn._schema
    return f"{schema.name.split('::')[-1]}.{schema.overload_name or 'default'}"


def _view_or_reshape(t, size):
    """``aten.view``, or a copy of the same shape where ``t``'s strides at run time admit no view. The
    trace records a view where the fake tensors' strides allowed one, but a kernel may lay its output out
    otherwise at run time (CPU flash attention's output follows its inputs' layout); values are the same."""
    import torch

    try:
        return torch.ops.aten.view.default(t, size)
    except RuntimeError:
        return torch.ops.aten.reshape.default(t, size)


def foreach_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, decoupled_weight_decay=False) -> None:
    """torch.optim's foreach Adam (``torch.optim.adam._multi_tensor_adam``) on the parameters given, in place:
    the update a captured foreach optimizer runs (``autoplace.foreach_adam`` / ``foreach_adamw`` in a
    graph). Its arguments are ``aten._fused_adam_``'s; the step counters have been advanced by the graph's
    own ``add_`` ops, so the function advances copies of them one behind."""
    from torch.optim.adam import _multi_tensor_adam

    _multi_tensor_adam(list(params), list(grads), list(exp_avgs), list(exp_avg_sqs), list(max_exp_avg_sqs),
                       [s - 1 for s in state_steps], None, None, amsgrad=amsgrad,
                       has_complex=any(p.is_complex() for p in params), beta1=beta1, beta2=beta2, lr=lr,
                       weight_decay=weight_decay, eps=eps, maximize=maximize, capturable=False,
                       differentiable=False, decoupled_weight_decay=decoupled_weight_decay)


def foreach_adamw(*args, **kwargs) -> None:
    """:func:`foreach_adam` with AdamW's decoupled weight decay."""
    foreach_adam(*args, **kwargs, decoupled_weight_decay=True)


def _with_schema(fn: Callable, schema_of: str) -> Callable:
    """``fn`` with the schema of aten op ``schema_of``: which arguments it writes (the executor orders
    those writes after their readers)."""
    import torch

    fn._schema = getattr(torch.ops.aten, schema_of).default._schema
    return fn


_AUTOPLACE_TARGETS = {"autoplace.foreach_adam": (foreach_adam, "_fused_adam_"),
                      "autoplace.foreach_adamw": (foreach_adamw, "_fused_adamw_")}


# ---------------------------------------------------------------------- DDP's gradient synchronisation
#: each collective this process takes part in (its name in the graph -> its ``torch.distributed`` process
#: group), set by the distributed runtime when it sets a placement up (:mod:`autoplace.runtime.dist.rank`)
COLLECTIVE_GROUPS: dict[str, Any] = {}
_IN_FLIGHT: dict[int, Any] = {}     # id of a bucket being all-reduced -> its work, until a view waits for it


def bucket(grads: list):
    """DDP's bucket: the gradients flattened into one buffer, in the bucket's order (a ``ddp_bucket`` op)."""
    import torch

    return torch.cat([g.reshape(-1) for g in grads])


def all_reduce(t, name: str):
    """Sum ``t`` over the participants of collective ``name``, in place and asynchronously (DDP posts a bucket's
    all-reduce as soon as it is full and goes on with backward); the first view of the result waits for it."""
    group = COLLECTIVE_GROUPS.get(name)
    if group is None:
        raise ExecutionError(f"collective {name!r}: replicas synchronise their gradients over torch.distributed, "
                             "so only the distributed runtime runs them (runtime='distributed')")
    import torch.distributed as dist

    _IN_FLIGHT[id(t)] = dist.all_reduce(t, group=group, async_op=True)
    return t


def bucket_view(t, offset: int, shape: list[int], dtype: str):
    """One gradient of a reduced bucket: ``prod(shape)`` elements from ``offset``, as ``shape`` (DDP's
    ``gradient_as_bucket_view``); waits for the bucket's all-reduce first."""
    import torch

    work = _IN_FLIGHT.pop(id(t), None)
    if work is not None:
        work.wait()
    out = t[offset:offset + math.prod(shape)].view(shape)
    return out if str(out.dtype).removeprefix("torch.") == dtype else out.to(getattr(torch, dtype))


_SYNC_TARGETS = {"autoplace.bucket": bucket, "autoplace.all_reduce": all_reduce,
                 "autoplace.bucket_view": bucket_view}


def _resolve_target(target: str, where: str) -> Callable:
    if target in _SCALAR_FUNCS:
        return _SCALAR_FUNCS[target]
    if target == "aten.view.default":
        return _view_or_reshape
    if target in _AUTOPLACE_TARGETS:
        fn, schema = _AUTOPLACE_TARGETS[target]
        return _with_schema(fn, schema)
    if target in _SYNC_TARGETS:
        return _SYNC_TARGETS[target]
    parts = target.split(".")
    if parts[0] == "aten" and len(parts) == 3:
        import torch

        try:
            return getattr(getattr(torch.ops.aten, parts[1]), parts[2])
        except (AttributeError, RuntimeError):
            pass
    raise ExecutionError(f"{where}: unknown callable {target!r}")


# ---------------------------------------------------------------------- per-device plans


def get_value(env: dict, r: TRef) -> Any:
    v = env[r.op]
    return v if r.k is None else v[r.k]


def run_reference(program: Program, *, seed: int = 0, steps: int = 1, device: str = "cpu") -> dict[str, Any]:
    """Run ``program`` unplaced in this process for ``steps`` steps; return its outputs and final state.

    The result maps ``"output{j}"`` to the program's outputs (the loss first) and each placeholder name
    to its value after the last step (parameters after their update)."""
    env: dict[int, Any] = {i: program.make_input(i, seed, device) for i in program.placeholders}
    for _ in range(steps):
        program.run_step(env, device)
    out = {f"output{j}": get_value(env, r) for j, r in enumerate(program.outputs)}
    out.update({name: get_value(env, r) for name, r in program.final_versions.items()})
    return out
