"""Trace a PyTorch training step with fake tensors and convert the aten graph to an autoplace Graph.

How: ``make_fx(..., tracing_mode="fake")`` runs a function that calls the model through
``torch.func.functional_call``, differentiates the loss with ``torch.autograd.grad`` (autograd's backward
is traced as aten ops), and runs the user's optimizer class with ``foreach=False`` so that every
parameter gets its own update ops. The optimizer's state (Adam's moments, step counters ...) is found by
one step on fake tensors and passed in as graph inputs, so the captured update is the steady-state one.

Metadata: ``torch.fx.traceback.annotate`` tags every traced node with its ``phase`` and the owning
module path (``scope``, from forward hooks; backward ops inherit the scope of the forward op they
differentiate, through autograd-node hooks). Model code may add its own tags (layer, time step, role)
with :func:`tag`; they land in each op's metadata.

Why one long file: tracing, the aten-to-op conversion and the optimizer's kernels share the trace's
bookkeeping (tensor ids, views, in-place writes) that the conversion reads as it goes.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from autoplace.errors import AutoplaceError
from autoplace.graph import Graph, Op, TensorSpec

__all__ = [
    "CaptureError", "capture_training_step", "capture_inference", "capture_from_factory", "load_factory", "tag",
    "resolve_model", "split_inputs",
]

#: aten ops that only re-describe memory: no FLOPs, no bytes moved on their device.
VIEW_OPS = {
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "squeeze", "unsqueeze",
    "slice", "select", "as_strided", "detach", "alias", "unfold", "split", "split_with_sizes", "chunk",
    "unbind", "lift_fresh_copy", "_reshape_alias", "view_as", "narrow", "diagonal", "expand_as",
}
#: aten ops whose work scales with their input, not their (smaller) output.
REDUCTION_OPS = {
    "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std", "prod", "norm",
    "logsumexp", "var_mean", "linalg_vector_norm", "_log_softmax", "_softmax", "nll_loss_forward",
    "nll_loss2d_forward",
}
_OPTIMIZER_FLAGS = ("foreach", "fused", "capturable", "differentiable")


class CaptureError(AutoplaceError):
    """The model could not be traced (data-dependent control flow, an op fake tensors cannot run ...)."""


def tag(**meta: Any) -> contextlib.AbstractContextManager:
    """Context manager adding ``meta`` (layer, step, role ...) to every op traced inside it.

    In eager mode it only sets a dict; model code can use it unconditionally::

        with tag(layer=l, step=t, role="lstm"):
            h, c = cell(x, (h, c))
    """
    import torch.fx.traceback as fxt

    return fxt.annotate(meta)


# ---------------------------------------------------------------------- scope tracking
class _Scopes:
    """Forward hooks that keep the current module path in the traced nodes' ``custom`` meta."""

    def __init__(self, model):
        import torch.fx.traceback as fxt

        self._fxt = fxt
        self.names: list[str] = []
        self._ctx: list[Any] = []
        self._handles = []
        for name, module in model.named_modules():
            if not name:
                continue
            self._handles.append(module.register_forward_pre_hook(self._enter(name)))
            self._handles.append(module.register_forward_hook(self._leave))

    def _enter(self, name: str):
        def hook(module, args):
            ctx = self._fxt.annotate({"scope": name})
            ctx.__enter__()
            self._ctx.append(ctx)
            self.names.append(name)
        return hook

    def _leave(self, module, args, output):
        self.names.pop()
        self._ctx.pop().__exit__(None, None, None)

    @property
    def current(self) -> str | None:
        return self.names[-1] if self.names else None

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def _grad_fn_tagger(scopes: _Scopes):
    """A TorchFunctionMode recording, on each new autograd node, the scope and tags it was created under.

    Each top-level torch call of the forward pass gets a number, ``fwd``: its aten ops carry it, and so do
    the backward ops of the autograd nodes it created — the link between an op and its gradient that
    TensorFlow's ``colocate_gradients_with_ops`` uses (the ``gradient`` grouping rule)."""
    import torch
    import torch.fx.traceback as fxt
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    class TagGradFn(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            TagGradFn.calls += 1
            fwd = TagGradFn.calls
            with fxt.annotate({"fwd": fwd}):
                out = func(*args, **(kwargs or {}))
            custom = {k: v for k, v in (fxt.current_meta.get("custom") or {}).items() if k != "phase"}
            custom["fwd"] = fwd
            custom.setdefault("scope", scopes.current)
            if custom["scope"] is not None:
                for t in tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                        t.grad_fn.metadata.setdefault("autoplace_scope", custom)
            return out

    return TagGradFn()


def _scope_backward(roots: Sequence[Any]) -> None:
    """Hook every autograd node reachable from ``roots`` so its backward ops carry its forward scope.

    Nodes created inside C++ composites (``log_softmax`` within ``cross_entropy``) were never seen by
    Python; they inherit the scope of the node whose gradient feeds them."""
    import torch.fx.traceback as fxt

    seen: set[int] = set()
    stack = [(r, None) for r in roots]
    while stack:
        node, inherited = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        scope = node.metadata.get("autoplace_scope", inherited) if hasattr(node, "metadata") else inherited
        if scope is not None:
            held: list[Any] = []

            def pre(grad_outputs, scope=scope, held=held):
                ctx = fxt.annotate(dict(scope))  # the forward op's scope and tags (step, layer, role)
                ctx.__enter__()
                held.append(ctx)

            def post(grad_inputs, grad_outputs, held=held):
                if held:
                    held.pop().__exit__(None, None, None)

            node.register_prehook(pre)
            node.register_hook(post)
        stack.extend((nxt, scope) for nxt, _ in node.next_functions)


# ---------------------------------------------------------------------- tracing
def _implementation(group: dict[str, Any]) -> str:
    """How PyTorch runs a param group's update: ``"fused"`` (one kernel for all its parameters),
    ``"foreach"`` (one multi-tensor kernel per step of the update), ``"for-loop"`` (kernels per parameter),
    or ``"default"`` (neither flag set: foreach on CUDA, the for-loop elsewhere — torch.optim's
    ``_default_to_fused_or_foreach``)."""
    if group.get("fused"):
        return "fused"
    if group.get("foreach") is None:
        return "default"
    return "foreach" if group["foreach"] else "for-loop"


def _optimizer_groups(model, optimizer) -> tuple[type, list[tuple[list[str], dict[str, Any]]]]:
    """The optimizer's class and, per param group, the parameter names and hyper-parameters."""
    by_id = {id(p): n for n, p in model.named_parameters()}
    groups = []
    for g in optimizer.param_groups:
        names = []
        for p in g["params"]:
            if id(p) not in by_id:
                raise CaptureError("the optimizer holds a tensor that is not a parameter of the model")
            names.append(by_id[id(p)])
        hyper = {k: v for k, v in g.items() if k != "params" and k not in _OPTIMIZER_FLAGS}
        groups.append((names, hyper))
    return type(optimizer), groups


#: optimizers whose per-parameter update becomes one op running PyTorch's fused kernel on that parameter
#: (where the user asked for foreach or fused): the class name -> the aten kernel
_FUSED_KERNELS = {"Adam": "aten._fused_adam_.default", "AdamW": "aten._fused_adamw_.default"}
#: and the foreach implementation's: torch.optim's own ``_multi_tensor_adam`` on that parameter
#: (:func:`autoplace.runtime.program.foreach_adam`), which rounds as eager foreach does (the fused kernel
#: does not)
_FOREACH_KERNELS = {"Adam": "autoplace.foreach_adam", "AdamW": "autoplace.foreach_adamw"}


def _update_params(ops: list[Op], params: Iterable[str]) -> dict[str, str]:
    """The parameter each update op works for: the first parameter, optimizer state (``p.key``) or update op
    of another parameter among its inputs, in order (a co-location group may hold several parameters:
    a norm layer's weight and bias)."""
    params = set(params)
    state_of = {op.name: op.name.rsplit(".", 1)[0] for op in ops if op.type == "optimizer_state"}
    out: dict[str, str] = {}
    for op in ops:
        if op.phase != "update" or not op.type.startswith(("aten.", "autoplace.")):
            continue
        for ref in (*op.inputs, *op.control_inputs):
            name = ref.split(":")[0]
            p = name if name in params else state_of.get(name) or out.get(name)
            if p is not None:
                out[op.name] = p
                break
    return out


def _fuse_updates(ops: list[Op], groups: list[tuple[list[str], dict[str, Any]]], modes: list[str], opt_name: str,
                  scalars: dict[str, dict] | None = None) -> list[Op]:
    """Each parameter's traced update (Adam: a step counter's ``add_``, then seven elementwise ops) as its
    step ``add_`` and **one op** running PyTorch's own multi-tensor update on that parameter alone, for the
    param groups whose updates PyTorch runs as multi-tensor kernels — still placeable with its parameter.
    ``fused``: ``aten._fused_adam_`` over one-tensor lists; ``foreach``: torch.optim's
    ``_multi_tensor_adam`` (``autoplace.foreach_adam``). Both are elementwise, so each computes for the
    parameter what the user's implementation computes, bit for bit. The op's FLOPs and bytes touched are
    the sum of the ops it replaces (a foreach implementation runs each of them as a kernel); its launches
    are set by :func:`_launch_groups`. Other optimizers, hyper-parameters the kernel does not take, and the
    for-loop or default implementations keep their traced ops."""
    if opt_name not in _FUSED_KERNELS:
        return ops
    fuse: dict[str, dict[str, Any]] = {}
    kernels: dict[str, str] = {}
    for (names, hyper), mode in zip(groups, modes):
        lr, betas = hyper.get("lr"), hyper.get("betas")
        if mode not in ("foreach", "fused") or not isinstance(lr, float) or not isinstance(betas, tuple) or \
                hyper.get("capturable") or hyper.get("differentiable"):
            continue
        # Adam with decoupled weight decay is AdamW (torch.optim.AdamW sets it)
        kernel = (_FUSED_KERNELS if mode == "fused" else _FOREACH_KERNELS)[
            "AdamW" if hyper.get("decoupled_weight_decay") else opt_name]
        kw = {"lr": lr, "beta1": float(betas[0]), "beta2": float(betas[1]),
              "weight_decay": float(hyper.get("weight_decay", 0.0)), "eps": float(hyper.get("eps", 1e-8)),
              "amsgrad": bool(hyper.get("amsgrad", False)), "maximize": bool(hyper.get("maximize", False))}
        for n in names:
            fuse[n], kernels[n] = kw, kernel
    if not fuse:
        return ops
    names = {op.name for op in ops}
    out_bytes = {op.name: op.out_bytes for op in ops}

    def touched(op: Op) -> float:  # the roofline's bytes: the op's own figure, else its inputs and outputs
        if op.meta.get("bytes_touched") is not None:
            return float(op.meta["bytes_touched"])
        ins = 0
        for ref in op.inputs:
            name, _, k = ref.partition(":")
            ins += out_bytes[name][int(k) if k else 0]
        return float(ins + sum(op.out_bytes))

    # the scalar reading each parameter's scheduled inputs: the fused kernel takes them in place of numbers
    scheduled: dict[str, dict[str, str]] = {}
    for name, spec in (scalars or {}).items():
        ref = spec["args"][0].get("ref", "") if spec.get("args") and isinstance(spec["args"][0], dict) else ""
        p, _, key = str(ref).rpartition(".")
        if spec.get("target") == "aten._local_scalar_dense.default" and key in SCHEDULED:
            scheduled.setdefault(p, {})[key] = name
    param_of = _update_params(ops, fuse)
    update: dict[str, list[Op]] = {}
    for op in ops:
        if param_of.get(op.name) in fuse:
            update.setdefault(param_of[op.name], []).append(op)
    replaced: dict[str, Op] = {}   # the last op of each fused update -> the fused op
    dropped: set[str] = set()
    for p, members in update.items():
        step = f"{p}.step"
        steps = [op for op in members if (op.meta.get("call") or {}).get("args", [None])[0] == {"ref": step}]
        rest = [op for op in members if op not in steps]
        own = {op.name for op in members} | {p, step, f"{p}.exp_avg", f"{p}.exp_avg_sq", f"{p}.max_exp_avg_sq"}
        grad = {i for op in rest for i in op.inputs if i.split(":")[0] not in own}   # what the update reads
        if len(steps) != 1 or not rest or f"{p}.exp_avg" not in names or len(grad) != 1:
            continue
        grads = {p: grad.pop()}
        kw, kernel = fuse[p], kernels[p]
        kw = {**kw, **{key: {"scalar": name} for key, name in scheduled.get(p, {}).items()}}
        ref = lambda name: [{"ref": name}]  # noqa: E731
        max_sq = ref(f"{p}.max_exp_avg_sq") if kw["amsgrad"] and f"{p}.max_exp_avg_sq" in names else []
        call = {"target": kernel, "args": [ref(p), ref(grads[p]), ref(f"{p}.exp_avg"), ref(f"{p}.exp_avg_sq"), max_sq,
                                            ref(steps[0].name)], "kwargs": kw}
        inputs = [p, grads[p], f"{p}.exp_avg", f"{p}.exp_avg_sq", *([max_sq[0]["ref"]] if max_sq else []),
                  steps[0].name]
        last = rest[-1]
        ctrl = tuple(f"{p}.{key}" for key in scheduled.get(p, {}))
        replaced[last.name] = Op(f"{p}.update", kernel.removesuffix(".default"), tuple(inputs), ctrl, output_bytes=(0,),
                                 flops=sum(op.flops for op in rest), colocation_group=p, scope=last.scope,
                                 phase="update", meta={"view": True, "call": call, "fused_ops": len(rest),
                                                       "bytes_touched": sum(touched(op) for op in rest)})
        dropped.update(op.name for op in rest if op is not last)
    out = []
    for op in ops:
        if op.name in dropped:
            continue
        out.append(replaced.get(op.name, op))
    # nothing outside a fused update may read what it replaced
    gone = dropped | set(replaced)
    for op in out:
        if op.name not in {r.name for r in replaced.values()} and any(
                i.split(":")[0] in gone for i in (*op.inputs, *op.control_inputs)):
            return ops
    return out


def _launch_groups(ops: list[Op], groups: list[tuple[list[str], dict[str, Any]]], modes: list[str]) -> list[Op]:
    """Mark each parameter's update ops with the multi-tensor kernel that runs them (op meta
    ``launch_group``, docs/formats.md). The update is traced per parameter (``foreach=False``: every op
    placeable with its parameter); PyTorch's foreach implementation runs the k-th op of every parameter's
    update as one ``torch._foreach_*`` call over the group's parameters on a device, so the k-th ops form
    one launch group; the fused implementation runs the whole update of the group's parameters on a
    device as one kernel, so they all form one. ``default`` is foreach on GPUs only."""
    import dataclasses

    param_group = {n: k for k, (names, _) in enumerate(groups) for n in names}
    param_of = _update_params(ops, param_group)
    position: dict[str, int] = {}
    out = []
    for op in ops:
        p = param_of.get(op.name)
        k = param_group.get(p)
        if k is None or modes[k] == "for-loop":
            out.append(op)
            continue
        j = position[p] = position.get(p, -1) + 1
        name = f"optimizer.{k}" if modes[k] == "fused" else f"optimizer.{k}.{j}.{op.type}"
        launches = 1
        if "fused_ops" in op.meta:   # one op standing for several: each a foreach call, or the fused kernel
            name = f"optimizer.{k}.update"
            launches = 1 if modes[k] == "fused" else int(op.meta["fused_ops"])
        meta = {**op.meta, "launch_group": name, "group_launches": launches}
        if modes[k] == "default":
            meta["group_device_types"] = ["gpu"]
        out.append(dataclasses.replace(op, meta=meta))
    return out


#: the hyper-parameters a captured step takes as inputs (one float64 scalar per parameter, named
#: ``"<parameter>.<key>"``): the learning rate, and Adam's betas where the optimizer reads them as numbers
#: without branching on them (momentum is not: SGD and RMSprop test it against 0)
SCHEDULED = ("lr", "beta1", "beta2")
BETAS_AS_INPUTS = frozenset({"Adam", "AdamW", "NAdam"})


def scheduled_value(group: dict[str, Any], key: str) -> float | None:
    """A param group's value of scheduled hyper-parameter ``key`` (``beta1``/``beta2``: of its ``betas``),
    or None where it has none that is a Python number."""
    if key == "lr":
        v = group.get("lr")
    else:
        betas = group.get("betas")
        v = betas[SCHEDULED.index(key) - 1] if isinstance(betas, tuple) and len(betas) == 2 else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _scheduled(opt_cls: type, groups: list[tuple[list[str], dict[str, Any]]], layout: dict[str, dict[str, tuple]]
               ) -> dict[str, dict[str, Any]]:
    """The captured step's scheduled inputs: per trained parameter, per key of :data:`SCHEDULED` its group
    has as a Python number, a float64 scalar holding it exactly (as torch.optim reads it). Schedulers change
    ``param_groups[k]["lr"]`` (and ``"betas"``: OneCycleLR's momentum cycle) between steps; as inputs, the
    new values reach the placed step without capturing again."""
    import torch

    keys = SCHEDULED if opt_cls.__name__ in BETAS_AS_INPUTS else SCHEDULED[:1]
    out: dict[str, dict[str, Any]] = {}
    for names, hyper in groups:
        for n in names:
            for key in keys:
                v = scheduled_value(hyper, key)
                if v is None:
                    continue
                if key in layout.get(n, {}):
                    raise CaptureError(f"parameter {n!r} has optimizer state named {key!r}: cannot name its "
                                       f"{key} input")
                out.setdefault(n, {})[key] = torch.tensor(v, dtype=torch.float64)
    return out


def _state_layout(opt_cls, groups, params: dict) -> dict[str, dict[str, tuple]]:
    """Run one optimizer step on fake tensors to learn each parameter's state (key -> shape, dtype, device)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = {n: torch.empty_like(p).requires_grad_() for n, p in params.items()}
        opt = opt_cls([{"params": [fake[n] for n in names], **hyper} for names, hyper in groups], foreach=False)
        for p in fake.values():
            p.grad = torch.zeros_like(p)
        opt.step()
        return {n: {k: (tuple(v.shape), v.dtype, v.device) for k, v in opt.state[fake[n]].items()
                    if isinstance(v, torch.Tensor)} for n in fake}


class _Held(logging.Filter):
    """Holds back the records of torch's fake-tensor logger while a step is traced: a meta kernel that
    fails (a shape the model's code does not accept) logs its traceback before raising, and the error it
    raises is what the user is told, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


_FAKE_TENSOR_LOGGER = "torch._subclasses.fake_tensor"


def _trace(fn: Callable, args: tuple, what: str):
    import torch.fx.traceback as fxt
    from torch.fx.experimental.proxy_tensor import make_fx

    held, log = _Held(), logging.getLogger(_FAKE_TENSOR_LOGGER)
    log.addFilter(held)
    try:
        with fxt.preserve_node_meta():
            return make_fx(fn, tracing_mode="fake")(*args)
    except AutoplaceError:
        raise
    except Exception as e:  # noqa: BLE001 - torch raises many kinds; all mean "cannot trace"
        text = " ".join(str(e).split())
        if ("data-dependent" in text or "DataDependent" in type(e).__name__
                or "GuardOnDataDependent" in type(e).__name__):
            why = "data-dependent Python control flow or output shape"
        elif "convert all Tensors to FakeTensors" in text:
            why = ("the model or loss_fn uses a tensor from outside it (a closure, a loss's class weights): "
                   "register it as a buffer of the model, or pass it among the targets")
        else:
            why = type(e).__name__
        where = _user_line(e)
        raise CaptureError(f"cannot trace {what}: {why}" + (f" at {where}" if where else "")
                           + f": {_first_sentence(text)}") from None
    finally:
        log.removeFilter(held)


def _first_sentence(text: str) -> str:
    """The first sentence of an exception's message, whole (torch's run on with advice after it)."""
    import re

    m = re.match(r"(.+?[.!?])(?=\s|$)", text)
    return m.group(1) if m else text


def _user_line(e: BaseException) -> str | None:
    """``file:line in function `source``` of the innermost frame of ``e``'s traceback in the user's code —
    neither torch's, nor autoplace's, nor the Python library's — or None."""
    import os
    import sysconfig
    import traceback

    import torch

    skip = tuple(os.path.dirname(p) + os.sep for p in (torch.__file__, os.path.dirname(__file__))) + \
        tuple(sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "purelib", "platlib"))
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(skip) and not f.filename.startswith("<")]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}" + (f" `{f.line.strip()}`" if f.line else "")


