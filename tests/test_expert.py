"""The expert placer: the papers' rules where they give them, FLOP-balanced layer ranges otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import uniform_cluster

from autoplace.graph import Graph, Op
from autoplace.placers import place
from autoplace.placers.expert import balanced_split


@pytest.mark.parametrize("weights, parts, expected", [
    # a heavy last unit gets a part of its own; the light ones share the other
    ([1, 1, 1, 6], 2, [0, 0, 0, 1]),
    # every split isolating the 6 has heaviest part 6; [1, 1] [2] [6] (squares 4 + 4 + 36) is more even
    # than [1] [1, 2] [6] (1 + 9 + 36)
    ([1, 1, 2, 6], 3, [0, 0, 1, 2]),
    ([3, 3, 3, 3], 2, [0, 0, 1, 1]),
    ([5, 1, 1, 1, 1, 1], 2, [0, 1, 1, 1, 1, 1]),
    ([2, 2], 4, [0, 1]),            # fewer units than parts: one unit per part
    ([7], 3, [0]),
    ([], 3, []),
])
def test_balanced_split_hand_cases(weights, parts, expected):
    assert balanced_split(weights, parts) == expected


def test_balanced_split_minimises_the_heaviest_part():
    rng = np.random.default_rng(0)
    for _ in range(50):
        w = rng.integers(1, 20, size=int(rng.integers(1, 8))).tolist()
        parts = int(rng.integers(1, 5))
        split = balanced_split(w, parts)
        heaviest = max(np.bincount(split, weights=w))
        # brute force over every way of cutting the sequence into at most `parts` runs
        n, best = len(w), float("inf")
        for mask in range(1 << (n - 1)):
            cuts = [i + 1 for i in range(n - 1) if mask >> i & 1]
            if len(cuts) + 1 > parts:
                continue
            bounds = [0, *cuts, n]
            best = min(best, max(sum(w[a:b]) for a, b in zip(bounds, bounds[1:])))
        assert heaviest == best, (w, parts, split)


def layered_lm(layers: int, softmax_flops: float) -> Graph:
    """An embedding, ``layers`` layers of 1 GFLOP each (forward and backward), and a heavy softmax."""
    ops = [Op("x", "input", output_bytes=(1024,)),
           Op("emb", "embedding", ("x",), output_bytes=(1024,), flops=1e6, meta={"role": "embedding", "layer": 0})]
    prev = "emb"
    for k in range(layers):
        ops.append(Op(f"l{k}", "mm", (prev,), output_bytes=(1024,), flops=1e9, meta={"role": "layer", "layer": k}))
        prev = f"l{k}"
    ops.append(Op("softmax", "mm", (prev,), output_bytes=(1024,), flops=softmax_flops,
                  meta={"role": "softmax", "layer": layers - 1}))
    ops.append(Op("softmax_grad", "mm", ("softmax",), output_bytes=(1024,), flops=softmax_flops,
                  phase="backward", meta={"role": "softmax", "layer": layers - 1}))
    prev = "softmax_grad"
    for k in reversed(range(layers)):
        ops.append(Op(f"l{k}_grad", "mm", (prev,), output_bytes=(1024,), flops=1e9, phase="backward",
                      meta={"role": "layer", "layer": k}))
        prev = f"l{k}_grad"
    return Graph(ops, name="layered-lm")


@pytest.mark.parametrize("layers, gpus", [(2, 2), (4, 4), (8, 8)])
def test_heavy_softmax_gets_a_device_of_its_own(layers, gpus):
    """A softmax heavier than all layers together (as in Transformer-XL's 32k vocabulary) is not tagged
    onto the top layer's device: every GPU gets work and the softmax's device has nothing else heavy."""
    graph = layered_lm(layers, softmax_flops=3e9 * layers)
    cluster = uniform_cluster(gpus)
    dev = place(graph, cluster, "expert").to_array(graph, cluster)
    load = np.bincount(dev, weights=graph.flops, minlength=gpus)
    assert (load > 0).all(), load
    sm = dev[graph.index("softmax")]
    assert dev[graph.index("softmax_grad")] == sm
    assert load[sm] == pytest.approx(2 * 3e9 * layers)           # the softmax, forward and backward, alone
    layer_devs = {int(dev[graph.index(f"l{k}")]) for k in range(layers)}
    assert sm not in layer_devs
    for k in range(layers):                                     # a layer's backward stays with its forward
        assert dev[graph.index(f"l{k}_grad")] == dev[graph.index(f"l{k}")]
