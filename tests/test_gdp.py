"""GDP (graph embedding + Transformer-XL placer + PPO) and HDP (grouper + seq2seq placer): layer shapes
and equations, segment recurrence, training on toy graphs, policy files, co-location, checkpoints, CLI."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest
from conftest import spy_on_updates

torch = pytest.importorskip("torch")

from autoplace.cli import main  # noqa: E402
from autoplace.cluster import get_cluster  # noqa: E402
from autoplace.errors import AutoplaceError, FormatError  # noqa: E402
from autoplace.graph import Graph, Op  # noqa: E402
from autoplace.grouping import group_ops  # noqa: E402
from autoplace.placers import place  # noqa: E402
from autoplace.placers.learned.gdp import (  # noqa: E402
    ColocationChecked,
    GDPConfig,
    GDPSearch,
    gdp_search,
    gdp_train,
    load_policy,
    new_policy,
    save_policy,
    zero_shot,
)
from autoplace.placers.learned.hdp import HDPConfig, HDPSearch, hdp_search  # noqa: E402
from autoplace.policies.features import NODE_DENSE, node_features  # noqa: E402
from autoplace.policies.graphsage import GraphEmbedding, SageLayer  # noqa: E402
from autoplace.policies.grouper import Grouper, group_input_dim, group_inputs  # noqa: E402
from autoplace.policies.transformer_xl import Superposition, TransformerXLPlacer, XLLayer  # noqa: E402
from autoplace.search import SearchBudget  # noqa: E402
from autoplace.sim import simulate  # noqa: E402
from autoplace.zoo import build_graph  # noqa: E402

SMALL = dict(hidden=16, type_dim=8, ff=32, heads=2, segment=8, memory=8, samples_per_update=8)


def chain(n: int = 6) -> Graph:
    """x -> a1 -> ... -> a{n}, with a co-location group joining a2 and a5."""
    ops = [Op("x", "input", output_bytes=(1024,))]
    for i in range(1, n + 1):
        ops.append(Op(f"a{i}", "mm" if i % 2 else "relu", (ops[-1].name,), output_bytes=(1024 * i,), flops=1e6 * i,
                      colocation_group="g" if i in (2, 5) else None))
    return Graph(ops, name="chain")


def toy():
    return build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")


# ----------------------------------------------------------------------------------------------- layers
def test_node_features_shapes_and_colocated_ops_are_one_node():
    g = chain()
    f = node_features(g, group_ops(g, ("colocation",)))
    assert f.n_nodes == 6 and f.dense.shape == (6, NODE_DENSE)            # a2 and a5 share a node
    assert len(f.type_offsets) == 6 and len(f.type_index) == 7
    assert f.edge_index.shape[0] == 2 and f.edge_index.shape[1] % 2 == 0
    half = f.edge_index.shape[1] // 2
    assert (f.edge_index[:, half:] == f.edge_index[::-1, :half]).all()     # second half: reversed edges
    assert f.dense[:, 8].tolist() == pytest.approx(np.linspace(0, 1, 6).tolist())   # topological position


def test_the_sage_layer_computes_eq_2_and_3_by_hand():
    torch.manual_seed(0)
    layer = SageLayer(3, 4, pool_dim=2)
    x = torch.randn(3, 3)
    edges = torch.tensor([[0, 1], [2, 2]])                               # 0 -> 2, 1 -> 2; nodes 0, 1: none
    out = layer(x, edges)
    msg = torch.sigmoid(x @ layer.pool.weight.T + layer.pool.bias)
    agg2 = torch.maximum(msg[0], msg[1])                                  # eq. 2: max over N(2)
    want2 = torch.relu(layer.dense(torch.cat([x[2], agg2])))               # eq. 3
    want0 = torch.relu(layer.dense(torch.cat([x[0], torch.zeros(2)])))     # no neighbours: zeros
    assert out.shape == (3, 4)
    assert torch.allclose(out[2], want2, atol=1e-6) and torch.allclose(out[0], want0, atol=1e-6)


def test_every_layer_has_its_documented_shape():
    g, c = toy()
    f = node_features(g, group_ops(g, ("colocation",)))
    N = f.n_nodes
    assert GraphEmbedding(16, 2, 8)(f).shape == (N, 16)
    x = torch.randn(N, 16)
    assert XLLayer(16, 2, 32)(x[:8], x[8:12]).shape == (8, 16)
    cs = Superposition(16, 2, [16, 32, 16], segment=8)(x)
    assert [v.shape for v in cs] == [(16,), (32,), (16,)] and all(torch.allclose(v, torch.ones_like(v)) for v in cs)
    mask = torch.zeros(N, 5)
    assert TransformerXLPlacer(16, 5, heads=2, ff=32, segment=8, memory=8)(x, mask).shape == (N, 5)
    assert new_policy(GDPConfig(max_devices=5, **SMALL))(f, mask).shape == (N, 5)
    assert Grouper(7, 16, 8)(f).shape == (N, 7)
    assign = np.random.default_rng(0).integers(0, 7, (3, N))
    emb = torch.nn.EmbeddingBag(1024, 8, mode="mean")
    assert group_inputs(f, assign, 7, emb).shape == (3, 7, 8 + group_input_dim(7))


def test_segment_recurrence_equals_one_long_segment_when_the_memory_covers_the_graph():
    torch.manual_seed(0)
    N = 37
    x, mask = torch.randn(N, 16), torch.zeros(N, 4)
    long = TransformerXLPlacer(16, 4, heads=2, ff=32, segment=N, memory=0)
    seg = TransformerXLPlacer(16, 4, heads=2, ff=32, segment=5, memory=N)
    seg.load_state_dict(long.state_dict())
    long.eval(), seg.eval()
    assert torch.allclose(long(x, mask), seg(x, mask), atol=1e-5)
    short = TransformerXLPlacer(16, 4, heads=2, ff=32, segment=5, memory=5)   # memory of one segment: differs
    short.load_state_dict(long.state_dict())
    short.eval()
    assert not torch.allclose(long(x, mask), short(x, mask), atol=1e-3)


def test_the_memory_carries_no_gradient():
    torch.manual_seed(0)
    x = torch.randn(10, 16, requires_grad=True)
    placer = TransformerXLPlacer(16, 4, heads=2, ff=32, segment=5, memory=5, superposition=False)
    placer(x, torch.zeros(10, 4))[5:].sum().backward()                  # the second segment's outputs only
    assert x.grad[:5].abs().sum() == 0 and x.grad[5:].abs().sum() > 0


def test_superposition_scales_the_dense_layers_inputs():
    torch.manual_seed(0)
    x, mask = torch.randn(12, 16), torch.zeros(12, 4)
    placer = TransformerXLPlacer(16, 4, heads=2, ff=32, segment=6, memory=6)
    before = placer(x, mask)
    torch.nn.init.constant_(placer.superpose.heads[-1].bias, 3.0)          # c of the output layer != 1
    assert not torch.allclose(before, placer(x, mask))
    plain = TransformerXLPlacer(16, 4, heads=2, ff=32, segment=6, memory=6, superposition=False)
    assert plain.superpose is None


def test_without_attention_a_node_is_placed_from_its_own_embedding_only():
    torch.manual_seed(0)
    x, mask = torch.randn(12, 16), torch.zeros(12, 4)
    placer = TransformerXLPlacer(16, 4, heads=2, ff=32, segment=6, memory=6, attention=False, superposition=False)
    y = placer(x, mask)
    x2 = x.clone()
    x2[0] += 1.0
    assert torch.allclose(y[1:], placer(x2, mask)[1:]) and not torch.allclose(y[0], placer(x2, mask)[0])


# ----------------------------------------------------------------------------------------------- GDP
def test_a_tiny_ppo_run_improves_on_its_first_samples():
    g, c = toy()
    # the paper's policy: no prior, no structured noise — the network alone must learn
    cfg = GDPConfig(learning_rate=1e-3, prior=None, unit_moves=0, **SMALL)
    r = gdp_search(g, c, budget=SearchBudget(samples=480), seed=0, config=cfg)
    first = r.curve.points[0].mean_step_s
    late = np.mean([p.mean_step_s for p in r.curve.points[-5:]])
    assert r.placement.meta["best_step_s"] < first and late < 0.9 * first
    assert simulate(g, c, r.placement).step_time == pytest.approx(r.placement.meta["best_step_s"])


def test_gdp_never_breaks_colocation_and_keeps_to_the_devices_of_the_cluster():
    g, c = chain(), get_cluster("k80x2")
    search = GDPSearch([g], [c], GDPConfig(**SMALL), seed=0)
    d, _, _ = search._sample(search.problems[0], 50)
    assert int(d.max()) < c.n_devices
    r = gdp_search(g, c, budget=SearchBudget(samples=16), seed=0, config=GDPConfig(**SMALL))
    dev = r.placement.to_array(g, c)
    assert dev[g.index("a2")] == dev[g.index("a5")]


def test_the_search_starts_from_its_prior_and_biases_toward_the_best_so_far():
    g, c = toy()
    expert = simulate(g, c, place(g, c, "expert")).step_time
    search = GDPSearch([g], [c], GDPConfig(prior="expert", **SMALL), seed=0)
    p = search.problems[0]
    assert p.prior_method == "expert" and p.prior_step == pytest.approx(expert) and p.best_step == p.prior_step
    D, N, U = c.n_devices, p.features.n_nodes, int(p.features.unit.max()) + 1
    assert p.weight == pytest.approx(math.log((D - 1) * N / 1.0))
    tail = 0.5 / (U * (D - 1))
    assert p.sigma == pytest.approx(p.weight / (math.sqrt(2) * NormalDist().inv_cdf(1 - tail)))
    bias = p.bias.numpy()[:, :D]
    assert (bias.argmax(1) == p.prior[p.features.order]).all() and bias.max(1) == pytest.approx(p.weight)
    for _ in range(6):
        search.update()
        assert search.best_step <= p.prior_step
        assert (p.bias.numpy()[:, :D].argmax(1) == p.best_groups[p.features.order]).all()   # re-centred
    r = gdp_search(g, c, budget=SearchBudget(samples=64), seed=0, config=GDPConfig(prior="expert", **SMALL))
    assert r.placement.meta["prior"] == "expert" and r.placement.meta["best_step_s"] <= expert
    assert simulate(g, c, r.placement).step_time == pytest.approx(r.placement.meta["best_step_s"])
    paper = GDPSearch([g], [c], GDPConfig(prior=None, **SMALL), seed=0).problems[0]
    assert paper.bias is None and paper.best_groups is None and paper.sigma == 0.0


def test_zero_shot_and_fine_tune_keep_the_saved_settings_and_never_lose_to_the_prior(tmp_path):
    g, c = toy()
    gdp_train([g], [c], budget=SearchBudget(samples=16), seed=0, output=tmp_path / "p.safetensors",
              config=GDPConfig(prior=None, unit_moves=0, **SMALL))
    z = gdp_search(g, c, policy=tmp_path / "p.safetensors", zero_shot_only=True, seed=0, config={}).placement
    assert z.meta["prior"] is None and z.meta["prior_step_s"] is None
    three = gdp_search(g, c, policy=tmp_path / "p.safetensors", zero_shot_only=True, seed=0,
                       config={"zero_shot_samples": 3})
    assert three.samples == three.evaluations == 4                 # the most likely placement and 3 samples
    tuned = gdp_search(g, c, policy=tmp_path / "p.safetensors", budget=SearchBudget(samples=8), seed=0)
    assert tuned.placement.meta["prior"] is None
    with pytest.raises(AutoplaceError, match="shapes the network"):
        gdp_search(g, c, policy=tmp_path / "p.safetensors", budget=SearchBudget(samples=8),
                   config={"hidden": 32, "heads": 2})
    # no bias (w = 0): the network's own placements, and the prior among the candidates
    with_prior = gdp_search(g, c, policy=tmp_path / "p.safetensors", zero_shot_only=True, seed=0,
                            config={"prior": "metis", "node_moves": 1e9}).placement
    assert with_prior.meta["prior"] == "metis"
    assert with_prior.meta["best_step_s"] <= with_prior.meta["prior_step_s"] + 1e-15


def test_a_prior_that_splits_a_node_biases_it_to_a_device_that_can_run_it(monkeypatch):
    import autoplace.placers.learned.gdp as gdp_module
    from autoplace.placers.learned.gdp import gdp_nodes, prior_nodes

    g, c = chain(), get_cluster("k80x2")
    nodes = gdp_nodes(g, c, GDPConfig())
    split = np.zeros(g.n_ops, dtype=np.int64)
    split[[g.index("a2"), g.index("a5")]] = [1, 2]               # the a2/a5 node split over both GPUs
    split[g.index("a4")] = 1

    class Fake:
        method = "fake"

        def to_array(self, graph, cluster):
            return split

    monkeypatch.setattr(gdp_module, "place", lambda *a, **k: Fake())
    feasible = np.ones((nodes.n_groups, c.n_devices), dtype=bool)
    node = nodes.group[g.index("a2")]
    feasible[node, 1] = False                                    # it cannot run on device 1
    dev, method = prior_nodes(g, c, nodes, "expert", 0, feasible)
    assert method == "fake" and dev[node] == 2 and dev[nodes.group[g.index("a4")]] == 1


def test_colocated_ops_share_a_device_in_every_gdp_sample():
    g, c = build_graph("rnnlm-2", layers=2, steps=3, batch=4, hidden=8, vocab=16), get_cluster("p100x4")
    groups: dict[str, list[int]] = {}
    for i, op in enumerate(g.ops):
        if op.colocation_group:
            groups.setdefault(op.colocation_group, []).append(i)
    assert any(len(v) > 1 for v in groups.values())
    search = GDPSearch([g], [c], GDPConfig(prior=None, **SMALL), seed=0)      # uniform: splits are likely
    p = search.problems[0]
    d, _, _ = search._sample(p, 20)
    per_node = np.empty((20, p.features.n_nodes), dtype=np.int64)
    per_node[:, p.features.order] = d.numpy()
    for k in range(20):
        dev = p.grouping.expand(per_node[k])
        assert all(len(set(dev[v].tolist())) == 1 for v in groups.values())


def test_the_papers_policy_without_a_prior_writes_its_placement(tmp_path):
    args = ["place", "layered-dag", "-P", "ops=20", "-c", "k80x2", "-m", "gdp", "--samples", "8",
            "--set", "prior=none", "--set", "unit_moves=0", "-o", str(tmp_path / "p.json")]
    assert main(args) == 0
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["prior"] is None and saved["prior_step_s"] is None and saved["method"] == "gdp"


def test_structured_noise_moves_whole_units():
    g, c = build_graph("rnnlm-2", layers=2, steps=3, batch=4, hidden=8, vocab=16), get_cluster("p100x2")
    search = GDPSearch([g], [c], GDPConfig(prior="single-gpu", node_moves=1e-9, unit_moves=2.0, **SMALL), seed=0)
    p = search.problems[0]
    d, _, eps = search._sample(p, 64)
    unit = p.features.unit
    assert eps.shape == (64, p.features.n_nodes, 16)
    assert all((eps[:, unit == u] == eps[:, unit == u][:, :1]).all() for u in range(int(unit.max()) + 1))
    moved = d.numpy() != p.prior[p.features.order][None]
    assert moved.any(axis=1).mean() > 0.3                     # samples move...
    # ...whole units (where a unit's draw lands on the threshold, the nodes' own logits decide)
    whole = [moved[k, unit == u].all() for k in range(64) for u in np.unique(unit[moved[k]])]
    assert np.mean(whole) > 0.5


@pytest.mark.parametrize("bad, match", [({"prior": "gdp"}, "fast placers"), ({"prior": "nope"}, "prior"),
                                        ({"node_moves": 0}, "node_moves"), ({"unit_moves": -1}, "unit_moves")])
def test_bad_search_settings_are_one_clear_error(bad, match):
    with pytest.raises(AutoplaceError, match=match):
        GDPConfig(**bad)


def test_save_then_load_gives_identical_placements_for_a_seed(tmp_path):
    g, c = toy()
    cfg = GDPConfig(prior=None, unit_moves=0, **SMALL)          # the network alone places
    fresh = zero_shot(new_policy(cfg), g, c, cfg, seed=3).to_array(g, c)
    r = gdp_train([g], [c], budget=SearchBudget(samples=32), seed=0, config=cfg, output=tmp_path / "p.safetensors")
    net, cfg2 = load_policy(tmp_path / "p.safetensors")
    assert cfg2 == cfg
    a = zero_shot(r.extra["policy"], g, c, cfg, seed=3).to_array(g, c)
    b = zero_shot(net, g, c, cfg2, seed=3).to_array(g, c)
    assert (a == b).all() and (a != fresh).any()                # the loaded weights, not any network's
    save_policy(net, cfg2, tmp_path / "q.pt")
    again, _ = load_policy(tmp_path / "q.pt")
    assert all(torch.equal(x, y) for x, y in zip(net.state_dict().values(), again.state_dict().values()))
    with pytest.raises(FormatError, match="not a GDP policy"):
        (tmp_path / "bad.pt").write_bytes(b"nonsense")
        load_policy(tmp_path / "bad.pt")
    with pytest.raises(AutoplaceError, match="shapes the network"):
        load_policy(tmp_path / "p.safetensors", {"hidden": 32})


def test_one_policy_trains_on_a_batch_of_graphs_and_places_a_held_out_one(tmp_path):
    a, c2 = build_graph("layered-dag", ops=30, width=3), get_cluster("k80x2")
    b, c4 = build_graph("layered-dag", ops=50, width=5, seed=1), get_cluster("k80x4")
    r = gdp_train([a, b], [c2, c4], budget=SearchBudget(samples=64), seed=0, config=GDPConfig(**SMALL),
                  output=tmp_path / "p.safetensors")
    assert len(r.placements) == 2 and r.samples == 64 and len(r.extra["best_steps_s"]) == 2
    held = build_graph("layered-dag", ops=40, width=4, seed=2)
    p = gdp_search(held, c4, policy=tmp_path / "p.safetensors", zero_shot_only=True, seed=0).placement
    assert p.meta["mode"] == "zero-shot" and p.meta["policy_time_s"] >= 0 and simulate(held, c4, p).ok
    tuned = gdp_search(held, c4, policy=tmp_path / "p.safetensors", budget=SearchBudget(samples=16), seed=0)
    assert tuned.samples == 16


def test_an_interrupted_gdp_search_resumes_to_the_uninterrupted_result(tmp_path):
    g, c = toy()
    cfg = GDPConfig(**SMALL)
    whole = gdp_search(g, c, budget=SearchBudget(samples=64), seed=0, config=cfg)
    gdp_search(g, c, budget=SearchBudget(samples=64), seed=0, config=cfg, checkpoint=tmp_path, stop_after_updates=3)
    resumed = gdp_search(g, c, budget=SearchBudget(samples=64), seed=0, config=cfg, resume=tmp_path)
    assert (resumed.placement.to_array(g, c) == whole.placement.to_array(g, c)).all()
    assert [p.best_step_s for p in resumed.curve.points] == [p.best_step_s for p in whole.curve.points]
    with pytest.raises(AutoplaceError, match="different: config"):
        gdp_search(g, c, budget=SearchBudget(samples=64), seed=0, config=GDPConfig(**{**SMALL, "clip": 0.1}),
                   resume=tmp_path)


def test_too_many_devices_for_the_policy_is_one_clear_error():
    g = chain()
    with pytest.raises(AutoplaceError, match="max_devices"):
        GDPSearch([g], [get_cluster("k80x4")], GDPConfig(max_devices=3, **{k: v for k, v in SMALL.items()}))


# ----------------------------------------------------------------------------------------------- HDP
def test_hdp_samples_valid_groupings_and_placements_reproducibly():
    """(Learning against its frozen self: tests/test_hdp.py.)"""
    g, c = toy()
    for cfg in (HDPConfig(groups=8, hidden=32), HDPConfig(paper=True)):
        search = HDPSearch(g, c, cfg, seed=0)
        node_dev, runs, logp = search._sample(5)
        assert node_dev.shape == (5, search.features.n_nodes) and runs.all() and logp.shape == (5,)
        assert logp.requires_grad
    r = hdp_search(g, c, budget=SearchBudget(samples=64), seed=0, config=HDPConfig(groups=8, hidden=32))
    again = hdp_search(g, c, budget=SearchBudget(samples=64), seed=0, config=HDPConfig(groups=8, hidden=32))
    assert (again.placement.to_array(g, c) == r.placement.to_array(g, c)).all()
    assert r.placement.meta["best_step_s"] == min(p.best_step_s for p in r.curve.points)


def test_hdp_keeps_colocated_ops_together_and_resumes(tmp_path):
    g, c = chain(), get_cluster("k80x2")
    cfg = HDPConfig(groups=3, hidden=16)
    whole = hdp_search(g, c, budget=SearchBudget(samples=48), seed=0, config=cfg)
    dev = whole.placement.to_array(g, c)
    assert dev[g.index("a2")] == dev[g.index("a5")]
    hdp_search(g, c, budget=SearchBudget(samples=48), seed=0, config=cfg, checkpoint=tmp_path, stop_after_updates=2)
    resumed = hdp_search(g, c, budget=SearchBudget(samples=48), seed=0, config=cfg, resume=tmp_path)
    assert (resumed.placement.to_array(g, c) == dev).all()


# ----------------------------------------------------------------------------------------------- CLI
def test_train_then_zero_shot_then_fine_tune_from_the_command_line(tmp_path, capsys):
    pol = tmp_path / "policy.pt"
    settings = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    assert main(["train", "--graphs", "transformer-xl-2,wavenet-2x18", "-c", "p100x2,p100x4", "-o", str(pol),
                 "--samples", "32", "--json", *settings]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 32 and [x["graph"] for x in out["graphs"]] == ["transformer-xl-2", "wavenet-2x18"]
    assert [x["cluster"] for x in out["graphs"]] == ["p100x2", "p100x4"]
    held = ["layered-dag", "-P", "ops=60", "-P", "width=4", "-c", "k80x2", "-m", "gdp", "--policy", str(pol)]
    assert main(["place", *held, "--zero-shot", "-o", str(tmp_path / "z.json")]) == 0
    assert main(["place", *held, "--samples", "8", "-o", str(tmp_path / "f.json")]) == 0
    capsys.readouterr()
    for bad in (["-m", "hdp", "--zero-shot"], ["-m", "gdp", "--zero-shot"], ["-m", "gdp", "--policy", "nope.pt"],
                ["-m", "gdp", "--set", "hidden=7", "--samples", "8"]):
        assert main(["place", "layered-dag", "-P", "ops=60", "-c", "k80x2", "-o", str(tmp_path / "x.json"), *bad]) == 2
        assert "error" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_parameters_no_cluster_can_hold_fail_before_the_search():
    from autoplace.cluster import Cluster, Device, LinkSpec
    from autoplace.errors import InfeasibleError

    ops = [Op("w", "parameter", output_bytes=(4096,), param_bytes=4096, meta={"view": True}),
           Op("y", "mm", ("w",), output_bytes=(64,), flops=1e6)]
    g = Graph(ops, name="heavy")
    def cluster(memory: int) -> Cluster:
        return Cluster("tiny", [Device(f"gpu:{i}", "gpu", memory, 1e12, 1e11) for i in range(2)],
                       default_link=LinkSpec(1e10, 1e-5))

    for memory, why in ((3000, "more than any device"), (1000, "exceed the memory")):
        for search in (gdp_search, hdp_search):
            with pytest.raises(InfeasibleError, match=why):
                search(g, cluster(memory), budget=SearchBudget(samples=10**6))


def test_learning_off_leaves_gdp_and_hdp_where_they_started_and_learning_on_moves_them():
    g, c = toy()
    pairs = [(GDPSearch([g], [c], GDPConfig(prior=None, learn=learn, **SMALL), seed=0), "policy")
             for learn in (True, False)]
    pairs += [(HDPSearch(g, c, HDPConfig(groups=8, hidden=32, learn=learn), seed=0), "placer")
              for learn in (True, False)]
    for (on, part), (off, _) in (pairs[:2], pairs[2:]):
        nets = [getattr(s, part) for s in (on, off)]
        before = [{k: v.clone() for k, v in n.state_dict().items()} for n in nets]
        for _ in range(3):
            on.update(), off.update()
        moved = [not all(torch.equal(b[k], v) for k, v in n.state_dict().items()) for b, n in zip(before, nets)]
        assert moved == [True, False], type(on).__name__


@pytest.mark.parametrize("case", ["ms", "100 s", "out of memory"])
def test_paper_mode_is_the_ppo_objective_with_the_running_mean_baseline_computed_by_hand(case):
    """One node, two devices: in the first PPO epoch the ratio is 1 and the clipped surrogate's gradient on
    the output bias is -(1/K) sum_i A_i (e_{d_i} - pi), with R = -sqrt(step) (-10 for a placement that
    does not fit: §4.1) and A = R - the mean of the graph's earlier rewards (the batch's own mean on the
    first update), nothing of ours in between: at steps of 100 s the gradient's norm is far above 1, where
    our clip would act, and the paper has none."""
    from autoplace.cluster import Cluster, Device, LinkSpec

    flops = 1e14 if case == "100 s" else 1e9
    g = Graph([Op("op0", "mm", output_bytes=(8,), flops=flops, param_bytes=100)], name="one")
    c = Cluster("c", [Device("gpu:0", "gpu", 10**9, 1e12, 1e11),
                      Device("gpu:1", "gpu", 10 if case == "out of memory" else 10**9, 1e11, 1e11)],
                default_link=LinkSpec(1e9, 1e-6))
    search = GDPSearch([g], [c], GDPConfig(paper=True, **SMALL), seed=0)
    assert search.config.prior is None and not search.config.normalize_advantage
    assert (search.config.ratio, search.config.features) == ("placement", "paper")
    assert search.config.grad_clip is None and search.config.invalid_reward == -10.0
    p = search.problems[0]
    seen, grads = spy_on_updates(p, search.optimizer, search.policy.placer.out.bias)
    earlier, norms = [], []
    for _ in range(2):
        with torch.no_grad():
            pi = torch.softmax(search._logits(p), dim=1)[0].numpy()
        grads.clear()
        search.update()
        d = seen[-1][:, 0]
        r = np.array([-10.0 if (case == "out of memory" and k == 1) else
                      -np.sqrt(simulate(g, c, np.array([k])).step_time) for k in d])
        baseline = np.mean(earlier) if earlier else r.mean()
        expected = -sum((ri - baseline) * (np.eye(len(pi))[k] - pi) for ri, k in zip(r, d)) / len(d)
        assert np.allclose(grads[0].numpy(), expected, rtol=1e-4, atol=1e-7)
        assert len(grads) == search.config.ppo_epochs
        earlier += r.tolist()
        norms.append(np.linalg.norm(expected))
    assert p.reward_sum == pytest.approx(sum(earlier)) and p.reward_n == len(earlier)
    if case == "100 s":
        assert max(norms) > 1.0                                  # a clip at 1 would have changed the step
    if case == "out of memory":
        assert -10.0 in earlier


def test_paper_mode_ratio_is_the_whole_placements_probability():
    """Two nodes: PPO's ratio is pi(D)/pi_old(D), the product over the nodes, so the first epoch's gradient
    on the output bias is -(1/K) sum_k A_k sum_v (e_{d_kv} - pi_v): twice the per-node ratio's mean over
    the nodes' decisions, which the same search with ratio=node gives."""
    from autoplace.cluster import Cluster, Device, LinkSpec

    g = Graph([Op("a", "mm", output_bytes=(8,), flops=1e9, param_bytes=100),
               Op("b", "mm", ("a",), output_bytes=(8,), flops=2e9, param_bytes=100)], name="two")
    c = Cluster("c", [Device("gpu:0", "gpu", 10**9, 1e12, 1e11), Device("gpu:1", "gpu", 10**9, 1e11, 1e11)],
                default_link=LinkSpec(1e9, 1e-6))
    got = {}
    for ratio in ("placement", "node"):
        search = GDPSearch([g], [c], GDPConfig(paper=True, **SMALL), seed=0)
        object.__setattr__(search.config, "ratio", ratio)
        p = search.problems[0]
        seen, grads = spy_on_updates(p, search.optimizer, search.policy.placer.out.bias)
        with torch.no_grad():
            pi = torch.softmax(search._logits(p), dim=1).numpy()                      # [N, max_devices]
        search.update()
        d = seen[0][:, p.features.order]                                             # [K, N] in node order
        r = -np.sqrt([simulate(g, c, p.grouping.expand(k)).step_time for k in seen[0]])
        a = r - r.mean()
        eye = np.eye(pi.shape[1])
        per_sample = [ai * sum(eye[dv] - pi[v] for v, dv in enumerate(dk)) for ai, dk in zip(a, d)]
        expected = -sum(per_sample) / len(d) / (1 if ratio == "placement" else d.shape[1])
        assert np.allclose(grads[0].numpy(), expected, rtol=1e-4, atol=1e-7), ratio
        got[ratio] = grads[0]
    assert torch.allclose(got["placement"], 2 * got["node"], rtol=1e-4, atol=1e-7)