def _as_tuple(x: Any) -> tuple:
    if x is None:
        return ()
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def resolve_model(model, example_inputs: Any = None) -> tuple[Any, Any]:
    """``(module, example_inputs)`` to capture: a ``torch.export`` ``ExportedProgram`` becomes its module
    (its own example inputs by default, as ``(args, kwargs)``); anything that is not an ``nn.Module``
    instance is one clear error."""
    import torch

    if isinstance(model, torch.export.ExportedProgram):
        if example_inputs is None and getattr(model, "example_inputs", None) is not None:
            example_inputs = tuple(model.example_inputs)
        model = model.module()
    if isinstance(model, type):
        raise CaptureError(f"model: got the class {model.__name__}, not a model: pass an instance "
                           f"({model.__name__}(...))")
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"model: expected a torch.nn.Module (or a torch.export ExportedProgram), got "
                           f"{type(model).__name__}")
    if example_inputs is None:
        raise CaptureError("no example inputs: give a batch of the shapes the model will see")
    return model, example_inputs


def split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    """The model's call as ``(args, kwargs)``: a dict is keyword arguments (``model(**inputs)``, as Hugging
    Face models take them), a tuple or list positional ones, a single value one argument, and an
    ``(args_tuple, kwargs_dict)`` pair both."""
    x = example_inputs
    if isinstance(x, dict):
        return (), dict(x)
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (tuple, list)) and isinstance(x[1], dict):
        return tuple(x[0]), dict(x[1])
    return _as_tuple(x), {}


