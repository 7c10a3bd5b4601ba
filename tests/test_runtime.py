"""Real execution: placed runs equal unplaced ones, failures are failing results, profiling
feeds the simulator, exports run. Two CPU worker processes stand for two devices."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from autoplace.capture import capture_training_step  # noqa: E402
from autoplace.cli import main  # noqa: E402
from autoplace.cluster import Cluster, Device, LinkSpec, get_cluster  # noqa: E402
from autoplace.cost import op_time_matrix  # noqa: E402
from autoplace.env import MeasuredEnv, make_env  # noqa: E402
from autoplace.errors import AutoplaceError  # noqa: E402
from autoplace.formats import save_graph, save_placement  # noqa: E402
from autoplace.grouping import group_ops  # noqa: E402
from autoplace.placement import Placement  # noqa: E402
from autoplace.runtime import ExecutionError, MeasuredResult, Program, make_pool, run_reference  # noqa: E402
from autoplace.runtime.detect import LinkFit  # noqa: E402
from autoplace.runtime.export import device_map, export_python  # noqa: E402
from autoplace.runtime.profile import _costs_of, profile_graph  # noqa: E402
from autoplace.sim import simulate  # noqa: E402


def _cpu_cluster(memory: int = 2**30) -> Cluster:
    devs = [Device(f"cpu:{i}", "cpu", memory, 1e10, 1e10, 5e-6, 1, {"affinity": [i % (os.cpu_count() or 1)]})
            for i in range(2)]
    return Cluster("two-workers", devs, default_link=LinkSpec(5e9, 1e-5))


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(8, 16)
        self.dec = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.dec(torch.relu(self.enc(x)))


@pytest.fixture(scope="module")
def mlp_graph():
    from autoplace.capture import capture_training_step

    torch.manual_seed(0)
    model = _MLP()
    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return capture_training_step(model, x, torch.nn.functional.cross_entropy, opt, targets=y, name="mlp")


@pytest.fixture(scope="module")
def rnn_graph():
    from autoplace.capture import capture_training_step
    from autoplace.zoo import papers

    with torch.device("meta"):
        model, inputs, loss_fn, opt, targets = papers._rnnlm(vocab=30, hidden=8, layers=2, steps=3, batch=2)
    return capture_training_step(model, inputs, loss_fn, opt, targets=targets, name="rnn")


RUNTIMES = ["shm", "distributed"]


@pytest.fixture(scope="module", params=["shm", pytest.param("distributed", marks=pytest.mark.slow)])
def pool(request):
    """A pool of two CPU workers on each runtime (the distributed one's tests are slow: make test keeps
    tests/test_distributed.py's own)."""
    with make_pool(_cpu_cluster(), runtime=request.param, timeout=30) as p:
        yield p


def _random_placement(graph, cluster, seed):
    groups = group_ops(graph, rules=("colocation",))
    rng = np.random.default_rng(seed)
    return Placement.from_array(graph, cluster, groups.expand(rng.integers(0, 2, groups.n_groups)), f"random{seed}")


def _assert_same(ref: dict, got: dict) -> None:
    assert set(ref) <= set(got)
    for k, v in ref.items():
        torch.testing.assert_close(got[k], v, rtol=1e-5, atol=1e-6, msg=lambda m: f"{k}: {m}")


# ---------------------------------------------------------------------- program and reference
def test_program_decodes_every_op(rnn_graph):
    p = Program(rnn_graph)
    assert len(p.placeholders) + sum(c is not None for c in p.calls) == rnn_graph.n_ops
    assert p.outputs and p.graph is rnn_graph
    # Adam updates every parameter in place: its final version is an in-place op, not the placeholder
    params = [op.name for op in rnn_graph.ops if op.type == "parameter"]
    assert all(p.final_versions[n].op != rnn_graph.index(n) for n in params)
    # token ids stay below the vocabulary (embedding rows / loss classes)
    tokens = p.make_input(rnn_graph.index("input0"), seed=3)
    assert tokens.dtype == torch.int64 and int(tokens.max()) < 30


def test_reference_run_trains(mlp_graph):
    p = Program(mlp_graph)
    one, two = run_reference(p, seed=0, steps=1), run_reference(p, seed=0, steps=2)
    assert torch.isfinite(one["output0"])
    assert not torch.equal(one["enc.weight"], two["enc.weight"])  # the second step updated again
    again = run_reference(p, seed=0, steps=1)
    _assert_same(one, again)  # deterministic for a seed


def test_uncaptured_graph_is_refused():
    from autoplace.zoo import build_graph

    with pytest.raises(ExecutionError, match="no aten program"):
        Program(build_graph("toy-mlp"))


# ---------------------------------------------------------------------- placed execution
@pytest.mark.parametrize("seed", [0, 1])
def test_placed_equals_unplaced(pool, rnn_graph, seed):
    cluster = pool.cluster
    placement = _random_placement(rnn_graph, cluster, seed)
    assert len(set(placement.assignment.values())) == 2
    result = pool.run(rnn_graph, placement, steps=2, seed=5, fetch=True)
    assert result.ok, result.error
    assert result.n_transfers > 0
    _assert_same(run_reference(Program(rnn_graph), seed=5, steps=2), result.outputs)


class _InPlaceReLU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.relu, self.b = torch.nn.Linear(8, 16), torch.nn.ReLU(inplace=True), torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.b(self.relu(self.a(x))).mean(1)


def test_a_read_through_a_view_made_before_an_in_place_write_follows_the_write(pool):
    """ReLU(inplace=True) on a 3-D Linear output: the backward reads the output through a view made from the
    same storage as the one ReLU writes, and no edge joins the two; on one device the reader waits for
    the write, as in program order (it ran first and read the values before ReLU)."""
    torch.manual_seed(0)
    model = _InPlaceReLU()
    x, y = torch.randn(4, 5, 8), torch.randint(0, 3, (4,))
    g = capture_training_step(model, x, torch.nn.functional.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1),
                              targets=y, name="inplace")
    one = Placement.from_array(g, pool.cluster, np.zeros(g.n_ops, dtype=np.int64), "one")
    result = pool.run(g, one, steps=2, seed=5, fetch=True)
    assert result.ok, result.error
    _assert_same(run_reference(Program(g), seed=5, steps=2), result.outputs)


