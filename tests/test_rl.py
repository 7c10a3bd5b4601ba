"""The RL placer (Mirhoseini et al. 2017) and the search engine it runs on: features, evaluation cache and
failing signal, REINFORCE's direction, checkpoints and resume, the curve."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from conftest import independent_products, spy_on_updates, wait_for

torch = pytest.importorskip("torch")

from autoplace.cluster import Cluster, Device, LinkSpec, get_cluster  # noqa: E402
from autoplace.env import SimulatedEnv  # noqa: E402
from autoplace.errors import AutoplaceError  # noqa: E402
from autoplace.graph import Graph, Op  # noqa: E402
from autoplace.grouping import Grouping, group_ops  # noqa: E402
from autoplace.placers.learned.rl import RLConfig, RLSearch, rl_grouping, rl_search, samples_for_budget  # noqa: E402
from autoplace.policies.features import group_features  # noqa: E402
from autoplace.search import Evaluator, SearchBudget, default_failing_step, load_checkpoint  # noqa: E402
from autoplace.search.checkpoint import CHECKPOINT_FILE  # noqa: E402
from autoplace.sim import simulate  # noqa: E402
from autoplace.zoo import build_graph  # noqa: E402


def three_groups(fast_bytes: int = 10**9) -> tuple[Graph, Cluster]:
    """Three independent ops, one group each, and two GPUs, gpu:0 ten times faster than gpu:1."""
    ops = [Op(f"op{i}", "mm", output_bytes=(8,), flops=1e9, param_bytes=100) for i in range(3)]
    c = Cluster("c", [Device("gpu:0", "gpu", fast_bytes, 1e12, 1e11), Device("gpu:1", "gpu", 10**9, 1e11, 1e11)],
                default_link=LinkSpec(1e9, 1e-6))
    return Graph(ops, name="three"), c


def test_features_follow_the_paper_per_group():
    g = build_graph("layered-dag", ops=40, width=4)
    grouping = group_ops(g, ("colocation", "structure"))
    f = group_features(g, grouping, max_outputs=3)
    G = grouping.n_groups
    assert f.dense.shape == (G, 3 + 2 * G) and len(f.type_offsets) == G
    assert len(f.type_index) == g.n_ops and f.type_offsets[0] == 0
    first = [g.rank[grouping.members(k)].min() for k in f.order]
    assert first == sorted(first)                                    # topological order of groups
    ins, outs = f.dense[:, 3:3 + G], f.dense[:, 3 + G:]
    assert np.array_equal(ins, outs.T)                               # j feeds i  <=>  i is fed by j
    assert (f.dense[:, :3] >= 0).all() and (f.dense[:, :3] <= 1).all()


def test_group_features_computed_by_hand():
    """§3.2 per group: its ops' types (an embedding bag's input: each group's op types, in encoder order),
    the distinct tensors leaving it as log2(bytes) / 40, largest first, zero-padded to max_outputs, and
    one-hot vectors of the groups feeding it and fed by it."""
    ops = [Op("x", "input", output_bytes=(1024,)), Op("a", "mm", ("x",), output_bytes=(4096,), flops=1e6),
           Op("b", "relu", ("a",), output_bytes=(256,), flops=1e3),
           Op("c", "mm", ("a", "b"), output_bytes=(64,), flops=1e6)]
    g = Graph(ops, name="hand")
    grouping = Grouping(np.array([0, 1, 1, 2]), ("x", "ab", "c"), ("colocation",))
    f = group_features(g, grouping, max_outputs=3)
    assert f.order.tolist() == [0, 1, 2] and f.type_names == ("input", "mm", "relu")
    assert f.type_index.tolist() == [0, 1, 2, 1] and f.type_offsets.tolist() == [0, 1, 3]
    sizes = f.dense[:, :3]
    # x sends its 1024 B to ab; ab sends a (4096 B) and b (256 B) to c, largest first; c sends nothing
    assert np.allclose(sizes, [[10 / 40, 0, 0], [12 / 40, 8 / 40, 0], [0, 0, 0]])
    feeds_me, i_feed = f.dense[:, 3:6], f.dense[:, 6:9]
    assert feeds_me.tolist() == [[0, 0, 0], [1, 0, 0], [0, 1, 0]]
    assert i_feed.tolist() == [[0, 1, 0], [0, 0, 1], [0, 0, 0]]


def test_the_evaluator_caches_by_placement_and_fails_what_runs_out_of_memory():
    g, c = three_groups(fast_bytes=10)                                # no parameter fits gpu:0
    grouping = group_ops(g)
    ev = Evaluator(SimulatedEnv(g, c), grouping)
    s = ev(np.array([[1, 1, 1], [0, 1, 1], [1, 1, 1]]))
    assert s.ok.tolist() == [True, False, True] and np.isinf(s.step_time[1])
    assert s.step_time[0] == pytest.approx(simulate(g, c, grouping.expand([1, 1, 1])).step_time)
    assert ev.evaluations == 2 and ev.hits == 1
    s2 = ev(np.array([[1, 1, 1]]))
    assert s2.cached.all() and ev.evaluations == 2
    assert default_failing_step(g, c) > s.step_time[0]


def test_reinforce_moves_probability_toward_the_faster_device():
    g, c = three_groups()
    search = RLSearch(g, c, RLConfig(learning_rate=1e-2, samples_per_update=8), seed=0)
    fast = torch.zeros((1, 3), dtype=torch.long)

    def p_fast() -> float:
        with torch.no_grad():
            return float(search.policy.log_prob(search.features, search.mask, fast).exp())

    before = p_fast()
    for _ in range(30):
        search.update()
    assert p_fast() > before + 0.2
    assert search.best_step == pytest.approx(simulate(g, c, np.zeros(3, dtype=np.int64)).step_time)


def test_a_tiny_search_places_validly_and_writes_its_curve(tmp_path):
    g, c = build_graph("layered-dag", ops=60, width=4), get_cluster("k80x2")
    r = rl_search(g, c, budget=SearchBudget(samples=40), config=RLConfig(samples_per_update=4), seed=0,
                  curve_csv=tmp_path / "curve.csv", curve_png=tmp_path / "curve.png")
    assert r.samples == 40 and r.updates == 10 and r.stop_reason == "samples"
    assert simulate(g, c, r.placement).step_time == pytest.approx(r.placement.meta["best_step_s"])
    rows = list(csv.DictReader(open(tmp_path / "curve.csv")))
    assert len(rows) == 10 and [int(x["samples"]) for x in rows] == list(range(4, 41, 4))
    best = [float(x["best_step_s"]) for x in rows]
    assert best == sorted(best, reverse=True)                        # the best only improves
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_reproducible_for_a_seed_and_different_across_seeds():
    g, c = build_graph("layered-dag", ops=60, width=4), get_cluster("k80x4")
    cfg = RLConfig(samples_per_update=4)
    runs = [rl_search(g, c, budget=SearchBudget(samples=48), config=cfg, seed=s) for s in (1, 1, 2)]
    assert runs[0].placement.assignment == runs[1].placement.assignment
    assert [p.best_step_s for p in runs[0].curve.points] == [p.best_step_s for p in runs[1].curve.points]
    assert [p.mean_step_s for p in runs[0].curve.points] != [p.mean_step_s for p in runs[2].curve.points]


def test_an_interrupted_search_resumes_to_the_uninterrupted_result(tmp_path):
    g, c = build_graph("layered-dag", ops=60, width=4), get_cluster("k80x4")
    cfg = RLConfig(samples_per_update=4)
    budget = SearchBudget(samples=80)
    whole = rl_search(g, c, budget=budget, config=cfg, seed=5)
    part = rl_search(g, c, budget=budget, config=cfg, seed=5, checkpoint=tmp_path, checkpoint_every_s=0.0,
                     stop_after_updates=7)
    assert part.stop_reason == "interrupted" and part.samples == 28
    assert load_checkpoint(tmp_path)["updates"] == 7
    resumed = rl_search(g, c, budget=budget, config=cfg, seed=5, resume=tmp_path)
    assert resumed.samples == whole.samples and resumed.updates == whole.updates
    assert resumed.placement.assignment == whole.placement.assignment
    assert [p.mean_step_s for p in resumed.curve.points] == [p.mean_step_s for p in whole.curve.points]


def test_resuming_another_search_or_nothing_is_one_clear_error(tmp_path):
    g, c = build_graph("layered-dag", ops=60, width=4), get_cluster("k80x4")
    with pytest.raises(AutoplaceError, match="no checkpoint"):
        rl_search(g, c, budget=SearchBudget(samples=4), resume=tmp_path / "none")
    rl_search(g, c, budget=SearchBudget(samples=4), config=RLConfig(samples_per_update=4), seed=0, checkpoint=tmp_path)
    with pytest.raises(AutoplaceError, match="seed"):
        rl_search(g, c, budget=SearchBudget(samples=8), config=RLConfig(samples_per_update=4), seed=1, resume=tmp_path)
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(AutoplaceError, match="not a checkpoint"):
        rl_search(g, c, budget=SearchBudget(samples=8), config=RLConfig(samples_per_update=4), seed=0, resume=tmp_path)


def test_a_search_whose_samples_all_fail_says_so():
    g, _ = three_groups()
    c = Cluster("tiny", [Device("gpu:0", "gpu", 305, 1e12, 1e11)])   # the parameters fit, not the outputs too
    with pytest.raises(AutoplaceError, match="none of the 8 sampled placements"):
        rl_search(g, c, budget=SearchBudget(samples=8), config=RLConfig(samples_per_update=8), seed=0)
    c = Cluster("tiny", [Device("gpu:0", "gpu", 10, 1e12, 1e11)])    # no parameter fits: before any sample
    with pytest.raises(AutoplaceError, match="exceed the memory"):
        rl_search(g, c, budget=SearchBudget(samples=10**6), seed=0)


def test_the_work_budget_grows_with_the_budget_and_shrinks_with_the_graph():
    small, big = build_graph("layered-dag", ops=60, width=4), build_graph("layered-dag", ops=600, width=8)
    assert samples_for_budget(small, 10, 10.0) == 2 * samples_for_budget(small, 10, 5.0)
    assert samples_for_budget(big, 100, 10.0) < samples_for_budget(small, 10, 10.0)


def test_the_baseline_starts_at_the_failing_signal_and_follows_the_rewards():
    g, c = three_groups()
    s = RLSearch(g, c, RLConfig(baseline_decay=0.5, baseline_start="failing"), seed=0)
    assert s.baseline == s.failing_signal == pytest.approx(np.sqrt(default_failing_step(g, c)))
    p = s.update()
    assert s.baseline == pytest.approx(0.5 * s.failing_signal + 0.5 * p.mean_reward)


def test_by_default_the_baseline_starts_at_the_first_updates_mean_reward():
    """The first update's advantages are centred on its own mean (they sum to zero), then B moves on."""
    g, c = three_groups()
    s = RLSearch(g, c, RLConfig(baseline_decay=0.5, learn=False), seed=0)
    p = s.update()
    assert p.mean_reward < s.failing_signal
    assert s.baseline == pytest.approx(p.mean_reward)
    q = s.update()
    assert s.baseline == pytest.approx(0.5 * p.mean_reward + 0.5 * q.mean_reward)


