"""Hand-computed step times, transfers and memory peaks on tiny graphs (see each test's timeline)."""

from __future__ import annotations

from dataclasses import replace

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
    from autoplace.graph import Op

    g = Graph([Op("compute", "mm", flops=2e9, output_bytes=(1000,)),   # 2 s of FLOPs vs 1 ms of bytes
               Op("memory", "copy", ["compute"], output_bytes=(3_000_000,))])  # (1e3 + 3e6) B / 1e6 B/s
    # a CPU runs each op's overhead and its work in series
    cpu = Cluster("one", [Device("c", "cpu", 10**9, peak_flops=1e9, memory_bandwidth=1e6, op_overhead_s=0.25)])
    assert simulate(g, cpu, np.zeros(2, np.int64)).step_time == pytest.approx(0.25 + 2.0 + 0.25 + 3.001)
    # a GPU's host thread launches "memory" [0.25, 0.5] while "compute" runs [0.25, 2.25]: one overhead
    gpu = Cluster("one", [Device("g", "gpu", 10**9, peak_flops=1e9, memory_bandwidth=1e6, op_overhead_s=0.25)])
    r = simulate(g, gpu, np.zeros(2, np.int64), trace=True)
    assert r.step_time == pytest.approx(0.25 + 2.0 + 3.001)
    assert r.timeline.launch_start.tolist() == [0.0, 0.25]
    assert r.timeline.start.tolist() == [0.25, 2.25]
    assert r.busy_time.tolist() == pytest.approx([5.001]) and r.host_time.tolist() == [0.5]


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


def test_a_peer_copy_takes_the_senders_engine_and_a_host_copy_the_gpus():
    # three producers on GPUs D0..D2 [0,1] (1000 B each) read by one op on GPU S: a copy between GPUs runs
    # on the source's engine (PyTorch copies on the source device's stream), so the three copies run at
    # once, [1,2], land at 2.5, and s runs [2.5, 3.5]
    g = Graph([op(f"a{k}", [], 1, 1000) for k in range(3)] + [op("s", ["a0", "a1", "a2"], 1, 0)])
    r = simulate(g, star(3), np.array([1, 2, 3, 0]), trace=True)
    assert r.timeline.transfer_start.tolist() == [1, 1, 1]
    assert r.step_time == 3.5
    # from three CPUs instead, each copy into S runs on S's one receive engine: [1,2], [2,3], [3,4]
    devs = [Device("S", "gpu", 10**9, 1e9, 1e9)] + [Device(f"D{k}", "cpu", 10**9, 1e9, 1e9) for k in range(3)]
    host = Cluster("host", devs, default_link=LinkSpec(1000.0, 0.5))
    r = simulate(g, host, np.array([1, 2, 3, 0]), trace=True)
    assert sorted(r.timeline.transfer_start.tolist()) == [1, 2, 3]
    assert r.step_time == 5.5


def test_two_transfers_crossing_one_shared_segment():
    # A->C and B->D both cross segment "up" (1000 B/s); their links carry 2000 B/s. At t = 1 each sends
    # 1000 B: they share the segment, 500 B/s each, and both end at 3 (the segment busy [1, 3]).
    # A->B does not cross it and runs at the link's rate at once: [1,1.5].
    devs = [Device(n, "gpu", 10**9, 1e9, 1e9) for n in "ABCD"]
    links = [Link(s, d, 2000.0, 0.0, 0.0, ("up",) if (s, d) in {("A", "C"), ("B", "D")} else ())
             for s in "ABCD" for d in "ABCD" if s != d]
    cl = Cluster("seg", devs, links, segments=[Segment("up", 1000.0)])
    g = Graph([op("a", [], 1, 1000), op("b", [], 1, 1000), op("c", ["a"], 1, 0), op("d", ["b"], 1, 0)])
    r = simulate(g, cl, np.array([0, 1, 2, 3]), trace=True)
    assert r.timeline.transfer_start.tolist() == [1, 1] and r.timeline.transfer_end.tolist() == [3, 3]
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