def _held(rt) -> list[str]:
    return sorted(map(str, rt.env))


def test_a_step_leaves_only_the_state_and_the_step_outputs_held(pool, rnn_graph):
    """Compiled steps (every step after the first) release every value they read last: what a device holds
    after a step is its placeholders and the outputs kept for a fetch."""
    program = Program(rnn_graph)
    placement = _random_placement(rnn_graph, pool.cluster, 0)
    assert pool.run(rnn_graph, placement, steps=3, seed=5).ok
    keep = {r.op for r in program.outputs} | {r.op for r in program.final_versions.values()}
    assignment = placement.to_array(rnn_graph, pool.cluster)
    for d in range(pool.cluster.n_devices):
        mine = [i for i in range(rnn_graph.n_ops) if assignment[i] == d]
        expected = sorted(str(i) for i in mine if program.calls[i] is None or i in keep)
        assert pool.call(d, _held) == expected


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_norm_placed_equals_unplaced(pool, seed):
    """native_batch_norm updates running_mean/running_var in place although its schema says it does not:
    capture co-locates it with the buffers, so a placed run updates the same buffers the unplaced one
    does (loss, gradients, parameters and running statistics, two steps). The same holds for
    num_batches_tracked, which an in-place add_ of the forward pass updates. (SGD, not Adam: a bias
    before BatchNorm has a gradient of rounding noise, which Adam's normalisation blows up to full steps
    whose sign depends on summation order.)"""
    from autoplace.capture import capture_training_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4), torch.nn.BatchNorm1d(4))
    graph = capture_training_step(model, torch.randn(6, 8), torch.nn.functional.cross_entropy,
                                  torch.optim.SGD(model.parameters(), lr=0.1), targets=torch.randint(0, 4, (6,)),
                                  name="bn")
    placement = _random_placement(graph, pool.cluster, seed)
    dev = placement.to_array(graph, pool.cluster)
    assert len(set(dev.tolist())) == 2
    result = pool.run(graph, placement, steps=2, seed=3, fetch=True)
    assert result.ok, result.error
    ref = run_reference(Program(graph), seed=3, steps=2)
    assert {"1.running_mean", "1.running_var", "4.running_mean", "1.num_batches_tracked"} <= set(ref)
    assert not torch.equal(ref["1.running_mean"], torch.zeros(16))   # the statistics did move
    _assert_same(ref, result.outputs)


def test_per_op_random_placement_equals_unplaced(pool, mlp_graph):
    """With the co-location groups dropped, any per-op cut is a valid placement: in-place updates then run
    on received copies of their parameters; outputs still match."""
    from dataclasses import replace

    from autoplace.graph import Graph

    free = Graph([replace(op, colocation_group=None) for op in mlp_graph.ops], name=mlp_graph.name,
                 meta=mlp_graph.meta)
    rng = np.random.default_rng(7)
    placement = Placement.from_array(free, pool.cluster, rng.integers(0, 2, free.n_ops), "per-op")
    result = pool.run(free, placement, steps=1, seed=2, fetch=True)
    assert result.ok, result.error
    ref = run_reference(Program(free), seed=2, steps=1)
    torch.testing.assert_close(result.outputs["output0"], ref["output0"])
    for name, r in Program(free).final_versions.items():
        torch.testing.assert_close(result.outputs[name], ref[name])


