"""CP-SAT: proven optima on hand-computed cases; its bound never exceeds any placer's simulated step."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import op

from autoplace.cluster import Cluster, Device, LinkSpec, Segment
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
    for method in available_placers(include_learned=False, include_strategies=False):   # placements of g
        if method in ("single-cpu",):
            continue
        step = simulate(g, cl, place(g, cl, method)).step_time
        assert step >= r.bound_s * (1 - 1e-6), method


def test_a_forced_transfer_takes_a_lone_transfers_time():
    """a runs only on the CPU, b only on the GPU: a's 1000 bytes must cross. The link carries 2000 B/s but
    crosses a 1000 B/s segment, with 0.25 s of overhead and 0.5 s of latency: the transfer takes
    0.25 + 1000 / 1000 + 0.5 = 1.75 s, and the optimum and the simulated step are 1 + 1.75 + 1 = 3.75 s."""
    from autoplace.graph import Op

    g = Graph([Op("a", "op", output_bytes=(1000,), cost={"cpu": 1.0}, device_types=("cpu",)),
               Op("b", "op", ("a",), cost={"gpu": 1.0}, device_types=("gpu",))])
    c = Cluster("forced", [Device("cpu", "cpu", 10**9, 1e9, 1e9), Device("gpu", "gpu", 10**9, 1e9, 1e9)],
                default_link=LinkSpec(2000.0, 0.5, 0.25, ("bus",)), segments=[Segment("bus", 1000.0)])
    r = solve_cp_sat(g, c, budget=5)
    assert r.status == "OPTIMAL" and r.bound_s == pytest.approx(3.75, rel=1e-5)
    assert simulate(g, c, np.array([0, 1])).step_time == pytest.approx(3.75)


def test_three_one_second_ops_on_one_gpu_are_feasible():
    # the integer horizon must hold the sum of the rounded durations (it once came out one unit short)
    g = Graph([op(f"o{i}", [], 1.0) for i in range(3)])
    r = solve_cp_sat(g, gpus(1), budget=5)
    assert r.optimal and r.objective_s == pytest.approx(3.0, rel=1e-4)
    assert r.bound_s <= 3.0


def test_bound_holds_where_memory_is_freed():
    """A 6-op chain of 1-s ops, each output 400 bytes on 1000-byte GPUs joined by a slow link. Holding every
    output all step (Baechi's static model) needs 2400 bytes, so that model spreads the chain over three
    GPUs and pays two 6-s transfers (a "bound" of 18 s). The simulator frees an output once its reader
    finishes: on one GPU at most two outputs are live (800 bytes), the step is 6 s and fits. The reported
    bound must not exceed it."""
    g = Graph([op(f"n{i}", [f"n{i - 1}"] if i else [], 1.0, 400) for i in range(6)])
    cl = Cluster("g", [Device(f"gpu:{i}", "gpu", 1000, 1e9, 1e9) for i in range(3)],
                 default_link=LinkSpec(400 / 6.0, 0.0))
    single = simulate(g, cl, np.zeros(6, dtype=np.int64))
    assert single.ok and single.step_time == pytest.approx(6.0)
    r = solve_cp_sat(g, cl, budget=5)
    assert r.model == "ops" and r.bound_s <= single.step_time * (1 + 1e-9)
    assert simulate(g, cl, r.devices).ok
    from autoplace.comparison import compare

    table = compare(g, cl, ["single-gpu", "cp-sat"])
    assert table.bounds.cp_sat == pytest.approx(r.bound_s)
    for row in table:
        assert table.bounds.gap(row.step_time) >= -1e-9, row.method


def test_a_coarse_model_reports_no_bound_on_the_placement_problem():
    rng = np.random.default_rng(1)
    ops = [op(f"o{i}", [f"o{i - 1}"] if i and rng.random() < 0.7 else [], float(rng.uniform(0.5, 2)), 100)
           for i in range(30)]
    g = Graph(ops)
    r = solve_cp_sat(g, gpus(2), budget=0.2, max_tasks=10)
    assert r.model == "10 tasks" and r.bound_s is None and r.model_bound_s > 0
    p = place(g, gpus(2), "cp-sat", budget=0.2)
    assert p.meta["model"] == "ops" and "bound_s" in p.meta      # 30 ops: the op-level model
