"""The list schedulers model what the simulator does with their placement: regression cases for each cause
that once made them lose to one GPU, on small hand-made graphs where the old behaviour was wrong."""

from __future__ import annotations

import numpy as np
import pytest

from autoplace.cluster import Cluster, Device, LinkSpec
from autoplace.graph import Graph, Op
from autoplace.placers import place
from autoplace.placers.schedule_model import _reader_penalty
from autoplace.sim import simulate

SCHEDULERS = ["tf-greedy", "heft", "m-topo", "m-etf", "m-sct"]


def cpu_and_gpus(n_gpus=2, link=LinkSpec(1e10, 2e-6, 6e-6)) -> Cluster:
    """A slow CPU with a lower per-op overhead (5 µs) than the fast GPUs (10 µs)."""
    devs = [Device("cpu:0", "cpu", 10**10, 1e11, 1e10, op_overhead_s=5e-6)]
    devs += [Device(f"gpu:{k}", "gpu", 10**10, 1e13, 5e11, op_overhead_s=10e-6) for k in range(n_gpus)]
    return Cluster("cpu+gpus", devs, default_link=link)


def fork() -> Graph:
    """An input batch, a heavy op, a fork of four tiny ops, and a heavy op joining them."""
    ops = [Op("x", "input", output_bytes=(1 << 20,)),
           Op("h1", "mm", ("x",), output_bytes=(1 << 20,), flops=2e9)]
    ops += [Op(f"t{k}", "add", ("h1",), output_bytes=(1 << 10,), flops=1e3) for k in range(4)]
    ops += [Op("h2", "mm", tuple(f"t{k}" for k in range(4)), output_bytes=(1 << 20,), flops=2e9)]
    return Graph(ops, name="fork")


@pytest.mark.parametrize("method", SCHEDULERS)
def test_a_source_follows_its_reader_rather_than_the_idle_cpu(method):
    """The input batch has no inputs and tells a scheduler nothing at time 0, where the CPU's lower per-op
    overhead makes it finish first: placed there, it would draw the whole graph after it (one reader at a
    time, each finishing earliest beside its input), 84x slower than one GPU. A source goes with its first
    reader."""
    g, c = fork(), cpu_and_gpus()
    dev = place(g, c, method).to_array(g, c)
    assert c.devices[dev[g.index("x")]].kind == "gpu"
    assert dev[g.index("x")] == dev[g.index("h1")]
    if method != "m-topo":            # m-TOPO fills the GPUs by shares of the work, by design
        single = simulate(g, c, place(g, c, "single-gpu")).step_time
        assert simulate(g, c, place(g, c, method)).step_time <= single * (1 + 1e-12)


@pytest.mark.parametrize("method", SCHEDULERS)
def test_copies_through_one_link_queue_and_the_estimate_says_so(method):
    """A CPU-only op sends two 1000-byte tensors to GPU-only readers over a 1000 B/s link: the copies take
    1 s each, one after the other (the link serves them in turn), so the second reader starts at 1 + 2 =
    3 s and the step is 3.1 s (an estimate of lone transfers would say 2.2 s)."""
    g = Graph([Op("a", "op", output_bytes=(1000, 1000), cost={"cpu": 1.0}, device_types=("cpu",)),
               Op("b1", "op", ("a:0",), cost={"gpu": 0.1}, device_types=("gpu",)),
               Op("b2", "op", ("a:1",), cost={"gpu": 0.1}, device_types=("gpu",))], name="two-copies")
    c = Cluster("slow-link", [Device("cpu:0", "cpu", 10**9, 1e9, 1e9), Device("gpu:0", "gpu", 10**9, 1e9, 1e9)],
                default_link=LinkSpec(1000.0, 0.0))
    p = place(g, c, method)
    assert simulate(g, c, p).step_time == pytest.approx(3.1)
    assert p.meta["estimated_step_time_s"] == pytest.approx(3.1)


@pytest.mark.parametrize("method", ["tf-greedy", "heft", "m-etf", "m-sct"])
def test_parameters_go_where_their_groups_run_fastest(method):
    """Two parameters, each co-located with a heavy update. Placed alone at time 0, the second would go to
    the CPU (idle sooner, lower per-op overhead) and pin its update there: 10 ms instead of 0.1 ms. A
    parameter follows its first reader, and a group's whole work weighs in its choice."""
    ops = [Op("x", "input", output_bytes=(1 << 10,))]
    for k in (1, 2):
        ops += [Op(f"w{k}", "parameter", output_bytes=(1 << 10,), param_bytes=1 << 10, colocation_group=f"w{k}",
                   meta={"view": True}),
                Op(f"mm{k}", "mm", ("x", f"w{k}"), output_bytes=(1 << 10,), flops=1e9),
                Op(f"update{k}", "adam", (f"w{k}", f"mm{k}"), output_bytes=(1 << 10,), flops=1e9,
                   colocation_group=f"w{k}")]
    g, c = Graph(ops, name="params"), cpu_and_gpus(1)
    p = place(g, c, method)
    dev = p.to_array(g, c)
    for k in (1, 2):
        assert c.devices[dev[g.index(f"w{k}")]].kind == "gpu", k
    assert simulate(g, c, p).step_time <= simulate(g, c, place(g, c, "single-gpu")).step_time * (1 + 1e-12)