def test_per_transfer_overhead_is_a_host_cost():
    # overhead 0.25 s per copy, 1000 B/s, latency 0.5: a:0, a:1 (500 B each, ready at 1 on A).
    from autoplace.graph import Op

    g = Graph([Op("a", "op", output_bytes=(500, 500), cost={"cpu": 1, "gpu": 1}), op("b", ["a:0", "a:1"], 1, 0)])
    # between CPUs the overhead delays each copy without holding the link: both join the link's queue at
    # 1.25 and run [1.25, 1.75], [1.75, 2.25], landing at 2.25 and 2.75; b [2.75, 3.75]
    cpus = Cluster("oh", [Device(n, "cpu", 10**9, 1e9, 1e9) for n in "AB"], default_link=LinkSpec(1000.0, 0.5, 0.25))
    r = simulate(g, cpus, np.array([0, 1]), trace=True)
    assert r.timeline.transfer_start.tolist() == [1.25, 1.75]
    assert r.timeline.transfer_arrival.tolist() == [2.25, 2.75]
    assert r.link_time[0, 1] == 1.0 and r.step_time == 3.75
    # between GPUs A's host thread submits both copies right after launching a, while a runs (0 to 0.5 of
    # its time, 0.25 each): they start as a ends, [1, 1.5] and [1.5, 2] on A's one send engine
    gpus = Cluster("oh", [Device(n, "gpu", 10**9, 1e9, 1e9) for n in "AB"], default_link=LinkSpec(1000.0, 0.5, 0.25))
    r = simulate(g, gpus, np.array([0, 1]), trace=True)
    assert r.timeline.transfer_start.tolist() == [1.0, 1.5]
    assert r.timeline.transfer_arrival.tolist() == [2.0, 2.5]
    assert r.host_time.tolist() == [0.5, 0.0] and r.step_time == 3.5


# ---------------------------------------------------------------------- host threads and launches
def gpu_chain(n, flops, *, reader=None, depth=1024, overhead=10e-6, out=4):
    """``n`` ops in a chain on one GPU (1 GFLOP/s, ``overhead`` s per launch), ``flops`` each; with
    ``reader``, op ``h`` on the CPU also reads chain op ``reader``'s output."""
    from autoplace.graph import Op

    devs = [Device("cpu", "cpu", 10**9, 1e9, 1e12, op_overhead_s=overhead),
            Device("gpu", "gpu", 10**9, 1e9, 1e12, op_overhead_s=overhead, launch_queue_depth=depth)]
    cl = Cluster("host", devs, default_link=LinkSpec(1e9, 0.0, 6e-6))
    ops = [Op(f"g{i}", "op", (f"g{i - 1}",) if i else (), output_bytes=(out,), flops=float(flops)) for i in range(n)]
    place = [1] * n
    if reader is not None:
        ops.append(Op("h", "op", (f"g{reader}",), cost={"cpu": 0.0}))
        place.append(0)
    return Graph(ops), cl, np.array(place)


def test_launches_run_ahead_of_the_gpu():
    # 1,000 kernels of 1 us, each launched in 10 us: bound by the host thread, 1,000 x 10 us + the last 1 us
    g, cl, dev = gpu_chain(1000, 1e3)
    assert simulate(g, cl, dev).step_time == pytest.approx(1000 * 10e-6 + 1e-6, rel=1e-9)
    # kernels of 100 us: the launches hide behind them, 10 us + 1,000 x 100 us (not 110 ms)
    g, cl, dev = gpu_chain(1000, 1e5)
    r = simulate(g, cl, dev)
    assert r.step_time == pytest.approx(10e-6 + 1000 * 100e-6, rel=1e-9)
    assert r.host_time[1] == pytest.approx(1000 * 10e-6) and r.busy_time[1] == pytest.approx(0.1)
    # the same chain on the CPU pays each overhead in series: 1,000 x 110 us
    assert simulate(g, cl, np.zeros(1000, np.int64)).step_time == pytest.approx(1000 * 110e-6, rel=1e-9)


def test_a_host_op_reading_a_gpu_tensor_drains_the_queue():
    # launches g0 [0,10], g1 [10,20] us; kernels g0 [10,110], g1 [110,210]. Without a host reader g2 is
    # launched at 20. With h on the CPU reading g1, the host thread waits for g1's kernel (210), submits the
    # copy (6 us) and only then launches g2 [216, 226], whose kernel runs [226, 326]: the GPU idles 16 us.
    g, cl, dev = gpu_chain(4, 1e5)
    tl = simulate(g, cl, dev, trace=True).timeline
    assert tl.launch_start[2] == pytest.approx(20e-6)
    g, cl, dev = gpu_chain(4, 1e5, reader=1)
    r = simulate(g, cl, dev, trace=True)
    tl = r.timeline
    assert tl.finish[1] == pytest.approx(210e-6)
    assert tl.launch_start[2] == pytest.approx(216e-6) and tl.start[2] == pytest.approx(226e-6)
    assert tl.transfer_start.tolist() == pytest.approx([216e-6])
    assert r.step_time == pytest.approx(426e-6)