def test_paper_mode_clips_the_whole_placements_ratio_in_later_epochs():
    """Two nodes: the second epoch's ratio is the product over the nodes, r = prod_v pi'_v(d_v)/pi_v(d_v);
    a sample whose r has passed the clip on its advantage's side gives no gradient, the others give
    -(1/K) A_k r_k sum_v (e_{d_kv} - pi'_v) on the output bias."""
    from autoplace.cluster import Cluster, Device, LinkSpec

    g = Graph([Op("a", "mm", output_bytes=(8,), flops=1e9, param_bytes=100),
               Op("b", "mm", ("a",), output_bytes=(8,), flops=2e9, param_bytes=100)], name="two")
    c = Cluster("c", [Device("gpu:0", "gpu", 10**9, 1e12, 1e11), Device("gpu:1", "gpu", 10**9, 1e11, 1e11)],
                default_link=LinkSpec(1e9, 1e-6))
    search = GDPSearch([g], [c], GDPConfig(paper=True, learning_rate=0.001, ppo_epochs=2, **SMALL), seed=0)
    p, grads, pis = search.problems[0], [], []
    seen, _ = spy_on_updates(p, search.optimizer, search.policy.placer.out.bias)
    step = search.optimizer.step

    def record():
        grads.append(search.policy.placer.out.bias.grad.clone())
        with torch.no_grad():
            pis.append(torch.softmax(search._logits(p), dim=1).numpy())
        step()

    search.optimizer.step = record
    search.update()
    d = seen[0][:, p.features.order]                                                # [K, N] in node order
    r = -np.sqrt([simulate(g, c, p.grouping.expand(k)).step_time for k in seen[0]])
    a = r - r.mean()
    nodes = np.arange(d.shape[1])
    ratio = np.array([np.prod(pis[1][nodes, dk] / pis[0][nodes, dk]) for dk in d])
    eps = search.config.clip
    active = np.where(a > 0, ratio < 1 + eps, ratio > 1 - eps)
    assert not active.all() and active.any(), ratio                # the clip bites on some samples only
    eye = np.eye(pis[1].shape[1])
    expected = -sum(ak * rk * sum(eye[dv] - pis[1][v] for v, dv in enumerate(dk))
                    for ak, rk, dk, on in zip(a, ratio, d, active) if on) / len(d)
    assert np.allclose(grads[1].numpy(), expected, rtol=1e-4, atol=1e-7)