def test_after_only_ok_after_updates_failed_placements_leave_the_update_out(monkeypatch):
    """The paper's rule (§3.1: after 5,000 updates only placements that ran update the policy): a failed
    placement's log-probability gets no gradient, a placement that ran gets (R - B) / (placements that ran);
    and the baseline moves by the rewards of those that ran only."""
    g, c = three_groups(fast_bytes=10)                                # a group on gpu:0 fails
    s = RLSearch(g, c, RLConfig(baseline_decay=0.5, only_ok_after=0, samples_per_update=16,
                                baseline_start="failing", entropy_weight=0.0), seed=0)
    start = s.baseline
    seen, forward = [], s.policy.forward

    def spy(*args, **kwargs):                                          # d loss / d log p of each sample
        devices, logp, entropy = forward(*args, **kwargs)
        logp.register_hook(lambda grad: seen.append(grad.detach().cpu().numpy().copy()))
        return devices, logp, entropy

    monkeypatch.setattr(s.policy, "forward", spy)
    evaluate, scored = s.evaluate, []
    monkeypatch.setattr(s, "evaluate", lambda groups: scored.append(evaluate(groups)) or scored[-1])
    p = s.update()
    ok_rewards = np.sqrt(scored[0].step_time[scored[0].ok])
    assert len(ok_rewards) and 0 < p.failed < 1                        # some ran, some failed
    assert s.baseline < 0.5 * start + 0.5 * p.mean_reward              # the failed ones' signal left out
    lo, hi = 0.5 * start + 0.5 * min(ok_rewards), 0.5 * start + 0.5 * max(ok_rewards)
    assert lo - 1e-12 <= s.baseline <= hi + 1e-12
    baseline = s.baseline                   # no longer the failing signal: a failed sample's R - B is not 0
    s.update()
    ok = scored[1].ok
    reward = np.sqrt(np.where(ok, scored[1].step_time, 1.0))
    assert 0 < ok.sum() < len(ok) and baseline != s.failing_signal
    assert np.all(seen[1][~ok] == 0)
    assert seen[1][ok] == pytest.approx((reward[ok] - baseline) / ok.sum(), rel=1e-5)


