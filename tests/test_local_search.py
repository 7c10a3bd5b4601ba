"""Local search: honest stop reasons, an evaluation budget that makes it reproducible, never worse than
its start."""

from __future__ import annotations

import numpy as np
import pytest

from autoplace.cluster import get_cluster
from autoplace.placers import place
from autoplace.placers.local_search import refine
from autoplace.search.work import OPS_PER_SECOND
from autoplace.sim import simulate
from autoplace.zoo import build_graph


@pytest.fixture(scope="module")
def dag():
    return build_graph("layered-dag", ops=300, width=12)


def test_a_budget_spent_mid_pass_is_not_convergence(dag):
    cluster = get_cluster("k80x4")
    start = place(dag, cluster, "single-gpu")
    budget = 40 * dag.n_ops / OPS_PER_SECOND           # 40 evaluations: a few groups of the first pass
    p = refine(dag, cluster, start, seed=0, budget=budget)
    m = p.meta
    assert m["stop_reason"] == "evaluation budget" and m["converged"] is False
    assert m["evaluations"] <= 40 and m["passes"] == 1 and m["groups_visited"] < m["groups"]


def test_converges_on_a_tiny_graph_and_says_so():
    g, cluster = build_graph("toy-mlp", layers=2), get_cluster("k80x2")
    p = place(g, cluster, "local-search", seed=0, budget=10)
    assert p.meta["stop_reason"] == "converged" and p.meta["converged"] is True
    assert p.meta["groups_visited"] == p.meta["levels"][-1]["visited"] <= p.meta["groups"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reproducible_and_never_worse_than_its_start(dag, seed):
    cluster = get_cluster("k80x2")
    start = place(dag, cluster, "metis")
    budget = 200 * dag.n_ops / OPS_PER_SECOND
    a = refine(dag, cluster, start, seed=seed, budget=budget)
    b = refine(dag, cluster, start, seed=seed, budget=budget)
    assert a.assignment == b.assignment and a.meta["evaluations"] == b.meta["evaluations"]
    assert simulate(dag, cluster, a).step_time <= simulate(dag, cluster, start).step_time * (1 + 1e-12)
    assert np.isfinite(a.meta["score_s"]) and a.meta["score_s"] <= a.meta["start_score_s"]


def test_levels_go_from_coarse_to_fine_and_nest(dag):
    """Every level's groups lie whole inside one group of the level before it, so a coarse move keeps the
    finer groups (and the co-location constraints) intact; the search reports each level it climbed."""
    from autoplace.placers.local_search import COARSE_GROUPS, group_levels

    g = build_graph("layered-dag", ops=3000, width=2)          # ~1,500 layer groups: a METIS level on top
    levels = group_levels(g, get_cluster("k80x4"))
    sizes = [lv.n_groups for lv in levels]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes) and sizes[0] <= COARSE_GROUPS
    for coarse, fine in zip(levels, levels[1:]):
        pairs = np.unique(np.stack([fine.group, coarse.group]), axis=1)
        assert len(pairs[0]) == fine.n_groups                     # each fine group maps to one coarse group
    cluster = get_cluster("k80x2")
    p = refine(dag, cluster, place(dag, cluster, "single-gpu"), seed=0, budget=10)
    report = p.meta["levels"]
    assert [lv["groups"] for lv in report] == [lv.n_groups for lv in group_levels(dag, cluster)][:len(report)]
    assert all(lv["converged"] for lv in report[:-1]) and sum(lv["evaluations"] for lv in report) + 1 == \
        p.meta["evaluations"]


def test_a_fitting_start_never_becomes_a_faster_placement_that_runs_out_of_memory():
    """Two independent heavy branches: moving one to the second GPU halves the step, but that GPU is 1 %
    too small for the branch's parameters. The overflow penalty alone (1.1x) would take the move."""
    from autoplace.cluster import Cluster, Device, LinkSpec
    from autoplace.graph import Graph, Op

    ops = [Op("x", "input", output_bytes=(100,))]
    for b in "ab":
        ops += [Op(f"w{b}", "parameter", output_bytes=(8,), param_bytes=10_000, colocation_group=f"w{b}",
                   meta={"view": True}),
                Op(f"{b}", "mm", ("x", f"w{b}"), output_bytes=(100,), flops=1e9, colocation_group=f"w{b}")]
    ops.append(Op("out", "add", ("a", "b"), output_bytes=(100,), flops=1.0))
    g = Graph(ops, name="two-branches")
    c = Cluster("tight", [Device("gpu:0", "gpu", 10**6, 1e12, 1e11), Device("gpu:1", "gpu", 10_000, 1e12, 1e11)],
                default_link=LinkSpec(1e9, 1e-6))
    start = place(g, c, "single-gpu")
    moved = start.to_array(g, c).copy()
    moved[[g.index("wb"), g.index("b")]] = 1
    r = simulate(g, c, moved)
    assert not r.ok and r.step_time < 0.6 * simulate(g, c, start).step_time    # the trap is there
    p = refine(g, c, start, seed=0, budget=1)
    assert simulate(g, c, p).ok and p.meta["out_of_memory"] is False


def test_large_fine_levels_are_searched_on_their_cut(dag, monkeypatch):
    """Above WHOLE_LEVEL_GROUPS groups a finer level visits only the groups with an edge to another device;
    at or below it, every group."""
    import autoplace.placers.local_search as ls

    cluster = get_cluster("k80x2")
    start = place(dag, cluster, "metis")
    budget = 2000 * dag.n_ops / OPS_PER_SECOND
    whole = refine(dag, cluster, start, seed=0, budget=budget).meta["levels"]
    assert all(lv["visited"] == lv["groups"] for lv in whole)
    monkeypatch.setattr(ls, "WHOLE_LEVEL_GROUPS", 0)
    p = refine(dag, cluster, start, seed=0, budget=budget)
    levels = p.meta["levels"]
    assert len(levels) > 1 and levels[0]["visited"] == levels[0]["groups"]
    assert all(0 < lv["visited"] < lv["groups"] for lv in levels[1:])
    assert simulate(dag, cluster, p).step_time <= simulate(dag, cluster, start).step_time * (1 + 1e-12)


def test_cut_groups_of_large_fine_levels_move_only_to_their_neighbours_devices(dag, monkeypatch):
    """On a finer level searched on its cut, a group is moved (or swapped) only onto a device one of its
    neighbour ops is on, or back onto its own; with four GPUs that leaves out some devices."""
    import autoplace.placers.local_search as ls

    monkeypatch.setattr(ls, "WHOLE_LEVEL_GROUPS", 0)
    calls = []
    real = ls._Level.neighbours

    def spy(self, g, dev, homes, rng, targets=None):
        cands = real(self, g, dev, homes, rng, targets)
        if targets is not None:
            calls.append((targets.copy(), int(homes[g]), [set(c[self.members[g]].tolist()) for c in cands]))
        return cands

    monkeypatch.setattr(ls._Level, "neighbours", spy)
    cluster = get_cluster("k80x4")
    refine(dag, cluster, place(dag, cluster, "metis"), seed=0, budget=1500 * dag.n_ops / OPS_PER_SECOND)
    assert calls and any(not t.all() for t, _, _ in calls)
    for targets, here, moved in calls:
        allowed = set(np.flatnonzero(targets).tolist()) | {here}
        assert all(devs <= allowed for devs in moved)