def test_a_full_launch_queue_blocks_the_host_thread():
    # depth 2: g0, g1 launched at 0 and 10 us; g2 waits for g0's kernel to finish (110 us) before launching
    g, cl, dev = gpu_chain(5, 1e5, depth=2)
    tl = simulate(g, cl, dev, trace=True).timeline
    assert tl.launch_start.tolist()[:4] == pytest.approx([0, 10e-6, 110e-6, 210e-6])


def test_a_launch_group_pays_its_launches_once_per_device():
    # ten ops of one foreach update (3 launches on each device it touches) on a GPU with 10 us launches:
    # the first op launched on a device pays 30 us, the others nothing; split over two GPUs, each pays 30 us
    from autoplace.graph import Op

    ops = [Op(f"u{i}", "adam", flops=1e3, meta={"launch_group": "adam", "group_launches": 3}) for i in range(10)]
    g = Graph(ops)
    gpu = Device("g0", "gpu", 10**9, 1e9, 1e12, op_overhead_s=10e-6)
    cl = Cluster("two", [gpu, replace(gpu, name="g1")], default_link=LinkSpec(1e9, 0.0))
    r = simulate(g, cl, np.zeros(10, np.int64))
    assert r.host_time.tolist() == pytest.approx([30e-6, 0.0])
    assert r.step_time == pytest.approx(30e-6 + 10 * 1e-6)
    r = simulate(g, cl, np.array([0, 1] * 5))
    assert r.host_time.tolist() == pytest.approx([30e-6, 30e-6])
    # on a CPU the same: one op pays the group's 3 overheads, each op its own work (1 us)
    cpu = Cluster("c", [replace(gpu, type="cpu")])
    assert simulate(g, cpu, np.zeros(10, np.int64)).step_time == pytest.approx(30e-6 + 10e-6)
    # a group for GPUs only (a foreach update left at PyTorch's default): on the CPU each op pays its own
    gpu_only = Graph([Op(o.name, o.type, flops=o.flops, meta={**o.meta, "group_device_types": ["gpu"]}) for o in ops])
    assert simulate(gpu_only, cpu, np.zeros(10, np.int64)).step_time == pytest.approx(10 * 11e-6)
    assert simulate(gpu_only, cl, np.zeros(10, np.int64)).host_time.tolist() == pytest.approx([30e-6, 0.0])


def test_a_control_edge_out_of_a_view_does_not_hold_its_base():
    # a (1000 B) -> v = view(a) -> b (5000 B, control input v): b waits for v but reads none of a's
    # bytes, so a's buffer is free when v ends; peak 5000 (holding it through b would be 6000)
    from autoplace.graph import Op

    g = Graph([op("a", [], 1, 1000), view("v", "a"), Op("b", "op", control_inputs=("v",), output_bytes=(5000,),
                                                        cost={"cpu": 1, "gpu": 1})])
    assert run(g, two_devices(), "AAA").peak_memory.tolist() == [5000, 0]


def test_fair_sharing_lets_a_small_transfer_pass_a_large_one():
    # g0 -> cpu (1e9 B) and g1 -> cpu (1e6 B) both cross segment "up" (1e9 B/s) at t = 1: each moves at
    # 5e8 B/s, the small one ends at 1.002; the large one then has the segment alone: 1 + 0.002 + 0.999
    from autoplace.graph import Op

    devs = [Device("cpu", "cpu", 10**10, 1e9, 1e9), Device("g0", "gpu", 10**10, 1e9, 1e9),
            Device("g1", "gpu", 10**10, 1e9, 1e9)]
    links = [Link(s, d, 1e9, 0.0, 0.0, ("up",) if d == "cpu" else ()) for s in ("cpu", "g0", "g1")
             for d in ("cpu", "g0", "g1") if s != d]
    cl = Cluster("share", devs, links, segments=[Segment("up", 1e9)])
    g = Graph([Op("a", "op", output_bytes=(10**9,), cost={"gpu": 1}),
               Op("b", "op", output_bytes=(10**6,), cost={"gpu": 1}),
               Op("h", "op", ("a", "b"), cost={"cpu": 0})])
    r = simulate(g, cl, np.array([1, 2, 0]), trace=True)
    assert r.timeline.transfer_start.tolist() == [1.0, 1.0]
    assert r.timeline.transfer_end.tolist() == pytest.approx([2.001, 1.002])
    assert r.segment_time.tolist() == pytest.approx([1.001])


# ---------------------------------------------------------------------- the readings docs/algorithms.md fixes
# Each test pins one rule of the Simulator section that an implementation could read two ways; each runs in
# both loops (the C extension and the numba kernel).
@pytest.fixture(params=["c", "numba"])
def loop(request, monkeypatch):
    from autoplace.sim import _cbackend

    if request.param == "c" and _cbackend.BACKEND != "c":
        pytest.skip("the C extension is not built here")
    monkeypatch.setattr(_cbackend, "BACKEND", request.param)
    return request.param


