"""The optimizer in a captured step: its param groups, the state it keeps, the hyper-parameters taken as
inputs, and its per-parameter updates marked with (or fused into) the multi-tensor kernels PyTorch runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from autoplace.errors import CaptureError
from autoplace.graph import Op, OpRole, Phase

__all__ = ["SCHEDULED", "BETAS_AS_INPUTS", "check_optimizer", "update_implementation", "optimizer_groups",
           "update_params", "fuse_updates", "launch_groups", "scheduled_value", "scheduled_inputs", "state_layout"]


_OPTIMIZER_FLAGS = ("foreach", "fused", "capturable", "differentiable")


def check_optimizer(optimizer) -> None:
    import torch

    if isinstance(optimizer, type):
        raise CaptureError(f"optimizer: got the class {optimizer.__name__}, not an optimizer: pass an instance, "
                           f"e.g. {optimizer.__name__}(model.parameters(), lr=...)")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise CaptureError(f"optimizer: expected a torch.optim optimizer, got {type(optimizer).__name__}")


def update_implementation(group: dict[str, Any]) -> str:
    """How PyTorch runs a param group's update: ``"fused"`` (one kernel for all its parameters),
    ``"foreach"`` (one multi-tensor kernel per step of the update), ``"for-loop"`` (kernels per parameter),
    or ``"default"`` (neither flag set: foreach on CUDA, the for-loop elsewhere — torch.optim's
    ``_default_to_fused_or_foreach``)."""
    if group.get("fused"):
        return "fused"
    if group.get("foreach") is None:
        return "default"
    return "foreach" if group["foreach"] else "for-loop"


def optimizer_groups(model, optimizer) -> tuple[type, list[tuple[list[str], dict[str, Any]]]]:
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


def update_params(ops: list[Op], params: Iterable[str]) -> dict[str, str]:
    """The parameter each update op works for: the first parameter, optimizer state (``p.key``) or update op
    of another parameter among its inputs, in order (a co-location group may hold several parameters:
    a norm layer's weight and bias)."""
    params = set(params)
    state_of = {op.name: op.name.rsplit(".", 1)[0] for op in ops if op.type == OpRole.OPTIMIZER_STATE}
    out: dict[str, str] = {}
    for op in ops:
        if op.phase != Phase.UPDATE or not op.type.startswith(("aten.", "autoplace.")):
            continue
        for ref in (*op.inputs, *op.control_inputs):
            name = ref.split(":")[0]
            p = name if name in params else state_of.get(name) or out.get(name)
            if p is not None:
                out[op.name] = p
                break
    return out


def fuse_updates(ops: list[Op], groups: list[tuple[list[str], dict[str, Any]]], modes: list[str], opt_name: str,
                  scalars: dict[str, dict] | None = None) -> list[Op]:
    """Each parameter's traced update (Adam: a step counter's ``add_``, then seven elementwise ops) as its
    step ``add_`` and **one op** running PyTorch's own multi-tensor update on that parameter alone, for the
    param groups whose updates PyTorch runs as multi-tensor kernels — still placeable with its parameter.
    ``fused``: ``aten._fused_adam_`` over one-tensor lists; ``foreach``: torch.optim's
    ``_multi_tensor_adam`` (``autoplace.foreach_adam``). Both are elementwise, so each computes for the
    parameter what the user's implementation computes, bit for bit. The op's FLOPs and bytes touched are
    the sum of the ops it replaces (a foreach implementation runs each of them as a kernel); its launches
    are set by :func:`launch_groups`. Other optimizers, hyper-parameters the kernel does not take, and the
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
    param_of = update_params(ops, fuse)
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
                                 phase=Phase.UPDATE, meta={"view": True, "call": call, "fused_ops": len(rest),
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


def launch_groups(ops: list[Op], groups: list[tuple[list[str], dict[str, Any]]], modes: list[str]) -> list[Op]:
    """Mark each parameter's update ops with the multi-tensor kernel that runs them (op meta
    ``launch_group``, docs/formats.md). The update is traced per parameter (``foreach=False``: every op
    placeable with its parameter); PyTorch's foreach implementation runs the k-th op of every parameter's
    update as one ``torch._foreach_*`` call over the group's parameters on a device, so the k-th ops form
    one launch group; the fused implementation runs the whole update of the group's parameters on a
    device as one kernel, so they all form one. ``default`` is foreach on GPUs only."""
    param_group = {n: k for k, (names, _) in enumerate(groups) for n in names}
    param_of = update_params(ops, param_group)
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
        out.append(replace(op, meta=meta))
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


def scheduled_inputs(opt_cls: type, groups: list[tuple[list[str], dict[str, Any]]], layout: dict[str, dict[str, tuple]]
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


def state_layout(opt_cls, groups, params: dict) -> dict[str, dict[str, tuple]]:
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
