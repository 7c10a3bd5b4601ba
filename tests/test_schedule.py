"""Schedules: each device runs its ops in the order a placement's schedule gives (GPipe and 1F1B by hand)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import op

from autoplace.cluster import Cluster, Device, LinkSpec
from autoplace.errors import PlacementError
from autoplace.formats import placement_from_dict, placement_to_dict
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.schedule import deadlock, pipeline_priorities, stage_actions
from autoplace.sim import NO_SCHEDULE, Simulator

F, B, ACT = 1.0, 2.0, 1000  # a stage's forward and backward time per micro-batch; an activation's bytes


def pipeline(S: int, M: int) -> Graph:
    """A uniform S-stage pipeline over M micro-batches: f{s}_{m} (forward, ``F`` s, ``ACT`` bytes out) reads
    f{s-1}_{m}; b{s}_{m} (backward, ``B`` s, no bytes out) reads b{s+1}_{m} and its stage's activation
    f{s}_{m}, which it frees."""
    ops = []
    for m in range(M):
        for s in range(S):
            ops.append(op(f"f{s}_{m}", [f"f{s - 1}_{m}"] if s else [], F, ACT, phase="forward",
                          meta={"micro_batch": m}))
        for s in reversed(range(S)):
            ins = [f"f{s}_{m}"] + ([f"b{s + 1}_{m}"] if s < S - 1 else [])
            ops.append(op(f"b{s}_{m}", ins, B, 0, phase="backward", meta={"micro_batch": m}))
    return Graph(ops, name=f"pipe{S}x{M}")


def stages(S: int) -> Cluster:
    """S synchronous devices whose links move an activation in no time to speak of (1 ns) with no latency."""
    devs = [Device(f"s{i}", "cpu", 10**9, 1e9, 1e9, 0.0) for i in range(S)]
    return Cluster(f"stages{S}", devs, default_link=LinkSpec(ACT * 1e9, 0.0))


def run(S, M, kind):
    g, c = pipeline(S, M), stages(S)
    dev = np.array([int(o.name[1:].split("_")[0]) for o in g.ops])
    prio = None if kind is None else pipeline_priorities(g, dev, range(S), kind)
    return Simulator(g, c).run(dev, trace=True, schedule=prio), g


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize("S,M", [(4, 4), (4, 8), (2, 5)])
def test_uniform_pipeline_has_the_textbook_bubble(kind, S, M):
    """Both schedules take (M + S - 1)(F + B): each stage is busy M (F + B) of it, so it idles
    (S - 1) / (M + S - 1) of the step (GPipe, Huang et al. 2019, §2.3; the same for 1F1B)."""
    r, _ = run(S, M, kind)
    assert r.step_time == pytest.approx((M + S - 1) * (F + B), rel=1e-9)
    assert r.busy_time.tolist() == pytest.approx([M * (F + B)] * S)
    bubble = 1 - r.busy_time / r.step_time
    assert bubble == pytest.approx(np.full(S, (S - 1) / (M + S - 1)), rel=1e-9)


def test_gpipe_by_hand_on_4_stages_and_4_micro_batches():
    """GPipe's forwards fill the pipeline diagonally (f{s}_{m} runs [s + m, s + m + 1]); stage 3's backwards
    start when its last forward is done (at 7) and drain back: b{s}_{m} runs from 7 + 2 (3 - s + m)."""
    r, g = run(4, 4, "gpipe")
    start = dict(zip(g.names, r.timeline.start))
    for s in range(4):
        for m in range(4):
            assert start[f"f{s}_{m}"] == pytest.approx(s + m, abs=1e-6)
            assert start[f"b{s}_{m}"] == pytest.approx(7 + 2 * (3 - s + m), abs=1e-6)


def in_flight(r, g, s: int, M: int) -> int:
    """The most micro-batches whose activation stage ``s`` holds at once: f{s}_{m} starts it, b{s}_{m}'s end
    frees it."""
    tl = r.timeline
    events = sorted([(tl.start[g.index(f"f{s}_{m}")], 1) for m in range(M)]
                    + [(tl.finish[g.index(f"b{s}_{m}")], -1) for m in range(M)], key=lambda e: (e[0], e[1]))
    return int(max(np.cumsum([e[1] for e in events])))


def test_1f1b_keeps_at_most_S_minus_s_micro_batches_in_flight():
    """1F1B: stage s holds at most S - s micro-batches' activations (it starts B m before F m + S - s), where
    GPipe holds all M. Stage 0's peak is exactly S activations; a later stage also holds the inputs that
    arrived before their turn (copies land when sent, as in autoplace's runtimes), still below GPipe's."""
    S, M = 4, 8
    onefb, g = run(S, M, "1f1b")
    gpipe, _ = run(S, M, "gpipe")
    assert [in_flight(onefb, g, s, M) for s in range(S)] == [S - s for s in range(S)]
    assert [in_flight(gpipe, g, s, M) for s in range(S)] == [M] * S
    assert gpipe.peak_memory[0] == M * ACT
    assert onefb.peak_memory[0] == S * ACT
    assert (onefb.peak_memory[1:] < gpipe.peak_memory[1:]).all()


def test_1f1b_stage_actions():
    assert stage_actions("1f1b", 0, 4, 6) == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("F", 4), ("B", 1),
                                              ("F", 5), ("B", 2), ("B", 3), ("B", 4), ("B", 5)]
    assert stage_actions("1f1b", 3, 4, 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    assert stage_actions("1f1b", 0, 4, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]  # fewer micro-batches
    with pytest.raises(PlacementError, match="unknown pipeline schedule 'zigzag'"):
        stage_actions("zigzag", 0, 2, 2)


def test_ready_order_interleaves_and_a_schedule_changes_the_step():
    """Without a schedule the same split runs as its ops become ready; the schedule is what decides."""
    fifo, _ = run(4, 8, None)
    onefb, _ = run(4, 8, "1f1b")
    assert fifo.peak_memory[0] > onefb.peak_memory[0]


def test_a_placement_carries_its_schedule_through_its_file_and_the_simulator():
    S, M = 4, 4
    g, c = pipeline(S, M), stages(S)
    dev = np.array([int(o.name[1:].split("_")[0]) for o in g.ops])
    prio = pipeline_priorities(g, dev, range(S), "gpipe")
    p = Placement.from_array(g, c, dev, "manual", prio)
    back = placement_from_dict(placement_to_dict(p))
    assert back.schedule == p.schedule and back.priorities(g).tolist() == prio.tolist()
    sim = Simulator(g, c)
    assert sim.run(back).step_time == pytest.approx(sim.run(dev, schedule=prio).step_time)
    # a batch mixes placements with and without schedules, row by row
    plain = Placement.from_array(g, c, dev, "manual")
    batch = sim.run_batch([back, plain])
    assert batch.step_time[0] == pytest.approx((M + S - 1) * (F + B), rel=1e-9)
    assert batch.step_time[1] == sim.run(dev).step_time
    rows = sim.run_batch(np.stack([dev, dev]), np.stack([prio, np.full(g.n_ops, NO_SCHEDULE)]))
    assert rows.step_time.tolist() == batch.step_time.tolist()


def test_bad_schedules_are_one_line_errors():
    S, M = 2, 2
    g, c = pipeline(S, M), stages(S)
    dev = np.array([int(o.name[1:].split("_")[0]) for o in g.ops])
    sim = Simulator(g, c)
    # stage 0 runs b0_0 (which needs f1_0, which needs f0_0) before f0_0: a deadlock, named
    prio = np.zeros(g.n_ops, np.int64)
    prio[g.index("f0_0")] = 1
    why = "the schedule deadlocks: op 'b0_0' needs op 'f0_0', which cannot run before it in the devices' orders"
    with pytest.raises(PlacementError, match=why):
        sim.run(dev, schedule=prio)
    assert "deadlocks" in deadlock(g, dev, prio)
    assert deadlock(g, dev, np.zeros(g.n_ops, np.int64)) is None
    p = Placement.from_array(g, c, dev, "manual")
    for schedule, why in [({"f0_0": 0}, "the schedule orders some of device s0's ops but not all: op 'b0_0' has no "
                                        "priority"),
                          ({**dict.fromkeys(g.names, 0), "nope": 1}, "schedule names op 'nope'"),
                          (dict.fromkeys(g.names, 0.5), "expected an integer")]:
        with pytest.raises(PlacementError, match=why):
            sim.run(Placement(p.assignment, p.graph, p.cluster, schedule=schedule))
    with pytest.raises(PlacementError, match="schedules have shape"):
        sim.run(dev, schedule=prio[:-1])
    bad = {**placement_to_dict(p), "schedule": {"f0_0": "first"}}
    with pytest.raises(Exception, match=r"schedule\['f0_0'\] must be an integer priority"):
        placement_from_dict(bad)


@pytest.mark.slow
def test_the_runtime_runs_each_device_in_its_schedules_order_and_trains_as_eager():
    """A micro-batched step placed on two CPU workers under a schedule that reorders each device's ops (any
    order that keeps ops after their inputs): every worker runs its ops in exactly that order, and training
    equals eager gradient accumulation."""
    pytest.importorskip("torch")

    from test_micro_batches import accumulation_case
    from test_sim_backends import random_schedule
    from torch import nn

    import autoplace
    from autoplace.capture import capture_training_step
    from autoplace.cluster import get_cluster
    from autoplace.placers import place
    from autoplace.runtime import WorkerPool
    from autoplace.runtime.plan import plan_all
    from autoplace.runtime.program import Program

    m = 2
    model, opt, data, expected, ref = accumulation_case(m, seed=3)
    graph = capture_training_step(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                                  micro_batches=m)
    cluster = get_cluster("localhost")
    plain = place(graph, cluster, "metis", seed=0)
    dev = plain.to_array(graph, cluster)
    assert set(dev.tolist()) == {0, 1}
    prio = random_schedule(graph, np.random.default_rng(1))
    assert prio.tolist() != sorted(prio.tolist())             # not program order
    scheduled = Placement.from_array(graph, cluster, dev, "metis", prio)
    plans = plan_all(Program(graph), dev, cluster.n_devices, prio)
    with WorkerPool(cluster) as pool:
        pool.prepare(graph, scheduled)
        for k, reply in zip((k for k, p in enumerate(plans) if p.ops), pool.step(profile=True)):
            assert list(reply[4]) == plans[k].order            # the order each worker ran its ops in
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                           placement=scheduled, micro_batches=m, cluster=cluster, progress=False) as step:
        losses = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max(float((state[k] - v).abs().max()) for k, v in ref.state_dict().items()) < 1e-5


def _exchange_runs(graph, cluster, placement) -> bool:
    """Emulate the distributed runtime's GPU ranks on ``placement``: each runs its ops in its plan's order;
    each pair shares one NCCL order of messages (``rank.message_order``) that both ranks post in turn, a
    receive at once, a send once its tensor is computed; a message moves once both ends have posted it. Does
    every op run?"""
    from autoplace.runtime.dist.rank import message_order
    from autoplace.runtime.plan import plan_all
    from autoplace.runtime.pool import transfer_layout
    from autoplace.runtime.program import Program

    program = Program(graph)
    plans = plan_all(program, placement.to_array(graph, cluster), cluster.n_devices, placement.priorities(graph))
    transfers, _ = transfer_layout(program, plans)
    order = message_order(transfers, plans[0].sequence)
    pairs = {}
    for t in order:
        pairs.setdefault(frozenset(transfers[t][1:3]), []).append(t)
    nxt = {(pair, d): 0 for pair in pairs for d in pair}
    posted = {d: set() for d in range(cluster.n_devices)}
    done, turn = set(), {p.device: 0 for p in plans}
    needs = {p.device: {i: [t for t in order if transfers[t][2] == p.device and i in p.recv_users.get(
        transfers[t][0], ())] for i in p.ops} for p in plans}
    moved = True
    while moved:
        moved = False
        for pair, seq in pairs.items():          # each rank posts what it can of its pair's order
            for d in pair:
                k = nxt[(pair, d)]
                while k < len(seq) and (transfers[seq[k]][2] == d or transfers[seq[k]][0].op in done):
                    posted[d].add(seq[k])
                    k += 1
                moved |= k != nxt[(pair, d)]
                nxt[(pair, d)] = k
        for p in plans:                          # each rank runs its next op once its messages have moved
            while turn[p.device] < len(p.order or p.ops):
                i = (p.order or p.ops)[turn[p.device]]
                if not all(t in posted[transfers[t][1]] and t in posted[p.device] for t in needs[p.device][i]):
                    break
                done.add(i)
                turn[p.device] += 1
                moved = True
    return len(done) == graph.n_ops


@pytest.mark.slow
@pytest.mark.parametrize("cluster_name", ["k80x2", "k80x4"])
def test_gpu_ranks_exchange_a_pipelines_messages_without_waiting_on_each_other(cluster_name):
    """Every pipeline schedule, on 2 and 4 GPU ranks: the pairs' message orders let every op run (messages in
    program order would stall GPipe: its last stage receives micro-batch 1 before it sends micro-batch 0's
    gradient)."""
    pytest.importorskip("torch")
    from test_pipeline import deep_mlp

    from autoplace.cluster import get_cluster
    from autoplace.placers.pipeline import even_split
    from autoplace.schedule import SCHEDULES

    graph, cluster = deep_mlp(layers=4, width=64, batch=16, micro_batches=4), get_cluster(cluster_name)
    for kind in SCHEDULES:
        assert _exchange_runs(graph, cluster, even_split(graph, cluster, kind)), kind