def _cpus(*names, overhead=0.0, latency=0.0, **kw):
    return Cluster("cpus", [Device(n, "cpu", 10**9, 1e9, 1e9, **kw.get(n, {})) for n in names],
                   default_link=LinkSpec(1000.0, latency, overhead))


def test_a_received_copy_counts_from_its_producers_finish(loop):
    # p@B holds 1000 B over [0, 2] (q reads it). a@A finishes at 1.5: its copy to B is created then (100 B
    # counted on B from 1.5), joins the link at 2.5 after its 1 s submit, runs [2.5, 2.6]; c@B [2.6, 3.6].
    # Counted from the submit or the transfer's start, B's peak would be 1000.
    g = Graph([op("a", [], 1.5, 100), op("p", [], 1, 1000), op("q", ["p"], 1, 0), op("c", ["a"], 1, 0)])
    r = simulate(g, _cpus("A", "B", overhead=1.0), np.array([0, 1, 1, 1]), trace=True)
    assert r.peak_memory.tolist() == [100, 1100]
    assert r.timeline.transfer_start.tolist() == pytest.approx([2.5])
    assert r.step_time == pytest.approx(3.6)


def test_outputs_go_in_output_order_each_to_its_readers_devices_in_op_order(loop):
    # a@S has two outputs; c@D1 reads a:0, b@D0 reads a:1 and a:0. Tensor a:0 first: to D1 (c comes first
    # in the op list), then D0; then a:1 to D0. One send engine: [1,2], [2,3], [3,4].
    from autoplace.graph import Op

    g = Graph([Op("a", "op", output_bytes=(1000, 1000), cost={"cpu": 1, "gpu": 1}), op("c", ["a:0"], 1, 0),
               op("b", ["a:1", "a:0"], 1, 0)])
    r = simulate(g, star(2), np.array([0, 2, 1]), trace=True)
    tl = r.timeline
    assert tl.transfer_tensor.tolist() == [0, 0, 1] and tl.transfer_dst.tolist() == [2, 1, 1]
    assert tl.transfer_start.tolist() == [1, 2, 3]
    assert r.step_time == pytest.approx(5.5)


def test_a_zero_latency_control_edge_lands_by_its_own_event(loop):
    # a@A [0,1] sends data (0 B) to d and a control edge to c, both on B, both latency 0. The data transfer
    # lands inside its end event; the control edge by its landing event, later at the same instant: d is
    # released first and runs [1,2], c [2,3].
    from autoplace.graph import Op

    g = Graph([Op("a", "op", output_bytes=(0,), cost={"cpu": 1}),
               Op("c", "op", control_inputs=("a",), cost={"cpu": 1}), op("d", ["a"], 1, 0)])
    r = simulate(g, _cpus("A", "B"), np.array([0, 1, 1]), trace=True)
    assert r.timeline.start.tolist() == [0, 2, 1]
    assert r.step_time == 3


def test_launchers_start_last_touched_first_and_free_copies_join_in_reverse(loop):
    # a@C (one send engine) is read on G0 (b0) and G1 (b1). With no submit cost both destination launchers
    # submit at 1, G1's last touched and first to start: its copy runs [1,2], G0's [2,3]; b1 [2.5,3.5],
    # b0 [3.5,4.5]. With a submit cost both copies join by their events, in reader order.
    devs = [Device("C", "cpu", 10**9, 1e9, 1e9, send_engines=1),
            Device("G0", "gpu", 10**9, 1e9, 1e9), Device("G1", "gpu", 10**9, 1e9, 1e9)]
    g = Graph([op("a", [], 1, 1000), op("b0", ["a"], 1, 0), op("b1", ["a"], 1, 0)])
    r = simulate(g, Cluster("c", devs, default_link=LinkSpec(1000.0, 0.5)), np.array([0, 1, 2]), trace=True)
    assert r.timeline.transfer_dst.tolist() == [1, 2] and r.timeline.transfer_start.tolist() == [2, 1]
    assert r.timeline.start.tolist()[1:] == [3.5, 2.5] and r.step_time == 4.5
    r = simulate(g, Cluster("c", devs, default_link=LinkSpec(1000.0, 0.5, 0.25)), np.array([0, 1, 2]), trace=True)
    assert r.timeline.transfer_start.tolist() == [1.25, 2.25]


