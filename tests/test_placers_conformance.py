"""One conformance suite, run against every registered placer (like Optuna's sampler tests).

Each placer must: place every op on a known device; honour device constraints (``device_types``) and
co-location groups; be deterministic for a seed; return within its budget; and, if it says it is
memory-aware, keep the parameters it puts on each device within that device's memory (activations are
estimated as the ops are placed, then checked by simulation) or raise InfeasibleError when nothing fits.
"""

from __future__ import annotations

import numpy as np
import pytest

from autoplace.cluster import Cluster, Device, LinkSpec, get_cluster
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph, Op
from autoplace.placers import available_placers, get_placer, place
from autoplace.replicas import strategy_graph
from autoplace.sim import simulate
from autoplace.zoo import build_graph

#: placers of one graph; the strategies (a placement of the replicated step) have their own tests below
PLACERS = available_placers(include_strategies=False)
STRATEGIES = [m for m in available_placers() if get_placer(m).strategy]
#: the placers whose captured-model and small-budget runs take seconds each: in the slow suite (CI runs it),
#: so that the default suite stays under 3 minutes
SLOW_ON_CAPTURED = ("local-search", "cp-sat", "auto", "hybrid", "pipelined")
CAPTURED = [pytest.param(m, marks=pytest.mark.slow) if m in SLOW_ON_CAPTURED else m for m in PLACERS]


def constrained_graph() -> Graph:
    """A small training-like graph with co-location groups, a CPU-only op and a GPU-only op."""
    ops = [Op("x", "input", output_bytes=(4096,)),
           Op("w1", "parameter", output_bytes=(65536,), param_bytes=65536, colocation_group="w1", meta={"view": True}),
           Op("w2", "parameter", output_bytes=(65536,), param_bytes=65536, colocation_group="w2", meta={"view": True}),
           Op("lookup", "embedding", ("x",), output_bytes=(8192,), flops=1e6, device_types=("cpu",)),
           Op("mm1", "mm", ("lookup", "w1"), output_bytes=(8192,), flops=5e8),
           Op("mm2", "mm", ("mm1", "w2"), output_bytes=(8192,), flops=5e8),
           Op("fused", "custom_gpu_kernel", ("mm2",), output_bytes=(8192,), flops=1e8, device_types=("gpu",)),
           Op("loss", "loss", ("fused",), output_bytes=(4,), flops=1e4),
           Op("g2", "mm", ("loss", "mm1"), output_bytes=(65536,), flops=5e8, colocation_group="w2"),
           Op("g1", "mm", ("loss", "lookup"), output_bytes=(65536,), flops=5e8, colocation_group="w1"),
           Op("u1", "update", ("w1", "g1"), output_bytes=(0,), flops=1e5, colocation_group="w1"),
           Op("u2", "update", ("w2", "g2"), output_bytes=(0,), flops=1e5, colocation_group="w2")]
    return Graph(ops, name="constrained")


