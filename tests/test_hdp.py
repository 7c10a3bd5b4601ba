"""HDP's paper mode: the authors' released code (TensorFlow's ``grappler/hierarchical_controller.py``) point by
point — its settings, node and group embeddings, update rule, schedules and noise — each computed by hand; and
HDP learning against its frozen self."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import independent_products  # noqa: E402

from autoplace.cluster import Cluster, Device, LinkSpec, get_cluster  # noqa: E402
from autoplace.errors import AutoplaceError  # noqa: E402
from autoplace.graph import Graph, Op  # noqa: E402
from autoplace.placers.learned.hdp import HDPConfig, HDPSearch, hdp_search  # noqa: E402
from autoplace.policies.hierarchical import group_embedding, noisy_logits, released_inputs  # noqa: E402
from autoplace.search import SearchBudget  # noqa: E402
from autoplace.sim import simulate  # noqa: E402
from autoplace.zoo import build_graph  # noqa: E402


def chain() -> Graph:
    """x -> a1 -> ... -> a6, a2 and a5 co-located (one node)."""
    ops = [Op("x", "input", output_bytes=(1024,))]
    for i in range(1, 7):
        ops.append(Op(f"a{i}", "mm" if i % 2 else "relu", (ops[-1].name,), output_bytes=(1024 * i,), flops=1e6 * i,
                      colocation_group="g" if i in (2, 5) else None))
    return Graph(ops, name="chain")


def two_gpus() -> Cluster:
    return Cluster("c", [Device("gpu:0", "gpu", 10**9, 1e12, 1e11), Device("gpu:1", "gpu", 10**9, 1e11, 1e11)],
                   default_link=LinkSpec(1e9, 1e-6))


def test_paper_mode_is_the_released_hyperparameters():
    """hierarchical_controller_hparams(): lr 0.1 decayed x0.95 every 50 steps from step 400, grad_bound 1.0,
    logits_std_noise 0.5 until step 750, tanh_constant 1.0, hidden 512 (bi-LSTM), grouping_hidden 64,
    bl_dec 0.9, failing_signal 100, stop_updating_after_steps 1000, stop_sampling 500, num_groups
    min(256, 20 devices); graph_placer.PlaceGraph: one child per step."""
    cfg = HDPConfig(paper=True)
    assert (cfg.network, cfg.samples_per_update, cfg.learning_rate, cfg.grad_clip, cfg.logit_clip) == \
        ("released", 1, 0.1, 1.0, 1.0)
    assert (cfg.logit_noise, cfg.noise_updates, cfg.hidden, cfg.grouper_hidden, cfg.baseline_decay) == \
        (0.5, 750, 512, 64, 0.9)
    assert (cfg.failing_step_s, cfg.only_successful_after, cfg.placer_sampling_updates) == (100.0, 1000, 500)
    assert cfg.n_groups(get_cluster("k80x2")) == 60 and cfg.n_groups(get_cluster("flexflow-p100x16")) == 256
    assert [cfg.step_size(t) for t in (0, 399, 449, 450, 499, 500, 1000)] == pytest.approx(
        [0.1, 0.1, 0.1, 0.1 * 0.95, 0.1 * 0.95, 0.1 * 0.95**2, 0.1 * 0.95**12])
    assert HDPConfig().step_size(5000) == HDPConfig().learning_rate          # ours: constant
    with pytest.raises(AutoplaceError, match="paper=true fixes hidden"):
        HDPConfig.from_dict({"paper": True, "hidden": 128})


def test_node_embedding_is_the_released_op_embedding_computed_by_hand():
    """[type index, 5x5 output dims (-1 absent), 20 adjacency entries]; a node's list is rebuilt each time it
    is met as a consumer (the released code's test of a name against integer keys)."""
    g = chain()
    s = HDPSearch(g, get_cluster("k80x2"), HDPConfig(paper=True), seed=0)
    inputs = released_inputs(g, s.nodes, s.features)
    emb, kind, n_types = inputs.embedding, inputs.kind, inputs.n_types
    # nodes in order: x, a1, {a2, a5}, a3, a4, a6; types input 0, mm 1, relu 2
    assert n_types == 3 and kind.tolist() == [0, 1, 2, 1, 2, 2]
    assert emb.shape == (6, 46) and emb[:, 0].tolist() == [0, 1, 2, 1, 2, 2]
    dims = [256, 256, 512, 768, 1024, 1536]                        # float32 elements of x, a1, a2, a3, a4, a6
    assert emb[:, 1].tolist() == dims and (emb[:, 2:26] == -1).all()
    # distinct node edges in order: (0,1) (1,2) (2,3) (2,5) (3,4) (4,2); node 2's last producer is 4 (the
    # groups' cycle 2 -> 3 -> 4 -> 2), and it keeps its consumers 3 and 5 as the file's ops always do
    adj = {0: [1, 1], 1: [0, -1, 2, 1], 2: [4, -1, 3, 1, 5, 1], 3: [2, -1, 4, 1], 4: [3, -1, 2, 1], 5: [2, -1]}
    for p, nb in adj.items():
        assert emb[p, 26:].tolist() == nb + [0] * (20 - len(nb))


def test_group_embedding_is_the_released_one_computed_by_hand():
    """[E, E^T, type counts with the summed output dims added onto the first columns] / (row max + 1)."""
    g = chain()
    s = HDPSearch(g, get_cluster("k80x2"), HDPConfig(paper=True), seed=0)
    inputs = released_inputs(g, s.nodes, s.features)
    kind = inputs.kind
    assign = np.array([[0, 0, 1, 1, 0, 1]])                      # nodes x, a1 | a2a5, a3 | a4 | a6
    out = group_embedding(inputs, assign, 3)
    assert out.shape == (1, 3, 2 * 3 + 3 + 25)
    E = np.zeros((3, 3))
    for a, b in ((0, 1), (1, 2), (2, 3), (2, 5), (3, 4), (4, 2)):
        E[assign[0, a], assign[0, b]] += 1
    counts = np.zeros((3, 28))
    for p, grp in enumerate(assign[0]):
        counts[grp, kind[p]] += 1
        counts[grp, 0] += [256, 256, 512, 768, 1024, 1536][p]
    row = np.concatenate([E, E.T, counts], axis=1)
    assert np.allclose(out[0], row / (row.max(axis=1, keepdims=True) + 1))


def test_logit_noise_is_half_the_rms_times_a_standard_normal():
    logits = torch.tensor([[3.0, -1.0], [0.5, 2.0]])
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(2, 2, generator=torch.Generator().manual_seed(3))
    rms = math.sqrt((9 + 1 + 0.25 + 4) / 4)
    assert torch.allclose(noisy_logits(logits, 0.5, gen), logits + 0.5 * rms * z)
    assert noisy_logits(logits, 0.0, gen) is logits


def _np_lstm(x, c, h, w, fb):
    """The released file's ``lstm``, in NumPy."""
    def sig(z):
        return 1 / (1 + np.exp(-z))
    i, f, o, g = np.split(np.concatenate([x, h], axis=1) @ w, 4, axis=1)
    c = sig(i) * np.tanh(g) + sig(f + fb) * c
    return c, sig(o) * np.tanh(c)


def _np_decode(p, mem, state, devices, noise=None) -> float:
    """The released ``decode``'s log-probability of ``devices`` in NumPy: per step the LSTM, attention over
    ``mem``, c·tanh of [h; context] W_softmax (c = 1), plus ``0.5 · rms · noise(D)`` where noise is given."""
    (c, h), signal, total = state, p["device_go_embedding"], 0.0
    for d in devices:
        c, h = _np_lstm(signal, c, h, p["decoder_lstm"], p["decoder_forget_bias"])
        score = (np.tanh(h @ p["attn_w_2"] + mem) @ p["attn_v"])[:, 0]
        a = np.exp(score - score.max())
        context = (mem * (a / a.sum())[:, None]).sum(0, keepdims=True)
        logits = np.tanh(np.concatenate([h, context], axis=1) @ p["device_softmax"])[0]
        if noise is not None:
            logits = logits + 0.5 * np.sqrt(np.mean(logits ** 2)) * noise(len(logits))
        total += logits[d] - np.log(np.exp(logits).sum())
        signal = p["device_embeddings"][d:d + 1]
    return total


def test_released_networks_forward_computed_by_hand():
    """The grouper is x W_ff W_softmax (no activation); the placer's log-probability of given devices is
    the released encode/decode written out in NumPy: the bidirectional encoder pairing forward step i with
    backward step G-1-i, attention over h W_1 with v tanh(h W_2 + mem), c tanh of [h; context] W_softmax."""
    from autoplace.policies.hierarchical import EMBED_DIM, ReleasedGrouper, ReleasedPlacer

    torch.manual_seed(0)
    grouper = ReleasedGrouper(3, hidden=4)
    x = torch.randn(5, EMBED_DIM)
    w = {k: v.detach().numpy().astype(np.float64) for k, v in grouper.state_dict().items()}
    assert np.allclose(grouper(x).detach().numpy(), x.numpy() @ w["w_ff"] @ w["w_softmax"], atol=1e-5)

    placer = ReleasedPlacer(6, 3, hidden=4, tanh_constant=1.0)
    with torch.no_grad():
        placer.encoder_forget_bias.fill_(0.7)
        placer.decoder_forget_bias.fill_(-0.3)
    p = {k: v.detach().numpy().astype(np.float64) for k, v in placer.state_dict().items()}
    emb = torch.randn(1, 4, 6)
    devices = torch.tensor([[2, 0, 1, 2]])
    _, logp = placer.sample(emb, torch.zeros(1, 4, 3), devices=devices)
    e, G, half = emb.numpy()[0].astype(np.float64), 4, 2
    cf = hf = cb = hb = np.zeros((1, half))
    outs = []
    for i in range(G):
        cf, hf = _np_lstm(e[i:i + 1], cf, hf, p["encoder_forward"], p["encoder_forget_bias"])
        cb, hb = _np_lstm(e[G - 1 - i:G - i], cb, hb, p["encoder_backward"], p["encoder_forget_bias"])
        outs.append(np.concatenate([hf, hb], axis=1)[0])
    mem = np.stack(outs) @ p["attn_w_1"]
    state = np.concatenate([cf, cb], axis=1), np.concatenate([hf, hb], axis=1)
    expected = _np_decode(p, mem, state, devices[0].tolist())
    assert logp.item() == pytest.approx(expected, abs=1e-5)
    # the placer's logits get the noise after the tanh bound (the released decode): c·tanh(·) + N(0, (0.5·rms)²),
    # rms over that step's bounded logits, one standard normal per device and step
    gen, z = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    noisy = placer.sample(emb, torch.zeros(1, 4, 3), devices=devices, noise=0.5, generator=gen)[1]
    expected_noisy = _np_decode(p, mem, state, devices[0].tolist(), noise=lambda n: torch.randn((1, n), generator=z)
                                .numpy()[0])
    assert noisy.item() == pytest.approx(expected_noisy, abs=1e-5)
    assert abs(noisy.item() - logp.item()) > 1e-4


def _one_node_search() -> tuple[Graph, Cluster, HDPSearch]:
    g = Graph([Op("op0", "mm", output_bytes=(8,), flops=1e9, param_bytes=100)], name="one")
    c = two_gpus()
    return g, c, HDPSearch(g, c, HDPConfig(paper=True), seed=0)


def _spy_logp(search, params):
    """The gradient of the log-probability of every sample drawn (one per update), taken as it is drawn."""
    drawn = []
    sample = search._sample

    def spy(k):
        out = sample(k)
        grads = torch.autograd.grad(out[2].sum(), params, retain_graph=True, allow_unused=True)
        drawn.append([torch.zeros_like(p) if d is None else d for d, p in zip(grads, params)])
        return out

    search._sample = spy
    return drawn


def test_paper_mode_update_is_the_joint_reinforce_step_clipped_to_norm_1_at_lr_0_1():
    """One child: gradient (R - B) d(log p_group + log p_device) with R = sqrt(step), B the failing
    signal sqrt(100) = 10 at first; clipped to global norm 1; then Adam at 0.1; B <- 0.9 B + 0.1 R."""
    g, c, search = _one_node_search()
    params = [*search.grouper.parameters(), *search.placer.parameters()]
    drawn = _spy_logp(search, params)
    seen, steps = [], []
    scorer, step = search.evaluate, search.optimizer.step
    search.evaluate = lambda groups: (seen.append(groups.copy()), scorer(groups))[1]
    search.optimizer.step = lambda: (steps.append([p.grad.clone() for p in params]), step())[1]
    assert search.baseline == 10.0
    search.update()
    r = math.sqrt(simulate(g, c, np.array([seen[0][0, 0]])).step_time)
    expected = [(r - 10.0) * d for d in drawn[0]]
    norm = torch.sqrt(sum((e ** 2).sum() for e in expected))
    assert norm > 1                                       # so the clip acts
    for got, e in zip(steps[0], expected):
        assert torch.allclose(got, e / norm, rtol=1e-4, atol=1e-6)
    assert search.optimizer.param_groups[0]["lr"] == 0.1
    assert search.baseline == pytest.approx(0.9 * 10.0 + 0.1 * r)


def test_after_1000_updates_only_placements_that_ran_train_and_move_the_baseline():
    g, c, search = _one_node_search()
    real = search.evaluate

    def failing(groups):
        s = real(groups)
        s.step_time[:] = np.inf
        s.ok[:] = False
        return s

    stepped = []
    step = search.optimizer.step
    grads = []
    search.optimizer.step = lambda: (stepped.append(search.updates), grads.append(
        sum(float(p.grad.abs().sum()) for p in search.grouper.parameters())), step())[1]
    search.evaluate = failing
    search.baseline = 9.0
    search.update()                                       # before 1000: a failure trains, B moves toward 10
    assert stepped == [0] and grads[0] > 0 and search.baseline == pytest.approx(0.9 * 9 + 0.1 * 10)
    # update 999: the loss still reads the failure, but the released baseline_update runs after train_op
    # has counted the update (global step 1000), so B reads only placements that ran and stays
    search.updates = 999
    b = search.baseline = 9.0
    search.update()
    assert stepped == [0, 999] and grads[1] > 0 and search.baseline == b
    search.updates = 1000
    search.update()             # after: a failure leaves B and gives a zero gradient (Adam steps on its moments)
    assert stepped == [0, 999, 1000] and grads[2] == 0 and search.baseline == b
    search.evaluate = real
    search.update()
    assert stepped == [0, 999, 1000, 1001] and grads[3] > 0 and search.baseline != b
    assert search.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.95 ** 12)


