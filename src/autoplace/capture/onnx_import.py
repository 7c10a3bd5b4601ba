"""Import an ONNX model as an autoplace graph (forward only, as ONNX files describe inference).

The model is shape-inferred (``onnx.shape_inference``); every tensor must get a static shape. Nodes
become ops; initializers become ``parameter`` ops holding their bytes; graph inputs become ``input``
ops. FLOPs: ``MatMul`` 2·(output elements)·k, ``Gemm`` 2·M·N·K (+ M·N for the bias), ``Conv``
2·(output elements)·(Cin/group · kernel), reductions and pooling their input elements, shape-only ops
(Reshape, Transpose, Gather, Concat ...) none, every other op (elementwise) its output elements.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from autoplace.errors import CaptureError, FormatError
from autoplace.formats.files import input_file
from autoplace.graph import Graph, Op, OpRole, Phase, TensorSpec

__all__ = ["import_onnx", "ONNX_DTYPES"]

#: ONNX TensorProto element types -> autoplace dtype names.
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128",
               16: "bfloat16", 17: "float8_e4m3fn", 19: "float8_e5m2"}
SHAPE_OPS = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Gather", "Concat",
             "Slice", "Split", "Expand", "Constant", "ConstantOfShape", "Cast", "Tile", "Pad", "Dropout"}
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
REDUCE_OPS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceLogSumExp",
              "GlobalAveragePool", "GlobalMaxPool", "AveragePool", "MaxPool", "ArgMax", "ArgMin"}


def _spec_of(value_type, what: str, where: str) -> TensorSpec:
    if not value_type.HasField("tensor_type"):
        raise CaptureError(f"{where}: {what} is not a tensor")
    tt = value_type.tensor_type
    dtype = ONNX_DTYPES.get(tt.elem_type)
    if dtype is None:
        raise CaptureError(f"{where}: {what} has an unsupported element type {tt.elem_type}")
    if not tt.HasField("shape"):
        raise CaptureError(f"{where}: {what} has no shape (export with fixed input sizes)")
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            label = d.dim_param or "?"
            raise CaptureError(f"{where}: {what} has a symbolic dimension {label!r} (export with fixed input sizes)")
        dims.append(int(d.dim_value))
    return TensorSpec(tuple(dims), dtype)


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            import onnx

            return onnx.helper.get_attribute_value(a)
    return default


def _flops(node, ins: list[TensorSpec | None], outs: list[TensorSpec]) -> float:
    out_el = math.prod(outs[0].shape) if outs else 0
    t = node.op_type
    if t == "MatMul" and ins[0] is not None and ins[0].shape:
        return 2.0 * out_el * ins[0].shape[-1]
    if t == "Gemm" and ins[0] is not None:
        a = ins[0].shape
        k = a[0] if _attr(node, "transA", 0) else a[1]
        bias = out_el if len(ins) > 2 and ins[2] is not None else 0
        return 2.0 * out_el * k + bias
    if t in ("Conv", "ConvTranspose") and len(ins) > 1 and ins[1] is not None:
        w = ins[1].shape  # (Cout, Cin/group, *kernel)
        per_output = math.prod(w[1:])
        if t == "ConvTranspose":
            return 2.0 * math.prod(ins[0].shape) * w[1] * math.prod(w[2:])
        return 2.0 * out_el * per_output
    if t in REDUCE_OPS and ins and ins[0] is not None:
        return float(math.prod(ins[0].shape))
    if t in SHAPE_OPS:
        return 0.0
    return float(out_el)


def _symbolic(model) -> bool:
    g = model.graph
    return any(d.dim_param or not d.HasField("dim_value")
               for v in [*g.input, *g.output, *g.value_info] for d in v.type.tensor_type.shape.dim)


def _infer_shapes(model, where: str):
    """Shapes of every value. Where ONNX's inference leaves a dimension symbolic although the inputs are
    fixed (the TorchScript exporter computes a reshape's target from ``Shape`` ops: ``unk__0``), the shape
    arithmetic is folded to constants first (onnxscript's optimizer, from the ``onnx`` extra) and the
    shapes inferred again."""
    import onnx

    def infer(m):
        try:
            return onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
        except Exception as e:  # noqa: BLE001 - onnx raises its own InferenceError and others
            raise CaptureError(f"{where}: shape inference failed: {' '.join(str(e).split())[:200]}") from None

    inferred = infer(model)
    if not _symbolic(inferred) or _symbolic_inputs(model):
        return inferred
    try:
        import onnxscript.optimizer
    except ImportError:
        return inferred                     # the symbolic dimension is reported where it is met
    try:
        folded = onnxscript.optimizer.optimize(model)
    except Exception:  # noqa: BLE001 - an optimizer failure leaves the model as it was
        return inferred
    return infer(folded)


def _symbolic_inputs(model) -> bool:
    """An input with a dimension that is not a number: the model was exported with dynamic sizes."""
    inits = {i.name for i in model.graph.initializer}
    return any(d.dim_param or not d.HasField("dim_value")
               for v in model.graph.input if v.name not in inits for d in v.type.tensor_type.shape.dim)


def import_onnx(path: str | os.PathLike, *, name: str | None = None) -> Graph:
    """Read ``path`` (an ONNX model), infer shapes, and build the forward graph."""
    import onnx
    from google.protobuf.message import DecodeError

    where = str(path)
    try:
        input_file(path, "file")
    except FormatError as e:                        # missing, a folder, a FIFO, a device
        raise CaptureError(str(e)) from None
    try:
        model = onnx.load(str(path))
    except (DecodeError, ValueError, RuntimeError, OSError) as e:
        raise CaptureError(f"{where}: not an ONNX model ({type(e).__name__})") from None
    if not model.graph.node:
        raise CaptureError(f"{where}: not an ONNX model (no graph nodes)")
    newest = onnx.defs.onnx_opset_version()
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    for domain, version in opsets.items():
        if domain == "ai.onnx" and not 1 <= version <= newest:
            raise CaptureError(f"{where}: ONNX opset {version} is not one this onnx knows (1 to {newest})")
    for node in model.graph.node:
        if (node.domain or "ai.onnx") not in ("ai.onnx", "ai.onnx.ml"):
            raise CaptureError(f"{where}: op {node.name or node.op_type!r} is from domain {node.domain!r}, "
                               f"which cannot be imported (only the standard ONNX operators)")
    model = _infer_shapes(model, where)
    g = model.graph
    types = {v.name: v.type for v in list(g.input) + list(g.output) + list(g.value_info)}
    specs: dict[str, TensorSpec] = {}
    producer: dict[str, str] = {}
    ops: list[Op] = []
    taken: set[str] = set()

    def unique(base: str) -> str:
        n, i = base, 1
        while n in taken:
            n, i = f"{base}_{i}", i + 1
        taken.add(n)
        return n

    for init in g.initializer:
        dtype = ONNX_DTYPES.get(init.data_type)
        if dtype is None:
            raise CaptureError(f"{where}: initializer {init.name!r} has an unsupported element type")
        spec = TensorSpec(tuple(int(d) for d in init.dims), dtype)
        opname = unique(init.name)
        ops.append(Op(opname, OpRole.PARAMETER, outputs=(spec,), param_bytes=spec.nbytes, colocation_group=opname,
                      phase=Phase.FORWARD, meta={"view": True}))  # its output is its resident bytes
        specs[init.name], producer[init.name] = spec, opname
    for inp in g.input:
        if inp.name in producer:
            continue
        spec = _spec_of(inp.type, f"input {inp.name!r}", where)
        opname = unique(inp.name)
        ops.append(Op(opname, OpRole.INPUT, outputs=(spec,), phase=Phase.FORWARD))
        specs[inp.name], producer[inp.name] = spec, opname

    for i, node in enumerate(g.node):
        opname = unique(node.name or f"{node.op_type}_{i}")
        ins, refs = [], []
        for v in node.input:
            if not v:
                ins.append(None)
                continue
            if v not in producer:
                raise CaptureError(f"{where}: node {opname!r} reads {v!r}, which nothing produces")
            ins.append(specs[v])
            refs.append(producer[v])
        outs = []
        for k, v in enumerate(node.output):
            if v not in types:
                raise CaptureError(f"{where}: output {v!r} of node {opname!r} has no inferred shape "
                                   f"(export with fixed input sizes)")
            outs.append(_spec_of(types[v], f"output {v!r} of node {opname!r}", where))
            specs[v], producer[v] = outs[-1], f"{opname}:{k}" if len(node.output) > 1 else opname
        meta = {"bytes_touched": 0, "view": True} if node.op_type in VIEW_OPS else {}
        ops.append(Op(opname, node.op_type, tuple(dict.fromkeys(refs)), outputs=tuple(outs),
                      flops=_flops(node, ins, outs), phase=Phase.FORWARD, scope=node.name or None, meta=meta))
    return Graph(ops, name=name or g.name or Path(path).stem, meta={"captured_from": "onnx"})
