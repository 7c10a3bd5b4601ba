"""Property tests of the simulator on random DAGs, clusters and placements (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoplace.cluster import Cluster, Device, Link, Segment
from autoplace.cost import group_launch_matrix
from autoplace.graph import Graph, Op
from autoplace.sim import Simulator

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw, max_ops=24, max_devices=4, concurrency=False):
    """A random DAG (some ops views of their first input, some in one of two launch groups, one of them
    only on GPUs), a random
    cluster (CPUs and GPUs, GPUs on their own host threads or sharing one, launch queues of 1-3 or 1024,
    copy engines 0-2 per device, per-transfer overheads, latencies, links crossing 0-2 of up to 3 shared
    segments) and a random placement."""
    n = draw(st.integers(1, max_ops))
    D = draw(st.integers(1, max_devices))
    ops = []
    for i in range(n):
        preds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        ctrl = draw(st.lists(st.integers(0, i - 1), max_size=1)) if i else []
        n_out = draw(st.integers(1, 2))
        out = tuple(draw(st.integers(0, 5000)) for _ in range(n_out))
        inputs = tuple(f"o{p}:{draw(st.integers(0, len(ops[p].output_bytes) - 1))}" for p in preds)
        meta = {"view": True} if inputs and draw(st.integers(0, 4)) == 0 else {}
        group = draw(st.integers(0, 5))
        if group < 2:
            meta = {**meta, "launch_group": f"g{group}", "group_launches": group + 1,
                    **({"group_device_types": ["gpu"]} if group == 1 else {})}
        ops.append(Op(f"o{i}", "op", inputs, tuple(f"o{c}" for c in ctrl), output_bytes=out,
                      flops=float(draw(st.integers(0, 10**9))), param_bytes=draw(st.integers(0, 3000)), meta=meta))
    engines = st.sampled_from([None, 0, 1, 2])
    devs = [Device(f"d{j}", draw(st.sampled_from(["gpu", "gpu", "cpu"])), 10**9,
                   float(draw(st.sampled_from([1e9, 2e9, 5e9]))), 1e9, draw(st.sampled_from([0.0, 1e-3])),
                   draw(st.integers(1, 3)) if concurrency else 1,
                   send_engines=draw(engines), recv_engines=draw(engines),
                   launcher=draw(st.sampled_from([None, "shared"])),
                   launch_queue_depth=draw(st.sampled_from([1, 3, 1024]))) for j in range(D)]
    segments = [Segment(f"s{k}", float(draw(st.sampled_from([1e3, 1e5])))) for k in range(draw(st.integers(0, 3)))]
    names = [seg.name for seg in segments]
    rate, lat, over = st.sampled_from([1e3, 1e5, 1e7]), st.sampled_from([0.0, 1e-3]), st.sampled_from([0.0, 2e-4])
    links = [Link(a.name, b.name, float(draw(rate)), float(draw(lat)), float(draw(over)),
                  tuple(draw(st.lists(st.sampled_from(names), max_size=2, unique=True))) if names else ())
             for a in devs for b in devs if a.name != b.name]
    cluster = Cluster("c", devs, links, segments=segments)
    placement = np.array(draw(st.lists(st.integers(0, D - 1), min_size=n, max_size=n)), dtype=np.int64)
    return Graph(ops, name="random"), cluster, placement


@SETTINGS
@given(cases())
def test_single_device_step_is_sum_of_op_times(case):
    """A CPU runs its ops one after another: the step is the sum of their times, with each launch group's
    overhead paid once. A GPU's launches overlap its kernels: the step is at least the kernels' sum and
    at most everything in series."""
    graph, cluster, _ = case
    sim = Simulator(graph, cluster)
    launches = group_launch_matrix(graph, cluster)
    for d in range(cluster.n_devices):
        grouped = np.zeros(graph.n_ops, bool)
        grouped[graph.op_group >= 0] = launches[graph.op_group[graph.op_group >= 0], d] > 0
        r = sim.run(np.full(graph.n_ops, d))
        t = sim.op_times[:, d]
        launch = np.minimum(cluster.op_overhead[d], t)
        groups = launches[np.unique(graph.op_group[grouped]), d].sum() * cluster.op_overhead[d]
        serial = np.where(grouped, t - launch, t).sum() + groups
        if cluster.launcher[d] < 0:
            assert np.isclose(r.step_time, serial, rtol=1e-12, atol=1e-15)
        else:
            assert (t - launch).sum() * (1 - 1e-12) <= r.step_time <= serial * (1 + 1e-12) + 1e-15
            assert np.isclose(r.busy_time[d], (t - launch).sum(), rtol=1e-12, atol=1e-15)
        assert r.n_transfers == 0


@SETTINGS
@given(cases(concurrency=True))
def test_step_time_lower_bounds(case):
    graph, cluster, dev = case
    sim = Simulator(graph, cluster)
    r = sim.run(dev)
    eps = 1e-12 * max(1.0, r.step_time)
    assert r.step_time >= sim.critical_path() - eps            # each op at its fastest device, free links
    assert r.step_time >= (r.busy_time / cluster.concurrency).max() - eps
    assert r.step_time >= r.segment_time.max(initial=0.0) - eps
    # a pair's copies share one copy queue: the sender's engines, else the receiver's, else the link alone
    D = cluster.n_devices
    for s in range(D):
        for d in range(D):
            cap = cluster.send_engines[s] or cluster.recv_engines[d] or 1
            assert r.step_time * cap >= r.link_time[s, d] - eps
    # a host thread launches one op (or submits one copy) at a time
    for h in range(len(cluster.launcher_names)):
        assert r.step_time >= r.host_time[cluster.launcher == h].sum() - eps


@SETTINGS
@given(cases(concurrency=True))
def test_deterministic_and_batch_matches_single(case):
    graph, cluster, dev = case
    sim = Simulator(graph, cluster)
    a, b = sim.run(dev, trace=True), sim.run(dev, trace=True)
    assert a.step_time == b.step_time
    assert np.array_equal(a.timeline.start, b.timeline.start)
    assert np.array_equal(a.peak_memory, b.peak_memory)
    batch = sim.run_batch(np.stack([dev, np.zeros_like(dev), dev]))
    assert batch.step_time[0] == batch.step_time[2] == a.step_time
    assert np.array_equal(batch.peak_memory[0], a.peak_memory)
    assert np.array_equal(batch.link_bytes[0], a.link_bytes)
    assert batch.step_time[1] == sim.run(np.zeros_like(dev)).step_time


@SETTINGS
@given(cases())
def test_schedule_respects_dependencies_devices_and_links(case):
    graph, cluster, dev = case
    r = Simulator(graph, cluster).run(dev, trace=True)
    tl = r.timeline
    arrival = {(int(t), int(d)): e for t, d, e in zip(tl.transfer_tensor, tl.transfer_dst, tl.transfer_arrival)}
    src, dst, _ = graph.edges()
    tensor_of_pair = graph.pair_tensor
    for p, (s, c) in enumerate(zip(src, dst)):
        ready = tl.finish[s] if dev[s] == dev[c] else arrival[(int(tensor_of_pair[p]), int(dev[c]))]
        assert tl.start[c] >= ready - 1e-12
    for d in range(cluster.n_devices):  # concurrency 1: no overlap on a device
        on = np.flatnonzero(dev == d)
        order = on[np.lexsort((tl.finish[on], tl.start[on]))]  # zero-length ops share a start
        assert np.all(tl.start[order][1:] >= tl.finish[order][:-1] - 1e-12)
    assert np.all(tl.launch_start <= tl.start + 1e-12)
    D = cluster.n_devices
    s_, d_ = tl.transfer_src, tl.transfer_dst
    data = graph.tensor_out[tl.transfer_tensor] >= 0
    nbytes = graph.tensor_bytes[tl.transfer_tensor]
    # a transfer moves no faster than the least bandwidth of its link and segments (exactly that where it
    # crosses no segment), and lands its latency later; a control tensor takes its latency alone
    took = tl.transfer_end - tl.transfer_start
    least = nbytes / cluster.transfer_bandwidth[s_, d_]
    assert np.all(took[data] >= least[data] * (1 - 1e-9) - 1e-12)
    alone = data & (cluster.route_ptr[s_ * D + d_ + 1] == cluster.route_ptr[s_ * D + d_])
    assert np.allclose(took[alone], least[alone], rtol=1e-9, atol=1e-12)
    assert np.all(took[~data] == 0)
    assert np.allclose(tl.transfer_arrival - tl.transfer_end, cluster.latency[s_, d_], rtol=1e-9, atol=1e-12)
    # at no instant does a copy queue run more transfers than it has engines (a link's: one)
    queue = np.where(cluster.send_engines[s_] > 0, s_,
                     np.where(cluster.recv_engines[d_] > 0, D + d_, 2 * D + s_ * D + d_))
    caps = np.concatenate([cluster.send_engines, cluster.recv_engines, np.ones(D * D, np.int64)])
    for k in np.unique(queue[data]):
        xs = np.flatnonzero(data & (queue == k))
        busy = tl.transfer_end[xs] > tl.transfer_start[xs]  # zero-length holds take no time
        for t in tl.transfer_start[xs][busy]:
            active = (tl.transfer_start[xs] <= t) & (tl.transfer_end[xs] > t) & busy
            assert active.sum() <= caps[k]
    # a segment carries no more than its bandwidth for as long as it is busy
    route = [cluster.route_seg[cluster.route_ptr[a * D + b]:cluster.route_ptr[a * D + b + 1]] for a, b in zip(s_, d_)]
    for k, seg in enumerate(cluster.segments):
        moved = sum(int(nbytes[x]) for x, rt in enumerate(route) if k in rt and data[x])
        assert moved <= seg.bandwidth * r.segment_time[k] * (1 + 1e-9) + 1e-6
    # each tensor is sent at most once per destination device
    pairs = list(zip(tl.transfer_tensor.tolist(), tl.transfer_dst.tolist()))
    assert len(pairs) == len(set(pairs))


@SETTINGS
@given(cases(), st.data())
def test_oom_exactly_when_peak_exceeds_capacity(case, data):
    graph, cluster, dev = case
    peak = Simulator(graph, cluster).run(dev).peak_memory
    d = data.draw(st.integers(0, cluster.n_devices - 1))
    for cap, expect_oom in ((int(peak[d]), False), (int(peak[d]) - 1, True)):
        if cap < 1:
            continue
        devs = [replace(x, memory_bytes=cap if i == d else x.memory_bytes) for i, x in enumerate(cluster.devices)]
        tight = Cluster("tight", devs, cluster.links, segments=cluster.segments)
        r = Simulator(graph, tight).run(dev)
        assert (tight.devices[d].name in r.oom_devices) == expect_oom
        assert np.array_equal(r.peak_memory, peak)  # memory never changes the schedule


@SETTINGS
@given(cases())
def test_memory_peak_bounds(case):
    graph, cluster, dev = case
    r = Simulator(graph, cluster).run(dev)
    for d in range(cluster.n_devices):
        on = dev == d
        resident = graph.param_bytes[on].sum()
        ptr = graph.tensor_pair_ptr
        received = sum(graph.tensor_bytes[t] for t in range(graph.n_tensors)
                       if dev[graph.tensor_src[t]] != d and any(dev[graph.pair_op[ptr[t]:ptr[t + 1]]] == d))
        assert resident <= r.peak_memory[d] <= resident + graph.out_alloc_total[on].sum() + received
        if on.any():
            assert r.peak_memory[d] >= resident + graph.out_alloc_total[on].max()
