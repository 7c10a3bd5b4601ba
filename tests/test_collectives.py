"""Collectives: hand-computed times of their algorithms in both simulator loops, segments shared with other
transfers, the choice between algorithms, and the C and numba loops bit for bit on random graphs with them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_sim_backends import random_schedule
from test_sim_properties import SETTINGS, cases

from autoplace.cluster import Cluster, Device, Link, LinkSpec, Segment
from autoplace.collectives import collective, groups, lower, ring_time
from autoplace.errors import GraphError, PlacementError
from autoplace.graph import Graph, Op
from autoplace.sim import BACKEND, Simulator, _cbackend

W, A = 10e9, 5e-6      # bytes/s and seconds of every link


@pytest.fixture(params=["c", "numba"])
def loop(request, monkeypatch):
    """Each test runs in both loops."""
    if request.param == "c" and BACKEND != "c":
        pytest.skip("the C extension is not built here")
    monkeypatch.setattr(_cbackend, "BACKEND", request.param)
    return request.param


def gpus(n: int, *, hosts: int = 1, link=LinkSpec(W, A, 7e-6), segments=(), links=()) -> Cluster:
    devs = [Device(f"gpu:{i}", "gpu", 10**10, 1e12, 1e11, 0.0, meta={"host": f"h{i * hosts // n}"})
            for i in range(n)]
    return Cluster("gpus", devs, links, default_link=link, segments=segments)


def collective_step(kind: str, n: int, nbytes: int, ready=None, **kw) -> Graph:
    """Rank r's input is ready at ``ready[r]`` seconds (an op of that cost), a reader takes its result."""
    ready = [0.0] * n if ready is None else ready
    ins = nbytes // n if kind == "all_gather" else nbytes
    ops = [Op(f"g{r}", "grad", output_bytes=(ins,), cost={"gpu": ready[r]}) for r in range(n)]
    ops += collective(kind, "c", [f"g{r}" for r in range(n)], nbytes, **kw)
    ops += [Op(f"u{r}", "update", inputs=(f"c/{r}",), cost={"gpu": 0.0}) for r in range(n)]
    return Graph(ops)


def on_ranks(graph: Graph, devices) -> np.ndarray:
    """Rank r's grad, collective op and reader on ``devices[r]``."""
    n = len(devices)
    return np.array(list(devices) * 3)[:graph.n_ops] if graph.n_ops == 3 * n else None


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_all_reduce_takes_2_n_minus_1_steps(loop, n):
    """B bytes over N devices, links of bandwidth W and latency a: 2(N-1)/N * B/W + 2(N-1) a (nccl-tests'
    bus bandwidth); no submit overhead (the library copies inside its kernel); 2(N-1) chunks of B/N per rank."""
    B = 24_000_000
    g = collective_step("all_reduce", n, B)
    r = Simulator(g, gpus(n)).run(on_ranks(g, range(n)), trace=True)
    assert r.step_time == pytest.approx(2 * (n - 1) / n * B / W + 2 * (n - 1) * A, rel=1e-12)
    assert r.step_time == pytest.approx(ring_time(B, n, W, A), rel=1e-12)
    assert r.n_transfers == 2 * (n - 1) * n
    assert r.link_bytes.sum() == 2 * (n - 1) * B
    assert r.host_time.sum() == 0.0   # nothing submitted by a launcher
    assert set(r.timeline.transfer_tensor.tolist()) == set(range(n))  # each chunk is part of a rank's input


@pytest.mark.parametrize("kind", ["reduce_scatter", "all_gather"])
def test_reduce_scatter_and_all_gather_take_n_minus_1_steps(loop, kind):
    n, B = 4, 8_000_000
    g = collective_step(kind, n, B)
    r = Simulator(g, gpus(n)).run(on_ranks(g, range(n)))
    assert r.step_time == pytest.approx((n - 1) / n * B / W + (n - 1) * A, rel=1e-12)


def test_broadcast_is_a_pipelined_chain(loop):
    """Chunks of 512 KiB along the chain (C = 8 for 4 MiB): each rank sends its chunks back to back while
    the earlier ones are in flight, so N - 2 + C chunk times and one latency per hop."""
    n, B = 4, 4 * 1024 * 1024
    g = collective_step("broadcast", n, B, root=2)
    r = Simulator(g, gpus(n)).run(on_ranks(g, range(n)))
    c = 8
    assert r.step_time == pytest.approx((n - 2 + c) * B / c / W + (n - 1) * A, rel=1e-12)
    assert r.n_transfers == (n - 1) * c