def _check_optimizer(optimizer) -> None:
    import torch

    if isinstance(optimizer, type):
        raise CaptureError(f"optimizer: got the class {optimizer.__name__}, not an optimizer: pass an instance, "
                           f"e.g. {optimizer.__name__}(model.parameters(), lr=...)")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise CaptureError(f"optimizer: expected a torch.optim optimizer, got {type(optimizer).__name__}")


def _check_inputs(model, args: tuple, kwargs: dict, targets: tuple) -> None:
    """Inputs and targets must be tensors (or None). A model and inputs all on the ``meta`` device capture
    (only shapes are needed: the zoo builds its large models so); some on ``meta`` and some not fail in the
    tracer with a confusing device error, so that is one clear error here, naming the first on ``meta``."""
    import torch
    from torch.utils._pytree import tree_leaves

    named = [(f"input {k}", v) for k, v in enumerate(tree_leaves(args))] + \
        [(f"input {k!r}", v) for k, val in kwargs.items() for v in tree_leaves(val)] + \
        [(f"target {k}", v) for k, v in enumerate(targets)]
    for what, v in named:
        if v is not None and not isinstance(v, torch.Tensor):
            raise CaptureError(f"{what} is a {type(v).__name__}, not a tensor: a step's inputs and targets are "
                               "tensors (make a setting like this a default argument or an attribute of the model)")
    named += [(f"parameter {n!r}", p) for n, p in model.named_parameters()]
    tensors = [(what, t) for what, t in named if isinstance(t, torch.Tensor)]
    meta = [what for what, t in tensors if t.is_meta]
    if meta and len(meta) < len(tensors):
        real = next(what for what, t in tensors if not t.is_meta)
        raise CaptureError(f"{meta[0]} is on the meta device but {real} is not: put the model and its example "
                           "inputs on one kind of device (meta for shapes only, or the CPU)")


