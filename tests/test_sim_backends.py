"""The C event loop and the numba reference kernel agree exactly (same events, same arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from test_sim_properties import SETTINGS, cases

from autoplace.schedule import NO_SCHEDULE, positions
from autoplace.sim import BACKEND, Simulator, _kernel
from autoplace.sim.results import Outputs

pytestmark = pytest.mark.skipif(BACKEND != "c", reason="the C extension is not built here")


def numba_run(sim: Simulator, dev: np.ndarray, op_times: np.ndarray | None = None, spos: np.ndarray | None = None):
    g, c = sim.graph, sim.cluster
    n, D, P, S = g.n_ops, c.n_devices, g.n_edges, len(c.segments)
    out = Outputs(1, n, D, P, S)
    op_times = sim.op_times if op_times is None else op_times
    spos = np.full(n, -1, np.int64) if spos is None else spos
    _kernel.simulate(dev[None, :], spos[None, :], op_times, sim._graph_args, sim._cluster_args, out.trace, out.rows)
    r, tr = out.rows, out.trace
    nx = int(r.n_transfers[0])
    assert r.n_finished[0] == n
    return (r.step_time[0], tr.start, tr.finish, tr.lstart, r.busy_time[0], r.host_time[0], r.peak[0],
            r.link_time[0], r.link_bytes[0], r.seg_time[0], nx,
            [a[:nx] for a in (tr.xf_tensor, tr.xf_src, tr.xf_dst, tr.xf_start, tr.xf_end, tr.xf_land)])


@SETTINGS
@given(cases(concurrency=True))
def test_c_matches_numba(case):
    """Bit for bit, with each device's ops in ready order and under a random schedule."""
    graph, cluster, dev = case
    sim = Simulator(graph, cluster)
    scheduled = random_schedule(graph, np.random.default_rng(graph.n_ops))
    if graph.n_ops % 2:
        scheduled[dev == dev[0]] = NO_SCHEDULE    # every other case: a device left in ready order
    for prio in (None, scheduled):
        r = sim.run(dev, trace=True, schedule=prio)
        spos = None if prio is None else positions(graph, dev, prio, cluster.n_devices)
        step, start, finish, lstart, busy, host, peak, lt, lb, st, nx, xf = numba_run(sim, dev, spos=spos)
        assert r.step_time == step
        assert np.array_equal(r.timeline.start, start) and np.array_equal(r.timeline.finish, finish)
        assert np.array_equal(r.timeline.launch_start, lstart) and np.array_equal(r.host_time, host)
        assert np.array_equal(r.busy_time, busy) and np.array_equal(r.peak_memory, peak)
        assert np.array_equal(r.link_time, lt) and np.array_equal(r.link_bytes, lb) and r.n_transfers == nx
        assert np.array_equal(r.segment_time, st)
        tl = r.timeline
        for mine, ref in zip((tl.transfer_tensor, tl.transfer_src, tl.transfer_dst, tl.transfer_start,
                              tl.transfer_end, tl.transfer_arrival), xf):
            assert np.array_equal(mine, ref)


def random_schedule(graph, rng) -> np.ndarray:
    """Priorities that keep every op after its inputs (so the schedule cannot deadlock) and otherwise shuffle
    each device's order: an op's depth in the graph times 4, plus 0..3 at random."""
    depth = np.zeros(graph.n_ops, np.int64)
    for i in graph.topological_order:
        preds = graph.predecessors(i)
        if len(preds):
            depth[i] = depth[preds].max() + 1
    return depth * 4 + rng.integers(0, 4, graph.n_ops)


def _agree(sim: Simulator, dev: np.ndarray, prio: np.ndarray | None = None) -> None:
    """The simulator (C) and the numba kernel on the same op times (with the row's exchange charges), under
    schedule ``prio`` if given."""
    r = sim.run(dev, trace=True, schedule=prio)
    times = sim.op_times.copy()
    times[np.arange(len(dev)), dev] += sim.exchange_charges(dev)
    spos = None if prio is None else positions(sim.graph, dev, prio, sim.cluster.n_devices)
    step, start, finish, lstart, busy, host, peak, lt, lb, st, nx, xf = numba_run(sim, dev, times, spos)
    assert r.step_time == step and r.n_transfers == nx
    assert np.array_equal(r.timeline.start, start) and np.array_equal(r.timeline.finish, finish)
    assert np.array_equal(r.timeline.launch_start, lstart) and np.array_equal(r.host_time, host)
    assert np.array_equal(r.peak_memory, peak) and np.array_equal(r.link_time, lt)
    assert np.array_equal(r.segment_time, st) and np.array_equal(r.timeline.transfer_end, xf[4])


def _concurrent_cpus():
    from autoplace.cluster import Cluster, Device, LinkSpec, Segment

    devs = [Device(f"cpu:{j}", "cpu", 10**12, 1e10, 1e10, concurrency=2, meta={"host": "h"},
                   send_cost_s_per_byte=1e-9, send_overhead_s=2e-5, recv_overhead_s=4e-5, send_engines=1,
                   recv_engines=2) for j in range(3)]
    return Cluster("cpus", devs, default_link=LinkSpec(1e9, 1e-4, 3e-5, ("bus",)), segments=[Segment("bus", 5e8)])


@pytest.mark.parametrize("cluster_name", ["k80x4", "h100x8", "cpus"])
@pytest.mark.parametrize("width", [33, 120, 400])
def test_c_matches_numba_past_the_sorted_queues(cluster_name, width):
    """Queues longer than the C loop's sorted arrays (32 entries) turn into heaps: a fan-out of ``width``
    readers all ready at once on a device, and a layered DAG of 3,000 ops ``width`` wide, under random and
    blocked placements, with and without copy engines, shared segments and concurrent slots."""
    from autoplace.cluster import get_cluster
    from autoplace.graph import Graph, Op
    from autoplace.zoo import build_graph

    rng = np.random.default_rng(width)
    cluster = _concurrent_cpus() if cluster_name == "cpus" else get_cluster(cluster_name)
    ops = [Op("src", "input", output_bytes=(10**6,))]
    ops += [Op(f"r{i}", "op", ("src",), output_bytes=(int(rng.integers(1, 10**6)),),
               flops=float(rng.choice([1e6, 1e8])))
            for i in range(width)]
    ops.append(Op("sum", "add", tuple(f"r{i}" for i in range(width)), output_bytes=(100,), flops=1e3))
    fan = Graph(ops, name="fan")
    dag = build_graph("layered-dag", ops=3000, width=width)
    D = cluster.n_devices
    for graph in (fan, dag):
        sim = Simulator(graph, cluster)
        n = graph.n_ops
        _agree(sim, np.zeros(n, dtype=np.int64))                                   # everything ready on one device
        for _ in range(3):
            _agree(sim, rng.integers(0, D, n))
        _agree(sim, np.minimum(np.arange(n) * D // n, D - 1))
        _agree(sim, rng.integers(0, D, n), random_schedule(graph, rng))   # under a schedule
        _agree(sim, np.zeros(n, dtype=np.int64), random_schedule(graph, rng))