def test_the_ring_waits_for_the_last_rank(loop):
    """Rank r's gradient is ready at r+1 ms; every step of the ring depends on a neighbour's, so the ring
    ends its 2(N-1) steps after the last rank is ready."""
    n, B = 4, 8_000_000
    g = collective_step("all_reduce", n, B, ready=[1e-3, 2e-3, 3e-3, 4e-3])
    r = Simulator(g, gpus(n)).run(on_ranks(g, range(n)), trace=True)
    assert r.step_time == pytest.approx(4e-3 + ring_time(B, n, W, A), rel=1e-12)
    tl = r.timeline
    assert tl.start[g.index("c/0")] == pytest.approx(1e-3)        # rank 0 sends its first chunk at once
    assert max(tl.finish[g.index(f"u{r}")] for r in range(n)) == pytest.approx(r.step_time)


def test_two_concurrent_collectives_share_a_segment(loop):
    """Four GPUs whose links all cross one switch of bandwidth W (links themselves 10x faster): one
    all-reduce over {0, 1} has two transfers on the switch per step (W/2 each, B/2 bytes: B/W a step); a
    second one over {2, 3} at the same time halves every share: the step takes twice as long."""
    B = 10_000_000
    cluster = gpus(4, link=LinkSpec(10 * W, 0.0, 0.0, ("switch",)), segments=[Segment("switch", W)])
    ops = [Op(f"g{r}", "grad", output_bytes=(B,), cost={"gpu": 0.0}) for r in range(4)]
    ops += collective("all_reduce", "x", ["g0", "g1"], B) + collective("all_reduce", "y", ["g2", "g3"], B)
    both = Graph(ops)
    dev = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    alone = Simulator(Graph(ops[:2] + ops[4:6]), cluster).run(np.array([0, 1, 0, 1]))
    assert alone.step_time == pytest.approx(2 * B / W, rel=1e-12)
    r = Simulator(both, cluster).run(dev)
    assert r.step_time == pytest.approx(4 * B / W, rel=1e-12)
    assert r.segment_time[0] == pytest.approx(4 * B / W, rel=1e-12)


def test_a_collective_shares_its_copy_queue_with_other_transfers(loop):
    """An activation of 10 MB leaves GPU 0 for GPU 1 when it is ready (at 0); GPU 0's chunk of the ring
    all-reduce (ready at 0 too) queues behind it on GPU 0's one send engine."""
    B, X = 8_000_000, 10_000_000
    devs = [Device(f"gpu:{i}", "gpu", 10**10, 1e12, 1e11, 0.0, send_engines=1, recv_engines=1) for i in range(2)]
    cluster = Cluster("two", devs, default_link=LinkSpec(W, 0.0, 0.0))
    ops = [Op("act", "fwd", output_bytes=(X,), cost={"gpu": 0.0}), Op("use", "fwd", inputs=("act",), cost={"gpu": 0.0})]
    ops += [Op(f"g{r}", "grad", inputs=("act",) if r == 0 else (), output_bytes=(B,), cost={"gpu": 0.0})
            for r in range(2)]
    ops += collective("all_reduce", "c", ["g0", "g1"], B)
    r = Simulator(Graph(ops), cluster).run(np.array([0, 1, 0, 1, 0, 1]))
    # rank 0: activation [0, 1 ms], then its chunks [1, 1.4] and [1.4 + ..]: two steps of B/2 after the 1 ms
    assert r.step_time == pytest.approx(X / W + 2 * (B / 2) / W, rel=1e-12)