def test_paper_features_are_output_shapes_and_adjacent_node_ids_computed_by_hand():
    from autoplace.policies.features import META_DENSE, meta_features

    g = chain()
    f = meta_features(g, group_ops(g, ("colocation",)))
    assert f.dense.shape == (6, META_DENSE) == (6, 45)                 # nodes x, a1, {a2, a5}, a3, a4, a6
    assert f.dense[:, 0].tolist() == [256, 256, 512, 768, 1024, 1536] and (f.dense[:, 1:25] == -1).all()
    ids = {0: [1, 1], 1: [0, -1, 2, 1], 2: [1, -1, 4, -1, 3, 1, 5, 1], 3: [2, -1, 4, 1], 4: [3, -1, 2, 1],
           5: [2, -1]}
    for p, nb in ids.items():
        assert f.dense[p, 25:].tolist() == nb + [0] * (20 - len(nb))
    search = GDPSearch([g], [get_cluster("k80x2")], GDPConfig(features="paper", **SMALL), seed=0)
    assert (search.problems[0].features.dense == f.dense).all()
    assert search.policy.embed.inp.in_features == SMALL["type_dim"] + 45
    # paper mode: every op a node (x, a1, ..., a6), each with its own output and its chain neighbours
    paper = GDPSearch([g], [get_cluster("k80x2")], GDPConfig(paper=True, **SMALL), seed=0).problems[0].features
    assert paper.dense.shape == (7, 45) and paper.dense[:, 0].tolist() == [256, 256, 512, 768, 1024, 1280, 1536]
    assert (paper.dense[:, 1:25] == -1).all()                          # one output of one dimension each
    ids = {0: [1, 1], **{k: [k - 1, -1, k + 1, 1] for k in range(1, 6)}, 6: [5, -1]}
    for p, nb in ids.items():
        assert paper.dense[p, 25:].tolist() == nb + [0] * (20 - len(nb))