def test_after_500_updates_the_placer_scores_its_last_draw_and_noise_stops_after_750():
    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    search = HDPSearch(g, c, HDPConfig(paper=True), seed=0)
    search.update()
    last = search.last_devices.copy()
    search.updates = 500
    for _ in range(3):
        node_dev, _, _ = search._sample(1)
        assert (search.last_devices == last).all()
    search.updates = 499                                  # before 500 the placer draws anew
    draws = []
    for _ in range(3):
        search._sample(1)
        draws.append(search.last_devices.copy())
    assert any((d != last).any() for d in draws)
    # the same draw with and without noise: they differ while the update count is at most 750
    search = HDPSearch(g, c, HDPConfig(paper=True), seed=0)
    quiet = HDPSearch(g, c, HDPConfig(**{**HDPConfig.PAPER, "logit_noise": 0.0}), seed=0)
    for updates, differs in ((750, True), (751, False)):
        search.updates = quiet.updates = updates
        search.generator.set_state(quiet.generator.get_state())
        search.last_devices = quiet.last_devices = None
        a, b = search._sample(1)[2].item(), quiet._sample(1)[2].item()
        assert (a != b) == differs, updates


def test_paper_mode_grouper_logits_get_the_noise_until_750_updates(monkeypatch):
    """The released ``make_grouping_predictions`` adds the noise to the grouper's logits too (not only the
    placer's): N(0, (0.5·RMS)²) on the [nodes, groups] logits while the update count is at most 750."""
    import autoplace.policies.hierarchical as hierarchical

    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    search = HDPSearch(g, c, HDPConfig(paper=True), seed=0)
    calls = []
    real = hierarchical.noisy_logits
    monkeypatch.setattr(hierarchical, "noisy_logits", lambda x, sigma, gen: calls.append((tuple(x.shape), sigma))
                        or real(x, sigma, gen))
    grouper_shape = (search.node_embedding.shape[0], search.n_groups)
    for updates, sigma in ((750, 0.5), (751, 0.0)):
        calls.clear()
        search.updates = updates
        search._sample(1)
        assert calls[0] == (grouper_shape, sigma), updates      # the grouper's, before the placer's steps
        assert all(s == sigma for _, s in calls[1:]) and len(calls) > 1