def test_measured_step_times(pool, mlp_graph):
    placement = _random_placement(mlp_graph, pool.cluster, 0)
    result = pool.run(mlp_graph, placement, steps=4)
    assert result.ok and len(result.step_times) == 4
    assert result.step_time == pytest.approx(np.mean(result.step_times[1:]))  # the first step is dropped
    assert (result.peak_memory > 0).all() and (result.busy_time > 0).all()
    assert result.step_time >= result.busy_time.max() * 0.99


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_memory_budget_exceeded_is_failing(mlp_graph, runtime):
    small = _cpu_cluster(memory=2000)  # the parameters alone need more
    with make_pool(small, runtime=runtime, timeout=30) as p:
        result = p.run(mlp_graph, _random_placement(mlp_graph, small, 0), steps=2)
    assert not result.ok and result.step_time == float("inf")
    assert "memory" in result.error


@pytest.mark.slow
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_memory_budget_exceeded_mid_step(rnn_graph, runtime):
    """Parameters fit, activations do not: the worker fails at the op that would overflow."""
    resident = max(sum(op.param_bytes for op in rnn_graph.ops if op.type != "input"), 1)
    tight = _cpu_cluster(memory=int(resident * 1.02))
    with make_pool(tight, runtime=runtime, timeout=30) as p:
        result = p.run(rnn_graph, Placement.from_array(rnn_graph, tight, np.zeros(rnn_graph.n_ops, int), "one"),
                       steps=1)
    assert not result.ok and "ran out of memory at op" in result.error


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # a zombie still answers kill(0)
        return f.read().split()[2] == "Z"


