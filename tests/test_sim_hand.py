"""Hand-computed step times, transfers and memory peaks on tiny graphs (see each test's timeline)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import op, two_devices

from autoplace.cluster import Cluster, Device, LinkSpec
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.sim import Simulator, simulate


def run(graph, cluster, devices, **kw):
    dev = [cluster.index(d) for d in devices]
    return simulate(graph, cluster, np.array(dev), trace=True, **kw)


def test_chain_one_device_time_and_memory(two):
    # a [0,1] -> b [1,3] -> c [3,6]; params 1000 resident.
    # memory: a starts +100 = 1100; b starts +200 = 1300; b ends frees a's 100; c starts +300 = 1500 (peak)
    g = Graph([op("a", [], 1, 100, params=1000), op("b", ["a"], 2, 200), op("c", ["b"], 3, 300)])
    r = run(g, two, "AAA")
    assert r.step_time == 6.0
    assert r.busy_time.tolist() == [6.0, 0.0]
    assert r.peak_memory.tolist() == [1500, 0]
    assert r.n_transfers == 0 and r.transfer_bytes == 0
    assert r.timeline.start.tolist() == [0, 1, 3]
    assert r.ok


def test_chain_across_devices_with_transfers(two):
    # a@A [0,1]; a:0 (1000 B) A->B [1, 1+0.5+1=2.5]; b@B [2.5,4.5]; b:0 (2000 B) B->A [4.5, 7]; c@A [7,10]
    g = Graph([op("a", [], 1, 1000), op("b", ["a"], 2, 2000), op("c", ["b"], 3, 300)])
    r = run(g, two, "ABA")
    assert r.step_time == pytest.approx(10.0)
    tl = r.timeline
    assert tl.start.tolist() == pytest.approx([0, 2.5, 7])
    assert tl.transfer_start.tolist() == pytest.approx([1, 4.5])
    assert tl.transfer_end.tolist() == pytest.approx([2.5, 7])
    assert r.link_bytes.tolist() == [[0, 1000], [2000, 0]]
    assert r.link_time.ravel().tolist() == pytest.approx([0, 1.5, 2.5, 0])
    # A: a's 1000 until its send lands at 2.5; later the received 2000 + c's 300 = 2300.
    # B: received 1000 + b's 2000 = 3000.
    assert r.peak_memory.tolist() == [2300, 3000]


def test_diamond_one_and_two_devices(two):
    g = Graph([op("a", [], 1, 1000), op("b", ["a"], 2, 10), op("c", ["a"], 3, 500), op("d", ["b", "c"], 1, 0)])
    assert run(g, two, "AAAA").step_time == pytest.approx(7.0)
    # a [0,1]; b@A [1,3]; a:0 -> B [1,2.5]; c@B [2.5,5.5]; c:0 (500 B) -> A [5.5,6.5]; d@A [6.5,7.5]
    r = run(g, two, "AABA")
    assert r.step_time == pytest.approx(7.5)
    assert r.n_transfers == 2


def test_fork_join_sends_once_per_destination_device(two):
    # a's output is read by b and c, both on B: one transfer, not two.
    g = Graph([op("a", [], 1, 1000), op("b", ["a"], 1, 0), op("c", ["a"], 1, 0), op("d", ["b", "c"], 1, 0)])
    r = run(g, two, "ABBA")
    assert r.n_transfers == 3  # a->B once, b->A, c->A
    assert r.link_bytes[0, 1] == 1000
    # a [0,1]; xfer [1,2.5]; b [2.5,3.5], c [3.5,4.5] (serial on B, ties by rank); b:0, c:0 are 0 B
    # -> latency only: b->A [3.5,4], c->A [4.5,5]; d [5,6]
    assert r.step_time == pytest.approx(6.0)


def test_links_serialise_transfers_in_fifo_order(two):
    # a1 [0,1], a2 [1,2] on A; a1:0 2000 B -> [1, 3.5]; a2:0 1000 B waits for the link -> [3.5, 5]
    g = Graph([op("a1", [], 1, 2000), op("a2", [], 1, 1000), op("b1", ["a1"], 1, 0), op("b2", ["a2"], 1, 0)])
    r = run(g, two, "AABB")
    assert r.timeline.transfer_start.tolist() == pytest.approx([1, 3.5])
    assert r.timeline.transfer_end.tolist() == pytest.approx([3.5, 5.0])
    assert r.timeline.start[2:].tolist() == pytest.approx([3.5, 5.0])
    assert r.step_time == pytest.approx(6.0)


def test_transfers_do_not_occupy_compute(two):
    # While a:0 travels A->B, A keeps computing x; B runs b when the tensor lands.
    g = Graph([op("a", [], 1, 4000), op("x", ["a"], 4, 0), op("b", ["a"], 1, 0)])
    r = run(g, two, "AAB")
    # a [0,1]; x@A [1,5]; a:0 -> B [1, 1+0.5+4=5.5]; b@B [5.5, 6.5]
    assert r.timeline.start.tolist() == pytest.approx([0, 1, 5.5])
    assert r.step_time == pytest.approx(6.5)


def test_concurrency_runs_independent_ops_together():
    cl = two_devices(concurrency=2)
    g = Graph([op("a", [], 1), op("b", [], 1), op("c", [], 1)])
    r = run(g, cl, "AAA")
    assert r.step_time == pytest.approx(2.0)  # a, b together; then c
    assert r.busy_time[0] == pytest.approx(3.0)


def test_ties_broken_by_topological_rank(two):
    g = Graph([op("s", [], 1), op("y", ["s"], 1), op("x", ["s"], 1)])
    r = run(g, two, "AAA")
    assert r.timeline.start.tolist() == [0, 1, 2]  # y (rank 1) before x (rank 2)


def test_oom_is_reported_not_raised():
    # a's parameters (600) + outputs (500) exceed B's 1000 bytes; A is fine.
    cl = two_devices(memory=1000)
    g = Graph([op("a", [], 1, 500, params=600), op("b", ["a"], 1, 0)])
    r = run(g, cl, "BA")
    assert r.oom_devices == ("B",)
    assert not r.ok
    assert r.step_time > 0
    exact = two_devices(memory=1100)
    assert run(g, exact, "BB").ok  # a peak equal to the capacity fits


def test_roofline_and_overhead():
    dev = Device("g", "gpu", 10**9, peak_flops=1e9, memory_bandwidth=1e6, op_overhead_s=0.25)
    cl = Cluster("one", [dev])
    from autoplace.graph import Op

    g = Graph([Op("compute", "mm", flops=2e9, output_bytes=(1000,)),   # 2 s of FLOPs vs 1 ms of bytes
               Op("memory", "copy", ["compute"], output_bytes=(3_000_000,))])  # (1e3 + 3e6) B / 1e6 B/s
    r = simulate(g, cl, np.zeros(2, np.int64))
    assert r.step_time == pytest.approx(0.25 + 2.0 + 0.25 + 3.001)


def test_placement_object_and_array_agree(two):
    g = Graph([op("a", [], 1, 1000), op("b", ["a"], 2, 0)])
    p = Placement({"a": "A", "b": "B"}, "g", "two")
    sim = Simulator(g, two)
    assert sim.run(p).step_time == sim.run(np.array([0, 1])).step_time == pytest.approx(4.5)


def test_control_dependency_crosses_devices_as_latency_only(two):
    from autoplace.graph import Op

    g = Graph([Op("a", "op", cost={"cpu": 1}), Op("b", "op", control_inputs=("a",), cost={"gpu": 1})])
    r = run(g, two, "AB")
    assert r.step_time == pytest.approx(1 + 0.5 + 1)
    assert r.transfer_bytes == 0 and r.n_transfers == 1


def test_default_link_covers_missing_pairs():
    devs = [Device(n, "gpu", 10**9, 1e9, 1e9) for n in ("x", "y")]
    cl = Cluster("d", devs, default_link=LinkSpec(100.0, 0.0))
    g = Graph([op("a", [], 1, 100), op("b", ["a"], 1, 0)])
    assert simulate(g, cl, np.array([0, 1])).step_time == pytest.approx(3.0)


def test_views_take_no_memory_but_transfer_their_bytes(two):
    # a (1000 B) -> v = view(a) -> b (10 B). On one device the view allocates nothing: peak 1000.
    from autoplace.graph import Op

    g = Graph([op("a", [], 1, 1000), Op("v", "view", ("a",), output_bytes=(1000,), cost={"cpu": 0, "gpu": 0},
                                         meta={"view": True}), op("b", ["v"], 1, 10)])
    assert run(g, two, "AAA").peak_memory.tolist() == [1000, 0]
    # v on A, b on B: the transfer moves v's full 1000 bytes, which land as a real copy on B
    r = run(g, two, "AAB")
    assert r.link_bytes[0, 1] == 1000 and r.peak_memory.tolist() == [1000, 1010]