def test_a_launcher_submitting_a_copy_launches_nothing_meanwhile(loop):
    # a@C sends 1000 B to b@G; G's launcher submits that copy over [1, 1.25] (its host time). g@G is released
    # at 1.1 (its control input e@C2 ends) but launches only at 1.25, for 0.1 s: its kernel runs [1.35, 2.25].
    # The copy joins at 1.25, runs [1.25, 2.25]; b launches [2.25, 2.35], runs [2.35, 3.25].
    from autoplace.graph import Op

    devs = [Device("C", "cpu", 10**9, 1e9, 1e9), Device("C2", "cpu", 10**9, 1e9, 1e9),
            Device("G", "gpu", 10**9, 1e9, 1e9, 0.1)]
    g = Graph([op("a", [], 1, 1000), op("b", ["a"], 1, 0), op("e", [], 1.1, 0),
               Op("g", "op", control_inputs=("e",), cost={"cpu": 1, "gpu": 1})])
    r = simulate(g, Cluster("c", devs, default_link=LinkSpec(1000.0, 0.0, 0.25)), np.array([0, 2, 1, 2]), trace=True)
    tl = r.timeline
    assert tl.launch_start[3] == pytest.approx(1.25) and tl.start[3] == pytest.approx(1.35)
    assert r.host_time[2] == pytest.approx(0.45)
    assert r.step_time == pytest.approx(3.25)


def test_exchange_charges_go_to_the_kernel_on_a_gpu(loop):
    # a@G0 (measured 100 us, launch 10 us) sends 1000 B to b@G1 and pays G0's 50 us send overhead: the
    # launch stays 10 us, the kernel grows from 90 to 140 us.
    devs = [Device("G0", "gpu", 10**9, 1e9, 1e9, 1e-5, send_overhead_s=5e-5),
            Device("G1", "gpu", 10**9, 1e9, 1e9, 1e-5)]
    g = Graph([op("a", [], 1e-4, 1000), op("b", ["a"], 1e-4, 0)])
    r = simulate(g, Cluster("c", devs, default_link=LinkSpec(1e9, 0.0)), np.array([0, 1]))
    assert r.host_time[0] == pytest.approx(1e-5)
    assert r.busy_time[0] == pytest.approx(1.4e-4)


def test_a_grouped_op_shorter_than_a_launch_does_no_negative_work(loop):
    # three 4 us ops of one launch group (2 launches) on a GPU with 10 us launches: the first pays 20 us of
    # launches, each op's own work is 4 us less min(10 us, 4 us) = 0, so the step is the launches' 20 us.
    from autoplace.graph import Op

    devs = [Device("G", "gpu", 10**9, 1e9, 1e9, 1e-5)]
    g = Graph([Op(f"u{i}", "adam", cost={"gpu": 4e-6}, meta={"launch_group": "adam", "group_launches": 2})
               for i in range(3)])
    r = simulate(g, Cluster("g", devs), np.zeros(3, np.int64))
    assert r.step_time == pytest.approx(2e-5) and r.host_time[0] == pytest.approx(2e-5)


def test_no_scenario_scales_exchange_charges(loop):
    # a@A [0,1] + A's 1 s send overhead, b@B [2,3]: 3 s. The host factor 2 doubles both ops' times (2 + 2)
    # and leaves the charge (1): 5 s; a charge scaled too would make it 6.
    from autoplace.robust import RobustSimulator, Scenario

    g = Graph([op("a", [], 1, 0), op("b", ["a"], 1, 0)])
    cl = _cpus("A", "B", A={"send_overhead_s": 1.0})
    steps = RobustSimulator(g, cl, scenarios=(Scenario("nominal"), Scenario("h", host=2.0))).steps(np.array([[0, 1]]))
    assert np.asarray(steps).ravel().tolist() == pytest.approx([3.0, 5.0])


def test_landings_at_one_instant_go_in_transfer_order(loop):
    # a@A and b@B end at 1 (a first: op 0's FINISH creates transfer 0), each sends 1000 B to C over its own
    # link ([1,2], landing at 2.5 both). Transfer 0 lands first, so a's reader ca is released first and runs
    # [2.5,3.5], cb [3.5,4.5] — though cb comes before ca in the op list.
    g = Graph([op("a", [], 1, 1000), op("b", [], 1, 1000), op("cb", ["b"], 1, 0), op("ca", ["a"], 1, 0)])
    r = simulate(g, _cpus("A", "B", "C", latency=0.5), np.array([0, 1, 2, 2]), trace=True)
    assert r.timeline.transfer_tensor.tolist() == [0, 1]
    assert r.timeline.start.tolist()[2:] == [3.5, 2.5] and r.step_time == 4.5