def capture_training_step(model, example_inputs: Any, loss_fn: Callable, optimizer, *,
                          targets: Any = None, name: str | None = None, micro_batches: int = 1,
                          batch_dim: int = 0) -> Graph:
    """Capture one training step of ``model`` as an autoplace Graph (nothing is computed).

    ``model``: an ``nn.Module`` or a ``torch.export`` ``ExportedProgram``; ``example_inputs``: one batch —
    a tensor, a tuple of positional arguments, a dict of keyword arguments, or ``(args, kwargs)``;
    ``loss_fn(outputs, *targets)`` must return a scalar; ``optimizer`` is a configured
    ``torch.optim`` optimizer over (some of) the model's parameters — its class and per-group
    hyper-parameters are reused with ``foreach=False`` so each parameter gets its own update ops, which
    are marked with the multi-tensor kernels PyTorch runs them in (``foreach``/``fused`` as configured,
    foreach on GPUs when unset: :func:`_launch_groups`).
    Parameters and optimizer state become ops with ``param_bytes``; each parameter's update ops and the
    op producing its gradient share its ``colocation_group`` (:func:`_group_gradients`), and ops writing
    a parameter or buffer in place join its group (:func:`_group_hidden_writes`).

    ``micro_batches=M`` captures gradient accumulation: every input and target tensor is cut along its
    first dimension (``batch_dim``: another, e.g. 1 for a ``[steps, batch]`` sequence) into ``M`` equal
    micro-batches, each runs forward and backward (its ops carry
    ``meta["micro_batch"]``), the gradients of ``loss / M`` are summed, and one update follows; the step's
    loss is the micro-batches' mean. With a mean-reduced loss that is the full batch's loss and gradient
    up to float reassociation; a BatchNorm normalises each micro-batch by its own statistics and updates
    its running statistics once per micro-batch, as eager gradient accumulation does.
    """
    import torch

    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise CaptureError(f"micro_batches must be a positive integer, got {micro_batches!r}")
    model, example_inputs = resolve_model(model, example_inputs)
    _check_optimizer(optimizer)
    if not callable(loss_fn):
        raise CaptureError(f"loss_fn: expected a function loss_fn(outputs, *targets), got {type(loss_fn).__name__}")
    (inputs, kwargs), targets = split_inputs(example_inputs), _as_tuple(targets)
    _check_inputs(model, inputs, kwargs, targets)
    if micro_batches > 1:
        _check_micro_batches(inputs, kwargs, targets, micro_batches, batch_dim)
    opt_cls, groups = _optimizer_groups(model, optimizer)
    modes = [_implementation(g) for g in optimizer.param_groups]
    all_params = dict(model.named_parameters())
    # a parameter with requires_grad=False gets no gradient, so the optimizer leaves it alone (as eager)
    kept_groups = [(kept, hyper, mode) for (names, hyper), mode in zip(groups, modes)
                   if (kept := [n for n in names if all_params[n].requires_grad])]
    groups, modes = [(n, h) for n, h, _ in kept_groups], [m for *_, m in kept_groups]
    trained = [n for names, _ in groups for n in names]
    params = {n: all_params[n].detach() for n in trained}
    frozen = {n: p.detach() for n, p in all_params.items() if n not in params}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    try:
        layout = _state_layout(opt_cls, groups, params)
    except AutoplaceError:
        raise
    except Exception as e:  # noqa: BLE001 - an optimizer whose step fake tensors cannot run (ASGD)
        raise CaptureError(f"optimizer {opt_cls.__name__} cannot be captured: its step does not run on fake tensors "
                           f"({type(e).__name__})") from None
    state = {n: {k: torch.zeros(shape, dtype=dtype, device=device) for k, (shape, dtype, device) in layout[n].items()}
             for n in trained}
    hyper = _scheduled(opt_cls, groups, layout)
    scopes = _Scopes(model)

    def pass_(live, frozen, buffers, inputs, kwargs, targets, scale):
        """One forward and backward pass: the loss and the gradients of ``loss * scale``."""
        import torch.fx.traceback as fxt

        with fxt.annotate({"phase": "forward"}), _grad_fn_tagger(scopes):
            out = torch.func.functional_call(model, {**live, **frozen, **buffers}, inputs, kwargs)
            with fxt.annotate({"scope": "loss"}):
                loss = loss_fn(out, *targets)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise CaptureError(f"loss_fn must return a scalar tensor (reduce it, e.g. .mean()), got {got}")
        with fxt.annotate({"phase": "backward"}):
            _scope_backward([loss.grad_fn])
            grads = torch.autograd.grad(loss * scale if scale != 1 else loss, list(live.values()), allow_unused=True)
        return loss, grads

    def step(params, frozen, buffers, state, hyper, inputs, kwargs, targets):
        import torch.fx.traceback as fxt

        # every tag this capture sets, unset for the step as a whole: a trace that failed part-way (a
        # micro-batch too small for a BatchNorm) can leave torch's tracing context holding its last ones
        with fxt.annotate({"phase": None, "micro_batch": None}):
            return _step(params, frozen, buffers, state, hyper, inputs, kwargs, targets)

    def _step(params, frozen, buffers, state, hyper, inputs, kwargs, targets):
        import torch.fx.traceback as fxt

        live = {n: p.requires_grad_() for n, p in params.items()}
        if micro_batches == 1:
            loss, grads = pass_(live, frozen, buffers, inputs, kwargs, targets, 1)
        else:  # gradient accumulation: each micro-batch's pass, the gradients of loss / M summed
            losses, grads = [], None
            for m in range(micro_batches):
                with fxt.annotate({"micro_batch": m}):
                    cut = _micro_batch((inputs, kwargs, targets), m, micro_batches, batch_dim)
                    loss_m, grads_m = pass_(live, frozen, buffers, *cut, 1.0 / micro_batches)
                    losses.append(loss_m.detach())
                    grads = list(grads_m) if grads is None else [
                        a if b is None else b if a is None else a + b for a, b in zip(grads, grads_m)]
            with fxt.annotate({"phase": "forward", "scope": "loss"}):
                loss = torch.stack(losses).mean()
        with fxt.annotate({"phase": "update", "scope": "optimizer"}), torch.no_grad():
            # one param group per parameter, each reading its learning rate from its own input (as a Python
            # number, the way torch.optim reads it), so the update ops stay with their parameter
            opt = opt_cls([{**h, "params": [live[n]]} for names, h in groups for n in names], foreach=False)
            for group, n in zip(opt.param_groups, (n for names, _ in groups for n in names)):
                h = hyper.get(n, {})
                if "lr" in h:
                    group["lr"] = h["lr"].item()
                if "beta1" in h:
                    group["betas"] = (h["beta1"].item(), h["beta2"].item())
            for (n, p), g in zip(live.items(), grads):
                p.grad = g                         # None (unused in the loss): skipped, as eager skips it
                opt.state[p] = dict(state[n])
            opt.step()
        return loss, [g for g in grads]

    try:
        gm = _trace(step, (params, frozen, buffers, state, hyper, inputs, kwargs, targets),
                    f"{type(model).__name__} training step")
    finally:
        scopes.remove()
    graph = _to_graph(gm, name or type(model).__name__, trained, list(frozen), list(buffers), layout, training=True,
                      hyper={n: {k: float(t) for k, t in h.items()} for n, h in hyper.items()})
    fused = _fuse_updates(list(graph.ops), groups, modes, opt_cls.__name__, graph.meta["program"]["scalars"])
    graph = Graph(_launch_groups(fused, groups, modes), name=graph.name,
                  meta={**graph.meta, "optimizer": {"class": opt_cls.__name__, "implementation": sorted(set(modes))},
                        **({"batch_dim": batch_dim} if micro_batches > 1 else {})})
    return _with_modules(_with_tied(graph, model), model)