@pytest.mark.slow
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_killed_worker_is_failing_and_leaves_no_orphans(rnn_graph, runtime):
    cluster = _cpu_cluster()
    with make_pool(cluster, runtime=runtime, timeout=30) as p:
        p.start()
        pids = p.pids
        victim = pids[1]
        threading.Timer(1.0, lambda: os.kill(victim, signal.SIGKILL)).start()
        result = p.run(rnn_graph, _random_placement(rnn_graph, cluster, 0), steps=100000)
        assert not result.ok and "died" in result.error and "cpu:1" in result.error
        assert not p.alive
        assert all(_gone(pid) for pid in pids)
        # the pool restarts on the next run
        again = p.run(rnn_graph, _random_placement(rnn_graph, cluster, 0), steps=2)
        assert again.ok, again.error
    assert all(_gone(pid) for pid in p.pids + pids)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_worker_dead_between_messages_is_failing(mlp_graph, monkeypatch, runtime):
    """A worker that dies after the pool last saw it alive (the race between ``start`` and the next send):
    the send meets a broken pipe, which is a failing result naming the worker, not an exception."""
    cluster = _cpu_cluster()
    with make_pool(cluster, runtime=runtime, timeout=30) as p:
        p.load(mlp_graph)
        victim = p._procs[1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(10)
        assert not victim.is_alive()
        monkeypatch.setattr(p, "start", lambda: None)     # the alive check happened before the death
        result = p.run(mlp_graph, _random_placement(mlp_graph, cluster, 0), steps=2)
        assert not result.ok and "cpu:1 died" in result.error and "signal 9" in result.error
        monkeypatch.undo()
        again = p.run(mlp_graph, _random_placement(mlp_graph, cluster, 0), steps=2)
        assert again.ok, again.error


def test_a_failing_measured_result_is_plain_json(capsys, monkeypatch):
    """A failing run (infinite step time, a step that never ended) writes null, not Infinity, and
    ``compare --env measured --json`` prints a failing row without a traceback."""
    failing = MeasuredResult(float("inf"), ("cpu:0", "cpu:1"), np.zeros(2), np.ones(2), (0.1, float("inf")),
                             np.array([0.1, float("nan")]), error="worker cpu:1 died")
    d = json.loads(json.dumps(failing.to_dict(), allow_nan=False))
    assert d["step_time_s"] is None and d["step_times_s"] == [0.1, None] and d["devices"][1]["busy_s"] is None
    from autoplace.zoo import build_graph

    g, c = build_graph("toy-mlp", layers=1), get_cluster("localhost")
    simulated = simulate(g, c, Placement.from_array(g, c, np.zeros(g.n_ops, dtype=int), "one"))
    assert set(simulated.to_dict()) == set(d)                        # one schema for both envs
    assert (d["env"], simulated.to_dict()["env"]) == ("measured", "simulated")
    assert [x["name"] for x in d["devices"]] == ["cpu:0", "cpu:1"] and set(d["devices"][0]) == \
        set(simulated.to_dict()["devices"][0])

    from autoplace.env import BaseEnv

    class FailingEnv(BaseEnv):
        name = "measured"

        def evaluate(self, placement):
            return failing

    def fake_make_env(kind):  # like make_env, an env passed in is returned as is (wherever it was imported)
        return lambda name, graph, cluster, **k: name if isinstance(name, BaseEnv) else kind(graph, cluster)

    monkeypatch.setattr("autoplace.cli.compare.make_env", fake_make_env(FailingEnv))
    assert main(["compare", "toy-mlp", "-P", "layers=2", "-c", "localhost", "--methods", "single-cpu",
                 "--env", "measured", "--json"]) == 1                 # no method found a placement that runs
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["ok"] is False and row["step_time_s"] is None and row["gap_to_bound"] is None
    assert row["error"] == "worker cpu:1 died" and row["env"] == "measured"

    fast = MeasuredResult(1e-9, ("cpu:0", "cpu:1"), np.zeros(2), np.ones(2) * 1e12, (1e-9, 1e-9))

    class FastEnv(FailingEnv):                      # a measured step below the simulator's bounds
        def evaluate(self, placement):
            return fast

    monkeypatch.setattr("autoplace.cli.compare.make_env", fake_make_env(FastEnv))
    assert main(["compare", "toy-mlp", "-P", "layers=2", "-c", "localhost", "--methods", "single-cpu",
                 "--env", "measured", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["ok"] and row["gap_to_bound"] is None                  # never a negative gap
    assert main(["compare", "toy-mlp", "-P", "layers=2", "-c", "localhost", "--methods", "single-cpu",
                 "--env", "measured", "--markdown"]) == 0
    text = capsys.readouterr().out
    assert "| single-cpu |" in text and "%" not in text.split("| single-cpu |")[1].split("\n")[0]


@pytest.mark.slow
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_hung_worker_times_out(mlp_graph, runtime):
    cluster = _cpu_cluster()
    with make_pool(cluster, runtime=runtime, timeout=1.0) as p:
        p.load(mlp_graph)
        pids = p.pids
        os.kill(pids[0], signal.SIGSTOP)
        t0 = time.monotonic()
        result = p.run(mlp_graph, _random_placement(mlp_graph, cluster, 0), steps=2)
        assert not result.ok and "timeout" in result.error
        assert time.monotonic() - t0 < 10
    assert all(_gone(pid) for pid in pids)


# ---------------------------------------------------------------------- envs, profiling, export
def test_measured_env_has_the_simulated_interface(mlp_graph):
    cluster = _cpu_cluster()
    devs = np.stack([_random_placement(mlp_graph, cluster, s).to_array(mlp_graph, cluster) for s in (0, 1)])
    with MeasuredEnv(mlp_graph, cluster, steps=3) as measured, make_env("simulated", mlp_graph, cluster) as sim:
        for env in (measured, sim):
            batch = env.evaluate_batch(devs)
            assert batch.step_time.shape == (2,) and np.isfinite(batch.step_time).all()
            assert batch.peak_memory.shape == (2, 2)
            one = env.evaluate(Placement.from_array(mlp_graph, cluster, devs[0], "x"))
            assert one.ok and one.step_time > 0


def test_profile_writes_costs_the_simulator_uses(pool, mlp_graph):
    profiled = profile_graph(mlp_graph, pool.cluster, steps=3, rounds=2, pool=pool)
    assert profiled.meta["profiled"]["cpu"]["device"] == "cpu:0"
    assert profiled.meta["profiled"]["cpu"]["rounds"] == 2 and "cpu|loaded" in profiled.meta["profiled"]
    costs = np.array([op.cost["cpu"] for op in profiled.ops])
    assert (costs >= 0).all() and costs.sum() > 0
    times = op_time_matrix(profiled, pool.cluster)
    np.testing.assert_allclose(times[:, 0], costs)
    np.testing.assert_allclose(times[:, 1], costs)  # the cost is per device type
    single = Placement.from_array(profiled, pool.cluster, np.zeros(profiled.n_ops, int), "one")
    assert simulate(profiled, pool.cluster, single).step_time == pytest.approx(costs.sum(), rel=1e-9)
    # every round's untimed run succeeded, so the costs were scaled to them (the scaling itself is checked by
    # hand below)
    info = profiled.meta["profiled"]["cpu"]
    assert info["calibrated"] is True and info["untimed_runs"] == 2
    # the loaded costs come from runs splitting the graph over cpu:0 and its host-mate cpu:1, whose
    # measured busy share extrapolates them to a host-mate busy all step
    split = profiled.meta["profiled"]["cpu|loaded"]
    assert split["calibrated"] is True and 0 < split["host_mates_busy"] <= 1
    assert all(op.cost["cpu|loaded"] >= 0 for op in profiled.ops)


def test_loaded_costs_by_hand():
    """Alone costs 1, 2, 3 s (6 s in all). The split runs time every op at 2 s (their shares); the three
    split runs took 1.2, 1.5 and 1.3 times the alone step just before them (median 1.3: 7.8 s in all, 2.6 s
    an op), with the host-mates busy half, half and 0.6 of the step (u_p = 0.5): at u = 1 each op costs
    alone + (2.6 - alone) / 0.5 = 4.2, 3.2, 2.2 s. A split cost below alone extrapolates below zero: 0."""
    from autoplace.runtime.profile import loaded_costs

    alone = np.array([1.0, 2.0, 3.0])
    runs_a = [(None, 6.0, 0.0), (None, 5.0, 0.0), (None, 7.0, 0.0)]
    runs_s = [(None, 7.2, 0.5), (None, 7.5, 0.5), (None, 9.1, 0.6)]
    cost, u_p = loaded_costs(alone, np.array([2.0, 2.0, 2.0]), runs_a, runs_s)
    np.testing.assert_allclose(cost, [4.2, 3.2, 2.2])
    assert u_p == 0.5
    cost, _ = loaded_costs(np.array([1.0, 5.0]), np.array([5.0, 1.0]), [(None, 6.0, 0.0)], [(None, 6.0, 0.5)])
    np.testing.assert_allclose(cost, [9.0, 0.0])  # ratio 1: split 5 and 1; 1 + 4 / 0.5 = 9; 5 - 4 / 0.5 < 0 -> 0


def test_host_mates_are_the_other_cpus_of_a_host():
    from autoplace.runtime.detect import host_mates

    devs = [Device("cpu:0", "cpu", 1, 1, 1, meta={"host": "a"}), Device("cpu:1", "cpu", 1, 1, 1, meta={"host": "a"}),
            Device("cpu:2", "cpu", 1, 1, 1, meta={"host": "b"}), Device("gpu:0", "gpu", 1, 1, 1, meta={"host": "a"})]
    c = Cluster("hosts", devs, default_link=LinkSpec(1e9))
    assert host_mates(c, 0) == [1] and host_mates(c, 2) == [] and host_mates(c, 3) == []
    plain = Cluster("plain", [Device(f"cpu:{i}", "cpu", 1, 1, 1) for i in range(3)], default_link=LinkSpec(1e9))
    assert host_mates(plain, 1) == [0, 2]  # no hosts named: every other CPU


def test_profile_pools_every_round_before_scaling(mlp_graph):
    # two rounds of two timed steps of three ops: medians per op over all four steps, then scaled so
    # they add up to the median untimed step of the rounds (nan: a failed plain run is skipped)
    runs = [(np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]), 12.0),
            (np.array([[2.0, 4.0, 3.0], [2.0, 2.0, 5.0]]), float("nan")),
            (np.array([[2.0, 2.0, 3.0]]), 6.0)]
    cost, untimed = _costs_of(runs)
    np.testing.assert_allclose(cost, np.array([2.0, 2.0, 3.0]) * 9.0 / 7.0)
    assert untimed == 2
    # every untimed run failed: the timed medians stand, and the profile says it is not calibrated
    cost, untimed = _costs_of([(t, float("nan")) for t, _ in runs])
    np.testing.assert_allclose(cost, [2.0, 2.0, 3.0])
    assert untimed == 0
    with pytest.raises(AutoplaceError, match="rounds"):
        profile_graph(mlp_graph, get_cluster("localhost"), rounds=0)


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores: two CPU workers")
def test_cluster_detect_measures_devices_engines_and_exchange_costs():
    """``cluster detect`` on this machine's CPU workers (small link sizes, two repeats): every device and
    link figure is measured; a worker pinned to one core sends one copy at a time (two copy threads
    share its core), reads arrivals in place (no receive limit), and pays a fixed compute per tensor
    sent and received, fitted on the placed programs; the result is a cluster file like any other."""
    from autoplace.formats import cluster_from_dict, cluster_to_dict
    from autoplace.runtime.detect import detect_cluster

    c = detect_cluster(repeats=2, sizes=(64, 4096, 262144))
    assert c.meta["measured"] and c.n_devices == os.cpu_count()
    for d in c.devices:
        assert d.meta["measured"] and d.peak_flops > 1e6 and d.memory_bandwidth > 1e6 and d.op_overhead_s > 0
        assert (d.send_engines, d.recv_engines) == (1, 0)
        assert d.send_cost_s_per_byte > 0 and d.send_overhead_s > 0 and d.recv_overhead_s > 0
    assert (c.latency[~np.eye(c.n_devices, dtype=bool)] > 0).all()
    assert cluster_to_dict(cluster_from_dict(cluster_to_dict(c))) == cluster_to_dict(c)


def test_copy_engines_count_cores_and_concurrent_copies(monkeypatch):
    """A CPU worker with one core has one send engine without timing anything; with more cores, ``k``
    concurrent copies count as ``k`` engines only when they move at least 0.8 k times one copy's bytes/s
    (timed here by a fake: copies that run side by side take one copy's time, serialized ones k times);
    the one-copy and two-copy runs alternate and only up to the worker's cores."""
    import types

    import torch

    from autoplace.runtime import detect as profile

    rt = types.SimpleNamespace(torch=torch, device="cpu")
    monkeypatch.setattr(profile.os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(profile, "_concurrent_copies", lambda *a: pytest.fail("timed a one-core worker"))
    assert profile._copy_engines(rt) == 1
    monkeypatch.setattr(profile.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    for parallel, want in ((1, 1), (2, 2), (4, 4), (3, 2)):
        # k copies with `parallel` running side by side take ceil(k / parallel) copy times
        monkeypatch.setattr(profile, "_concurrent_copies", lambda copy, k, sync: -(-k // parallel))
        assert profile._copy_engines(rt, nbytes=4096) == want
    calls = []
    monkeypatch.undo()
    monkeypatch.setattr(profile.os, "sched_getaffinity", lambda pid: {0, 1})
    real = profile._concurrent_copies
    monkeypatch.setattr(profile, "_concurrent_copies", lambda copy, k, sync: calls.append(k) or real(copy, k, sync))
    assert profile._copy_engines(rt, nbytes=4096, repeats=2) in (1, 2) and calls == [1, 2, 1, 2]


def test_send_cost_fit():
    """Three programs' sends made of 6 us per tensor and 0.2 ns per byte are recovered exactly; with one
    program only, the link test's per-byte cost stays and the rest is per tensor."""
    from autoplace.runtime.detect import fit_send_costs

    n, nb = np.array([1000.0, 40.0, 400.0]), np.array([2e5, 4e7, 3e6])
    over, byte = fit_send_costs(n, nb, n * 6e-6 + nb * 2e-10, per_byte=8e-11)
    assert over == pytest.approx(6e-6) and byte == pytest.approx(2e-10)
    one = np.array([0.0, 40.0, 0.0]), np.array([0.0, 4e7, 0.0])
    over, byte = fit_send_costs(*one, one[0] * 6e-6 + one[1] * 2e-10, per_byte=8e-11)
    assert byte == 8e-11 and over == pytest.approx((40 * 6e-6 + 4e7 * 2e-10 - 4e7 * 8e-11) / 40)


def test_link_fit_recovers_latency_and_bandwidth():
    sizes = np.array([64 * 4**k for k in range(8)])
    fit = LinkFit(sizes, 20e-6 + sizes / 4e9)
    assert fit.latency_s == pytest.approx(20e-6, rel=1e-6)
    assert fit.bandwidth == pytest.approx(4e9, rel=1e-6)


def test_exported_program_runs_and_equals_reference(rnn_graph):
    cluster = get_cluster("localhost")
    placement = _random_placement(rnn_graph, _cpu_cluster(), 0)
    placement = Placement(placement.assignment, placement.graph, cluster.name, placement.method)
    source = export_python(rnn_graph, placement, cluster)
    # the placement crosses between the two CPU workers: every crossing is an explicit copy in the code
    g, dev = rnn_graph, placement.to_array(rnn_graph, cluster)
    crossings = {(int(t), int(dev[c])) for t, c in zip(g.pair_tensor, g.pair_op)
                 if dev[g.tensor_src[t]] != dev[c] and g.tensor_out[t] >= 0}   # (tensor, destination), data only
    assert len(crossings) > 10 and source.count(".to('cpu')") == len(crossings)
    ns: dict = {}
    exec(compile(source, "placed.py", "exec"), ns)
    prog = Program(rnn_graph)
    outputs, updated = ns["step"](*[prog.make_input(i, 4) for i in prog.placeholders])
    ref = run_reference(prog, seed=4)
    torch.testing.assert_close(outputs[0], ref["output0"])
    for name, value in zip(ns["UPDATED"], updated):
        torch.testing.assert_close(value, ref[name])
    assert [row[0] for row in ns["INPUTS"]] == [rnn_graph.ops[i].name for i in prog.placeholders]


def test_export_moves_tensors_between_gpus(mlp_graph):
    cluster = get_cluster("k80x2")
    g0, g1 = cluster.devices_of_kind("gpu")[:2]
    dev = np.array([g0 if (op.scope or "").startswith("enc") else g1 for op in mlp_graph.ops])
    placement = Placement.from_array(mlp_graph, cluster, dev, "split")
    source = export_python(mlp_graph, placement, cluster)
    compile(source, "placed.py", "exec")
    assert ".to('cuda:1')" in source and ".to('cuda:0')" in source
    assert device_map(mlp_graph, placement, cluster) == {"enc": "cuda:0", "dec": "cuda:1"}
    one = Placement.from_array(mlp_graph, cluster, np.full(mlp_graph.n_ops, g0), "one")
    assert device_map(mlp_graph, one, cluster) == {"": "cuda:0"}
    split = dev.copy()
    split[mlp_graph.colocation_groups()[mlp_graph.ops[mlp_graph.index("enc.bias")].colocation_group]] = g1
    with pytest.raises(ExecutionError, match="module 'enc'"):
        device_map(mlp_graph, Placement.from_array(mlp_graph, cluster, split, "bad"), cluster)


def test_send_cost_is_charged_to_the_producer():
    """Hand-computed: a 1000-byte tensor sent at 1 ns/byte adds 1 µs to its producer."""
    from autoplace.graph import Graph, Op, TensorSpec

    g = Graph([Op("a", "x", outputs=(TensorSpec((250,)),), cost={"cpu": 1e-3}),
               Op("b", "x", ("a",), cost={"cpu": 2e-3})])
    devs = [Device(f"cpu:{i}", "cpu", 2**30, 1e10, 1e10, 0.0, 1, {}, send_cost_s_per_byte=1e-9) for i in range(2)]
    cluster = Cluster("c", devs, default_link=LinkSpec(1e9, 0.0))
    r = simulate(g, cluster, Placement({"a": "cpu:0", "b": "cpu:1"}, "graph", "c"))
    assert r.step_time == pytest.approx(1e-3 + 1e-6 + 1000 / 1e9 + 2e-3)
    assert simulate(g, cluster, Placement({"a": "cpu:0", "b": "cpu:0"}, "graph", "c")).step_time == \
        pytest.approx(3e-3)


# ---------------------------------------------------------------------- command line
@pytest.mark.slow
def test_cli_measure_profile_export(tmp_path, mlp_graph, capsys):
    gpath, ppath = tmp_path / "g.json", tmp_path / "p.json"
    save_graph(mlp_graph, gpath)
    cluster = get_cluster("localhost")
    n = cluster.n_devices
    groups = group_ops(mlp_graph, rules=("colocation",))
    dev = groups.expand(np.arange(groups.n_groups) % min(n, 2))
    save_placement(Placement.from_array(mlp_graph, cluster, dev, "alt"), ppath)
    assert main(["measure", str(gpath), "-c", "localhost", "-p", str(ppath), "--steps", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["step_time_s"] > 0 and len(out["step_times_s"]) == 3
    assert main(["measure", str(gpath), "-c", "localhost", "-p", str(ppath), "--steps", "4"]) == 0
    text = capsys.readouterr().out
    assert "mean of 3 steps after the first: min " in text and ", median " in text and ", max " in text
    assert "measured / simulated: " in text and "'autoplace cluster detect' measures them" in text
    assert main(["profile", str(gpath), "-c", "localhost", "--steps", "2", "--rounds", "1",
                 "-o", str(tmp_path / "gp.json")]) == 0
    prof = json.loads((tmp_path / "gp.json").read_text())
    assert all("cpu" in op["cost"] for op in prof["ops"])
    capsys.readouterr()
    assert main(["export", str(gpath), "-p", str(ppath), "-o", str(tmp_path / "placed.py"),
                 "--device-map", str(tmp_path / "map.json")]) == 0
    assert "def step(" in (tmp_path / "placed.py").read_text()
    assert json.loads((tmp_path / "map.json").read_text()) == {"": "cpu"}


def test_cli_refuses_uncaptured_graph(tmp_path, capsys):
    ppath = tmp_path / "p.json"
    assert main(["place", "toy-mlp", "-c", "localhost", "-m", "single-cpu", "-o", str(ppath)]) == 0
    capsys.readouterr()
    assert main(["measure", "toy-mlp", "-c", "localhost", "-p", str(ppath)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autoplace: error: graph 'toy-mlp' has no aten program") and err.count("\n") == 1
    assert main(["export", "toy-mlp", "-p", str(ppath), "-o", str(tmp_path / "x.py")]) == 2
    assert not (tmp_path / "x.py").exists()


def test_contention_blends_loaded_costs_by_host_mates_busy_share():
    """Hand-computed: two 1 ms ops (2 ms when the host's other core is busy) on two cores of one host."""
    from autoplace.graph import Graph, Op

    g = Graph([Op("a", "x", cost={"cpu": 1e-3, "cpu|loaded": 2e-3}),
               Op("b", "x", cost={"cpu": 1e-3, "cpu|loaded": 2e-3}),
               Op("c", "x", ("a",), cost={"cpu": 1e-3, "cpu|loaded": 2e-3})])

    def cluster(host):
        meta = {"host": host} if host else {}
        return Cluster("c", [Device(f"cpu:{i}", "cpu", 2**30, 1e10, 1e10, 0.0, 1, meta) for i in range(2)],
                       default_link=LinkSpec(1e12, 0.0))

    split = {"a": "cpu:0", "b": "cpu:1", "c": "cpu:0"}
    # pass 1: a [0,1] on cpu:0 beside b [0,1] on cpu:1, then c [1,2] on cpu:0 alone -> u(a) = u(b) = 1,
    # u(c) = 0; pass 2: a and b take 2 ms each, c 1 ms after a -> step 3 ms
    assert simulate(g, cluster("h"), Placement(split, "graph", "c")).step_time == pytest.approx(3e-3)
    assert simulate(g, cluster(None), Placement(split, "graph", "c")).step_time == pytest.approx(2e-3)
    one = {n: "cpu:0" for n in "abc"}
    assert simulate(g, cluster("h"), Placement(one, "graph", "c")).step_time == pytest.approx(3e-3)


def test_identical_cores_measuring_far_apart_are_a_warning():
    from dataclasses import replace

    from autoplace.runtime.detect import speed_warnings

    c = get_cluster("localhost")
    slow = [replace(d, peak_flops=d.peak_flops / (2.1 if i == 1 else 1)) for i, d in enumerate(c.devices)]
    (line,) = speed_warnings(Cluster(c.name, slow, default_link=c.default_link))
    assert "cpu:0 and cpu:1" in line and "2.1x apart" in line
    near = [replace(d, peak_flops=d.peak_flops / (1.2 if i == 1 else 1)) for i, d in enumerate(c.devices)]
    assert speed_warnings(Cluster(c.name, near, default_link=c.default_link)) == []
    other = [replace(d, peak_flops=d.peak_flops / (3 if i == 1 else 1), meta={**d.meta, "model": f"m{i}"})
             for i, d in enumerate(c.devices)]
    assert speed_warnings(Cluster(c.name, other, default_link=c.default_link)) == []   # different models may differ


def test_exchange_calibration_keeps_co_location_groups_whole_when_ops_are_unscoped():
    """cluster detect's calibration programs deal an MLP's layers round-robin; a capture that leaves a
    parameter's ops unscoped (as torch 2.11 did on a CPU+GPU machine) must still keep each co-location
    group on one device, and every layer on ``layer % D``."""
    import dataclasses

    from autoplace.graph import Graph
    from autoplace.runtime.detect import _deal_layers

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(6)])
    g = capture_training_step(model, torch.randn(4, 8), torch.nn.functional.mse_loss,
                              torch.optim.SGD(model.parameters(), lr=0.1), targets=torch.randn(4, 8))
    bare = Graph([dataclasses.replace(op, scope=None) if op.param_bytes or "weight" in op.name else op
                  for op in g.ops], g.name, g.meta)
    for graph in (g, bare):
        for D in (2, 3, 5):
            c = Cluster("c", [Device(f"cpu:{i}", "cpu", 2**30, 1e10, 1e10) for i in range(D)],
                        default_link=LinkSpec(1e9, 1e-6))
            a = _deal_layers(graph, D)
            Placement.from_array(graph, c, a, "calibration")          # raises if a group is split
            for i, op in enumerate(graph.ops):
                if op.name.split(".")[0].isdigit():
                    assert a[i] == int(op.name.split(".")[0]) % D, op.name


def test_a_multi_tensor_update_waits_for_every_reader_of_what_it_writes():
    """A fused-kernel update (foreach Adam: ``aten._fused_adam_`` over one-tensor lists) writes its parameter
    and state in place: each worker runs it after every earlier local reader of them — the backward ``mm``
    that reads the weight for the input's gradient included, which nothing else orders before it."""
    import torch
    from torch import nn

    from autoplace.runtime.plan import plan_device

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    g = capture_training_step(model, torch.randn(2, 8), lambda o: o.pow(2).mean(),
                              torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True))
    prog = Program(g)
    update = g.index("2.weight.update")
    assert prog.calls[update].writes_lists and prog.calls[update].mutates is None
    plan = plan_device(prog, np.zeros(g.n_ops, dtype=np.int64), 0)
    views = {op.name for op in g.ops if op.meta.get("view") and op.inputs and op.inputs[0] == "2.weight"}
    readers = {g.index(op.name) for op in g.ops if op.name != "2.weight.update" and op.name not in views
               and any(i.split(":")[0] in {"2.weight", *views} for i in op.inputs)}
    assert readers and readers <= set(plan.deps[update])


def _worker_settings(rt):
    from autoplace.runtime import device as worker

    return os.environ.get("AUTOPLACE_SPIN_POLLS"), worker.SPIN_POLLS, worker.DRIVER_PID, worker.__file__


def test_workers_take_the_drivers_environment_and_code_at_launch_and_watch_the_driver(monkeypatch):
    """Workers fork from a server that imported torch once, yet each takes the driver's environment as it is
    when its pool starts, imports autoplace from where the driver does, and watches the driver (not the
    server, its parent)."""
    from autoplace.runtime import device as worker
    from autoplace.runtime.shm.pool import WorkerPool

    cluster = get_cluster("localhost")
    with WorkerPool(cluster) as pool:
        pool.start()
        before = pool.call(0, _worker_settings)
    monkeypatch.setenv("AUTOPLACE_SPIN_POLLS", "7")
    with WorkerPool(cluster) as pool:
        pool.start()
        after = pool.call(0, _worker_settings)
    assert before[0] is None and after[:3] == ("7", 7, os.getpid()) and after[3] == worker.__file__
    monkeypatch.setattr(worker, "DRIVER_PID", os.getpid())
    assert not worker.driver_gone()
    dead = os.fork()
    if dead == 0:           # pragma: no cover - the child ends at once
        os._exit(0)
    os.waitpid(dead, 0)
    monkeypatch.setattr(worker, "DRIVER_PID", dead)
    assert worker.driver_gone()