def test_hdp_learns_against_its_frozen_self():
    """The same search with and without its gradient steps, at equal samples: learning must leave the late
    samples faster than the frozen policy's (0.79 of it here; seeds 1 and 2: 0.78, 0.87)."""
    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    late = {}
    for learn in (True, False):
        r = hdp_search(g, c, budget=SearchBudget(samples=800), seed=0,
                       config=HDPConfig(groups=8, hidden=32, learning_rate=3e-3, learn=learn))
        late[learn] = np.mean([p.mean_step_s for p in r.curve.points[-10:]])
    assert late[True] < 0.9 * late[False]


@pytest.mark.slow
def test_paper_mode_hdp_learns_at_the_failing_signals_scale():
    """The released network and schedule at their own scale: forty independent products on a fast and a slow
    GPU whose steps run 25-250 s, around the released failing signal (100 s) the baseline starts from. The
    learned search's last 50 samples must be faster than its frozen self's (0.35x here; seeds 1 and 2:
    0.46x, 0.51x). (At steps of milliseconds the same search settles on an early draw: docs/algorithms.md.)"""
    g, c = independent_products(6.25e11)
    late = {}
    for learn in (True, False):
        r = hdp_search(g, c, budget=SearchBudget(samples=150), seed=0, config=HDPConfig(paper=True, learn=learn))
        late[learn] = np.mean([p.mean_step_s for p in r.curve.points[-50:]])
    assert late[True] < 0.6 * late[False], late


