"""Zoo models (small sizes) and the capture cache: rebuilt, never trusted, when the key changes."""

from __future__ import annotations

import gzip
import json

import pytest

pytest.importorskip("torch")

from autoplace.cache import CAPTURE_VERSION  # noqa: E402
from autoplace.cluster import get_cluster  # noqa: E402
from autoplace.placers import place  # noqa: E402
from autoplace.sim import simulate  # noqa: E402
from autoplace.zoo import (  # noqa: E402
    build_graph,
    zoo_names,
)

SMALL_RNNLM = dict(vocab=50, hidden=16, layers=2, steps=3, batch=4)
TINY_RNNLM = dict(vocab=10, hidden=4, layers=1, steps=2, batch=2)    # where only the cache matters


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOPLACE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_paper_models_are_registered():
    assert {"rnnlm-2", "rnnlm-2-large", "rnnlm-4", "rnnlm-8", "toy-mlp", "layered-dag"} <= set(zoo_names())


def test_rnnlm_structure_and_metadata():
    g = build_graph("rnnlm-2", **SMALL_RNNLM)
    roles = {(op.meta.get("role"), op.phase) for op in g.ops if op.meta.get("role")}
    assert {("lstm", "forward"), ("lstm", "backward"), ("softmax", "forward"), ("embedding", "forward")} <= roles
    cells = {(op.meta["layer"], op.meta["step"]) for op in g.ops if op.meta.get("role") == "lstm"}
    assert cells == {(k, t) for k in range(2) for t in range(3)}  # unrolled: one cell per layer and step
    assert any(op.scope == "layers.1.t2" for op in g.ops)
    r = simulate(g, get_cluster("k80x2"), place(g, get_cluster("k80x2"), "single-gpu"))
    assert r.ok and r.step_time > 0


def test_more_layers_is_slower():
    cluster = get_cluster("k80x2")

    def step(layers):
        g = build_graph("rnnlm-2", **{**SMALL_RNNLM, "layers": layers})
        return simulate(g, cluster, place(g, cluster, "single-gpu")).step_time

    assert step(4) > step(2)


def test_cache_hit_rebuild_and_corruption(cache, monkeypatch):
    """A stored entry is read back without capturing again; another key, a corrupt gzip stream, JSON nested
    too deeply for the decoder or a foreign key inside the file make it rebuild (never trusted, never fatal)."""
    import autoplace.capture
    import autoplace.zoo.papers

    captures = []
    real = autoplace.capture.capture_training_step

    def counting(*a, **k):
        captures.append(1)
        return real(*a, **k)

    monkeypatch.setattr(autoplace.zoo.papers, "capture_training_step", counting)
    g1 = build_graph("rnnlm-2", **TINY_RNNLM)
    files = list(cache.glob("rnnlm-2-*.json.gz"))
    assert len(files) == 1 and len(captures) == 1
    stored = json.loads(gzip.decompress(files[0].read_bytes()))
    assert (stored["cache_key"]["params"] == TINY_RNNLM
            and stored["cache_key"]["capture_version"] == CAPTURE_VERSION)
    g2 = build_graph("rnnlm-2", **TINY_RNNLM)                              # served from the cache
    assert len(captures) == 1 and [op.name for op in g2.ops] == [op.name for op in g1.ops]
    build_graph("rnnlm-2", **{**TINY_RNNLM, "steps": 3})                  # other parameters: another entry
    assert len(list(cache.glob("rnnlm-2-*.json.gz"))) == 2 and len(captures) == 2
    damaged = [b"\x1f\x8bgarbage",                                          # not gzip after the magic
               b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 64,   # invalid deflate blocks
               gzip.compress(b"[" * 100_000 + b"]" * 100_000),               # too deep for the decoder
               gzip.compress(json.dumps({**stored, "cache_key": {**stored["cache_key"], "capture_version": -1}})
                             .encode())]                                    # a foreign key inside
    for k, data in enumerate(damaged):
        files[0].write_bytes(data)
        assert build_graph("rnnlm-2", **TINY_RNNLM).n_ops == g1.n_ops
        assert len(captures) == 3 + k, k                                    # rebuilt ...
        fresh = json.loads(gzip.decompress(files[0].read_bytes()))
        assert fresh["cache_key"] == stored["cache_key"]                    # ... and stored again
    build_graph("rnnlm-2", **TINY_RNNLM)
    assert len(captures) == 2 + len(damaged)                                 # and read from then on


SMALL_S2S = dict(vocab=50, hidden=16, src_len=3, tgt_len=3, batch=4)


@pytest.mark.parametrize("name", ["nmt-2", "gnmt-2"])
def test_seq2seq_structure(name):
    g = build_graph(name, **SMALL_S2S)
    tagged = [op for op in g.ops if op.meta.get("role")]
    assert {op.meta.get("part") for op in tagged} >= {"encoder", "decoder"}  # the loss is untagged by part
    attention_steps = {op.meta["step"] for op in tagged if op.meta["role"] == "attention" and "step" in op.meta}
    assert attention_steps == {0, 1, 2}
    assert {op.meta["role"] for op in tagged} == {"embedding", "lstm", "attention", "softmax"}
    if name == "gnmt-2":
        assert any(op.meta.get("direction") == "reverse" for op in tagged)  # bidirectional first layer


@pytest.mark.slow
def test_gnmt_depth_ordering():
    cluster = get_cluster("k80x2")
    times = []
    for layers in (2, 8):
        g = build_graph(f"gnmt-{layers}", **SMALL_S2S)
        times.append(simulate(g, cluster, place(g, cluster, "single-gpu")).step_time)
    assert times[1] > times[0]