def test_ppo_clips_the_ratio_in_later_epochs_as_schulman_et_al():
    """A large step makes the second epoch's ratios r = pi'(d)/pi(d) leave [1 - eps, 1 + eps]: a sample
    whose ratio has passed the clip on the side its advantage pushes toward gives no gradient; the others
    give -(1/K) A_i r_i (e_{d_i} - pi')."""
    from autoplace.cluster import Cluster, Device, LinkSpec

    g = Graph([Op("op0", "mm", output_bytes=(8,), flops=1e9, param_bytes=100)], name="one")
    c = Cluster("c", [Device("gpu:0", "gpu", 10**9, 1e12, 1e11), Device("gpu:1", "gpu", 10**9, 1e11, 1e11)],
                default_link=LinkSpec(1e9, 1e-6))
    search = GDPSearch([g], [c], GDPConfig(paper=True, learning_rate=0.0015, ppo_epochs=2, **SMALL), seed=0)
    p, seen, grads, pis = search.problems[0], [], [], []
    scorer = p.evaluate
    p.evaluate = lambda groups: (seen.append(groups.copy()), scorer(groups))[1]
    step = search.optimizer.step

    def record():
        grads.append(search.policy.placer.out.bias.grad.clone())
        with torch.no_grad():
            pis.append(torch.softmax(search._logits(p), dim=1)[0].numpy())
        step()

    search.optimizer.step = record
    search.update()
    d = seen[0][:, 0]
    r = -np.sqrt([simulate(g, c, np.array([k])).step_time for k in d])
    a = r - r.mean()
    ratio = pis[1][d] / pis[0][d]
    eps = search.config.clip
    active = np.where(a > 0, ratio < 1 + eps, ratio > 1 - eps)
    assert not active.all() and active.any()                         # the clip bites on some samples only
    expected = -sum(ai * ri * (np.eye(len(pis[1]))[k] - pis[1]) for ai, ri, k, on in zip(a, ratio, d, active)
                    if on) / len(d)
    assert np.allclose(grads[1].numpy(), expected, rtol=1e-4, atol=1e-7)


