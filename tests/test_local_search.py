"""Local search: honest stop reasons, an evaluation budget that makes it reproducible, never worse than
its start."""

from __future__ import annotations

import numpy as np
import pytest

from autoplace.cluster import get_cluster
from autoplace.placers import place
from autoplace.placers.local_search import OPS_PER_SECOND, refine
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
    assert p.meta["groups_visited"] == p.meta["groups"]


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