@pytest.mark.slow
def test_inception_blocks_and_branches():
    g = build_graph("inception-v3", batch=2, image=75, classes=10)
    branches = {(op.meta["block"], op.meta["branch"]) for op in g.ops if "branch" in op.meta}
    assert {b for b, _ in branches} == {"Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c",
                                        "Mixed_6d", "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c"}
    assert ("Mixed_5b", 3) in branches and ("Mixed_6a", 3) not in branches  # 4 branches in A, 3 in B
    convs = [op for op in g.ops if op.type == "aten.convolution"]
    assert len(convs) == 94  # Inception-V3 without the auxiliary head has 94 convolutions
    assert any(op.type == "optimizer_state" and op.name.endswith("square_avg") for op in g.ops)  # RMSProp


@pytest.mark.slow
def test_resnet_101():
    """ResNet-101's 33 bottleneck blocks: three convolutions each, four projections and the stem's."""
    res = build_graph("resnet-101", batch=2, image=32, classes=10)
    blocks = {op.meta.get("block") for op in res.ops if isinstance(op.meta.get("block"), int)}
    assert blocks == set(range(33))
    assert sum(op.type == "aten.convolution" for op in res.ops) == 104


def test_rnn_text_classifier():
    """The RNN text classifier's LSTM layers over every step, one softmax at the last."""
    tc = build_graph("rnntc", vocab=50, hidden=16, layers=4, steps=3, classes=2, batch=4)
    assert {op.meta.get("layer") for op in tc.ops if op.meta.get("role") == "lstm"} == {0, 1, 2, 3}
    assert {op.meta.get("step") for op in tc.ops if op.meta.get("role") == "softmax"} == {2}


def test_htf_mpr_models():
    mnist = build_graph("mnist-softmax", batch=10)
    mm = [op for op in mnist.ops if op.type == "aten.addmm" and op.phase == "forward"]
    assert len(mm) == 1 and mm[0].flops == 2 * 10 * 784 * 10
    alex = build_graph("alexnet", batch=2, image=224, classes=10)
    assert sum(op.type == "aten.convolution" for op in alex.ops) == 5
    vgg = build_graph("vgg16", batch=1, image=64, classes=10)
    assert sum(op.type == "aten.convolution" for op in vgg.ops) == 13
    assert {op.meta["layer"] for op in vgg.ops if op.meta.get("role") == "conv"} == {0, 1, 2, 3, 4}


@pytest.mark.slow
def test_transformer_xl_and_wavenet():
    txl = [build_graph(f"transformer-xl-{n}", vocab=50, d_model=16, heads=2, d_inner=32, seg_len=4, mem_len=4,
                       batch=2) for n in (2, 4)]
    assert {op.meta["layer"] for op in txl[1].ops if op.meta.get("role") == "transformer"} == {0, 1, 2, 3}
    assert txl[1].n_ops > txl[0].n_ops
    # attention scores over memory + segment: [B, H, seg, mem + seg] content term is a batched matmul
    scores = [op for op in txl[0].ops if op.phase == "forward" and op.type in ("aten.bmm", "aten.matmul")]
    assert scores
    wn = build_graph("wavenet-2x18", layers_per_stack=3, residual=4, skip=8, classes=16, length=32, batch=2)
    layers = {(op.meta["stack"], op.meta["layer"]) for op in wn.ops if op.meta.get("role") == "wavenet"}
    assert layers == {(k // 3, k) for k in range(6)}
    dilated = [op for op in wn.ops if op.type == "aten.convolution" and op.phase == "forward"
               and op.meta.get("role") == "wavenet"]
    assert len(dilated) == 6 * 3  # dilated, residual and skip convolutions per layer


@pytest.mark.slow
def test_amoebanet_cells():
    g = build_graph("amoebanet", cells=1, filters=16, batch=2, image=64, classes=10)
    cells = {op.meta["cell"] for op in g.ops if op.meta.get("role") == "amoeba"}
    assert cells == set(range(2 + 3 * 1 + 2))  # 2 stem reductions, 3 stacks of 1 normal cell, 2 reductions
    steps = {op.meta["step"] for op in g.ops if op.meta.get("role") == "amoeba" and "step" in op.meta}
    assert steps == set(range(5))
    depthwise = [op for op in g.ops if op.type == "aten.convolution" and op.phase == "forward"]
    assert depthwise and all(op.flops > 0 for op in depthwise)


@pytest.mark.slow
def test_micro_batched_zoo_models_cut_their_batch_dimension():
    """``micro_batches`` captures gradient accumulation: the recurrent models' batch is their second
    dimension; the GPT's its first; M = 1 is the graph the model always had."""
    from autoplace.errors import AutoplaceError
    from autoplace.schedule import micro_batches

    small = dict(vocab=50, hidden=16, layers=2, steps=3, batch=4)
    one, two = build_graph("rnnlm-2", **small), build_graph("rnnlm-2", **small, micro_batches=2)
    assert micro_batches(one) == 1 and micro_batches(two) == 2 and two.n_ops > one.n_ops
    gpt = build_graph("gpt-24", vocab=50, d_model=16, heads=2, layers=2, seq_len=4, batch=4, micro_batches=4)
    assert micro_batches(gpt) == 4
    assert {op.meta.get("layer") for op in gpt.ops if op.meta.get("role") == "transformer"} == {0, 1}
    with pytest.raises(AutoplaceError, match="micro_batches=3 does not divide the batch of 4"):
        build_graph("rnnlm-2", **small, micro_batches=3)
