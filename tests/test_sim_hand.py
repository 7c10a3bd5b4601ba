"""Hand-computed step times, transfers and memory peaks on tiny graphs (see each test's timeline)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import op, two_devices

from autoplace.cluster import Cluster, Device, Link, LinkSpec, Segment
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
    # a@A [0,1]; a:0 (1000 B) holds A->B for 1000/1000 = [1,2], lands 0.5 later at 2.5; b@B [2.5,4.5];
    # b:0 (2000 B) holds B->A [4.5,6.5], lands 7; c@A [7,10]
    g = Graph([op("a", [], 1, 1000), op("b", ["a"], 2, 2000), op("c", ["b"], 3, 300)])
    r = run(g, two, "ABA")
    assert r.step_time == pytest.approx(10.0)
    tl = r.timeline
    assert tl.start.tolist() == pytest.approx([0, 2.5, 7])
    assert tl.transfer_start.tolist() == pytest.approx([1, 4.5])
    assert tl.transfer_end.tolist() == pytest.approx([2, 6.5])
    assert tl.transfer_arrival.tolist() == pytest.approx([2.5, 7])
    assert r.link_bytes.tolist() == [[0, 1000], [2000, 0]]
    assert r.link_time.ravel().tolist() == pytest.approx([0, 1, 2, 0])  # the latency does not hold the link
    # A: a's 1000 until its send lands at 2.5; the received 2000 from its issue at 4.5, + c's 300 = 2300.
    # B: the received 1000 from its issue at 1, + b's 2000 = 3000.
    assert r.peak_memory.tolist() == [2300, 3000]


def test_diamond_one_and_two_devices(two):
    g = Graph([op("a", [], 1, 1000), op("b", ["a"], 2, 10), op("c", ["a"], 3, 500), op("d", ["b", "c"], 1, 0)])
    assert run(g, two, "AAAA").step_time == pytest.approx(7.0)
    # a [0,1]; b@A [1,3]; a:0 -> B [1,2] lands 2.5; c@B [2.5,5.5]; c:0 (500 B) -> A [5.5,6] lands 6.5;
    # d@A [6.5,7.5]
    r = run(g, two, "AABA")
    assert r.step_time == pytest.approx(7.5)
    assert r.n_transfers == 2


def test_fork_join_sends_once_per_destination_device(two):
    # a's output is read by b and c, both on B: one transfer, not two.
    g = Graph([op("a", [], 1, 1000), op("b", ["a"], 1, 0), op("c", ["a"], 1, 0), op("d", ["b", "c"], 1, 0)])
    r = run(g, two, "ABBA")
    assert r.n_transfers == 3  # a->B once, b->A, c->A
    assert r.link_bytes[0, 1] == 1000
    # a [0,1]; xfer [1,2] lands 2.5; b [2.5,3.5], c [3.5,4.5] (serial on B, ties by rank); b:0, c:0 are
    # 0 B -> latency only: b->A lands 4, c->A lands 5; d [5,6]
    assert r.step_time == pytest.approx(6.0)


def test_links_serialise_transfers_in_fifo_order(two):
    # a1 [0,1], a2 [1,2] on A; a1:0 2000 B holds the link [1,3], lands 3.5; a2:0 1000 B, issued at 2,
    # waits for the link (not for a1:0's latency): [3,4], lands 4.5; b1 [3.5,4.5], b2 [4.5,5.5]
    g = Graph([op("a1", [], 1, 2000), op("a2", [], 1, 1000), op("b1", ["a1"], 1, 0), op("b2", ["a2"], 1, 0)])
    r = run(g, two, "AABB")
    assert r.timeline.transfer_start.tolist() == pytest.approx([1, 3])
    assert r.timeline.transfer_end.tolist() == pytest.approx([3, 4])
    assert r.timeline.transfer_arrival.tolist() == pytest.approx([3.5, 4.5])
    assert r.timeline.start[2:].tolist() == pytest.approx([3.5, 4.5])
    assert r.step_time == pytest.approx(5.5)


def test_transfers_do_not_occupy_compute(two):
    # While a:0 travels A->B, A keeps computing x; B runs b when the tensor lands.
    g = Graph([op("a", [], 1, 4000), op("x", ["a"], 4, 0), op("b", ["a"], 1, 0)])
    r = run(g, two, "AAB")
    # a [0,1]; x@A [1,5]; a:0 -> B holds the link [1, 1+4=5], lands 5.5; b@B [5.5, 6.5]
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


def view(name, base, out=1000):
    """A zero-time op whose output aliases its input's buffer (``"view": true``)."""
    from autoplace.graph import Op

    return Op(name, "view", (base,), output_bytes=(out,), cost={"cpu": 0, "gpu": 0}, meta={"view": True})