def test_reader_penalty_is_the_cheaper_of_following_or_copying():
    """Op p's reader r takes 1 s on the CPU and 0.1 s on the GPU; the copy between them takes 0.05 s. With p
    on the CPU, r either runs there (0.9 s later than its best) or copies over (0.05 s later): 0.05. With p
    on the GPU: 0. Identical devices: 0."""
    g = Graph([Op("p", "op", output_bytes=(50,)), Op("r", "op", ("p",), cost={"cpu": 1.0, "gpu": 0.1})], name="pr")
    c = Cluster("c", [Device("cpu:0", "cpu", 10**9, 1e9, 1e9), Device("gpu:0", "gpu", 10**9, 1e9, 1e9)],
                default_link=LinkSpec(1000.0, 0.0))
    times = np.array([[1e-3, 1e-3], [1.0, 0.1]])
    pen = _reader_penalty(g, c, times)
    assert pen[0].tolist() == pytest.approx([0.05, 0.0]) and pen[1].tolist() == [0.0, 0.0]
    same = Cluster("same", [Device(f"gpu:{k}", "gpu", 10**9, 1e9, 1e9) for k in range(2)],
                   default_link=LinkSpec(1000.0, 0.0))
    assert _reader_penalty(g, same, np.array([[1e-3, 1e-3], [0.1, 0.1]])).tolist() == [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("method", ["m-topo", "m-etf", "m-sct"])
def test_memory_aware_schedules_are_rebuilt_until_they_fit(method):
    """Three 400-byte activations live at once on 1000-byte GPUs: the schedule's first count (outputs freed
    when their last reader is placed) lets them share a device; the simulated peak does not fit, and the
    placer tries again with less room until it does."""
    ops = [Op("x", "input", output_bytes=(8,))]
    ops += [Op(f"a{k}", "op", ("x",), output_bytes=(400,), cost={"gpu": 1.0, "cpu": 100.0}) for k in range(3)]
    ops += [Op("join", "op", ("a0", "a1", "a2"), output_bytes=(8,), cost={"gpu": 1.0, "cpu": 100.0})]
    g = Graph(ops, name="three")
    c = Cluster("small", [Device("cpu:0", "cpu", 10**6, 1e9, 1e9)] +
                [Device(f"gpu:{k}", "gpu", 1000, 1e9, 1e9) for k in range(2)], default_link=LinkSpec(1e6, 0.0))
    p = place(g, c, method)
    assert simulate(g, c, p).ok and p.meta["memory_tries"] >= 1


def test_a_schedule_that_runs_out_of_memory_is_rebuilt_with_less_room():
    """:func:`fitting` simulates each schedule and builds again with the capacity of the device that ran
    out scaled down by its overflow, until one fits; it gives up after MEMORY_TRIES."""
    from autoplace.errors import InfeasibleError
    from autoplace.placement import Placement
    from autoplace.placers.schedule_model import MEMORY_TRIES, fitting

    ops = [Op("x", "input", output_bytes=(8,))]
    ops += [Op(f"a{k}", "op", ("x",), output_bytes=(8,), param_bytes=400, flops=1e6) for k in range(3)]
    g = Graph(ops, name="three")
    c = Cluster("small", [Device(f"gpu:{k}", "gpu", 1000, 1e9, 1e9) for k in range(2)],
                default_link=LinkSpec(1e6, 0.0))
    seen = []

    def build(cap):                  # everything on gpu:0 while the schedule thinks it has 1000 bytes there
        seen.append(cap.copy())
        dev = np.zeros(g.n_ops, dtype=np.int64) if cap[0] >= 1000 else np.array([0, 0, 1, 1])
        return Placement.from_array(g, c, dev, "stub")

    p = fitting(g, c, "stub", build)
    assert p.meta["memory_tries"] == 2 and simulate(g, c, p).ok
    assert seen[1][0] < seen[0][0] and seen[1][1] == seen[0][1]        # less room only where it ran out
    with pytest.raises(InfeasibleError, match=f"after {MEMORY_TRIES} tries"):
        fitting(g, c, "stub", lambda cap: Placement.from_array(g, c, np.zeros(g.n_ops, dtype=np.int64), "stub"))


def test_views_of_sources_float():
    """A view does no work: a view of the targets batch (read only by the loss) waits for the loss to be
    placed instead of fixing the loss's group on an idle GPU at time 0."""
    from autoplace.grouping import floating_ops

    g = Graph([Op("x", "input", output_bytes=(64,)), Op("y", "input", output_bytes=(64,)),
               Op("w", "parameter", output_bytes=(64,), param_bytes=64, meta={"view": True}),
               Op("wt", "t", ("w",), output_bytes=(64,), meta={"view": True}),
               Op("bias_corr", "pow", ("w",), output_bytes=(4,)),
               Op("yv", "view", ("y",), output_bytes=(64,), meta={"view": True}),
               Op("h", "mm", ("x", "wt"), output_bytes=(64,), flops=1e6),
               Op("hv", "view", ("h",), output_bytes=(64,), meta={"view": True}),
               Op("loss", "nll", ("hv", "yv"), output_bytes=(4,))], name="floating")
    assert [g.ops[i].name for i in np.flatnonzero(floating_ops(g))] == ["x", "y", "w", "wt", "bias_corr", "yv"]


@pytest.mark.parametrize("method", SCHEDULERS)
@pytest.mark.parametrize("model,params,cluster", [("layered-dag", {"ops": 400, "width": 16}, "k80x4"),
                                                  ("transformer-xl-2", {"d_model": 64, "d_inner": 128, "vocab": 500,
                                                                        "seg_len": 16, "mem_len": 16, "batch": 4},
                                                   "p100x2")])
def test_the_estimate_is_the_simulated_step_within_15_percent(method, model, params, cluster):
    """Each scheduler's own estimate (its schedule model replayed in the order the runtime runs ops) is
    within 15 % of the simulated step (docs/benchmarks.md measures it on the papers' settings)."""
    from autoplace.cluster import get_cluster
    from autoplace.zoo import build_graph

    if model != "layered-dag":
        pytest.importorskip("torch")
    g, c = build_graph(model, **params), get_cluster(cluster)
    p = place(g, c, method)
    step = simulate(g, c, p).step_time
    assert abs(p.meta["estimated_step_time_s"] / step - 1) < 0.15, (p.meta["estimated_step_time_s"], step)


LIST_SCHEDULERS = ("tf-greedy", "heft", "m-topo", "m-etf", "m-sct")


def split_gradient_group(conflict: bool = False) -> tuple[Graph, Cluster]:
    """A forward op that only a GPU runs and its gradient op that only a CPU runs: the gradient rule would
    group them (with the parameter both read), yet no device runs the group whole. With ``conflict`` the
    two also share a co-location group, which no placement can honour."""
    co = "pair" if conflict else None
    ops = [Op("x", "input", output_bytes=(100,)),
           Op("w", "parameter", output_bytes=(100,), param_bytes=100, meta={"fwd": "f", "view": True}),
           Op("f", "mm", ("x", "w"), output_bytes=(100,), flops=1e6, device_types=("gpu",), phase="forward",
              colocation_group=co, meta={"fwd": "f"}),
           Op("df", "mm", ("f", "w"), output_bytes=(100,), flops=1e6, device_types=("cpu",), phase="backward",
              colocation_group=co, meta={"fwd": "f"}),
           Op("out", "add", ("df",), output_bytes=(100,), flops=1e3)]
    c = Cluster("c", [Device("gpu:0", "gpu", 10**9, 1e12, 1e11), Device("cpu:0", "cpu", 10**9, 1e11, 1e10)],
                default_link=LinkSpec(1e9, 1e-6))
    return Graph(ops, name="split-group"), c


@pytest.mark.parametrize("method", LIST_SCHEDULERS)
def test_a_heuristic_group_no_device_runs_whole_is_split_not_infeasible(method):
    g, c = split_gradient_group()
    p = place(g, c, method)
    assert simulate(g, c, p).ok and p.assignment["f"] == "gpu:0" and p.assignment["df"] == "cpu:0"


@pytest.mark.parametrize("method", LIST_SCHEDULERS)
def test_a_co_location_group_no_device_runs_whole_is_infeasible_and_named(method):
    from autoplace.errors import InfeasibleError

    g, c = split_gradient_group(conflict=True)
    with pytest.raises(InfeasibleError, match="co-location group 'pair'"):
        place(g, c, method)


@pytest.mark.parametrize("method", ["metis", "mincut", "scotch", "dp-split", "auto"])
def test_other_grouping_placers_split_such_a_group_too(method):
    g, c = split_gradient_group()
    p = place(g, c, method, budget=1)
    assert simulate(g, c, p).ok and p.assignment["f"] == "gpu:0" and p.assignment["df"] == "cpu:0"