@pytest.mark.slow
def test_a_search_killed_with_sigkill_resumes_from_its_checkpoint_to_the_uninterrupted_result(tmp_path):
    """The command line, killed with ``kill -9`` mid-search, then resumed: the same placement as a run of
    the same seed and samples that was never interrupted."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from autoplace.zoo import build_graph as zoo_graph

    ck, out = tmp_path / "ck", tmp_path / "rl.json"
    cmd = [sys.executable, "-m", "autoplace.cli", "place", "toy-mlp", "--cluster", "k80x4", "-m", "rl", "--seed", "2",
           "--samples", "2000", "--checkpoint-every", "0", "-o", str(out)]
    proc = subprocess.Popen([*cmd, "--checkpoint", str(ck)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: proc.poll() is not None or (ck / CHECKPOINT_FILE).exists()
                 and load_checkpoint(ck)["updates"] >= 20, what="a checkpoint of 20 updates or the search's end")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and not out.exists()
    killed_at = load_checkpoint(ck)["updates"]
    subprocess.run([*cmd, "--resume", str(ck), "--curve", str(tmp_path / "curve")], check=True,
                   stdout=subprocess.DEVNULL)
    whole = rl_search(zoo_graph("toy-mlp"), get_cluster("k80x4"), budget=SearchBudget(samples=2000), seed=2)
    assert 20 <= killed_at < whole.updates
    assert json.loads(out.read_text())["assignment"] == whole.placement.assignment
    resumed = list(csv.DictReader(open(tmp_path / "curve.csv")))          # every update's sampled mean
    assert [float(r["mean_step_s"]) for r in resumed] == [p.mean_step_s for p in whole.curve.points]


def test_the_command_line_sets_rl_settings_and_rejects_unknown_ones(tmp_path, capsys):
    import json

    from autoplace.cli import main

    out = tmp_path / "rl.json"
    assert main(["place", "toy-mlp", "-c", "k80x2", "-m", "rl", "--samples", "8", "--set", "samples_per_update=4",
                 "--set", "grad_clip=none", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["updates"] == 2
    assert main(["place", "toy-mlp", "-c", "k80x2", "-m", "rl", "--samples", "8", "--set", "lr=0.1",
                 "-o", str(tmp_path / "x.json")]) == 2
    assert "unknown RL setting 'lr'" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
    assert main(["place", "toy-mlp", "-c", "k80x2", "-m", "metis", "--set", "hidden=8", "-o", str(out)]) == 2


def test_a_logit_clip_keeps_every_placement_possible():
    """With logits bounded to ±C on two devices, each step's choice has probability at least
    sigmoid(-2C), however far training pushes the policy; all placements' probabilities sum to 1."""
    import itertools

    g, c = three_groups()
    s = RLSearch(g, c, RLConfig(logit_clip=0.5, learning_rate=0.1, grad_clip=None), seed=0)
    for _ in range(30):
        s.update()
    every = torch.tensor(list(itertools.product((0, 1), repeat=3)))
    with torch.no_grad():
        p = s.policy.log_prob(s.features, s.mask, every).exp()
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-5)
    assert float(p.min()) >= float(torch.sigmoid(torch.tensor(-1.0))) ** 3 * (1 - 1e-5)