def _check_micro_batches(inputs, kwargs, targets, m: int, dim: int = 0) -> None:
    """Every input and target tensor has one size along dimension ``dim``, which ``m`` divides (one clear
    error else)."""
    import torch
    from torch.utils._pytree import tree_flatten

    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
        raise CaptureError(f"batch_dim must be a non-negative integer, got {dim!r}")
    leaves = [t for t in tree_flatten((inputs, kwargs, targets))[0] if isinstance(t, torch.Tensor)]
    sizes = {int(t.shape[dim]) if t.dim() > dim else None for t in leaves}
    which = "first dimension" if dim == 0 else f"dimension {dim}"
    if len(sizes) != 1 or None in sizes:
        raise CaptureError(f"micro_batches={m}: every input and target must be a tensor batched along its {which}, "
                           f"of one size (got sizes {sorted(map(str, sizes))})")
    (n,) = sizes
    if n % m:
        raise CaptureError(f"micro_batches={m} does not divide the batch of {n}")


def _micro_batch(batch, m: int, count: int, dim: int = 0):
    """Micro-batch ``m`` of ``count`` of a batch: each tensor's ``m``-th equal slice along dimension ``dim``."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.chunk(count, dim)[m] if isinstance(t, torch.Tensor) else t, batch)


def _with_modules(graph: Graph, model) -> Graph:
    """Record each module's class by path in ``graph.meta["modules"]`` (what ``keep_whole`` names, as
    Accelerate's ``no_split_module_classes``)."""
    graph.meta["modules"] = {path: type(m).__name__ for path, m in model.named_modules()}
    return graph


