"""Synthetic graphs written op by op: a hand-built MLP training step and random layered DAGs.

``toy-mlp`` is one SGD training step of a multi-layer perceptron with analytic FLOP counts (a matmul
is ``2*m*n*k``), forward, backward and update phases, and each parameter's gradient and update ops in
the parameter's co-location group. ``layered-dag`` is the simulator benchmark's workload: a DAG of
layers with fan-out and fan-in (and skip connections) like a training graph.
"""

from __future__ import annotations

import numpy as np

from autoplace.graph import Graph, Op, TensorSpec
from autoplace.zoo.registry import register_model

__all__ = ["mlp_training_graph", "layered_dag"]


def _t(*shape: int, dtype: str = "float32") -> tuple[TensorSpec, ...]:
    return (TensorSpec(tuple(shape), dtype),)


@register_model("toy-mlp", description="hand-built MLP training step (forward, backward, SGD update)",
                batch=512, hidden=4096, layers=8, inputs=1024, classes=1000)
def mlp_training_graph(batch: int = 512, hidden: int = 4096, layers: int = 8, inputs: int = 1024,
                       classes: int = 1000) -> Graph:
    """One SGD step of ``layers`` dense layers: ``x -> [matmul, bias, relu] * L -> softmax-xent``."""
    B = batch
    dims = [inputs] + [hidden] * (layers - 1) + [classes]
    ops: list[Op] = [
        Op("x", "placeholder", outputs=_t(B, inputs), phase="forward", scope="input"),
        Op("labels", "placeholder", outputs=_t(B, dtype="int64"), phase="forward", scope="input"),
    ]
    h = "x"
    acts = []  # (input activation, relu output or None) per layer
    for k in range(layers):
        d_in, d_out = dims[k], dims[k + 1]
        s = f"layers.{k}"
        meta = {"layer": k}
        ops += [
            Op(f"{s}.weight", "parameter", outputs=_t(d_in, d_out), param_bytes=4 * d_in * d_out, phase="forward",
               colocation_group=f"{s}.weight", scope=s, meta={**meta, "view": True}),
            Op(f"{s}.bias", "parameter", outputs=_t(d_out), param_bytes=4 * d_out, phase="forward",
               colocation_group=f"{s}.bias", scope=s, meta={**meta, "view": True}),
            Op(f"{s}.matmul", "mm", [h, f"{s}.weight"], outputs=_t(B, d_out), flops=2.0 * B * d_in * d_out,
               phase="forward", scope=s, meta=meta),
            Op(f"{s}.add", "add", [f"{s}.matmul", f"{s}.bias"], outputs=_t(B, d_out), flops=float(B * d_out),
               phase="forward", scope=s, meta=meta),
        ]
        out = f"{s}.add"
        if k < layers - 1:
            ops.append(Op(f"{s}.relu", "relu", [out], outputs=_t(B, d_out), flops=float(B * d_out), phase="forward",
                          scope=s, meta=meta))
            out = f"{s}.relu"
        acts.append((h, out))
        h = out
    C = classes
    ops += [
        Op("loss", "cross_entropy", [h, "labels"], outputs=_t(), flops=5.0 * B * C, phase="forward",
           scope="loss"),
        Op("loss.grad", "cross_entropy_backward", ["loss", h, "labels"], outputs=_t(B, C),
           flops=5.0 * B * C, phase="backward", scope="loss"),
    ]
    grad = "loss.grad"
    for k in reversed(range(layers)):
        d_in, d_out = dims[k], dims[k + 1]
        s = f"layers.{k}"
        meta = {"layer": k}
        x_in, out = acts[k]
        if k < layers - 1:
            ops.append(Op(f"{s}.relu.grad", "threshold_backward", [grad, out], outputs=_t(B, d_out),
                          flops=float(B * d_out), phase="backward", scope=s, meta=meta))
            grad = f"{s}.relu.grad"
        ops += [
            Op(f"{s}.bias.grad", "sum", [grad], outputs=_t(d_out), flops=float(B * d_out), phase="backward",
               colocation_group=f"{s}.bias", scope=s, meta=meta),
            Op(f"{s}.weight.grad", "mm", [x_in, grad], outputs=_t(d_in, d_out), flops=2.0 * B * d_in * d_out,
               phase="backward", colocation_group=f"{s}.weight", scope=s, meta=meta),
            Op(f"{s}.weight.update", "sgd_update", [f"{s}.weight", f"{s}.weight.grad"], output_bytes=(0,),
               flops=2.0 * d_in * d_out, phase="update", colocation_group=f"{s}.weight", scope=s, meta=meta),
            Op(f"{s}.bias.update", "sgd_update", [f"{s}.bias", f"{s}.bias.grad"], output_bytes=(0,),
               flops=2.0 * d_out, phase="update", colocation_group=f"{s}.bias", scope=s, meta=meta),
        ]
        if k > 0:
            ops.append(Op(f"{s}.input.grad", "mm", [grad, f"{s}.weight"], outputs=_t(B, d_in),
                          flops=2.0 * B * d_in * d_out, phase="backward", scope=s, meta=meta))
            grad = f"{s}.input.grad"
    return Graph(ops, name="toy-mlp", meta={"model": {"batch": batch, "hidden": hidden, "layers": layers,
                                                      "inputs": inputs, "classes": classes}})


@register_model("layered-dag", description="random layered DAG with fan-out/fan-in (simulator benchmark)",
                ops=30000, width=64, fan_in=3, skip=0.1, seed=0)
def layered_dag(ops: int = 30000, width: int = 64, fan_in: int = 3, skip: float = 0.1, seed: int = 0) -> Graph:
    """``ops`` ops in layers of ``width``; each op reads 1..``fan_in`` ops of the previous layer and,
    with probability ``skip``, one of an earlier layer. Sizes and FLOPs are drawn log-uniformly so
    that compute and transfer times vary over three orders of magnitude."""
    rng = np.random.default_rng(seed)
    flops = 10 ** rng.uniform(6, 10, size=ops)
    nbytes = (10 ** rng.uniform(3, 7, size=ops)).astype(np.int64)
    params = np.where(rng.random(ops) < 0.05, (10 ** rng.uniform(4, 7, size=ops)).astype(np.int64), 0)
    out: list[Op] = []
    for i in range(ops):
        layer = i // width
        inputs: list[str] = []
        if layer > 0:
            lo = (layer - 1) * width
            k = int(rng.integers(1, fan_in + 1))
            inputs = [f"n{j}" for j in sorted(set(rng.integers(lo, lo + width, size=k).tolist()))]
            if layer > 1 and rng.random() < skip:
                inputs.append(f"n{int(rng.integers(0, lo))}")
        out.append(Op(f"n{i}", "op", tuple(inputs), output_bytes=(int(nbytes[i]),), flops=float(flops[i]),
                      param_bytes=int(params[i]), meta={"layer": layer}))
    return Graph(out, name="layered-dag")
