"""Every bound is a bound: no placement simulates faster than the critical-path, load or CP-SAT bound,
including with profiled loaded costs below alone costs, host contention and exchange charges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoplace.bounds import lower_bounds
from autoplace.cluster import Cluster, Device, LinkSpec, Segment
from autoplace.comparison import ComparisonRow, compare
from autoplace.cost import fastest_op_times
from autoplace.graph import Graph, Op
from autoplace.placers.cpsat import solve_cp_sat
from autoplace.sim import Simulator


@st.composite
def cases(draw, max_ops=10, max_devices=3, tight=False):
    """A random DAG (data and control edges, some ops views of their input) whose ops carry measured alone
    and loaded costs (loaded may be faster, as profiling does measure), random co-location groups, CPU
    workers of one host running one or two ops at once with exchange charges, 0-2 copy engines each way,
    per-transfer overheads and latencies, links crossing a shared segment or not, and a random placement
    that honours the groups. ``tight``: devices of 20-150 kB as well as 1 GB, so some placements run out of
    memory."""
    n = draw(st.integers(1, max_ops))
    D = draw(st.integers(1, max_devices))
    n_groups = draw(st.integers(0, 2))
    ops = []
    for i in range(n):
        preds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        ctrl = draw(st.lists(st.integers(0, i - 1), max_size=1)) if i else []
        alone = draw(st.floats(1e-4, 1e-2))
        loaded = alone * draw(st.sampled_from([0.7, 0.9, 1.0, 1.2]))
        group = draw(st.integers(-1, n_groups - 1)) if n_groups else -1
        view = bool(preds) and draw(st.integers(0, 4)) == 0
        ops.append(Op(f"o{i}", "op", tuple(f"o{p}" for p in preds), tuple(f"o{c}" for c in ctrl if c not in preds),
                      output_bytes=(draw(st.integers(0, 100_000)),), param_bytes=draw(st.integers(0, 5000)),
                      cost={"cpu": alone, "cpu|loaded": loaded},
                      colocation_group=f"g{group}" if group >= 0 else None, meta={"view": True} if view else {}))
    charges = draw(st.booleans())
    concurrency = draw(st.integers(1, 2))
    engines = st.sampled_from([0, 1, 2])
    memory = st.sampled_from([10**9, 20_000, 60_000, 150_000]) if tight else st.just(10**9)
    devs = [Device(f"cpu:{j}", "cpu", draw(memory), 1e10, 1e10, concurrency=concurrency, meta={"host": "h"},
                   send_cost_s_per_byte=1e-9 if charges else 0.0, send_overhead_s=2e-5 if charges else 0.0,
                   recv_overhead_s=4e-5 if charges else 0.0, send_engines=draw(engines), recv_engines=draw(engines))
            for j in range(D)]
    shared = draw(st.booleans())
    link = LinkSpec(float(draw(st.sampled_from([1e7, 1e9]))), float(draw(st.sampled_from([0.0, 1e-4]))),
                    float(draw(st.sampled_from([0.0, 3e-5]))), ("bus",) if shared else ())
    cluster = Cluster("c", devs, default_link=link, segments=[Segment("bus", 5e6)] if shared else [])
    graph = Graph(ops, name="random")
    gdev = {name: draw(st.integers(0, D - 1)) for name in graph.colocation_groups()}
    dev = np.array([gdev[op.colocation_group] if op.colocation_group else draw(st.integers(0, D - 1))
                    for op in ops], dtype=np.int64)
    return graph, cluster, dev


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_no_placement_beats_the_critical_path_or_load_bound(case):
    graph, cluster, dev = case
    sim = Simulator(graph, cluster)
    step = sim.run(dev).step_time
    b = lower_bounds(graph, cluster, sim.op_times)
    assert step >= b.best * (1 - 1e-9)
    assert b.gap(step) >= -1e-9


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(max_ops=7))
def test_no_placement_beats_cp_sats_bound(case):
    graph, cluster, dev = case
    r = solve_cp_sat(graph, cluster, budget=2.0)
    assert r.model == "ops" and r.bound_s is not None
    step = Simulator(graph, cluster).run(dev).step_time
    assert step >= r.bound_s * (1 - 1e-9), (step, r.bound_s, r.status)


def test_loaded_costs_below_alone_lower_the_bound():
    """Two 1-ms ops on two CPU workers of one host, each measured at 0.6 ms with the other core busy: run
    together they blend towards the loaded cost, so the bound must use 0.6 ms, not 1 ms."""
    ops = [Op(f"o{i}", "op", output_bytes=(0,), cost={"cpu": 1e-3, "cpu|loaded": 6e-4}) for i in range(2)]
    graph = Graph(ops, name="pair")
    cluster = Cluster("c", [Device(f"cpu:{j}", "cpu", 10**9, 1e10, 1e10, meta={"host": "h"}) for j in range(2)],
                      default_link=LinkSpec(1e9, 0.0))
    assert fastest_op_times(graph, cluster).tolist() == [6e-4, 6e-4]
    step = Simulator(graph, cluster).run(np.array([0, 1])).step_time
    assert step < 1e-3                                     # the contention blend ran them faster than alone
    assert step >= lower_bounds(graph, cluster).best


def test_contention_counts_only_while_a_host_mate_is_busy():
    """a [0,1] and b on cpu:0, c (reading a) on cpu:1, every op 1 s alone and 2 s with its host-mate busy.
    First pass: a [0,1] alone, b [1,2] and c [1,2] side by side. So a keeps 1 s, b and c take 2 s:
    a [0,1], b [1,3], c [1,3], step 3. (Blending by the host-mate's busy share of the whole step would
    run a and b at 1.5 s each and end at 3.5.)"""
    ops = [Op("a", "op", output_bytes=(0,), cost={"cpu": 1.0, "cpu|loaded": 2.0}),
           Op("b", "op", ("a",), cost={"cpu": 1.0, "cpu|loaded": 2.0}),
           Op("c", "op", ("a",), cost={"cpu": 1.0, "cpu|loaded": 2.0})]
    cluster = Cluster("c", [Device(f"cpu:{j}", "cpu", 10**9, 1e10, 1e10, meta={"host": "h"}) for j in range(2)],
                      default_link=LinkSpec(1e9, 0.0))
    r = Simulator(Graph(ops, name="abc"), cluster).run(np.array([0, 0, 1]), trace=True)
    assert r.timeline.start.tolist() == [0.0, 1.0, 1.0] and r.timeline.finish.tolist() == [1.0, 3.0, 3.0]
    assert r.step_time == 3.0


def test_host_busy_share_by_hand():
    from autoplace.sim import host_busy_share

    # device 1 busy [0,2] and [1,3] (overlapping: merged to [0,3]) and [5,6]; device 0's ops run [2,4],
    # [4,6], [7,8] and [3,3]: busy shares 1/2, 1/2, 0 and 0 (no time)
    start = np.array([2.0, 4.0, 7.0, 3.0, 0.0, 1.0, 5.0])
    finish = np.array([4.0, 6.0, 8.0, 3.0, 2.0, 3.0, 6.0])
    dev = np.array([0, 0, 0, 0, 1, 1, 1])
    mates = ~np.eye(2, dtype=bool)
    u = host_busy_share(start, finish, dev, mates)
    assert u.tolist()[:4] == [0.5, 0.5, 0.0, 0.0]
    # device 0 is busy [2,6] and [7,8]: device 1's [0,2] overlaps it not at all, [1,3] for 1 s of 2, [5,6] wholly
    assert u.tolist()[4:] == [0.0, 0.5, 1.0]
    # two host-mates busy all of one op's run: their busy time adds up to 2 runs, the share stops at 1;
    # a device that is not a host-mate (device 3) adds nothing
    start, finish = np.array([0.0, 0.0, 0.0, 0.0]), np.array([2.0, 2.0, 2.0, 2.0])
    dev = np.arange(4)
    mates = np.ones((4, 4), dtype=bool) & ~np.eye(4, dtype=bool)
    mates[3, :] = mates[:, 3] = False
    u = host_busy_share(start, finish, dev, mates)
    assert u.tolist() == [1.0, 1.0, 1.0, 0.0]
    # devices 1 and 2 busy [0,1] and [0,0.5] of op 0's [0,2]: 1/2 + 1/4 add up; ops 1 and 2 see device 0
    # busy all their run plus the other one (1 + 1/2, 1 + 1): capped
    finish = np.array([2.0, 1.0, 0.5, 2.0])
    assert host_busy_share(start, finish, dev, mates).tolist() == [0.75, 1.0, 1.0, 0.0]


def test_measured_rows_have_no_gap():
    graph = Graph([Op("a", "op", output_bytes=(0,), cost={"cpu": 1.0})], name="one")
    cluster = Cluster("c", [Device("cpu:0", "cpu", 10**9, 1e10, 1e10)], default_link=LinkSpec(1e9, 0.0))
    table = compare(graph, cluster, ["single-cpu"])
    row = table.rows[0]
    assert table.gap(row) == pytest.approx(0.0)
    measured = type(table)(table.rows, table.bounds, "measured")
    fast = ComparisonRow(row.method, row.placement, row.result, row.search_time_s)
    assert np.isnan(measured.gap(fast))


@st.composite
def mixed_cases(draw, max_ops=9):
    """A random DAG on a slow CPU and two fast GPUs of small memory: ops with their own CPU and GPU costs,
    some CPU-only or GPU-only, parameters large enough that the GPUs cannot hold them all, copy engines;
    and a random placement honouring the device types."""
    n = draw(st.integers(1, max_ops))
    ops = []
    for i in range(n):
        preds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        types = draw(st.sampled_from([None, None, None, ("cpu",), ("gpu",)]))
        gpu = draw(st.floats(1e-4, 1e-2))
        ops.append(Op(f"o{i}", "op", tuple(f"o{p}" for p in preds), output_bytes=(draw(st.integers(0, 2000)),),
                      param_bytes=draw(st.integers(0, 3000)), device_types=types,
                      cost={"gpu": gpu, "cpu": gpu * draw(st.sampled_from([0.5, 2.0, 8.0]))}))
    devs = [Device("cpu:0", "cpu", 10**6, 1e10, 1e10),
            *(Device(f"gpu:{k}", "gpu", draw(st.integers(2000, 8000)), 1e12, 1e11, send_engines=1, recv_engines=1)
              for k in range(2))]
    cluster = Cluster("mixed", devs, default_link=LinkSpec(1e6, 1e-4, 2e-5))
    graph = Graph(ops, name="mixed")
    ok = [[d.type in (op.device_types or ("cpu", "gpu")) for d in devs] for op in ops]
    dev = np.array([draw(st.sampled_from([d for d in range(3) if ok[i][d]])) for i in range(n)], dtype=np.int64)
    return graph, cluster, dev


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_cases())
def test_bounds_hold_on_unlike_devices_with_tight_memory(case):
    """The critical path (with the transfers device types force) bounds every placement; the memory-aware
    load bound every placement that fits."""
    graph, cluster, dev = case
    r = Simulator(graph, cluster).run(dev)
    b = lower_bounds(graph, cluster)
    assert r.step_time >= b.critical_path * (1 - 1e-9)
    if r.ok:
        assert r.step_time >= b.best * (1 - 1e-9), (r.step_time, b)


def test_memory_aware_load_bound_by_hand():
    """Two ops of 1 s on the GPU and 3 s on the CPU, 600 bytes of parameters each. With room for both on
    the GPU the work spreads to 1.5 s (three quarters of it on the GPU); with room for one (600 bytes),
    one op's work goes to the CPU: 3 s, which a placement attains. Ratios are rounded down to 2 % bins
    (3 becomes 1.02^55 = 2.97), so the bound is within 2 % below."""
    ops = [Op(f"o{i}", "op", output_bytes=(0,), param_bytes=600, cost={"gpu": 1.0, "cpu": 3.0}) for i in range(2)]
    graph = Graph(ops, name="two")

    def bound(gpu_memory):
        c = Cluster("c", [Device("cpu:0", "cpu", 10**6, 1e9, 1e9), Device("gpu:0", "gpu", gpu_memory, 1e9, 1e9)],
                    default_link=LinkSpec(1e9, 0.0))
        return lower_bounds(graph, c).load, Simulator(graph, c)

    loose, _ = bound(10**6)
    tight, sim = bound(600)
    assert loose == pytest.approx(1.5, rel=0.02) and loose <= 1.5
    assert tight == pytest.approx(3.0, rel=0.02) and tight <= 3.0
    assert sim.run(np.array([0, 1])).step_time == pytest.approx(3.0)


def test_a_transfer_the_device_types_force_lengthens_the_critical_path():
    """a runs only on the CPU, b only on the GPU: a's 1000 bytes cross a 1000 B/s link with 0.25 s of
    overhead and 0.5 s of latency, so nothing finishes before 1 + 1.75 + 1 = 3.75 s."""
    g = Graph([Op("a", "op", output_bytes=(1000,), cost={"cpu": 1.0}, device_types=("cpu",)),
               Op("b", "op", ("a",), cost={"gpu": 1.0}, device_types=("gpu",))], name="forced")
    c = Cluster("forced", [Device("cpu", "cpu", 10**9, 1e9, 1e9), Device("gpu", "gpu", 10**9, 1e9, 1e9)],
                default_link=LinkSpec(1000.0, 0.5, 0.25))
    b = lower_bounds(g, c)
    assert b.critical_path == pytest.approx(3.75)
    assert Simulator(g, c).run(np.array([0, 1])).step_time == pytest.approx(3.75)


def test_no_gap_where_the_launches_the_bounds_leave_out_exceed_them():
    """A step of tiny ops is all launch overhead, which the bounds leave out: a gap to them would be
    thousands of percent and say nothing, so it is not given (and the reason is); where the work
    dominates, it is."""
    def cluster(overhead):
        devs = [Device(f"g{i}", "gpu", 10**9, 1e12, 1e11, overhead) for i in range(2)]
        return Cluster("two-gpus", devs, default_link=LinkSpec(1e9, 1e-5))

    tiny = Graph([Op(f"n{i}", "op", (f"n{i - 1}",) if i else (), output_bytes=(4,), flops=10.0) for i in range(50)],
                 name="tiny")
    b = lower_bounds(tiny, cluster(1e-5))
    assert b.launches == pytest.approx(50 * 1e-5 / 2, rel=1e-6) and b.launches > b.best
    assert "leave out launch overhead" in b.meaningless and np.isnan(b.gap(1e-3))
    big = Graph([Op(f"n{i}", "op", (f"n{i - 1}",) if i else (), output_bytes=(4,), flops=1e10) for i in range(50)],
                name="big")
    b = lower_bounds(big, cluster(1e-5))
    assert b.meaningless is None and b.gap(2 * b.best) == pytest.approx(1.0)