def _with_tied(graph: Graph, model) -> Graph:
    """Record parameters and buffers reachable under a second name (tied weights: an output layer sharing
    the embedding's matrix) in ``graph.meta["tied"]``: alias -> the name the graph has it under."""
    first: dict[int, str] = {}
    tied: dict[str, str] = {}
    for n, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if id(t) in first:
            tied[n] = first[id(t)]
        else:
            first[id(t)] = n
    if tied:
        graph.meta["tied"] = tied
    return graph


def capture_inference(model, example_inputs: Any, *, name: str | None = None) -> Graph:
    """Capture the forward pass of ``model`` (no backward, no update) as an autoplace Graph."""
    import torch

    model, example_inputs = resolve_model(model, example_inputs)
    inputs, kwargs = split_inputs(example_inputs)
    _check_inputs(model, inputs, kwargs, ())
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    scopes = _Scopes(model)

    def forward(params, buffers, inputs, kwargs):
        import torch.fx.traceback as fxt

        with fxt.annotate({"phase": "forward"}), torch.no_grad():
            return torch.func.functional_call(model, {**params, **buffers}, inputs, kwargs)

    try:
        gm = _trace(forward, (params, buffers, inputs, kwargs), f"{type(model).__name__} forward")
    finally:
        scopes.remove()
    return _with_tied(_to_graph(gm, name or type(model).__name__, [], list(params), list(buffers), {}, training=False),
                      model)


# ---------------------------------------------------------------------- fx -> autoplace
def _tensors(val: Any) -> list | None:
    """The tensors of a node's value (one, or a tuple/list of them); None if it holds none."""
    import torch

    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)) and val and all(isinstance(v, torch.Tensor) or v is None for v in val):
        return [v for v in val]
    return None


