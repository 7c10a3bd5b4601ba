"""The traced aten graph (torch.fx) as autoplace ops: parameters, buffers, optimizer state and inputs
become resident ops, every aten call an op with its tensors' sizes, FLOPs (torch's flop counter) and the
call itself (JSON, for the executor); co-location groups follow gradients and in-place writes."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from autoplace.graph import Graph, Op, OpRole, Phase, TensorSpec

__all__ = ["to_graph", "VIEW_OPS", "REDUCTION_OPS", "HIDDEN_WRITES"]


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


def _resident_ops(placeholders: list, trained: list[str], frozen: list[str], buffers: list[str],
                  layout: dict[str, dict[str, tuple]], hyper: dict[str, dict[str, float]]) -> list[Op]:
    """The traced step's inputs as ops, in placeholder order: parameters (trained, then frozen), buffers,
    optimizer state and scheduled hyper-parameters (each in its parameter's co-location group, resident:
    ``param_bytes``), then the batch's inputs."""
    kinds: list[tuple[str, str, str | None]] = []  # (op name, type, colocation group)
    kinds += [(n, OpRole.PARAMETER, n) for n in (*trained, *frozen)]
    kinds += [(n, OpRole.BUFFER, n) for n in buffers]
    kinds += [(f"{n}.{key}", OpRole.OPTIMIZER_STATE, n) for n in trained for key in layout.get(n, {})]
    kinds += [(f"{n}.{key}", OpRole.HYPERPARAMETER, n) for n in trained for key in hyper.get(n, {})]
    kinds += [(f"input{i}", OpRole.INPUT, None) for i in range(len(placeholders) - len(kinds))]
    ops = []
    for node, (opname, kind, group) in zip(placeholders, kinds):
        spec = _spec(node.meta.get("val"))
        resident = spec.nbytes if kind != OpRole.INPUT else 0
        phase = Phase.UPDATE if kind in (OpRole.OPTIMIZER_STATE, OpRole.HYPERPARAMETER) else Phase.FORWARD
        scope = opname.rsplit(".", 1)[0] if "." in opname and kind != OpRole.INPUT else None
        if kind in (OpRole.OPTIMIZER_STATE, OpRole.HYPERPARAMETER):
            scope = group.rsplit(".", 1)[0] if "." in group else group
        # a parameter's output *is* its resident memory: mark it a view so it is not allocated twice
        meta = {"view": True} if resident else {}
        if kind == OpRole.HYPERPARAMETER:
            meta["value"] = hyper[group][opname.rpartition(".")[2]]   # the captured value: runs given none use it
        ops.append(Op(opname, kind, outputs=(spec,), param_bytes=resident, colocation_group=group, scope=scope,
                      phase=phase, meta=meta))
    return ops


def to_graph(gm, name: str, trained: list[str], frozen: list[str], buffers: list[str],
              layout: dict[str, dict[str, tuple]], *, training: bool,
              hyper: dict[str, dict[str, float]] | None = None) -> Graph:
    """The traced graph module ``gm`` as a Graph: its placeholders in the order the capture passed them
    (:func:`_resident_ops`), every aten call an op, Python scalars recorded for the executor to recompute,
    other calls dependencies only; then gradients and hidden writes join their parameters' groups."""
    import torch
    import torch.fx as fx

    ops: list[Op] = []
    ref: dict[fx.Node, list[str]] = {}        # node -> producer refs ("op" or "op:k") it stands for
    control: dict[fx.Node, list[str]] = {}    # non-tensor nodes -> the ops they depend on
    scalars: dict[str, dict] = {}             # python-number nodes the executor recomputes
    encode = _Encoder(ref, scalars)
    group_of: dict[str, str] = {}             # op -> its co-location group
    scope_of_param: dict[str, str | None] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, op in zip(placeholders, _resident_ops(placeholders, trained, frozen, buffers, layout, hyper or {})):
        ops.append(op)
        ref[node] = [op.name]
        if op.colocation_group:
            group_of[op.name] = op.colocation_group
            scope_of_param[op.colocation_group] = op.scope

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
        if target is operator.getitem and node.args[0] in ref:
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
        if phase == Phase.UPDATE:
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
        if i is None or ops[i].phase != Phase.BACKWARD:
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