def test_hierarchical_all_reduce_across_hosts_is_chosen_where_cheaper(loop):
    """Two hosts of four GPUs: 100 GB/s within a host, 1 GB/s across on one NIC per host and direction.
    The flat ring crosses the network with B/8 chunks in all 14 steps; the hierarchical one only in its 2
    middle steps, where the 4 ranks of a host share the NIC: 2 (G-1) B/G / 100 GB/s + 2 B/(G H) / (1 GB/s / G)."""
    fast, slow = 100e9, 1e9
    n, G, H, B = 8, 4, 2, 80_000_000
    names = [f"gpu:{i}" for i in range(n)]
    links = [Link(a, b, fast if i // G == j // G else slow, 0.0, 0.0,
                  () if i // G == j // G else (f"nic{i // G}.out", f"nic{j // G}.in"))
             for i, a in enumerate(names) for j, b in enumerate(names) if i != j]
    segments = [Segment(f"nic{h}.{d}", slow) for h in range(H) for d in ("out", "in")]
    cluster = gpus(n, hosts=H, links=links, segments=segments)
    g = collective_step("all_reduce", n, B)
    sim = Simulator(g, cluster)
    dev = on_ranks(g, range(n))
    assert sim.lowering(dev).algorithms == {"c": "hierarchical"}
    hier = 2 * (G - 1) * (B / G) / fast + 2 * (B / G / H) / (slow / G)
    assert sim.run(dev).step_time == pytest.approx(hier, rel=1e-9)
    ring = Simulator(collective_step("all_reduce", n, B, algorithm="ring"), cluster).run(dev)
    assert ring.step_time == pytest.approx(2 * (n - 1) * (B / n) / slow, rel=1e-9)
    assert ring.step_time > 1.5 * hier


def test_ranks_on_one_device_move_nothing(loop):
    g = collective_step("all_reduce", 2, 8_000_000)
    r = Simulator(g, gpus(2)).run(np.zeros(6, np.int64))
    assert r.step_time == 0.0 and r.n_transfers == 0


def test_a_collective_in_place_takes_its_chunks_in_flight(loop):
    """All-reduce in place: each rank holds its gradient (B) and the chunks it receives (B/N each) from their
    issue until the next step has read them: two at once where a chunk is issued at the instant the step
    reading the previous one ends (the FINISH that issues it pops first)."""
    n, B = 4, 8_000_000
    g = collective_step("all_reduce", n, B)
    r = Simulator(g, gpus(n)).run(on_ranks(g, range(n)))
    assert r.peak_memory.tolist() == [B + 2 * B // n] * n


def test_a_communication_op_takes_no_slot(loop):
    """GPU 0's one slot runs a 5 ms kernel launched right after its gradient; the all-reduce of that gradient
    goes on beside it (the library's own stream), so the step is the longer of the two, not their sum."""
    B = 8_000_000
    ops = [Op("g0", "grad", output_bytes=(B,), cost={"gpu": 1e-3}), Op("g1", "grad", output_bytes=(B,),
                                                                          cost={"gpu": 1e-3}),
           Op("busy", "k", inputs=("g0",), cost={"gpu": 5e-3})]
    ops += collective("all_reduce", "c", ["g0", "g1"], B)
    r = Simulator(Graph(ops), gpus(2)).run(np.array([0, 1, 0, 0, 1]))
    assert r.step_time == pytest.approx(1e-3 + 5e-3, rel=1e-12)
    ring = 1e-3 + ring_time(B, 2, W, A)
    assert ring < r.step_time


def test_a_communication_reader_holds_its_buffer_from_the_launch(loop):
    """A GPU of two slots: producer P (1 GB) is read by a reduce-scatter and by c2, a kernel of no time that
    ends before P does; P's buffer stays held for the collective until P's kernel ends, whatever the op order
    (the collective's reference is taken at P's launch, as a transfer's is)."""
    GB = 10**9
    cl = Cluster("one", [Device("gpu:0", "gpu", 100 * GB, 1e12, 1e11, 1e-3, 2)], default_link=LinkSpec(1e10, 0, 0))
    peaks = set()
    for first in ("c2", "P"):
        ops = {"c2": Op("c2", "k", inputs=("P",), output_bytes=(0,), cost={"gpu": 0.5e-3}),
               "P": Op("P", "k", output_bytes=(GB,), cost={"gpu": 5e-3}),
               "Q": Op("Q", "k", inputs=("rs/0",), output_bytes=(3 * GB,), cost={"gpu": 5e-3})}
        order = [first, "P" if first == "c2" else "c2", "Q"]
        g = Graph([ops[k] for k in order] + collective("reduce_scatter", "rs", ["P"], GB))
        peaks.add(int(Simulator(g, cl).run(np.zeros(g.n_ops, np.int64)).peak_memory[0]))
    assert peaks == {4 * GB}


def test_a_schedule_that_deadlocks_the_ranks_is_a_clear_error():
    """GPU 1 is told to run u0's copy of the reduced tensor before its own gradient: the ring's steps then
    wait for each other across the ranks; the simulator says so (the graph alone has no such cycle)."""
    from autoplace.schedule import NO_SCHEDULE

    g = collective_step("all_reduce", 2, 8_000_000)
    dev = np.array([0, 1, 0, 1, 1, 1])                   # u0 on GPU 1
    prio = np.full(g.n_ops, NO_SCHEDULE)
    on1 = np.flatnonzero(dev == 1)
    prio[on1] = [10, 2, 1, 3]                            # g1, c/1, u0, u1: u0 first
    with pytest.raises(PlacementError, match="deadlocks once the collectives"):
        Simulator(g, gpus(2)).run(dev, schedule=prio)


def test_an_empty_batch_of_placements():
    g = collective_step("all_reduce", 2, 800)
    assert len(Simulator(g, gpus(2)).run_batch(np.zeros((0, g.n_ops), np.int64))) == 0


def test_malformed_collectives_are_refused():
    ops = [Op(f"g{r}", "grad", output_bytes=(8,)) for r in range(2)]
    bad = collective("all_reduce", "c", ["g0", "g1"], 8)
    with pytest.raises(GraphError, match="rank 0 of collective 'c' is also"):
        groups(Graph(ops + [bad[0], Op("c/x", "all_reduce", inputs=("g1",), meta={**bad[0].meta})]))
    with pytest.raises(GraphError, match="ranks \\[1\\], expected 0 .. 0"):
        groups(Graph(ops + [bad[1]]))
    with pytest.raises(GraphError, match="differs from 'c/0'"):
        groups(Graph(ops + collective("all_reduce", "c", ["g0", "g1"], 8)[:1]
                     + collective("all_reduce", "c", ["g0", "g1"], 16)[1:]))
    with pytest.raises(GraphError, match="unknown collective 'gossip'"):
        collective("gossip", "c", ["g0"], 8)
    with pytest.raises(GraphError, match="unknown algorithm"):
        groups(Graph(ops + collective("all_reduce", "c", ["g0", "g1"], 8, algorithm="tree")))


def test_lowering_keeps_the_graph_ops_at_their_indices():
    n = 3
    g = collective_step("all_reduce", n, 900)
    low = lower(g, gpus(n), on_ranks(g, range(n)))
    assert low.graph.names[:g.n_ops] == g.names
    assert low.graph.n_ops == g.n_ops + n * 2 * (n - 1)
    assert low.comm.sum() == n + n * 2 * (n - 1)
    assert set(low.origin[g.n_ops:].tolist()) == {g.index(f"c/{r}") for r in range(n)}


@st.composite
def cases_with_collectives(draw):
    graph, cluster, dev = draw(cases(concurrency=True))
    ops = list(graph.ops)
    k = draw(st.integers(1, 3))
    for c in range(k):
        kind = draw(st.sampled_from(["all_reduce", "reduce_scatter", "all_gather", "broadcast"]))
        srcs = draw(st.lists(st.integers(0, graph.n_ops - 1), min_size=1, max_size=4))
        ops += collective(kind, f"k{c}", [f"o{s}" for s in srcs], draw(st.integers(0, 3_000_000)),
                          root=draw(st.integers(0, len(srcs) - 1)))
        ops += [Op(f"k{c}u{r}", "op", inputs=(f"k{c}/{r}",), flops=1e6) for r in range(len(srcs))]
    g = Graph(ops)
    extra = np.array(draw(st.lists(st.integers(0, cluster.n_devices - 1), min_size=g.n_ops - graph.n_ops,
                                   max_size=g.n_ops - graph.n_ops)), np.int64)
    return g, cluster, np.concatenate([dev, extra])


@pytest.mark.skipif(BACKEND != "c", reason="the C extension is not built here")
@SETTINGS
@given(cases_with_collectives())
def test_c_matches_numba_with_collectives(case):
    graph, cluster, dev = case
    sim = Simulator(graph, cluster)
    out = {}
    for backend in ("c", "numba"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_cbackend, "BACKEND", backend)
            r = sim.run(dev, trace=True)
        tl = r.timeline
        out[backend] = (r.step_time, r.busy_time, r.peak_memory, r.link_time, r.link_bytes, r.segment_time,
                        r.host_time, tl.start, tl.finish, tl.launch_start, tl.transfer_tensor, tl.transfer_end)
    for a, b in zip(out["c"], out["numba"]):
        assert np.array_equal(a, b)


@pytest.mark.skipif(BACKEND != "c", reason="the C extension is not built here")
@SETTINGS
@given(cases_with_collectives())
def test_c_matches_numba_with_collectives_under_a_schedule(case):
    """As above, every device under a random schedule that keeps ops after their inputs (a run whose ranks
    stall is an error in both loops alike), the transfers compared one by one."""
    graph, cluster, dev = case
    sim = Simulator(graph, cluster)
    prio = random_schedule(graph, np.random.default_rng(graph.n_ops))
    out = {}
    for backend in ("c", "numba"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_cbackend, "BACKEND", backend)
            try:
                r = sim.run(dev, trace=True, schedule=prio)
            except PlacementError as e:
                out[backend] = str(e)
                continue
        tl = r.timeline
        out[backend] = (r.step_time, r.n_transfers, r.peak_memory, r.link_time, r.host_time, tl.start, tl.finish,
                        tl.transfer_tensor, tl.transfer_src, tl.transfer_dst, tl.transfer_start, tl.transfer_end)
    if isinstance(out["c"], str) or isinstance(out["numba"], str):
        assert out["c"] == out["numba"]
        return
    for a, b in zip(out["c"], out["numba"]):
        assert np.array_equal(a, b)