def _spec(t) -> TensorSpec:
    if t is None:
        return TensorSpec((0,), "float32")
    return TensorSpec(tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."))


def _numel(t) -> int:
    return math.prod(int(d) for d in t.shape) if t is not None else 0


def _op_flops(node, name: str, outs: list) -> float:
    from torch.utils.flop_counter import flop_registry

    packet = node.target.overloadpacket
    if packet in flop_registry:
        import torch.fx as fx
        from torch.utils._pytree import tree_map

        args = tree_map(lambda a: a.meta.get("val") if isinstance(a, fx.Node) else a, node.args)
        kwargs = tree_map(lambda a: a.meta.get("val") if isinstance(a, fx.Node) else a, node.kwargs)
        out_val = node.meta.get("val")
        try:
            return float(flop_registry[packet](*args, **kwargs, out_val=out_val))
        except Exception:  # noqa: BLE001 - fall back to element counting for odd overloads
            pass
    if name in VIEW_OPS:
        return 0.0
    if name in REDUCTION_OPS:
        ins = [a.meta.get("val") for a in node.all_input_nodes]
        return float(max((_numel(v) for v in ins if hasattr(v, "shape")), default=0))
    return float(sum(_numel(t) for t in outs))


def _to_graph(gm, name: str, trained: list[str], frozen: list[str], buffers: list[str],
              layout: dict[str, dict[str, tuple]], *, training: bool,
              hyper: dict[str, dict[str, float]] | None = None) -> Graph:
    import torch
    import torch.fx as fx

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    kinds: list[tuple[str, str, str | None]] = []  # (op name, type, colocation group)
    for n in trained:
        kinds.append((n, "parameter", n))
    for n in frozen:
        kinds.append((n, "parameter", n))
    for n in buffers:
        kinds.append((n, "buffer", n))
    for n in trained:
        for key in layout.get(n, {}):
            kinds.append((f"{n}.{key}", "optimizer_state", n))
    hyper = hyper or {}
    kinds += [(f"{n}.{key}", "hyperparameter", n) for n in trained for key in hyper.get(n, {})]
    n_inputs = len(placeholders) - len(kinds)
    kinds += [(f"input{i}", "input", None) for i in range(n_inputs)]

    ops: list[Op] = []
    ref: dict[fx.Node, list[str]] = {}        # node -> producer refs ("op" or "op:k") it stands for
    control: dict[fx.Node, list[str]] = {}    # non-tensor nodes -> the ops they depend on
    scalars: dict[str, dict] = {}             # python-number nodes the executor recomputes
    encode = _Encoder(ref, scalars)
    group_of: dict[str, str] = {}
    scope_of_param = {}

    for node, (opname, kind, group) in zip(placeholders, kinds):
        val = node.meta.get("val")
        spec = _spec(val)
        resident = spec.nbytes if kind != "input" else 0
        phase = "update" if kind in ("optimizer_state", "hyperparameter") else "forward"
        scope = opname.rsplit(".", 1)[0] if "." in opname and kind != "input" else None
        if kind in ("optimizer_state", "hyperparameter"):
            scope = group.rsplit(".", 1)[0] if "." in group else group
        # a parameter's output *is* its resident memory: mark it a view so it is not allocated twice
        meta = {"view": True} if resident else {}
        if kind == "hyperparameter":
            meta["value"] = hyper[group][opname.rpartition(".")[2]]   # the captured value: runs given none use it
        ops.append(Op(opname, kind, outputs=(spec,), param_bytes=resident, colocation_group=group, scope=scope,
                      phase=phase, meta=meta))
        ref[node] = [opname]
        if group:
            group_of[opname] = group
            scope_of_param[group] = scope

    def deps(arg) -> tuple[list[str], list[str]]:
        data, ctrl = [], []
        for a in _flatten(arg):
            if not isinstance(a, fx.Node):
                continue
            if a in ref:
                data.extend(ref[a])
            elif a in control:
                ctrl.extend(control[a])
        return data, ctrl

    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        val = node.meta.get("val")
        data, ctrl = deps((node.args, node.kwargs))
        target = node.target
        if target is __import__("operator").getitem and node.args[0] in ref:
            src = node.args[0]
            base = ref[src][0].split(":")[0]
            if len(_tensors(src.meta.get("val")) or []) > 1:
                ref[node] = [f"{base}:{int(node.args[1])}"]
            else:
                ref[node] = ref[src]
            continue
        outs = _tensors(val)
        if outs is None or not isinstance(target, torch._ops.OpOverload) or getattr(target, "namespace", "") != "aten":
            control[node] = sorted(set(data + ctrl))  # python scalars, profiler markers: dependencies only
            if _is_number(val):
                scalars[node.name] = {"target": _target_name(target), "args": encode(list(node.args)),
                                      "kwargs": encode(dict(node.kwargs))}
            continue
        opname = node.name
        short = target.overloadpacket.__name__
        custom = dict(node.meta.get("custom") or {})
        phase = custom.pop("phase", None)
        scope = custom.pop("scope", None)
        specs = tuple(_spec(t) for t in outs)
        flops = _op_flops(node, short, outs)
        meta = {k: v for k, v in custom.items() if isinstance(v, (str, int, float, bool))}
        if scope is not None and "step" in meta:
            scope = f"{scope}.t{meta['step']}"  # unrolled recurrences: encoder.layers.1.t17
        seen_data = list(dict.fromkeys(data))
        written = _written_ref(node, target, ref)
        if short in VIEW_OPS:
            meta["bytes_touched"] = 0
            meta["view"] = True
        elif written is not None and seen_data and seen_data[0] == written:
            meta["view"] = True  # an in-place op (add_, addcdiv_): its output is its self, allocated before
        meta["call"] = {"target": _target_name(target), "args": encode(list(node.args)),
                        "kwargs": encode(dict(node.kwargs))}
        group = None
        if phase == "update":
            group = next((group_of[d.split(":")[0]] for d in data + ctrl if d.split(":")[0] in group_of), None)
            if group is not None:
                scope = scope_of_param.get(group, scope)
        elif written is not None and written.split(":")[0] in group_of:
            # an in-place write to a parameter or buffer (num_batches_tracked += 1) runs where it lives
            group = group_of[written.split(":")[0]]
        ops.append(Op(opname, f"aten.{short}", tuple(seen_data),
                      tuple(sorted(set(ctrl) - {d.split(':')[0] for d in seen_data})),
                      outputs=specs, flops=flops, colocation_group=group, scope=scope, phase=phase, meta=meta))
        if group is not None:
            group_of[opname] = group
        ref[node] = [opname]

    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    if training:
        grads = list(_flatten(out_node.args[0]))[1:1 + len(trained)]  # make_fx flattens (loss, grads)
        _group_gradients(ops, trained, [ref[g][0].split(":")[0] if isinstance(g, fx.Node) and g in ref else None
                                        for g in grads])
    _group_hidden_writes(ops)
    outputs = [encode(a) for a in _flatten(out_node.args[0]) if isinstance(a, fx.Node) and a in ref]
    return Graph(ops, name=name, meta={"captured_from": "pytorch", "training": training,
                                       "program": {"outputs": outputs, "scalars": scalars}})


def _group_gradients(ops: list[Op], params: list[str], producers: list[str | None]) -> None:
    """Put the op producing each parameter's gradient in that parameter's co-location group (with its
    update and optimizer state). The ops computing the gradient before it (the ``mm`` computing ``dW``)
    stay with the forward op they differentiate, as TensorFlow places them: the ``gradient`` grouping
    rule joins them, and through the producer the parameter (an MLP layer's weight, its forward ``addmm``
    and its gradient ``mm`` end in one group), while an RNN's per-step gradients stay with their steps.
    An op producing several parameters' gradients (``native_batch_norm_backward``: the weight's and the
    bias's) joins the first parameter's group and the others join that group too. Ops are replaced in
    ``ops``."""
    index = {op.name: i for i, op in enumerate(ops)}
    for pname, producer in zip(params, producers):
        i = index.get(producer) if producer is not None else None
        if i is None or ops[i].phase != "backward":
            continue
        other = ops[i].colocation_group
        if other is None:
            ops[i] = replace(ops[i], colocation_group=pname)
        elif other != pname:  # one op computes this gradient and another parameter's: one group for both
            for k, op in enumerate(ops):
                if op.colocation_group == pname:
                    ops[k] = replace(op, colocation_group=other)


def _written_ref(node, target, ref) -> str | None:
    """The tensor (``"op"`` or ``"op:k"``) that ``node`` writes in place, by its schema (``add_``'s
    ``self``), if any."""
    import torch.fx as fx

    schema = getattr(target, "_schema", None)
    if schema is None or not schema.is_mutable:
        return None
    for j, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            val = node.args[j] if j < len(node.args) else node.kwargs.get(arg.name)
            if isinstance(val, fx.Node) and val in ref:
                return ref[val][0]
    return None


#: aten ops that write some of their arguments although their schema does not say so (argument indices)
HIDDEN_WRITES = {"aten.native_batch_norm.default": (3, 4)}  # running_mean, running_var (in training)


def _group_hidden_writes(ops: list[Op]) -> None:
    """An op that updates a buffer in place must run where the buffer lives: ``native_batch_norm`` updates
    ``running_mean`` and ``running_var`` although its schema declares no write, so it joins their
    co-location group (the two buffers' groups become one). Ops are replaced in ``ops``."""
    index = {op.name: i for i, op in enumerate(ops)}
    for i, op in enumerate(ops):
        call = op.meta.get("call") or {}
        args = call.get("args", [])
        written = [args[j]["ref"].split(":")[0] for j in HIDDEN_WRITES.get(call.get("target"), ())
                   if j < len(args) and isinstance(args[j], dict) and "ref" in args[j]]
        groups = [ops[index[w]].colocation_group for w in written if w in index]
        groups = [g for g in groups if g is not None]
        if not groups:
            continue
        keep = groups[0]
        for k, other in enumerate(ops):
            if other.colocation_group in groups[1:]:
                ops[k] = replace(other, colocation_group=keep)
        ops[i] = replace(ops[i], colocation_group=keep)


def _is_number(val: Any) -> bool:
    import torch

    return isinstance(val, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool))