def test_the_grouping_rules_are_a_setting():
    g, c = build_graph("layered-dag", ops=60, width=4), get_cluster("k80x2")
    fine = RLSearch(g, c, RLConfig(group_rules="colocation", decide="group"), seed=0).features.n_groups
    coarse = RLSearch(g, c, RLConfig(group_rules="colocation,structure", decide="group"), seed=0).features.n_groups
    assert fine == g.n_ops > coarse
    with pytest.raises(AutoplaceError, match="unknown rule 'branches'"):
        RLConfig(group_rules="colocation,branches")


def test_a_checkpoint_folder_that_is_a_file_is_refused_before_searching(tmp_path, capsys):
    from autoplace.cli import main

    f = tmp_path / "not-a-folder"
    f.write_text("x")
    assert main(["place", "toy-mlp", "-c", "k80x2", "-m", "rl", "--samples", "8", "--checkpoint", str(f),
                 "-o", str(tmp_path / "rl.json")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err and not (tmp_path / "rl.json").exists()


def test_step_blocks_coarsen_a_recurrent_model_layer_by_layer():
    """Over ``groups``, a layer's time steps are taken in blocks: every group stays within one layer (so a
    layer-per-device split can still be sampled) and there are at most ``groups`` of them."""
    from autoplace.grouping import structural_key

    g = build_graph("rnnlm-2", vocab=50, hidden=16, steps=12, batch=2)
    c = get_cluster("k80x4")
    full = rl_grouping(g, c, RLConfig(groups=10_000, decide="group"))
    blocked = rl_grouping(g, c, RLConfig(groups=30, decide="group"))
    assert blocked.n_groups <= 30 < full.n_groups
    for k in range(blocked.n_groups):
        layers = {key[:3] for key in (structural_key(g.ops[i]) for i in blocked.members(k)) if key is not None}
        assert len(layers) <= 1, layers           # (role, part, layer): one layer's steps, never two layers
    with pytest.raises(AutoplaceError, match="coarsen"):
        RLConfig(coarsen="kmeans")


def test_a_layers_groups_at_every_step_share_one_unit_and_its_weights_join_it():
    from autoplace.grouping import structural_key

    g = build_graph("rnnlm-2", vocab=50, hidden=16, steps=12, batch=2)
    s = RLSearch(g, get_cluster("k80x4"), RLConfig(decide="group"), seed=0)
    f, grouping = s.features, s.grouping
    G = f.n_groups
    assert f.unit.shape == (G,) and f.n_units < G
    layer_of_unit: dict = {}
    untagged = []
    for p, k in enumerate(f.order):
        tagged = [key[:3] for key in (structural_key(g.ops[i]) for i in grouping.members(k)) if key is not None]
        if tagged:
            layer_of_unit.setdefault(f.unit[p], set()).update(tagged)
        else:
            untagged.append(p)
    assert all(len(v) == 1 for v in layer_of_unit.values())             # a unit is one layer ...
    assert len(set(map(frozenset, layer_of_unit.values()))) == len(layer_of_unit)   # ... and a layer one unit
    assert max((f.unit == u).sum() for u in layer_of_unit) > 1          # ... at every step
    assert untagged
    near = f.dense[:, -2 * G:-G] + f.dense[:, -G:]                       # groups it exchanges tensors with
    joined = 0
    for p in untagged:            # a weight: the unit of a tagged neighbour; none: a unit of its own
        units = {f.unit[q] for q in np.flatnonzero(near[p]) if q not in untagged}
        assert f.unit[p] in units if units else (f.unit == f.unit[p]).sum() == 1
        joined += bool(units)
    assert joined > 0


def test_exploration_noise_moves_a_units_groups_together():
    """With noise far above the logits (bounded to ±3), a sample puts every group of one unit on one device,
    each sample its own draw, and its log-probability is that of the noisy distribution it came from (about 0);
    without noise, a fresh policy places groups independently. The search passes its config's noise."""
    g = build_graph("rnnlm-2", vocab=50, hidden=16, steps=12, batch=2)
    s = RLSearch(g, get_cluster("k80x4"), RLConfig(exploration_noise=1e5, decide="group"), seed=0)
    f, gen = s.features, torch.Generator().manual_seed(0)
    anywhere = torch.isfinite(s.mask).all(dim=1).numpy()              # groups every device can run
    shared = [f.unit == u for u in range(f.n_units) if ((f.unit == u) & anywhere).sum() > 2]
    assert shared

    def split_units(devices: np.ndarray) -> int:
        return sum(len(set(row[u & anywhere])) > 1 for row in devices for u in shared)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)                  # small matrices: more threads only contend on a busy machine
    try:
        with torch.no_grad():
            noisy, logp, _ = s.policy(f, s.mask, 16, gen, 1e5)
            plain = s.policy(f, s.mask, 16, gen, 0.0)[0]
        assert split_units(noisy.numpy()) == 0
        assert len({tuple(row) for row in noisy.tolist()}) > 1           # a draw per sample, not one per update
        assert logp.abs().max() < 1e-3                                 # log p under the noisy distribution
        assert split_units(plain.numpy()) > 0
        s.update()                                                      # the search samples with its noise
        sampled = np.array([np.frombuffer(key, dtype=np.int64) for key in s.evaluate.cache])   # group ids
        in_order = sampled[:, f.order]                                  # -> encoder order
        assert len(sampled) > 1 and split_units(in_order) == 0
    finally:
        torch.set_num_threads(threads)
    for bad in (-1, float("inf"), float("nan")):
        with pytest.raises(AutoplaceError, match="exploration_noise"):
            RLConfig(exploration_noise=bad)


def test_an_untagged_group_joins_the_neighbour_unit_it_exchanges_the_most_bytes_with():
    """``mix`` (no structural tag) reads both layers; its unit is the layer whose tensor into it is larger."""
    from autoplace.grouping import group_ops

    def unit_of_mix(bytes0: int, bytes1: int) -> str:
        ops = [Op("x", "input", output_bytes=(8,)),
               Op("l0", "mm", ("x",), output_bytes=(bytes0,), meta={"layer": 0}),
               Op("l1", "mm", ("x",), output_bytes=(bytes1,), meta={"layer": 1}),
               Op("mix", "add", ("l0", "l1"), output_bytes=(8,))]
        g = Graph(ops, name="mix")
        grouping = group_ops(g, ("colocation",))                        # one op a group
        f = group_features(g, grouping)
        unit = dict(zip((grouping.names[k] for k in f.order), f.unit.tolist()))
        name = {v: k for k, v in unit.items() if k in ("l0", "l1")}
        assert unit["x"] in name                                        # x joins a layer too ...
        return name[unit["mix"]]

    assert unit_of_mix(1000, 10) == "l0"
    assert unit_of_mix(10, 1000) == "l1"


def test_one_encoder_read_by_every_sample_scores_as_a_copy_per_sample():
    """The product attention serves every sample with one matrix product when they read one encoder output
    (an expanded tensor): the same log-probabilities as a copy per sample (a batched product each)."""
    g = build_graph("layered-dag", ops=60, width=4)
    search = RLSearch(g, get_cluster("k80x4"), RLConfig(attention="dot"), seed=0)
    f, mask, policy = search.features, search.mask, search.policy
    with torch.no_grad():
        for layer in (policy.attn_h, policy.attn_s):                   # sharp attention: a wrong score shows
            layer.weight.mul_(30)
        devices, _, _ = policy(f, mask, 6, torch.Generator().manual_seed(1))
        h = policy.encode(f)
        shared = policy.decode(h.expand(6, -1, -1), mask, devices)[1]          # one matrix product per step
        copied = policy.decode(h.repeat(6, 1, 1), mask, devices)[1]            # a batched product per sample
    assert torch.allclose(shared, copied, atol=1e-5)
    assert len(set(map(tuple, devices.tolist()))) > 1


def test_learning_off_samples_what_learning_samples_first_and_never_moves_the_policy():
    g, c = build_graph("layered-dag", ops=60, width=4), get_cluster("k80x4")
    on, off = (RLSearch(g, c, RLConfig(samples_per_update=4, learning_rate=1e-2, learn=learn), seed=0)
               for learn in (True, False))
    before = {k: v.clone() for k, v in off.policy.state_dict().items()}
    first = [s.update() for s in (on, off)]
    assert first[0].mean_step_s == first[1].mean_step_s              # the same first samples
    for _ in range(4):
        on.update(), off.update()
    assert all(torch.equal(before[k], v) for k, v in off.policy.state_dict().items())
    assert not all(torch.equal(before[k], v) for k, v in on.policy.state_dict().items())
    assert off.baseline != off.failing_signal                          # the baseline still follows the rewards


def test_deciding_per_unit_places_each_structural_unit_whole():
    g, c = build_graph("rnnlm-2", vocab=50, hidden=16, steps=12, batch=2), get_cluster("k80x4")
    groups = RLSearch(g, c, RLConfig(decide="group"), seed=0)
    units = RLSearch(g, c, RLConfig(samples_per_update=4), seed=0)                  # the default
    unit_of_op = groups.features.unit_of_group[groups.grouping.group]
    assert units.features.n_groups == groups.features.n_units < groups.features.n_groups
    for u in range(units.grouping.n_groups):                   # one decision per unit: the same ops
        assert len(set(unit_of_op[units.grouping.members(u)])) == 1
    assert len(set(units.grouping.group[unit_of_op == unit_of_op[0]])) == 1
    for _ in range(3):
        units.update()
    placement = units.best_placement().to_array(g, c)
    assert all(len(set(placement[unit_of_op == u])) == 1 for u in set(unit_of_op))


def test_a_unit_no_device_runs_whole_is_placed_per_group():

    ops = [Op("a", "mm", output_bytes=(8,), flops=1e6, meta={"layer": "L", "step": 0}),
           Op("b", "mm", ("a",), output_bytes=(8,), flops=1e6, meta={"layer": "L", "step": 1})]
    c = Cluster("c", [Device("cpu:0", "cpu", 10**9, 1e10, 1e10), Device("gpu:0", "gpu", 10**9, 1e12, 1e11)],
                default_link=LinkSpec(1e9, 1e-6))
    assert rl_grouping(Graph(ops, name="one"), c, RLConfig(decide="unit", group_rules="colocation")).n_groups == 1
    split = Graph([ops[0], Op("b", "mm", ("a",), output_bytes=(8,), flops=1e6, meta={"layer": "L", "step": 1},
                              device_types=("cpu",))], name="split")     # a on any device, b on the CPU only
    g0 = Graph([Op("a", "mm", output_bytes=(8,), flops=1e6, meta={"layer": "L", "step": 0}, device_types=("gpu",)),
                split.ops[1]], name="split")
    assert rl_grouping(split, c, RLConfig(decide="unit", group_rules="colocation")).n_groups == 1
    assert rl_grouping(g0, c, RLConfig(decide="unit", group_rules="colocation")).n_groups == 2
    tiny = Cluster("c", [Device("gpu:0", "gpu", 150, 1e12, 1e11), Device("gpu:1", "gpu", 150, 1e12, 1e11)],
                   default_link=LinkSpec(1e9, 1e-6))
    heavy = Graph([Op(o.name, o.type, o.inputs, output_bytes=(8,), flops=1e6, param_bytes=100, meta=o.meta)
                   for o in ops], name="heavy")                  # 200 bytes of weights: no device holds both
    assert rl_grouping(heavy, tiny, RLConfig(decide="unit", group_rules="colocation")).n_groups == 2


def test_paper_mode_is_eq_3_and_the_moving_average_baseline_computed_by_hand():
    """One group, two devices: log p(d) = b_d - logsumexp(b) + ..., so the gradient on the output layer's bias
    is (1/K) sum_i (R_i - B)(e_{d_i} - pi) (eq. 3, R = sqrt(step)), with nothing of ours in between (no
    noise, clip or gradient clipping), and B moves to 0.9 B + 0.1 mean(R) from the failing signal."""
    ops = [Op("op0", "mm", output_bytes=(8,), flops=1e9, param_bytes=100)]
    g, c = Graph(ops, name="one"), three_groups()[1]
    search = RLSearch(g, c, RLConfig(paper=True), seed=0)
    assert search.config.exploration_noise == 0 and search.config.grad_clip is None
    assert (search.config.attention, search.config.decide) == ("additive", "group")      # Bahdanau's, §3.3
    assert search.policy.attention == "additive"
    seen, grads = spy_on_updates(search, search.optimizer, search.policy.out.bias)
    with torch.no_grad():
        pi = torch.stack([search.policy.log_prob(search.features, search.mask, torch.tensor([[d]])).exp()[0]
                          for d in range(2)])
    b0 = search.baseline
    assert b0 == pytest.approx(search.failing_signal)
    search.update()
    d = seen[0][:, 0]
    r = np.sqrt([simulate(g, c, np.array([k])).step_time for k in d])
    expected = sum((ri - b0) * (np.eye(2)[k] - pi.numpy()) for ri, k in zip(r, d)) / 8
    assert np.allclose(grads[0].numpy(), expected, rtol=1e-4, atol=1e-7)
    assert search.baseline == pytest.approx(0.9 * b0 + 0.1 * r.mean())
    assert len(set(d.tolist())) == 2                                   # both devices sampled: a real test


def test_paper_mode_settings_are_the_papers_written_out():
    """§3.1–§3.4 written out setting by setting, not read from ``RLConfig.PAPER``: no logit bound,
    temperature, entropy bonus, noise or gradient clipping, no convergence stop (the paper trains to its
    budget), a decision per group with Bahdanau's attention, K = 8, the baseline from the failing
    signal, and only placements that ran in the updates after the first 5,000."""
    cfg = RLConfig(paper=True)
    assert cfg.logit_clip is None and cfg.temperature == 1.0 and cfg.entropy_weight == 0.0
    assert cfg.exploration_noise == 0.0 and cfg.grad_clip is None and cfg.converged_updates == 0
    assert (cfg.decide, cfg.attention, cfg.samples_per_update) == ("group", "additive", 8)
    assert cfg.baseline_start == "failing" and cfg.only_ok_after == 5000 and cfg.groups is None
    default = RLConfig()
    assert default.logit_clip == 3.0 and default.converged_updates == 20 and default.decide == "unit"


def test_paper_mode_groups_are_the_papers_rules_uncoarsened_with_the_consumer_only_merge():
    """§3.3: TensorFlow's co-location (each op's gradients with it), the consumer-only merge applied until
    nothing merges, and §4.1's per-model groups; no cap on their number (the paper's NMT has 280)."""
    cfg = RLConfig(paper=True)
    assert cfg.groups is None and cfg.rules == ("colocation", "gradient", "single-consumer", "structure",
                                                "structure-first")
    # a chain whose middle ops each feed one consumer collapses into one group; a fan-out op stays apart
    ops = [Op("x", "input", output_bytes=(8,)), Op("a", "mm", ("x",), output_bytes=(8,), flops=1e6),
           Op("b", "mm", ("a",), output_bytes=(8,), flops=1e6), Op("c", "mm", ("b",), output_bytes=(8,), flops=1e6),
           Op("d", "mm", ("c",), output_bytes=(8,), flops=1e6), Op("e", "mm", ("c",), output_bytes=(8,), flops=1e6)]
    g, c = Graph(ops, name="fan"), three_groups()[1]
    groups = rl_grouping(g, c, cfg).group
    assert len({groups[g.index(n)] for n in ("x", "a", "b", "c")}) == 1
    assert len({groups[g.index(n)] for n in ("c", "d", "e")}) == 3
    # recursively, groups as ops: a fans out to b and c, both read only by d; then a's group's one reader
    # is d's, so all four are one group (op by op, a has two readers and stays apart)
    ops = [Op("a", "mm", output_bytes=(8,), flops=1e6), Op("b", "mm", ("a",), output_bytes=(8,), flops=1e6),
           Op("c", "mm", ("a",), output_bytes=(8,), flops=1e6), Op("d", "mm", ("b", "c"), output_bytes=(8,), flops=1e6)]
    assert len(set(rl_grouping(Graph(ops, name="diamond"), c, cfg).group.tolist())) == 1
    big = build_graph("nmt-2")
    assert rl_grouping(big, get_cluster("k80x4"), cfg).n_groups == 386 > RLConfig().groups     # not coarsened


@pytest.mark.slow
def test_paper_mode_group_counts_on_the_papers_models():
    """The groups paper mode places on Table 1's models (the paper's: 188, 280 and 83): docs/algorithms.md's
    and docs/benchmarks.md's figures."""
    cfg = RLConfig(paper=True)
    got = {m: rl_grouping(build_graph(m), get_cluster("k80x2"), cfg).n_groups
           for m in ("rnnlm-2", "nmt-2", "inception-v3")}
    assert got == {"rnnlm-2": 212, "nmt-2": 386, "inception-v3": 68}


def test_paper_mode_failing_signal_set_by_hand_and_reduced_controllers_stated():
    """§3.1: the failing signal is set by hand per graph (its square root of a step time); §3.4's up to 20
    controllers: a one-controller run says so in its placement's meta."""
    g, c = three_groups()
    r = rl_search(g, c, budget=SearchBudget(samples=8), seed=0, config=RLConfig(paper=True, failing_step_s=50.0))
    assert r.extra["failing_step_s"] == 50.0
    assert RLSearch(g, c, RLConfig(paper=True, failing_step_s=50.0), seed=0).failing_signal == pytest.approx(50**0.5)
    assert r.placement.meta["paper_reduced"].startswith("1 controller(s) where the paper ran up to 20")
    assert "failing signal" not in r.placement.meta["paper_reduced"]
    unset = rl_search(g, c, budget=SearchBudget(samples=8), seed=0, config=RLConfig(paper=True))
    assert unset.placement.meta["paper_reduced"].endswith("where the paper set one by hand per graph "
                                                          "(set failing_step_s)")
    assert "paper_reduced" not in rl_search(g, c, budget=SearchBudget(samples=8), seed=0).placement.meta


@pytest.mark.slow
def test_learning_beats_its_frozen_self_where_each_group_has_a_better_device():
    """Forty independent products on two GPUs, one ten times faster: the best placement puts about nine in
    ten products on the fast GPU — a rule per group that learning finds and random search does not (a
    uniform sample puts half on the slow GPU, and 400 of them leave the best with about a quarter there,
    roughly three times the optimal step). Started from its first rewards (the default), the learned search
    reaches the optimum (37 products on the fast GPU: 37 ms, the slow one's 3 take 30) on 3 of 3 seeds, each
    faster than the same search with learning off."""
    g, c = independent_products(1e9)
    best = {learn: [rl_search(g, c, budget=SearchBudget(samples=400), seed=s,
                              config=RLConfig(learn=learn)).placement.meta["best_step_s"]
                    for s in (0, 1, 2)] for learn in (True, False)}
    assert all(on < 0.8 * off for on, off in zip(best[True], best[False])), best
    assert max(best[True]) < 0.0371, best                                      # the optimum, 37 ms


def test_units_whose_weights_cannot_share_the_devices_are_placed_per_group():
    """Three units of two 50-byte layers each on two GPUs of 190 bytes: each unit fits one GPU, but no two
    fit one together, so no placement of whole units fits; the search decides per group and finds one."""

    ops = [Op(f"u{u}s{t}", "mm", (f"u{u}s{t - 1}",) if t else (), output_bytes=(8,), flops=1e6, param_bytes=50,
              meta={"layer": f"L{u}", "step": t}) for u in range(3) for t in range(2)]
    g = Graph(ops, name="three-units")
    c = Cluster("c", [Device("gpu:0", "gpu", 190, 1e12, 1e11), Device("gpu:1", "gpu", 190, 1e12, 1e11)],
                default_link=LinkSpec(1e9, 1e-6))
    config = RLConfig(decide="unit", group_rules="colocation", samples_per_update=4)
    assert rl_grouping(g, c, config).n_groups == 6
    assert rl_search(g, c, budget=SearchBudget(samples=40), config=config, seed=0).placement.meta["best_step_s"] > 0


def test_a_checkpoint_written_before_a_setting_existed_holds_it_at_its_default(tmp_path):
    """A stored config without a setting (an earlier version's) resumes where the setting is at its default,
    and is another search's where it is not."""
    from autoplace.errors import FormatError

    g, c = three_groups()
    rl_search(g, c, budget=SearchBudget(samples=16), seed=0, checkpoint=tmp_path, stop_after_updates=1)
    state = load_checkpoint(tmp_path)
    del state["config"]["failing_step_s"]
    RLSearch(g, c, RLConfig(), seed=0).load(state)
    with pytest.raises(FormatError, match=r"config \(failing_step_s\)"):
        RLSearch(g, c, RLConfig(failing_step_s=5.0), seed=0).load(state)