@pytest.fixture(scope="module")
def small_rnnlm(tmp_path_factory):
    pytest.importorskip("torch")
    with pytest.MonkeyPatch.context() as mp:        # the capture cache in a folder of its own, for this module
        mp.setenv("AUTOPLACE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield build_graph("rnnlm-2", vocab=50, hidden=32, layers=2, steps=4, batch=4)


def budget_for(method: str) -> float:
    """Validity needs little search: the learned placers get a few dozen samples (their default budget is
    a minute's search; what more buys is measured in benchmarks/, not here), ``auto`` (a search of
    searches) 1, the others the budget of 5."""
    return 0.1 if get_placer(method).learned else 1.0 if method == "auto" else 5.0


def check(graph: Graph, cluster: Cluster, method: str, seed: int = 0, budget: float | None = None):
    p = place(graph, cluster, method, seed=seed, budget=budget_for(method) if budget is None else budget)
    graph = strategy_graph(graph, p)                     # a strategy's placement is of its replicated step
    dev = p.to_array(graph, cluster)                     # every op, known devices (validates)
    for i, op in enumerate(graph.ops):
        if op.device_types is not None:
            assert cluster.devices[dev[i]].kind in op.device_types, (method, op.name)
    groups: dict[str, set[int]] = {}
    for i, op in enumerate(graph.ops):
        if op.colocation_group is not None:
            groups.setdefault(op.colocation_group, set()).add(int(dev[i]))
    assert all(len(d) == 1 for d in groups.values()), (method, groups)
    return p, dev


@pytest.mark.parametrize("method", PLACERS)
def test_valid_constrained_and_colocated(method):
    graph, cluster = constrained_graph(), get_cluster("k80x2")
    p, dev = check(graph, cluster, method)
    assert p.method == method and p.graph == graph.name and p.cluster == cluster.name
    assert simulate(graph, cluster, p).step_time > 0


@pytest.mark.parametrize("method", CAPTURED)
def test_captured_model(method, small_rnnlm):
    check(small_rnnlm, get_cluster("k80x4"), method)


@pytest.mark.parametrize("method", PLACERS)
def test_deterministic_for_a_seed(method):
    graph, cluster = constrained_graph(), get_cluster("k80x4")
    budget = budget_for(method) if get_placer(method).learned else None
    a = place(graph, cluster, method, seed=3, budget=budget).assignment
    b = place(graph, cluster, method, seed=3, budget=budget).assignment
    assert a == b


@pytest.mark.parametrize("method", CAPTURED)
def test_small_budget_still_places_reproducibly(method):
    """A small budget still gives a valid placement, the same twice. Budgets count work (CP-SAT's and
    GLOP's deterministic time, local search's evaluations), not the wall clock, so this holds on a busy
    machine; how long a budget takes in seconds is measured in benchmarks/placer_speed.py."""
    graph, cluster = build_graph("layered-dag", ops=400, width=16), get_cluster("k80x4")
    a = place(graph, cluster, method, seed=0, budget=0.5)
    b = place(graph, cluster, method, seed=0, budget=0.5)
    assert a.assignment == b.assignment
    a.to_array(graph, cluster)


@pytest.mark.parametrize("method", [m for m in PLACERS if get_placer(m).memory_aware])
def test_memory_aware_placers_respect_capacity(method):
    graph = constrained_graph()
    need = graph.param_bytes + graph.out_alloc_total
    # GPUs with room for every activation but only ~60 % of the parameters: the parameters must be split
    cap = int(graph.param_bytes.sum() * 0.6) + int(graph.out_alloc_total.sum())
    devs = [Device("cpu:0", "cpu", int(need[3] + need[0] + 1024), 1e11, 1e10),  # about the CPU-only op alone
            Device("gpu:0", "gpu", cap, 1e12, 1e11), Device("gpu:1", "gpu", cap, 1e12, 1e11)]
    cluster = Cluster("tight", devs, default_link=LinkSpec(1e10, 1e-5))
    # most random placements overflow here: a learned search needs more samples to find one that fits
    p, dev = check(graph, cluster, method, budget=max(budget_for(method), 1.0))
    assert len(set(dev.tolist()) - {0}) == 2            # both GPUs needed
    resident = np.bincount(dev, weights=graph.param_bytes, minlength=3)
    assert (resident <= cluster.memory_bytes).all(), resident  # parameters never exceed a device
    r = simulate(graph, cluster, p)
    assert r.step_time > 0 and r.ok, r.oom_devices                # and the simulated step fits
    tiny = Cluster("tiny", [Device(d.name, d.type, 1000, d.peak_flops, d.memory_bandwidth) for d in devs],
                   default_link=LinkSpec(1e10, 1e-5))
    with pytest.raises(InfeasibleError):
        place(graph, tiny, method)


def test_single_gpu_keeps_a_mixed_group_together():
    """A group whose ops allow different device types (one GPU-capable, one CPU-only) goes whole to the
    CPU rather than being split."""
    ops = [Op("x", "input", output_bytes=(64,)),
           Op("a", "mm", ("x",), output_bytes=(64,), flops=1e6, colocation_group="g"),
           Op("b", "lookup", ("a",), output_bytes=(64,), flops=1e3, device_types=("cpu",), colocation_group="g"),
           Op("c", "mm", ("b",), output_bytes=(64,), flops=1e6)]
    graph, cluster = Graph(ops, name="mixed"), get_cluster("k80x2")
    dev = place(graph, cluster, "single-gpu").to_array(graph, cluster)
    cpu, gpu = cluster.index("cpu:0"), cluster.devices_of_kind("gpu")[0]
    assert dev[graph.index("a")] == dev[graph.index("b")] == cpu
    assert dev[graph.index("c")] == dev[graph.index("x")] == gpu


@pytest.mark.parametrize("method", ["scotch", "mincut"])
def test_scotch_is_deterministic_on_a_large_graph(method):
    """Scotch's tools vary their mapping from run to run on larger graphs unless told to be deterministic;
    3,000 ops is where that showed."""
    graph, cluster = build_graph("layered-dag", ops=3000, width=32), get_cluster("k80x4")
    runs = {tuple(place(graph, cluster, method, seed=0).to_array(graph, cluster)) for _ in range(3)}
    assert len(runs) == 1
    assert tuple(place(graph, cluster, method, seed=1).to_array(graph, cluster)) not in runs  # seeds matter


@pytest.mark.parametrize("kw", [dict(budget=-1.0), dict(budget=float("nan")), dict(seed=-3), dict(seed=1.5)])
def test_bad_budget_or_seed_is_one_clear_error(kw):
    from autoplace.errors import AutoplaceError

    with pytest.raises(AutoplaceError, match="budget|seed"):
        place(constrained_graph(), get_cluster("k80x2"), "cp-sat", **kw)


@pytest.mark.parametrize("method", PLACERS)
def test_a_time_limit_ends_the_search_with_a_valid_placement(method):
    """Given a budget of more than a day of work and a tenth of a second of wall clock, a placer returns a
    valid placement (a search: its best so far, the first update done), saying the limit stopped it."""
    graph, cluster = constrained_graph(), get_cluster("k80x2")
    p = place(graph, cluster, method, seed=0, budget=100_000, time_limit=0.1)
    p.to_array(graph, cluster)
    assert p.meta["time_limit_s"] == 0.1
    if get_placer(method).learned:
        assert p.meta["stop_reason"] == "time limit"


@pytest.mark.parametrize("method,key", [("local-search", "stop_reason"), ("cp-sat", "stopped_by")])
def test_the_searches_that_are_not_learned_stop_at_a_time_limit_too(method, key):
    """A budget of hours of work on a 3,000-op graph, three tenths of a second of wall clock: the search
    ends at the limit and says so."""
    graph, cluster = build_graph("layered-dag", ops=3000), get_cluster("k80x2")
    p = place(graph, cluster, method, seed=0, budget=10_000, time_limit=0.3)
    assert p.meta[key] == "time limit"


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW_ON_CAPTURED else m
                                    for m in STRATEGIES])