def test_a_released_network_search_resumes_after_its_step_size_decayed(tmp_path):
    """The step size at the last saved update comes back with the optimizer: a search stopped after the decay
    began resumes to the uninterrupted result (the placer's last draw too)."""
    g, c = build_graph("layered-dag", ops=24, width=3), get_cluster("k80x2")
    cfg = HDPConfig(**{**HDPConfig.PAPER, "hidden": 8, "groups": 4, "lr_decay_start": 1, "lr_decay_every": 1,
                       "placer_sampling_updates": 3})
    whole = hdp_search(g, c, budget=SearchBudget(samples=9), seed=0, config=cfg)
    hdp_search(g, c, budget=SearchBudget(samples=9), seed=0, config=cfg, checkpoint=tmp_path, stop_after_updates=5)
    resumed = hdp_search(g, c, budget=SearchBudget(samples=9), seed=0, config=cfg, resume=tmp_path)
    assert [p.mean_step_s for p in resumed.curve.points] == [p.mean_step_s for p in whole.curve.points]
    assert (resumed.placement.to_array(g, c) == whole.placement.to_array(g, c)).all()


def test_paper_mode_fixes_the_nodes_and_our_network_refuses_the_released_knobs():
    assert HDPConfig(paper=True).group_rules == "colocation"
    for bad in ({"logit_noise": 0.5}, {"placer_sampling_updates": 10}):
        with pytest.raises(AutoplaceError, match="released network only"):
            HDPConfig(**bad)
