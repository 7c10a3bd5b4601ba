"""Replicas: one replica's step cut from a micro-batched capture, DDP's buckets and all-reduce, towers, and the
strategy placers (``data-parallel``, ``towers``, ``hybrid``) on a tiny captured model."""

from __future__ import annotations

import numpy as np
import pytest

from autoplace.cluster import get_cluster
from autoplace.errors import InfeasibleError
from autoplace.placers import place
from autoplace.replicas import (
    expand,
    gradients,
    micro_batched,
    replica_graph,
    set_micro_batched,
    strategy_graph,
    towers_graph,
)
from autoplace.schedule import micro_batches
from autoplace.sim import Simulator, simulate

torch = pytest.importorskip("torch")


def _capture(m: int, optimizer: str = "adam"):
    from autoplace.capture import capture_training_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.BatchNorm1d(256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    opt = (torch.optim.Adam(model.parameters(), lr=1e-3) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    return capture_training_step(model, x, torch.nn.functional.cross_entropy, opt, targets=y, micro_batches=m,
                                 name="mlp")


class _Captures(dict):
    """The tiny model's step per micro-batch count, captured on first use."""

    def __missing__(self, m: int):
        self[m] = set_micro_batched(_capture(m), lambda k: self[k])
        return self[m]


@pytest.fixture(scope="module")
def captures():
    return _Captures()


def test_one_replica_keeps_its_micro_batches_and_sums_only_theirs(captures):
    g4 = captures[4]
    one = replica_graph(g4, 2)
    assert micro_batches(one) == 2
    assert {op.meta.get("micro_batch") for op in one.ops} == {None, 0, 1}
    # the update reads the sum over micro-batches 0 and 1 (an add tagged 1), never a later one
    for _, ref in gradients(one):
        src = one.op(ref.partition(":")[0])
        assert src.meta.get("micro_batch") in (0, 1)
    # inputs hold half the batch
    for op in one.ops:
        if op.type == "input":
            assert op.out_bytes[0] == g4.op(op.name).out_bytes[0] // 2
    # with one micro-batch per replica, the update reads micro-batch 0's gradients themselves
    single = replica_graph(g4, 4)
    assert all(single.op(ref.partition(":")[0]).meta.get("micro_batch") == 0 for _, ref in gradients(single))
    with pytest.raises(InfeasibleError, match="3 replicas do not divide"):
        replica_graph(g4, 3)


def test_ddp_buckets_fill_in_ready_order_and_all_reduce_once_each(captures):
    one = replica_graph(captures[2], 2)
    grads = gradients(one)
    sizes = [one.op(ref.partition(":")[0]).out_bytes[int(ref.partition(":")[2] or 0)] for _, ref in grads]
    # a first bucket of 4 KiB, then 64 KiB ones: the 256x10 weight's gradient (10 KiB) closes the first
    ex = expand(one, np.zeros(one.n_ops, np.int64), [[1], [2]], first_bucket_bytes=4096, bucket_bytes=65536)
    flat = [ref for _, refs in ex.buckets for ref in refs]
    assert flat == [ref for _, ref in grads]            # every gradient once, in ready order
    totals = [sum(sizes[flat.index(r)] for r in refs) for _, refs in ex.buckets]
    assert totals[0] >= 4096 and all(t >= 65536 for t in totals[1:-1])
    assert sum(totals) == sum(sizes)
    g = ex.graph
    assert sum(op.type == "all_reduce" for op in g.ops) == 2 * len(ex.buckets)
    # per replica: its ops, a copy per bucket, the bucket's all-reduce, a view per gradient
    assert g.n_ops == 2 * (one.n_ops + 2 * len(ex.buckets) + len(flat))
    # replica r's update reads its gradients as views of its reduced buckets
    reads = [ref for op in g.ops if op.phase == "update" for ref in op.inputs if ".".join(ref.split(".")[:1])
             and "/bucket" in ref]
    assert len(reads) >= 2 * len(flat)
    for op in g.ops:
        for ref in op.inputs:
            if "/bucket" in ref and op.phase == "update":
                assert ref.startswith(f"r{op.meta['replica']}/bucket")
                assert g.op(ref).type == "bucket_view" and g.op(ref).inputs[0].endswith(f"/{op.meta['replica']}")


def test_all_reduce_overlaps_backward(captures):
    """Two replicas on two GPUs: the step is one replica's half-batch step plus what of the last bucket's
    all-reduce backward does not hide, far less than computing the whole batch on one GPU plus the sync."""
    cluster = get_cluster("p100x2")
    one = replica_graph(captures[2], 2)
    alone = Simulator(one, cluster).run(np.ones(one.n_ops, np.int64)).step_time
    ex = expand(one, np.zeros(one.n_ops, np.int64), [[1], [2]])
    r = Simulator(ex.graph, cluster).run(ex.devices, trace=True)
    assert r.ok and r.n_transfers > 0
    assert alone < r.step_time < alone + 2 * (r.link_time.max() + 1e-4)


def test_towers_share_parameters_on_the_cpu(captures):
    t = towers_graph(captures[2], 2)
    params = [op for op in t.ops if op.type == "parameter"]
    assert len(params) == sum(op.type == "parameter" for op in captures[1].ops)   # one copy
    assert sum(op.type == "buffer" for op in t.ops) == 2 * sum(op.type == "buffer" for op in captures[1].ops)
    assert sum(op.name.startswith("gradsum") for op in t.ops) == len(gradients(replica_graph(captures[2], 2)))


def test_asynchronous_towers_update_each_with_their_own_gradients(captures):
    """No sum: each tower's copy of the update reads its own gradients and the one shared state."""
    t = towers_graph(captures[2], 2, asynchronous=True)
    sync = towers_graph(captures[2], 2)
    assert not any(op.name.startswith("gradsum") for op in t.ops)
    updates = [op for op in sync.ops if op.phase == "update" and op.type not in ("optimizer_state", "hyperparameter")]
    assert sum(op.phase == "update" and op.name.startswith("t") and "/" in op.name for op in t.ops) == 2 * len(updates)
    for op in t.ops:
        if op.phase == "update" and op.name.startswith("t1/"):
            assert not any(ref.startswith("t0/") for ref in op.inputs)


@pytest.mark.parametrize("method", ["data-parallel", "towers", "towers-async", "hybrid", "pipelined"])
def test_strategy_placers_rebuild_their_step(captures, method):
    """Each strategy's placement simulates on the step :func:`strategy_graph` rebuilds from the user's graph
    (a fresh rebuild equal to the one the placer made)."""
    cluster = get_cluster("p100x4")
    g = captures[1]
    p = place(g, cluster, method, seed=0)
    assert p.meta["strategy"]["replicas"] >= (1 if method == "pipelined" else 2)
    big = strategy_graph(g, p)
    assert big.n_ops > g.n_ops
    r = simulate(g, cluster, p)
    assert r.ok and r.step_time > 0
    # rebuilt from scratch (no remembered graph): the same ops
    fresh = set_micro_batched(_capture(1), lambda m: captures[m])
    assert strategy_graph(fresh, p).names == big.names


def test_data_parallel_needs_a_capture():
    from autoplace.zoo import build_graph

    g = build_graph("layered-dag", ops=30, width=3)
    with pytest.raises(InfeasibleError, match="micro_batches=4"):
        place(g, get_cluster("p100x4"), "data-parallel")
    with pytest.raises(InfeasibleError):
        micro_batched(g, 2)


def test_buckets_fill_in_backward_order_with_micro_batches_summed(captures):
    """With two micro-batches per replica the update reads sums, all computed after the last backward op;
    the gradients still come in the order backward finishes them (the last layer's first), the order of one
    micro-batch per replica: each named by the co-location group of the update that reads it."""
    def params(one):
        first_reader = {}
        for op in one.ops:
            if op.phase == "update":
                for ref in op.inputs:
                    first_reader.setdefault(ref, op.colocation_group)
        return [first_reader[ref] for _, ref in gradients(one)]

    summed, single = replica_graph(captures[4], 2), replica_graph(captures[2], 2)
    assert all(summed.op(ref.partition(":")[0]).meta.get("micro_batch") == 1 for _, ref in gradients(summed))
    assert params(summed) == params(single)
    assert params(single)[0] != params(single)[-1] and params(single)[0].startswith("3.")   # the last layer first


def test_an_update_on_another_device_receives_its_gradient_not_the_bucket(captures):
    """Replicas of two slots, the gradients all in one bucket on slot 0 and one update on slot 1: what crosses
    to slot 1 is that update's gradient (a view of the reduced bucket), not the whole bucket."""
    one = replica_graph(captures[2], 2)
    grads = {ref for _, ref in gradients(one)}
    last = max(i for i, op in enumerate(one.ops) if op.phase == "update" and any(ref in grads for ref in op.inputs))
    slots = np.zeros(one.n_ops, np.int64)
    slots[last] = 1
    ex = expand(one, slots, [[1, 2], [3, 4]], first_bucket_bytes=10**9)
    assert len(ex.buckets) == 1
    r = Simulator(ex.graph, get_cluster("p100x4")).run(ex.devices)
    size = lambda ref: one.op(ref.partition(":")[0]).out_bytes[int(ref.partition(":")[2] or 0)]  # noqa: E731
    inputs = sum(size(ref) for ref in dict.fromkeys(one.ops[last].inputs))   # its gradient and its state
    total = sum(size(ref) for ref in grads)
    assert sum(size(ref) for ref in one.ops[last].inputs if ref in grads) < total
    assert r.link_bytes[1, 2] == inputs and r.link_bytes[3, 4] == inputs


def test_groups_follow_the_cluster_order_on_every_node():
    """On FlexFlow's 16-P100 cluster, two replicas of eight GPUs: each group is its nodes' CPU and GPUs in
    cluster order, slot for slot the same kinds of device on the same positions of a node."""
    from autoplace.placers.replicated import _groups

    cluster = get_cluster("flexflow-p100x16")
    groups = _groups(cluster, 2)
    names = [[cluster.device_names[d] for d in g] for g in groups]
    assert names[0] == ["cpu:0", "gpu:0", "gpu:1", "gpu:2", "gpu:3", "cpu:1", "gpu:4", "gpu:5", "gpu:6", "gpu:7"]
    assert names[1] == ["cpu:2", "gpu:8", "gpu:9", "gpu:10", "gpu:11", "cpu:3", "gpu:12", "gpu:13", "gpu:14",
                        "gpu:15"]
    keep = set(groups[0])
    sub = cluster.without([n for i, n in enumerate(cluster.device_names) if i not in keep])
    assert sub.device_names == names[0]


def test_distinct_groups_share_no_device_so_every_collective_has_one_rank_per_device(captures):
    """On four K80 dies and one CPU every group takes the CPU; ``distinct`` (the distributed runtime's one rank
    per device) leaves it out, and ``hybrid`` then places no bucket's participants on one device."""
    from autoplace.placers.replicated import _groups
    from autoplace.runtime.dist.rank import participants

    cluster = get_cluster("k80x4")
    assert all(0 in g for g in _groups(cluster, 2))                    # the host's one CPU in both
    groups = _groups(cluster, 2, distinct=True)
    assert [len(g) for g in groups] == [2, 2] and not set(groups[0]) & set(groups[1])
    p = place(captures[1], cluster, "hybrid", seed=0, distinct=True)
    big = strategy_graph(captures[1], p)
    for devs in participants(big, p.to_array(big, cluster)).values():
        assert len(set(devs)) == len(devs)


def test_compare_shows_no_gap_to_the_bounds_for_a_strategy(captures):
    """The lower bounds are of the step itself; replicas each run a share of the batch, so a strategy's row
    has no gap (it could fall below the bound), a placement's has its own."""
    from dataclasses import replace

    from autoplace.bounds import Bounds
    from autoplace.comparison import compare

    result = compare(captures[1], get_cluster("p100x4"), ["single-gpu", "data-parallel"])
    # bounds that mean something (this tiny step's are below its launch costs, so no row would have a gap)
    result = replace(result, bounds=Bounds(critical_path=1e-4, load=5e-5, cp_sat=None, launches=0.0))
    rows = {r.method: r for r in result.rows}
    assert np.isnan(result.gap(rows["data-parallel"]))
    assert result.gap(rows["single-gpu"]) == pytest.approx(rows["single-gpu"].step_time / 1e-4 - 1)


def _wide(m: int):
    from autoplace.capture import capture_training_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    x, y = torch.randn(4096, 512), torch.randint(0, 10, (4096,))
    return capture_training_step(model, x, torch.nn.functional.cross_entropy,
                                 torch.optim.SGD(model.parameters(), lr=0.1), targets=y, micro_batches=m, name="wide")


def test_auto_returns_the_strategy_of_least_regret():
    """A wide MLP on a batch of 4,096 on four K80 dies: compute-bound, its 4 MB of gradients cheap to
    all-reduce. auto's placement of the step has a regret above 2, data parallelism 1: auto returns it, and
    its row says why (each strategy's regret, the least returned, the placement's kept for the record)."""
    wide = {}

    def captured(m):
        if m not in wide:
            wide[m] = set_micro_batched(_wide(m), captured)
        return wide[m]

    g, cluster = captured(1), get_cluster("k80x4")
    p = place(g, cluster, "auto", seed=0, budget=0.05)
    rows = {r["method"]: r for r in p.meta["strategies"]}
    fitting = {m: r["regret"] for m, r in rows.items() if r.get("fits")}
    assert p.meta["from"] == "data-parallel" and p.meta["strategy"]["replicas"] == 4
    assert p.meta["regret"] == min(fitting.values()) == rows["data-parallel"]["regret"] == pytest.approx(1.0)
    assert rows["placement"]["regret"] > 2 and "data-parallel" in p.meta["weighed"]
    assert simulate(g, cluster, p).step_time == pytest.approx(rows["data-parallel"]["step_time_s"])
    # left to its placements, auto returns the one its strategies' row recorded
    alone = place(g, cluster, "auto", seed=0, budget=0.05, strategies=False)
    assert simulate(g, cluster, alone).step_time == pytest.approx(rows["placement"]["step_time_s"])