def test_deciding_per_unit_gdp_places_each_structural_unit_whole_and_paper_mode_places_every_node():
    from autoplace.placers.learned.gdp import gdp_nodes
    from autoplace.policies.features import group_features

    g, c = build_graph("rnnlm-2", vocab=50, hidden=16, steps=12, batch=2), get_cluster("p100x2")
    nodes = gdp_nodes(g, c, GDPConfig(**SMALL))
    unit_of_op = group_features(g, nodes, 1).unit_of_group[nodes.group]
    units = GDPSearch([g], [c], GDPConfig(decide="unit", **SMALL), seed=0)
    p = units.problems[0]
    assert p.features.n_nodes == len(set(unit_of_op)) < nodes.n_groups
    for u in range(p.grouping.n_groups):                          # one decision per unit: the same ops
        assert len(set(unit_of_op[p.grouping.members(u)])) == 1
    units.update()
    placement = p.placement("gdp").to_array(g, c)
    assert all(len(set(placement[unit_of_op == u])) == 1 for u in set(unit_of_op))
    assert (GDPConfig(paper=True).decide, GDPConfig(paper=True).nodes) == ("node", "ops")
    with pytest.raises(AutoplaceError, match="paper=true fixes nodes"):
        GDPConfig.from_dict({"paper": True, "nodes": "groups"})
    with pytest.raises(AutoplaceError, match="paper=true fixes decide"):
        GDPConfig.from_dict({"paper": True, "decide": "unit"})


