"""Property tests of the simulator on random DAGs, clusters and placements (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoplace.cluster import Cluster, Device, LinkSpec
from autoplace.graph import Graph, Op
from autoplace.sim import Simulator

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw, max_ops=24, max_devices=4, concurrency=False):
    n = draw(st.integers(1, max_ops))
    D = draw(st.integers(1, max_devices))
    ops = []
    for i in range(n):
        preds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        ctrl = draw(st.lists(st.integers(0, i - 1), max_size=1)) if i else []
        n_out = draw(st.integers(1, 2))
        out = tuple(draw(st.integers(0, 5000)) for _ in range(n_out))
        inputs = tuple(f"o{p}:{draw(st.integers(0, len(ops[p].output_bytes) - 1))}" for p in preds)
        ops.append(Op(f"o{i}", "op", inputs, tuple(f"o{c}" for c in ctrl), output_bytes=out,
                      flops=float(draw(st.integers(0, 10**9))), param_bytes=draw(st.integers(0, 3000))))
    devs = [Device(f"d{j}", "gpu", 10**9, float(draw(st.sampled_from([1e9, 2e9, 5e9]))), 1e9,
                   draw(st.sampled_from([0.0, 1e-3])),
                   draw(st.integers(1, 3)) if concurrency else 1) for j in range(D)]
    cluster = Cluster("c", devs, default_link=LinkSpec(float(draw(st.sampled_from([1e3, 1e5, 1e7]))),
                                                      float(draw(st.sampled_from([0.0, 1e-3])))))
    placement = np.array(draw(st.lists(st.integers(0, D - 1), min_size=n, max_size=n)), dtype=np.int64)
    return Graph(ops, name="random"), cluster, placement


@SETTINGS
@given(cases())
def test_single_device_step_is_sum_of_op_times(case):
    graph, cluster, _ = case
    sim = Simulator(graph, cluster)
    for d in range(cluster.n_devices):
        r = sim.run(np.full(graph.n_ops, d))
        assert np.isclose(r.step_time, sim.op_times[:, d].sum(), rtol=1e-12, atol=1e-15)
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
    assert r.step_time >= r.link_time.max() - eps


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
    arrival = {(int(t), int(d)): e for t, d, e in zip(tl.transfer_tensor, tl.transfer_dst, tl.transfer_end)}
    src, dst, _ = graph.edges()
    tensor_of_pair = graph.pair_tensor
    for p, (s, c) in enumerate(zip(src, dst)):
        ready = tl.finish[s] if dev[s] == dev[c] else arrival[(int(tensor_of_pair[p]), int(dev[c]))]
        assert tl.start[c] >= ready - 1e-12
    for d in range(cluster.n_devices):  # concurrency 1: no overlap on a device
        on = np.flatnonzero(dev == d)
        order = on[np.lexsort((tl.finish[on], tl.start[on]))]  # zero-length ops share a start
        assert np.all(tl.start[order][1:] >= tl.finish[order][:-1] - 1e-12)
    for s in range(cluster.n_devices):  # links carry one transfer at a time
        for d in range(cluster.n_devices):
            m = (tl.transfer_src == s) & (tl.transfer_dst == d)
            a, e = tl.transfer_start[m], tl.transfer_end[m]
            assert np.all(a[1:] >= e[:-1] - 1e-12)
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
        devs = [Device(x.name, x.type, cap if i == d else x.memory_bytes, x.peak_flops, x.memory_bandwidth,
                       x.op_overhead_s) for i, x in enumerate(cluster.devices)]
        tight = Cluster("tight", devs, default_link=cluster.default_link)
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