def test_views_take_no_memory_but_transfer_their_bytes(two):
    # a (1000 B) -> v = view(a) -> b (10 B). On one device the view allocates nothing, and a's buffer lives
    # until b, v's reader, has finished: a 1000 + b 10 = 1010 (not a freed when v ends).
    g = Graph([op("a", [], 1, 1000), view("v", "a"), op("b", ["v"], 1, 10)])
    assert run(g, two, "AAA").peak_memory.tolist() == [1010, 0]
    # v on A, b on B: the transfer moves v's full 1000 bytes, which land as a real copy on B
    r = run(g, two, "AAB")
    assert r.link_bytes[0, 1] == 1000 and r.peak_memory.tolist() == [1000, 1010]


def test_a_views_base_outlives_the_view_op(two):
    # a [0,1] (1000 B) -> v = view(a) [1,1] -> w = view(v) [1,1] -> b [1,2] (10 B) -> c [2,3] (100 B).
    # a's buffer is read through v and w until b finishes at 2; c then runs with only b's 10 B alive.
    g = Graph([op("a", [], 1, 1000), view("v", "a"), view("w", "v"), op("b", ["w"], 1, 10),
               op("c", ["b"], 1, 100)])
    r = run(g, two, "AAAAA")
    assert r.timeline.start.tolist() == [0, 1, 1, 1, 2]
    assert r.peak_memory.tolist() == [1010, 0]
    # with a second, later reader of the view (d reads w after c), a stays alive until d ends: 1000 + 10 + 100
    g2 = Graph([op("a", [], 1, 1000), view("v", "a"), view("w", "v"), op("b", ["w"], 1, 10),
                op("c", ["b"], 1, 100), op("d", ["w", "c"], 1, 0)])
    assert run(g2, two, "AAAAAA").peak_memory.tolist() == [1110, 0]
    # the view of a received copy keeps the copy alive on its device: a on A, v, w, b on B
    r3 = run(g, two, "ABBBB")
    assert r3.peak_memory.tolist() == [1000, 1010]


def test_in_place_update_allocates_nothing(two):
    # w: a parameter (4000 B resident); g [0,1] makes a gradient (4000 B); add_ = w.add_(g) writes w in
    # place: marked a view of w, it allocates nothing. Peak = 4000 resident + g's 4000, not + 4000 more.
    from autoplace.graph import Op

    g = Graph([Op("w", "parameter", output_bytes=(4000,), param_bytes=4000, cost={"cpu": 0, "gpu": 0},
                  meta={"view": True}),
               op("g", [], 1, 4000),
               Op("add_", "aten.add_", ("w", "g"), output_bytes=(4000,), cost={"cpu": 1, "gpu": 1},
                  meta={"view": True}),
               op("after", ["add_"], 1, 0)])
    assert run(g, two, "AAAA").peak_memory.tolist() == [8000, 0]
    # the update aliases what it writes (w, its first input), not the gradient it reads: g is freed when
    # add_ ends at 2, so h [2,3] (4000 B) runs beside w alone: 8000 (aliasing g would keep it: 12000)
    g2 = Graph([*g.ops[:3], op("h", ["add_"], 1, 4000), op("after", ["h"], 1, 0)])
    assert g2.pair_tensor[g2.alias_pair[2]] == g2.pair_tensor[g2.in_ptr[2]]     # add_'s pair of input w
    assert g2.tensor_src[g2.pair_tensor[g2.alias_pair[2]]] == 0
    assert run(g2, two, "AAAAA").peak_memory.tolist() == [8000, 0]


def test_received_copy_is_allocated_in_flight():
    # a@A [0,1] (1000 B) -> b@B; the link is slow (100 B/s): the copy holds it [1,11] and lands at 11.5.
    # x@B [0,5] has 50 B nobody reads. The received copy counts on B from its issue at 1, while x still
    # holds its 50 B: B's peak is 1050 (counting it only on landing would give 1000 + b's 10 = 1010).
    cl = two_devices(bandwidth=100.0)
    g = Graph([op("a", [], 1, 1000), op("x", [], 5, 50), op("b", ["a"], 1, 10)])
    r = run(g, cl, "ABB")
    assert r.timeline.transfer_start.tolist() == [1] and r.timeline.transfer_arrival.tolist() == [11.5]
    assert r.timeline.start[2] == 11.5
    assert r.peak_memory.tolist() == [1000, 1050]


def star(n_dst: int, *, send=None, recv=None, bandwidth=1000.0, latency=0.5):
    """Device ``S`` and ``n_dst`` devices ``D0..``, every pair joined by links of ``bandwidth`` and
    ``latency``; ``send``/``recv`` copy engines on every device (None: the GPU default, one each)."""
    devs = [Device(name, "gpu", 10**9, 1e9, 1e9, send_engines=send, recv_engines=recv)
            for name in ["S", *(f"D{k}" for k in range(n_dst))]]
    return Cluster("star", devs, default_link=LinkSpec(bandwidth, latency))