def test_strategy_on_a_captured_model(method, small_rnnlm):
    """A strategy places every op of the replicated step it names, honours its co-location groups and device
    types, is deterministic for a seed and simulates (through the user's graph)."""
    cluster = get_cluster("k80x4")
    p, dev = check(small_rnnlm, cluster, method)
    assert p.meta["strategy"]["replicas"] >= (1 if method == "pipelined" else 2) and p.method == method
    assert place(small_rnnlm, cluster, method, seed=0).assignment == p.assignment
    assert simulate(small_rnnlm, cluster, p).step_time > 0


@pytest.mark.parametrize("method", STRATEGIES)
def test_strategy_needs_a_capture(method):
    """A graph read from a file has no micro-batch capture to replicate: the strategy says so."""
    with pytest.raises(InfeasibleError, match="micro_batches"):
        place(constrained_graph(), get_cluster("k80x2"), method)


def test_placers_are_listed_in_the_registry_order_whatever_imported_them_first():
    """Tables' columns and compare's rows follow ``registry.LISTING`` (by module, then registration), not the
    order in which their modules happened to be imported."""
    from autoplace.placers import available_placers

    assert available_placers() == [
        "auto", "single-cpu", "single-gpu", "cp-sat", "dp-split", "pipeline", "expert", "rl", "gdp", "hdp", "htf-mpr",
        "tf-greedy", "heft", "m-topo", "m-etf", "m-sct", "local-search", "scotch", "mincut", "metis", "data-parallel",
        "towers", "towers-async", "hybrid", "pipelined"]