def test_placing_op_by_op_makes_a_placement_that_splits_a_colocation_group_invalid():
    """``nodes="ops"`` (§3: a node per op): the policy decides every op, and a placement that puts two ops of
    one co-location group on different devices is invalid (§4.1), scored -10 without being run; one that
    keeps every group whole is scored as the simulator scores it."""
    g, c = build_graph("toy-mlp"), get_cluster("k80x2")
    search = GDPSearch([g], [c], GDPConfig(nodes="ops", prior=None, samples_per_update=16), seed=0)
    p = search.problems[0]
    coloc = group_ops(g, rules=("colocation",)).group
    assert p.features.n_nodes == g.n_ops and (p.grouping.group == np.arange(g.n_ops)).all()
    whole = np.zeros((1, g.n_ops), dtype=np.int64) + 1                  # everything on gpu:0 (index 1)
    split = whole.copy()
    member = np.flatnonzero(np.bincount(coloc)[coloc] > 1)[0]           # an op of a group of two or more
    split[0, member] = 2
    runs_before = p.evaluate.evaluations
    scores = p.evaluate(np.concatenate([whole, split]))
    assert scores.ok.tolist() == [True, False] and math.isinf(scores.step_time[1])
    assert scores.step_time[0] == pytest.approx(simulate(g, c, whole[0]).step_time)
    assert p.evaluate.evaluations == runs_before + 1                    # the split one was not run
    seen, evaluate = [], p.evaluate
    p.evaluate = lambda groups: seen.append((groups.copy(), evaluate(groups))) or seen[-1][1]
    search.update()
    groups, scores = seen[0]
    first = np.unique(coloc, return_index=True)[1][coloc]
    kept = (groups == groups[:, first]).all(axis=1)
    assert (~kept).any() and (scores.ok == kept).all()                   # a fresh network splits groups
    assert p.reward_sum == pytest.approx(np.where(kept, -np.sqrt(np.where(kept, scores.step_time, 1.0)), -10.0).sum())
    # on a graph with one group of two ops (a2, a5) some samples keep it whole: the best is one of those,
    # and a checkpoint whose cache holds a split placement as one that ran (with the step the simulator,
    # which knows nothing of co-location, gives it) is refused: the placement is scored again as invalid
    g = chain()
    search = GDPSearch([g], [c], GDPConfig(nodes="ops", prior=None, samples_per_update=16), seed=0)
    p = search.problems[0]
    a2, a5 = g.index("a2"), g.index("a5")
    while p.best_groups is None and search.updates < 20:
        search.update()
    assert p.best_groups[a2] == p.best_groups[a5]
    split = p.best_groups.copy()[None]
    split[0, a5] = (split[0, a2] + 1) % c.n_devices
    step = simulate(g, c, split[0]).step_time
    assert math.isfinite(step)
    state = search.state()
    cache = state["problems"][0]["cache"]
    for key, value in (("groups", split), ("step", [step]), ("ok", [True]), ("runs", [1]), ("failed", [0])):
        cache[key] = np.concatenate([np.asarray(cache[key]), np.asarray(value, dtype=np.asarray(cache[key]).dtype)])
    fresh = GDPSearch([g], [c], GDPConfig(nodes="ops", prior=None, samples_per_update=16), seed=0)
    with pytest.raises(FormatError, match="a step time its placement does not have"):
        fresh.load(state)
    with pytest.raises(AutoplaceError, match="decide='node'"):
        GDPConfig(nodes="ops", decide="unit")
    with pytest.raises(AutoplaceError, match="group_rules does not apply"):
        GDPConfig(nodes="ops", group_rules="colocation,gradient")
    assert isinstance(GDPSearch([g], [c], GDPConfig(paper=True, **SMALL), seed=0).problems[0].evaluate,
                      ColocationChecked)                                # paper mode scores so
