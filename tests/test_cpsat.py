"""CP-SAT: proven optima on hand-computed cases; its bound never exceeds any placer's simulated step."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import op

from autoplace.cluster import Cluster, Device, LinkSpec
from autoplace.graph import Graph
from autoplace.placers import available_placers, place
from autoplace.placers.cpsat import solve_cp_sat
from autoplace.sim import simulate


def gpus(n, bandwidth=1000.0, latency=0.0):
    return Cluster("g", [Device(f"gpu:{i}", "gpu", 10**9, 1e9, 1e9) for i in range(n)],
                   default_link=LinkSpec(bandwidth, latency))


def test_independent_ops_are_balanced_optimally():
    g = Graph([op(f"o{i}", [], 1.0) for i in range(4)])
    r = solve_cp_sat(g, gpus(2), budget=10)
    assert r.optimal and r.objective_s == pytest.approx(2.0, rel=1e-4)
    assert simulate(g, gpus(2), r.devices).step_time == pytest.approx(2.0)


def test_transfer_cost_keeps_a_chain_together():
    # a -> b with a 1000-byte tensor at 1000 B/s: splitting costs 1 s, so the optimum keeps them together
    g = Graph([op("a", [], 1.0, 1000), op("b", ["a"], 1.0), op("c", [], 1.5)])
    r = solve_cp_sat(g, gpus(2), budget=10)
    assert r.optimal and r.objective_s == pytest.approx(2.0, rel=1e-4)
    assert r.devices[0] == r.devices[1] != r.devices[2]


def test_bound_is_below_every_placer_on_a_small_graph():
    rng = np.random.default_rng(0)
    ops = [op(f"o{i}", [f"o{j}" for j in range(i) if rng.random() < 0.3][-2:], float(rng.uniform(0.5, 2)),
              int(rng.integers(0, 3000))) for i in range(14)]
    g, cl = Graph(ops), gpus(3, bandwidth=2000.0, latency=0.1)
    r = solve_cp_sat(g, cl, budget=30)
    assert r.optimal
    for method in available_placers():
        if method in ("single-cpu",):
            continue
        step = simulate(g, cl, place(g, cl, method)).step_time
        assert step >= r.bound_s * (1 - 1e-6), method
