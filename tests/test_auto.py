"""auto, local search and CP-SAT never return worse than where they start; auto picks the best candidate and
says where it came from."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bounds import cases

from autoplace.cluster import Cluster, Device, LinkSpec, get_cluster
from autoplace.graph import Graph, Op
from autoplace.placement import Placement
from autoplace.placers import fast, place
from autoplace.placers.auto import CLEANUP_SHARE, NEAR_TIE, robust_simulator
from autoplace.placers.fast import FAST_PLACERS, LIST_SCHEDULERS, run_fast_placers
from autoplace.placers.local_search import refine
from autoplace.robust import SCENARIOS
from autoplace.search.work import OPS_PER_SECOND
from autoplace.sim import simulate
from autoplace.zoo import build_graph


def test_auto_returns_the_best_candidate_and_says_where_it_came_from():
    """Chosen by regret (each scenario's step over the best candidate's there, the worst taken): auto's regret
    is within the near-tie of every candidate's, so it is nominally slower than a candidate only by a factor
    that candidate loses to the best in some scenario; each regret is the one its steps per scenario give."""
    g, c = build_graph("layered-dag", ops=120, width=8), get_cluster("k80x2")
    p = place(g, c, "auto", seed=0, budget=200 * g.n_ops / OPS_PER_SECOND)
    m = p.meta
    assert [x["method"] for x in m["candidates"]] == list(FAST_PLACERS)
    regret = {x["method"]: x["regret"] for x in m["candidates"] if x["ok"]}
    regret.update((x["stage"], x["regret"]) for x in m["stages"] if x["fits"])
    mine = m["robust"]["regret"]
    assert mine >= 1.0 and mine <= min(regret.values()) * (1 + NEAR_TIE)
    assert m["robust"]["step_s"][0] == pytest.approx(simulate(g, c, p).step_time)
    reference = np.array(m["robust"]["reference_s"])
    assert mine == pytest.approx(max(np.array(m["robust"]["step_s"]) / reference))
    # the reference is the least step per scenario over what it weighed, each listed with its steps
    weighed = dict(zip(m["weighed"], np.array(m["weighed_steps_s"])))
    assert np.array_equal(np.array(m["weighed_steps_s"]).min(axis=0), reference)
    assert "cleaned" in weighed and set(regret) - {"start"} <= set(weighed)     # the start is its fast placer
    for name, r in regret.items():
        if name != "start":
            assert r == pytest.approx(max(weighed[name] / reference))
    # a candidate's regret is its own steps per scenario over the reference, by hand
    robust = robust_simulator(g, c)
    one = place(g, c, "single-gpu")
    steps = robust.steps(one.to_array(g, c)[None, :])[:, 0]
    assert regret["single-gpu"] == pytest.approx(max(steps / reference))
    # nominally slower than a candidate by at most what that candidate loses somewhere
    nominal = {x["method"]: x["step_time_s"] for x in m["candidates"] if x["ok"]}
    for method, step in nominal.items():
        assert m["robust"]["step_s"][0] / step <= regret[method] * (1 + NEAR_TIE) + 1e-12
    assert [x["stage"] for x in m["stages"]] == ["start", "refined"]
    assert set(m["improved_by"]) <= {"refined", "cp-sat"}
    assert m["refine"]["evaluations"] <= 200 // len(SCENARIOS) + 1


def test_auto_on_a_small_graph_also_solves_it_exactly():
    """At most 60 ops: CP-SAT's op-level model runs too (a stage of auto, at the nominal figures), and
    auto's regret is within the near-tie of its stages'."""
    g, c = build_graph("toy-mlp", layers=2), get_cluster("k80x2")
    p = place(g, c, "auto", seed=0, budget=4)
    stages = {x["stage"]: x for x in p.meta["stages"]}
    assert set(stages) == {"start", "refined", "cp-sat"}
    assert p.meta["robust"]["regret"] <= min(x["regret"] for x in stages.values()) * (1 + NEAR_TIE)


def test_auto_prefers_a_placement_that_fits():
    """Four 1000-byte layers on 2500-byte GPUs: the fast single-GPU is out of memory, auto fits."""
    ops = [Op("x", "input", output_bytes=(100,))]
    prev = "x"
    for k in range(4):
        ops += [Op(f"w{k}", "parameter", output_bytes=(8,), param_bytes=1000, colocation_group=f"w{k}",
                   meta={"view": True}),
                Op(f"l{k}", "mm", (prev, f"w{k}"), output_bytes=(100,), flops=1e6, colocation_group=f"w{k}")]
        prev = f"l{k}"
    g = Graph(ops, name="chain4")
    c = Cluster("tight", [Device(f"gpu:{k}", "gpu", 2500, 1e12, 1e11) for k in range(3)],
                default_link=LinkSpec(1e9, 1e-6))
    cands = {x.method: x for x in run_fast_placers(g, c)}
    assert cands["single-gpu"].placement is not None and not cands["single-gpu"].ok
    p = place(g, c, "auto", budget=1)
    assert simulate(g, c, p).ok
    # the one GPU that runs out of memory is the fastest nominally, yet sets no reference and has no regret
    one = cands["single-gpu"].step_time
    assert one < min(x.step_time for x in cands.values() if x.ok)
    assert p.meta["robust"]["reference_s"][0] > one and "single-gpu" not in p.meta["weighed"]
    assert "regret" not in next(x for x in p.meta["candidates"] if x["method"] == "single-gpu")


def test_list_schedulers_are_left_out_of_graphs_too_large_for_them(monkeypatch):
    """Over LIST_MAX_OP_DEVICES op-device pairs the list schedulers are candidates without a placement that
    say why; the partitioners still place; at the limit itself every placer runs."""
    g, c = build_graph("layered-dag", ops=200, width=10), get_cluster("k80x2")
    monkeypatch.setattr(fast, "LIST_MAX_OP_DEVICES", g.n_ops * c.n_devices - 1)
    cands = {x.method: x for x in run_fast_placers(g, c)}
    assert list(cands) == list(FAST_PLACERS)
    for m in LIST_SCHEDULERS:
        assert cands[m].placement is None and cands[m].error.startswith("left out: 200 ops on 3 devices")
    assert all(cands[m].placement is not None for m in ("metis", "expert", "single-gpu", "dp-split"))
    monkeypatch.setattr(fast, "LIST_MAX_OP_DEVICES", g.n_ops * c.n_devices)
    assert all(x.placement is not None for x in run_fast_placers(g, c) if x.method in LIST_SCHEDULERS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_ops=12, tight=True), st.integers(0, 3))
def test_refine_never_returns_worse_than_its_start(case, seed):
    """Worse: slower, or out of memory where the start fits (devices of 20 kB to 1 GB)."""
    graph, cluster, dev = case
    start = Placement.from_array(graph, cluster, dev, "random")
    before = simulate(graph, cluster, start)
    p = refine(graph, cluster, start, seed=seed, budget=60 * graph.n_ops / OPS_PER_SECOND)
    after = simulate(graph, cluster, p)
    assert (not after.ok, p.meta["score_s"]) <= (not before.ok, p.meta["start_score_s"])   # fit first, then score
    if before.ok:
        assert after.ok and after.step_time <= before.step_time * (1 + 1e-12)


def two_parameters_one_fast_small_gpu() -> tuple[Graph, Cluster]:
    """Two ops whose parameters (10 kB each) do not both fit the fast GPU (19.9 kB, 0.5 % over), beside a
    GPU a thousand times slower with room: the placement that fits is far slower than the one that does
    not, and by more than its overflow penalty."""
    ops = [Op("x", "input", output_bytes=(8,)),
           Op("a", "mm", ("x",), output_bytes=(8,), flops=1e6, param_bytes=10_000),
           Op("b", "mm", ("x",), output_bytes=(8,), flops=1e6, param_bytes=10_000)]
    c = Cluster("c", [Device("gpu:0", "gpu", 19_900, 1e12, 1e11), Device("gpu:1", "gpu", 10**9, 1e9, 1e11)],
                default_link=LinkSpec(1e9, 1e-6))
    return Graph(ops, name="two-parameters"), c


def test_refine_takes_a_failing_start_to_a_fitting_placement_even_at_a_higher_score():
    g, c = two_parameters_one_fast_small_gpu()
    start = Placement({"x": "gpu:0", "a": "gpu:0", "b": "gpu:0"}, g, c, "start")
    assert not simulate(g, c, start).ok
    p = refine(g, c, start, seed=0, budget=1)
    assert simulate(g, c, p).ok and p.meta["score_s"] > p.meta["start_score_s"]


def test_auto_prefers_a_fitting_candidate_to_a_lower_scoring_one_that_runs_out_of_memory(monkeypatch):
    """Its fast-placer ranking and its stages rank (fits, score): a faster placement that overflows, even
    with a lower penalised score, never displaces one that fits."""
    import autoplace.placers.auto as auto_placer
    from autoplace.placers.fast import Candidate, _best

    g, c = two_parameters_one_fast_small_gpu()
    fits = Placement({"x": "gpu:0", "a": "gpu:0", "b": "gpu:1"}, g, c, "fits")
    overflows = Placement({"x": "gpu:0", "a": "gpu:0", "b": "gpu:0"}, g, c, "overflows")
    r_fits, r_over = simulate(g, c, fits), simulate(g, c, overflows)
    assert r_fits.ok and not r_over.ok and r_over.step_time * 1.2 < r_fits.step_time
    cands = [Candidate("overflows", overflows, r_over.step_time, False, r_over.step_time * 1.05, 0.0),
             Candidate("fits", fits, r_fits.step_time, True, r_fits.step_time, 0.0)]
    assert _best(cands).method == "fits"

    refined = Placement(overflows.assignment, g, c, "refined",
                        {"evaluations": 1, "stop_reason": "converged", "converged": True, "levels": []})
    monkeypatch.setattr(auto_placer, "refine", lambda graph, cluster, start, **kw: refined)
    p = place(g, c, "auto", seed=0, budget=1)
    assert simulate(g, c, p).ok and "refined" not in p.meta["improved_by"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_ops=8))
def test_cp_sat_never_returns_worse_than_its_hint(case):
    graph, cluster, _ = case
    p = place(graph, cluster, "cp-sat", budget=0.5)
    hint = place(graph, cluster, p.meta["hint"])
    mine, theirs = simulate(graph, cluster, p), simulate(graph, cluster, hint)
    assert (mine.ok, -mine.step_time) >= (theirs.ok, -theirs.step_time * (1 + 1e-12))
    assert p.meta["hint_step_s"] == pytest.approx(theirs.step_time)
    if p.meta["returned"] == "hint":
        assert np.array_equal(p.to_array(graph, cluster), hint.to_array(graph, cluster))


def test_cp_sat_keeps_a_better_hint_over_its_coarse_model():
    """200 ops: CP-SAT solves a model of contiguous tasks (a layer or more each), coarser than the op-level
    placements; where its solution simulates slower, the hint comes back."""
    g, c = build_graph("layered-dag", ops=200, width=8), get_cluster("k80x4")
    p = place(g, c, "cp-sat", budget=0.5)
    hint = place(g, c, p.meta["hint"])
    assert p.meta["model"].endswith(" tasks") and p.meta["returned"] == "hint"
    assert simulate(g, c, p).step_time == pytest.approx(simulate(g, c, hint).step_time)


def test_cp_sat_returns_its_hint_when_the_budget_ends_before_any_solution():
    g, c = build_graph("layered-dag", ops=200, width=8), get_cluster("k80x4")
    p = place(g, c, "cp-sat", budget=1e-6)
    assert p.meta["cp_sat_status"] == "UNKNOWN" and p.meta["returned"] == "hint"
    assert p.meta["stopped_by"] == "deterministic budget"
    hint = place(g, c, p.meta["hint"])
    assert np.array_equal(p.to_array(g, c), hint.to_array(g, c))


def test_auto_hints_cp_sat_with_the_refined_placement(monkeypatch):
    """On a small graph the CP-SAT stage starts from the refined placement (the best so far), not from the
    fast placers again."""
    import autoplace.placers.auto as auto_placer

    seen = {}
    real = auto_placer.improve_with_cp_sat

    def spy(graph, cluster, start, **kw):
        seen["start"] = start
        return real(graph, cluster, start, **kw)

    monkeypatch.setattr(auto_placer, "improve_with_cp_sat", spy)
    g, c = build_graph("toy-mlp", layers=2), get_cluster("k80x2")
    p = place(g, c, "auto", seed=0, budget=2)
    robust = robust_simulator(g, c)
    refined = refine(g, c, place(g, c, p.meta["from"], seed=0), seed=0, budget=2 * (1 - CLEANUP_SHARE) / 2,
                     method=p.meta["from"], simulator=robust)
    assert "start" in seen
    assert np.array_equal(seen["start"].to_array(g, c), refined.to_array(g, c))


def test_under_a_time_limit_that_has_run_out_auto_leaves_out_its_fixed_steps(monkeypatch):
    """A limit gone by the time the searches return (no time left, as auto reads it): CP-SAT, the pipeline
    and the strategies are left out and said so; the placement is still one of the fast placers' or the
    refined one."""
    from autoplace.placers import auto

    g, c = build_graph("toy-mlp"), get_cluster("k80x2")
    with monkeypatch.context() as m:
        m.setattr(auto, "time_left", lambda: 0.0)
        p = place(g, c, "auto", budget=1.0)
    assert p.meta["time_limit_skipped"][-2:] == ["pipeline", "strategies"]      # CP-SAT too where it runs
    assert "strategies" not in p.meta and simulate(g, c, p).ok
    assert "time_limit_skipped" not in place(g, c, "auto", budget=0.2, strategies=False).meta
    small = build_graph("toy-mlp", layers=2)                 # CP-SAT's size: its stage is left out too
    monkeypatch.setattr(auto, "time_left", lambda: 0.0)
    p = place(small, c, "auto", seed=0, budget=4)
    assert p.meta["time_limit_skipped"] == ["cp-sat", "pipeline", "strategies"]
    assert {x["stage"] for x in p.meta["stages"]} == {"start", "refined"}