def _target_name(target: Any) -> str:
    """``aten.addmm.default`` for aten overloads, ``operator.pow`` for Python operators."""
    import torch

    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return f"{getattr(target, '__module__', None) or 'builtins'}.{target.__name__}".replace("_operator.", "operator.")


class _Encoder:
    """JSON form of an fx node's arguments: ``{"ref": "op:k"}`` for tensors, ``{"scalar": name}`` for
    Python numbers computed in the program, tagged dicts for dtypes/devices/layouts."""

    def __init__(self, ref: dict, scalars: dict):
        self.ref, self.scalars = ref, scalars

    def __call__(self, a: Any) -> Any:
        import torch
        import torch.fx as fx

        if isinstance(a, fx.Node):
            if a in self.ref:
                return {"ref": self.ref[a][0]}
            if a.name in self.scalars:
                return {"scalar": a.name}
            return {"opaque": a.name}
        if isinstance(a, (list, tuple)):
            return [self(x) for x in a]
        if isinstance(a, dict):
            return {k: self(v) for k, v in a.items()}
        if isinstance(a, torch.dtype):
            return {"dtype": str(a).removeprefix("torch.")}
        if isinstance(a, torch.device):
            return {"device": a.type}
        if isinstance(a, torch.layout):
            return {"layout": str(a).removeprefix("torch.")}
        if isinstance(a, torch.memory_format):
            return {"memory_format": str(a).removeprefix("torch.")}
        if isinstance(a, float) and not math.isfinite(a):
            return {"float": repr(a)}  # JSON has no inf/nan
        if a is None or isinstance(a, (bool, int, float, str)):
            return a
        return {"opaque": repr(a)}


def _flatten(x: Any) -> Iterator[Any]:
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _flatten(y)
    else:
        yield x



# ---------------------------------------------------------------------- user factories
def load_factory(spec: str) -> Callable[[], Any]:
    """``"package.module:function"`` or ``"path/to/file.py:function"`` -> the callable."""
    import importlib
    import importlib.util
    import os

    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise CaptureError(f"factory {spec!r}: expected MODULE:FUNCTION or FILE.py:FUNCTION")
    try:
        if target.endswith(".py") or os.sep in target:
            if not os.path.exists(target):
                raise CaptureError(f"factory {spec!r}: no such file {target!r}")
            import sys

            mod_spec = importlib.util.spec_from_file_location(f"_autoplace_factory_{abs(hash(target))}", target)
            module = importlib.util.module_from_spec(mod_spec)
            folder = os.path.dirname(os.path.abspath(target))      # its sibling modules import, as python FILE
            added = folder not in sys.path
            if added:
                sys.path.insert(0, folder)
            try:
                mod_spec.loader.exec_module(module)
            finally:
                if added:
                    sys.path.remove(folder)
        else:
            import sys

            here = os.getcwd()                     # a module in the current directory, as ``python -m`` finds it
            added = here not in sys.path
            if added:
                sys.path.insert(0, here)
            try:
                module = importlib.import_module(target)
            finally:
                if added:
                    sys.path.remove(here)
    except CaptureError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the user's module raises on import
        raise CaptureError(f"factory {spec!r}: importing {target!r} raised {type(e).__name__}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise CaptureError(f"factory {spec!r}: {target!r} has no callable {attr!r}")
    return fn


def capture_from_factory(spec: str, *, inference: bool = False, name: str | None = None,
                         micro_batches: int = 1) -> Graph:
    """Call a user factory and capture what it returns.

    The factory returns ``(model, example_inputs, loss_fn, optimizer[, targets])`` for a training step
    (``loss_fn(outputs, *targets)`` a scalar; ``example_inputs`` a tensor, a tuple, a dict of keyword
    arguments or ``(args, kwargs)``; ``model`` an ``nn.Module`` or a ``torch.export`` ``ExportedProgram``),
    or ``(model, example_inputs)`` (or the training tuple) with ``inference=True``; a dict with those keys
    (``model``, ``inputs``, ``loss_fn``, ``optimizer``, ``targets``) works too.
    """
    fn = load_factory(spec)
    try:
        made = fn()
    except Exception as e:  # noqa: BLE001 - report the user's error in one line
        where = _user_line(e)
        raise CaptureError(f"factory {spec!r} raised {type(e).__name__}" + (f" at {where}" if where else "")
                           + f": {_first_sentence(' '.join(str(e).split()))}") from None
    keys = ("model", "inputs", "loss_fn", "optimizer", "targets")
    if isinstance(made, dict):
        parts = {k: made.get(k) for k in keys}
    elif isinstance(made, (tuple, list)) and 2 <= len(made) <= 5:
        parts = dict(zip(keys, made))
    else:
        raise CaptureError(f"factory {spec!r} must return (model, inputs, loss_fn, optimizer[, targets])")
    if parts.get("model") is None:
        raise CaptureError(f"factory {spec!r} returned no model")
    # the model's class names the graph (a factory is usually "make_step"); a bare container, the factory
    kind = type(parts["model"]).__name__
    default = name or (spec.rpartition(":")[2] if kind in ("Sequential", "ModuleList", "ModuleDict",
                                                           "ExportedProgram", "GraphModule") else kind)
    if inference:
        return capture_inference(parts["model"], parts["inputs"], name=default)
    if parts.get("loss_fn") is None or parts.get("optimizer") is None:
        raise CaptureError(f"factory {spec!r} returned no loss_fn/optimizer (use --inference for forward only)")
    return capture_training_step(parts["model"], parts["inputs"], parts["loss_fn"], parts["optimizer"],
                                 targets=parts.get("targets"), name=default, micro_batches=micro_batches)