def test_broadcast_to_three_devices_through_one_send_engine():
    # a@S [0,1] (1000 B) read by b_k on D_k. One send engine: the three copies go one after another,
    # [1,2], [2,3], [3,4], landing 0.5 later; b_k runs on landing: the last ends at 4.5 + 1 = 5.5.
    g = Graph([op("a", [], 1, 1000)] + [op(f"b{k}", ["a"], 1, 0) for k in range(3)])
    r = simulate(g, star(3), np.array([0, 1, 2, 3]), trace=True)
    assert r.timeline.transfer_start.tolist() == [1, 2, 3]
    assert r.timeline.transfer_arrival.tolist() == [2.5, 3.5, 4.5]
    assert r.step_time == 5.5
    # two send engines: two copies at once [1,2], the third on the engine that frees first [2,3]
    r2 = simulate(g, star(3, send=2), np.array([0, 1, 2, 3]), trace=True)
    assert r2.timeline.transfer_start.tolist() == [1, 1, 2] and r2.step_time == 4.5
    # no limit (0): all three at once, each on its own link
    assert simulate(g, star(3, send=0), np.array([0, 1, 2, 3])).step_time == 3.5


def test_gather_into_one_receive_engine():
    # three producers on D0..D2 [0,1] (1000 B each) read by one op on S: S's single receive engine takes
    # the copies one at a time, [1,2], [2,3], [3,4]; the reader starts at the last landing, 4.5.
    g = Graph([op(f"a{k}", [], 1, 1000) for k in range(3)] + [op("s", ["a0", "a1", "a2"], 1, 0)])
    r = simulate(g, star(3), np.array([1, 2, 3, 0]), trace=True)
    assert sorted(r.timeline.transfer_start.tolist()) == [1, 2, 3]
    assert r.step_time == 5.5
    assert simulate(g, star(3, recv=0), np.array([1, 2, 3, 0])).step_time == 3.5


def test_two_transfers_crossing_one_shared_segment():
    # A->C and B->D both cross segment "up" (1000 B/s); their links carry 2000 B/s. At t = 1 each sends
    # 1000 B: the first holds the segment at the segment's rate, [1,2]; the second waits for it, [2,3].
    # A->B does not cross it and runs at the link's rate at once: [1,1.5].
    devs = [Device(n, "gpu", 10**9, 1e9, 1e9) for n in "ABCD"]
    links = [Link(s, d, 2000.0, 0.0, 0.0, ("up",) if (s, d) in {("A", "C"), ("B", "D")} else ())
             for s in "ABCD" for d in "ABCD" if s != d]
    cl = Cluster("seg", devs, links, segments=[Segment("up", 1000.0)])
    g = Graph([op("a", [], 1, 1000), op("b", [], 1, 1000), op("c", ["a"], 1, 0), op("d", ["b"], 1, 0)])
    r = simulate(g, cl, np.array([0, 1, 2, 3]), trace=True)
    assert r.timeline.transfer_start.tolist() == [1, 2] and r.timeline.transfer_end.tolist() == [2, 3]
    assert r.step_time == 4.0
    assert r.segment_time.tolist() == [2.0] and r.to_dict()["segments"] == [{"name": "up", "busy_s": 2.0}]
    g2 = Graph([op("a", [], 1, 1000), op("c", ["a"], 1, 0)])
    assert simulate(g2, cl, np.array([0, 1])).step_time == 2.5  # A->B: 1000 B at 2000 B/s
    assert simulate(g2, cl, np.array([0, 2])).step_time == 3.0  # A->C: at the segment's 1000 B/s


def test_latencies_of_small_transfers_overlap(two):
    # a [0,1] has four 10 B outputs, all read by d on B. Each copy holds the link 10/1000 = 0.01 s and
    # lands 0.5 later: the four land at 1.51, 1.52, 1.53, 1.54 (were latency to hold the link, the last
    # would land at 1 + 4 * 0.51 = 3.04). d [1.54, 2.54].
    from autoplace.graph import Op

    g = Graph([Op("a", "op", output_bytes=(10, 10, 10, 10), cost={"cpu": 1, "gpu": 1}),
               op("d", ["a:0", "a:1", "a:2", "a:3"], 1, 0)])
    r = run(g, two, "AB")
    assert r.timeline.transfer_arrival.tolist() == pytest.approx([1.51, 1.52, 1.53, 1.54])
    assert r.step_time == pytest.approx(2.54)


def test_per_transfer_overhead_holds_the_link():
    # overhead 0.25 s per copy, 1000 B/s, latency 0.5: a1:0, a2:0 (500 B each, both ready at 1 on A) hold
    # the link [1, 1.75] and [1.75, 2.5] and land at 2.25 and 3.0.
    devs = [Device(n, "gpu", 10**9, 1e9, 1e9, send_engines=0, recv_engines=0) for n in "AB"]
    cl = Cluster("oh", devs, default_link=LinkSpec(1000.0, 0.5, 0.25))
    from autoplace.graph import Op

    g = Graph([Op("a", "op", output_bytes=(500, 500), cost={"gpu": 1}), op("b", ["a:0", "a:1"], 1, 0)])
    r = simulate(g, cl, np.array([0, 1]), trace=True)
    assert r.timeline.transfer_end.tolist() == [1.75, 2.5]
    assert r.timeline.transfer_arrival.tolist() == [2.25, 3.0]
    assert r.link_time[0, 1] == 1.5 and r.step_time == 4.0
