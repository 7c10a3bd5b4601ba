"""The torch.distributed runtime: placed training over gloo equals eager PyTorch on two ranks of one host
and on two "hosts" on loopback (ranks started by torchrun, as on two machines); its failures are failing
results; which runtime runs where. The shared-memory runtime's own tests, and the fault tests both
runtimes pass, are in test_runtime.py."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")
from conftest import wait_for  # noqa: E402
from test_placed import Mixed, Normed, TinyLM, batches, eager, lm_loss, max_diff  # noqa: E402
from test_runtime import _assert_same, _gone, _random_placement  # noqa: E402
from torch import nn  # noqa: E402

import autoplace  # noqa: E402
from autoplace.cli import main  # noqa: E402
from autoplace.cluster import Cluster, Device, LinkSpec, get_cluster  # noqa: E402
from autoplace.errors import AutoplaceError  # noqa: E402
from autoplace.formats import load_cluster, save_cluster  # noqa: E402
from autoplace.runtime import DistributedPool, Program, make_pool, run_reference, runtime_for  # noqa: E402
from autoplace.runtime.dist.control import rank_order  # noqa: E402
from autoplace.runtime.dist.pool import HEARTBEAT_S  # noqa: E402
from autoplace.runtime.dist.serve import DRIVER_QUIET_S, PEER_TIMEOUT_S, torchrun_command  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def ranks_secret_file(tmp_path_factory):
    """The ranks' secret of this module's ranks and drivers (never the user's own file)."""
    from autoplace.runtime.dist.rendezvous import SECRET_ENV, ranks_secret

    path = tmp_path_factory.mktemp("secret") / "ranks.secret"
    ranks_secret(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_ENV, str(path))
        yield path


def _device(name: str, host: str | None, core: int) -> Device:
    meta = {"affinity": [core % (os.cpu_count() or 1)], **({"host": host} if host else {})}
    return Device(name, "cpu", 2**30, 1e10, 1e10, 5e-6, 1, meta)


class ConvNet(nn.Module):
    """A small CNN with BatchNorm: its running statistics are updated in place by the forward pass."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


OPTIMIZERS = {
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adamw-fused": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True),
    "nadam": lambda ps: torch.optim.NAdam(ps, lr=1e-2),
    "adam-foreach": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True),
    "sgd-nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
}


def _trains_as_eager(make_model, data, loss_fn, make_opt, cluster, **kw) -> None:
    """compile over ``cluster`` on the distributed runtime: losses and every weight equal eager's to 1e-5."""
    torch.manual_seed(0)
    model = make_model()
    ref = copy.deepcopy(model)
    expected = eager(ref, make_opt(ref.parameters()), loss_fn, data)
    with autoplace.compile(model, data[0][0], loss_fn, make_opt(model.parameters()), targets=data[0][1],
                           cluster=cluster, method="metis", runtime="distributed", cache=False, **kw) as step:
        assert len(set(step.devices.values())) == 2                    # the parameters really are split
        losses = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max_diff(state, ref.state_dict()) < 1e-5


def _conv_batches(n: int):
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(4, 3, 6, 6, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(n)]


# ---------------------------------------------------------------------- which runtime
def test_auto_picks_distributed_for_hosts_and_gpu_pairs_and_shm_otherwise():
    one = Cluster("one", [_device(f"cpu:{i}", None, i) for i in range(2)], default_link=LinkSpec(1e9))
    two = Cluster("two", [_device("a/cpu:0", "a", 0), _device("b/cpu:0", "b", 1)], default_link=LinkSpec(1e9),
                  meta={"rendezvous": "127.0.0.1:29500"})
    assert runtime_for(one) == "shm" and runtime_for(two) == "distributed"
    assert runtime_for(get_cluster("p100x4")) == "distributed"          # GPUs copy peer to peer over NCCL
    assert runtime_for(one, "distributed") == "distributed"
    with pytest.raises(AutoplaceError, match="unknown runtime 'mpi'"):
        runtime_for(one, "mpi")
    with pytest.raises(AutoplaceError, match="spans 2 hosts"):
        make_pool(two, runtime="shm")
    assert rank_order(Cluster("mixed", [_device("b/cpu:1", "b", 0), _device("a/cpu:0", "a", 1),
                                        _device("b/cpu:2", "b", 0)], default_link=LinkSpec(1e9))) == [0, 2, 1]
    # a device naming no host (localhost's GPUs) is on the first host named: still one machine
    gpu = Cluster("cpu-gpu", [_device("cpu:0", "vm", 0), Device("cuda:0", "gpu", 2**30, 1e12, 1e12)],
                  default_link=LinkSpec(1e9))
    assert runtime_for(gpu) == "shm" and rank_order(gpu) == [0, 1]
    assert isinstance(make_pool(gpu, runtime="shm"), autoplace.runtime.WorkerPool)


def test_ranks_prints_each_hosts_torchrun_command(tmp_path, capsys):
    cl = Cluster("two", [_device("a/cpu:0", "a", 0), _device("b/cpu:0", "b", 1), _device("b/cpu:1", "b", 1)],
                 default_link=LinkSpec(1e9), meta={"rendezvous": "10.0.0.1:29500"})
    save_cluster(cl, tmp_path / "c.json")
    assert main(["ranks", str(tmp_path / "c.json"), "--host", "b", "--print"]) == 0
    cmd = capsys.readouterr().out.split()
    assert cmd[cmd.index("--nnodes") + 1] == "2" and cmd[cmd.index("--node-rank") + 1] == "1"
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2" and cmd[cmd.index("--master-addr") + 1] == "10.0.0.1"
    assert cmd[cmd.index("--master-port") + 1] == "29501" and cmd[-2] == "--timeout"
    assert main(["ranks", str(tmp_path / "c.json"), "--host", "b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["node_rank"] == 1 and out["hosts"] == ["a", "b"] and out["command"][-1] == cmd[-1]
    assert out["ranks"] == {"0": "a/cpu:0", "1": "b/cpu:0", "2": "b/cpu:1"}
    assert main(["ranks", str(tmp_path / "c.json"), "--host", "c", "--print"]) == 2
    assert "no host 'c'" in capsys.readouterr().err
    save_cluster(Cluster("nohost", [_device("a/cpu:0", "a", 0), _device("b/cpu:0", "b", 1)],
                         default_link=LinkSpec(1e9)), tmp_path / "n.json")
    assert main(["ranks", str(tmp_path / "n.json"), "--host", "a", "--print"]) == 2
    assert "names no rendezvous" in capsys.readouterr().err


# ---------------------------------------------------------------------- two ranks, one host
def _local() -> Cluster:
    return Cluster("two-ranks", [_device(f"cpu:{i}", None, i) for i in range(2)], default_link=LinkSpec(5e9, 1e-4))


def test_a_transformer_lm_over_two_gloo_ranks_trains_as_eager():
    _trains_as_eager(TinyLM, batches(4), lm_loss, OPTIMIZERS["sgd-momentum"], _local())


@pytest.mark.slow
def test_a_batch_norm_cnn_over_two_gloo_ranks_trains_as_eager():
    _trains_as_eager(ConvNet, _conv_batches(3), nn.functional.cross_entropy, OPTIMIZERS["adam"], _local())


@pytest.mark.slow
@pytest.mark.parametrize("opt", [k for k in OPTIMIZERS if k not in ("sgd-momentum", "adam")])
def test_every_optimizer_over_two_gloo_ranks_trains_as_eager(opt):
    g = torch.Generator().manual_seed(4)
    data = [(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)) for _ in range(3)]
    _trains_as_eager(Mixed, data, nn.functional.cross_entropy, OPTIMIZERS[opt], _local())


def _mlp_files(tmp_path, cl: Cluster) -> None:
    """``g.json`` (a captured MLP step), ``c.json`` (``cl``) and ``p.json`` (a placement over both devices)."""
    from test_runtime import _MLP

    from autoplace.formats import save_graph, save_placement

    torch.manual_seed(0)
    model = _MLP()
    g = autoplace.capture.capture_training_step(model, torch.randn(5, 8), nn.functional.cross_entropy,
                                               torch.optim.SGD(model.parameters(), lr=0.1),
                                               targets=torch.randint(0, 4, (5,)), name="mlp")
    save_graph(g, tmp_path / "g.json")
    save_cluster(cl, tmp_path / "c.json")
    save_placement(_random_placement(g, cl, 0), tmp_path / "p.json")


def test_measure_on_the_distributed_runtime_from_the_command_line(tmp_path, capsys):
    from test_runtime import _cpu_cluster

    _mlp_files(tmp_path, _cpu_cluster())
    assert main(["measure", str(tmp_path / "g.json"), "-c", str(tmp_path / "c.json"), "-p", str(tmp_path / "p.json"),
                 "--runtime", "distributed", "--steps", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["env"] == "measured" and out["step_time_s"] > 0
    with pytest.raises(SystemExit) as e:
        main(["measure", str(tmp_path / "g.json"), "-c", str(tmp_path / "c.json"), "-p", str(tmp_path / "p.json"),
              "--runtime", "mpi"])
    assert e.value.code == 2 and "invalid choice: 'mpi'" in capsys.readouterr().err


# ---------------------------------------------------------------------- two "hosts" on loopback
def _free_port() -> int:
    """A port whose successor is free too (the rendezvous, torchrun's own store)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair")


def _rnn():
    from autoplace.capture import capture_training_step
    from autoplace.zoo import papers

    with torch.device("meta"):
        model, inputs, loss_fn, opt, targets = papers._rnnlm(vocab=30, hidden=8, layers=2, steps=3, batch=2)
    return capture_training_step(model, inputs, loss_fn, opt, targets=targets, name="rnn")


def _start_hosts(path) -> list[subprocess.Popen]:
    """Each host's ranks as a user starts them (``autoplace ranks``), in its own process group; each host's
    log in ``PATH.HOST.log``."""
    cl = load_cluster(path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = []
    for host in ("a", "b"):
        cmd = torchrun_command(cl, str(path), host, timeout=60, idle=120)
        with open(f"{path}.{host}.log", "wb") as log:
            procs.append(subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                          stderr=log))
    return procs


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)


def _two_hosts(tmp_path, names=("a/cpu:0", "b/cpu:0")) -> str:
    """A cluster file of devices on hosts ``a`` and ``b`` of this machine (the host before the slash)."""
    cl = Cluster("loopback-hosts", [_device(n, n.split("/")[0], k) for k, n in enumerate(names)],
                 default_link=LinkSpec(1e9, 1e-4), meta={"rendezvous": f"127.0.0.1:{_free_port()}"})
    save_cluster(cl, tmp_path / "hosts.json")
    return str(tmp_path / "hosts.json")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    path = _two_hosts(tmp_path_factory.mktemp("hosts"))
    procs = _start_hosts(path)
    yield path
    _stop(procs)


@pytest.mark.slow
def test_two_hosts_on_loopback_run_placed_steps_as_unplaced(hosts):
    g = _rnn()
    cl = load_cluster(hosts)
    with DistributedPool(cl, timeout=60) as pool:
        for seed in (0, 1):
            result = pool.run(g, _random_placement(g, cl, seed), steps=3, seed=5, fetch=True)
            assert result.ok, result.error
            _assert_same(run_reference(Program(g), seed=5, steps=3), result.outputs)
    with DistributedPool(cl, timeout=60) as pool:                      # a second driver joins the same ranks
        assert pool.run(g, _random_placement(g, cl, 2), steps=2).ok


@pytest.mark.slow
@pytest.mark.parametrize("case", ["lm-sgd-momentum", "cnn-adam", *[f"mixed-{k}" for k in OPTIMIZERS]])
def test_two_hosts_on_loopback_train_as_eager(hosts, case):
    if case == "lm-sgd-momentum":
        _trains_as_eager(TinyLM, batches(3), lm_loss, OPTIMIZERS["sgd-momentum"], hosts)
    elif case == "cnn-adam":
        _trains_as_eager(ConvNet, _conv_batches(3), nn.functional.cross_entropy, OPTIMIZERS["adam"], hosts)
    else:
        g = torch.Generator().manual_seed(4)
        data = [(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)) for _ in range(3)]
        _trains_as_eager(Mixed, data, nn.functional.cross_entropy, OPTIMIZERS[case.split("-", 1)[1]], hosts)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "hung", "out of memory"])
def test_a_rank_killed_hung_or_out_of_memory_on_another_host_is_a_failing_result_and_the_ranks_end(tmp_path,
                                                                                                   how):
    path = _two_hosts(tmp_path)
    procs = _start_hosts(path)
    try:
        cl = load_cluster(path)
        torch.manual_seed(0)
        model = Normed()
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        g = autoplace.capture.capture_training_step(model, x, nn.functional.cross_entropy,
                                                   torch.optim.Adam(model.parameters()), targets=y, name="n")
        with DistributedPool(cl, timeout=30) as pool:
            pool.start()
            pids = pool.pids
            placement = _random_placement(g, cl, 0)
            first = pool.run(g, placement, steps=2)
            assert first.ok
            if how == "out of memory":     # b's budget half its peak (a peak moves with arrival timing)
                tight = dataclasses.replace(cl.devices[1], memory_bytes=int(first.peak_memory[1]) // 2)
                pool.cluster = Cluster(cl.name, [cl.devices[0], tight], cl.links, cl.default_link, cl.meta)
            else:
                os.kill(pids[1], signal.SIGKILL if how == "killed" else signal.SIGSTOP)
            t0 = time.monotonic()
            result = pool.run(g, placement, steps=2)
            assert not result.ok and "b/cpu:0" in result.error, result.error
            assert ("ran out of memory" if how == "out of memory" else "died or hung") in result.error
            assert time.monotonic() - t0 < 20                          # the heartbeat, not the 30 s timeout
        if how == "hung":
            wait_for(lambda: _gone(pids[0]), 60, "the hung rank's peer to end")   # its peer ends ...
            os.kill(pids[1], signal.SIGCONT)                           # ... and it ends once it runs again
        for p in procs:                                               # torchrun ends both hosts' ranks
            p.wait(60)
        assert all(_gone(pid) for pid in pids)
    finally:
        _stop(procs)


@pytest.mark.slow
def test_cluster_detect_measures_the_link_between_hosts(hosts):
    from autoplace.runtime.detect import detect_cluster

    measured = detect_cluster(load_cluster(hosts), repeats=2, sizes=(64, 4096, 262144))
    assert measured.meta["runtime"] == "distributed" and measured.meta["rendezvous"] == load_cluster(hosts).meta[
        "rendezvous"]
    assert {(ln.src, ln.dst) for ln in measured.links} == {("a/cpu:0", "b/cpu:0"), ("b/cpu:0", "a/cpu:0")}
    for ln in measured.links:
        assert 1e6 < ln.bandwidth < 1e12 and 0 <= ln.latency_s < 0.1      # a loopback TCP link, fitted
    assert all(d.send_overhead_s > 0 and d.meta["measured"] for d in measured.devices)


def test_no_ranks_at_the_rendezvous_is_a_one_line_error(tmp_path, capfd):
    path = _two_hosts(tmp_path)                                       # nobody started the ranks
    with pytest.raises(AutoplaceError, match="no ranks answer at 127.0.0.1:.*autoplace ranks"):
        DistributedPool(load_cluster(path), timeout=1).start()
    for th in threading.enumerate():         # a join the bound gave up on (a loaded machine) logs until it ends
        if th.name == "join-store":
            th.join(60)
    _mlp_files(tmp_path, load_cluster(path))
    capfd.readouterr()
    assert main(["measure", str(tmp_path / "g.json"), "-c", path, "-p", str(tmp_path / "p.json"),
                 "--timeout", "1"]) == 2
    err = capfd.readouterr().err.strip().splitlines()               # the file descriptor: torch's C++ lines too
    assert len(err) == 1 and "no ranks answer at 127.0.0.1" in err[0] and "Traceback" not in err[0], err


@pytest.mark.slow
def test_a_driver_without_the_ranks_secret_is_refused_and_logged(hosts, tmp_path, monkeypatch):
    from autoplace.runtime.dist.rendezvous import SECRET_ENV, ranks_secret

    g, cl = _rnn(), load_cluster(hosts)
    monkeypatch.setenv(SECRET_ENV, str(tmp_path / "other.secret"))
    ranks_secret(tmp_path / "other.secret")                            # a secret, not the ranks' one
    with pytest.raises(AutoplaceError, match="does not hold this machine's ranks secret"):
        DistributedPool(cl, timeout=30).start()
    monkeypatch.undo()
    from autoplace.runtime.dist import control as rank_module

    # a driver that signs the ranks' registrations right but opens its session unsigned: refused, logged
    real = rank_module.StoreChannel
    with monkeypatch.context() as mp:
        import autoplace.runtime.dist.pool as dist_module

        mp.setattr(dist_module, "sign", lambda *a: b"\0" * 32)
        with pytest.raises(AutoplaceError, match="refused this driver: its driver did not sign it"):
            DistributedPool(cl, timeout=30).start()
    assert rank_module.StoreChannel is real
    logs = "".join(open(f"{hosts}.{h}.log", errors="replace").read() for h in "ab")
    assert "refused session" in logs and "did not sign it with the ranks' secret" in logs
    with DistributedPool(cl, timeout=60) as pool:                    # the ranks serve the next driver
        pool.start()
        assert pool.run(g, _random_placement(g, cl, 0), steps=1).ok


#: longer than every limit a quiet driver could trip: the ranks' wait for its heartbeat, the driver's for theirs
QUIET_S = max(DRIVER_QUIET_S, PEER_TIMEOUT_S, HEARTBEAT_S) + 1.0


@pytest.mark.slow
def test_a_quiet_driver_keeps_its_session_and_a_second_live_driver_is_refused(hosts):
    g = _rnn()
    cl = load_cluster(hosts)
    with DistributedPool(cl, timeout=60) as first:
        first.start()
        with pytest.raises(AutoplaceError, match="another driver is using the ranks"):
            DistributedPool(cl, timeout=60).start()
        time.sleep(QUIET_S)                                           # capturing, placing: no message for a while
        assert first.run(g, _random_placement(g, cl, 0), steps=2).ok
    with DistributedPool(cl, timeout=60) as second:                  # once it closed, the next driver is served
        second.start()
        time.sleep(QUIET_S)
        assert second.run(g, _random_placement(g, cl, 1), steps=2).ok


@pytest.mark.slow
def test_ranks_numbered_host_by_host_exchange_with_the_right_peers(tmp_path):
    """Devices listed a, b, a: torchrun numbers a's two ranks first, so rank 1 is the third device."""
    import numpy as np

    from autoplace.grouping import group_ops
    from autoplace.placement import Placement

    path = _two_hosts(tmp_path, ("a/cpu:0", "b/cpu:0", "a/cpu:1"))
    procs = _start_hosts(path)
    try:
        g = _rnn()
        cl = load_cluster(path)
        assert rank_order(cl) == [0, 2, 1]
        groups = group_ops(g, rules=("colocation",))
        with DistributedPool(cl, timeout=60) as pool:
            for seed in (0, 1):
                devs = groups.expand(np.random.default_rng(seed).integers(0, 3, groups.n_groups))
                assert len(set(devs.tolist())) == 3
                result = pool.run(g, Placement.from_array(g, cl, devs, "random"), steps=2, seed=5, fetch=True)
                assert result.ok, result.error
                _assert_same(run_reference(Program(g), seed=5, steps=2), result.outputs)
    finally:
        _stop(procs)


def test_a_message_keeps_a_permuted_tensors_strides():
    """A permuted dense tensor (3-D: no permutation of it is its own inverse) travels in memory order with
    its permutation and arrives with the sender's strides and values."""
    from autoplace.runtime.dist.rank import RankRuntime

    rt = RankRuntime.__new__(RankRuntime)                            # packing needs no process group
    rt.torch = torch
    v = torch.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1)
    rt.specs = {0: (tuple(v.shape), torch.float32)}
    got = rt._unpack(0, rt._pack(v))
    assert got.stride() == v.stride() and torch.equal(got, v)
    plain = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    rt.specs[1] = (tuple(plain.shape), torch.int64)
    assert torch.equal(rt._unpack(1, rt._pack(plain)), plain)


@pytest.mark.slow
def test_profile_runs_on_the_ranks_of_each_host(hosts):
    from autoplace.runtime.profile import profile_graph

    g = _rnn()
    profiled = profile_graph(g, load_cluster(hosts), steps=2, rounds=1)
    costs = [op.cost.get("cpu") for op in profiled.ops if op.meta.get("call")]
    assert costs and all(c is not None and c >= 0 for c in costs) and sum(costs) > 0
    # a/cpu:0 has no CPU host-mate (b/cpu:0 is another machine): no split run, no loaded cost
    assert not any("cpu|loaded" in op.cost for op in profiled.ops)


# ---------------------------------------------------------------------- a rank's environment, deadlines, secret
def _rank(tmp_path, monkeypatch, capsys, env: dict, cluster: str | None = None, extra=()) -> tuple[int, list[str]]:
    """``python -m autoplace.runtime`` as torchrun starts it, in this process: its code and its stderr lines."""
    from autoplace.runtime.dist.serve import main as rank_main

    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", **env}.items():
        monkeypatch.setenv(k, v)
    if cluster is None:
        cluster = _two_hosts(tmp_path)
    code = rank_main([cluster, "--timeout", "1", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


@pytest.mark.parametrize("env,expect", [
    ({"WORLD_SIZE": "two"}, r"\$WORLD_SIZE='two' is not a whole number"),
    ({"RANK": "7"}, r"\$RANK='7' is not a whole number in \[0, 1\]"),
    ({"RANK": "-1"}, r"\$RANK='-1' is not a whole number"),
    ({"RANK": "²"}, r"\$RANK='²' is not a whole number"),
    ({"MASTER_PORT": "x"}, r"\$MASTER_PORT='x' is not a whole number"),
    ({"MASTER_ADDR": ""}, r"\$MASTER_ADDR='' is not an address"),
    ({"WORLD_SIZE": "3"}, r"torchrun started 3 ranks but cluster 'loopback-hosts' has 2 devices"),
])
def test_a_ranks_environment_is_checked_in_one_line(tmp_path, monkeypatch, capsys, env, expect):
    import re

    code, err = _rank(tmp_path, monkeypatch, capsys, env)
    assert code == 2 and len(err) == 1 and re.search(expect, err[0]), err
    assert err[0].startswith("autoplace rank") and ": error: " in err[0] and "Traceback" not in err[0]


def test_a_ranks_cluster_and_rendezvous_are_checked_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "garbage.json").write_text("{not json")
    code, err = _rank(tmp_path, monkeypatch, capsys, {}, str(tmp_path / "garbage.json"))
    assert code == 2 and len(err) == 1 and "garbage.json" in err[0]
    for meta, expect in (({}, "names no rendezvous"), ({"rendezvous": "127.0.0.1:²"}, "is not ADDRESS:PORT"),
                         ({"rendezvous": "127.0.0.1:70000"}, "is not ADDRESS:PORT")):
        cl = Cluster("c", [_device(f"{h}/cpu:0", h, 0) for h in "ab"], default_link=LinkSpec(1e9), meta=meta)
        save_cluster(cl, tmp_path / "c.json")
        code, err = _rank(tmp_path, monkeypatch, capsys, {}, str(tmp_path / "c.json"))
        assert code == 2 and len(err) == 1 and expect in err[0] and "Traceback" not in err[0], err
    with socket.socket() as held:                                     # the rendezvous port is taken
        held.bind(("127.0.0.1", 0))
        held.listen()
        cl = Cluster("c", [_device(f"{h}/cpu:0", h, 0) for h in "ab"], default_link=LinkSpec(1e9),
                     meta={"rendezvous": f"127.0.0.1:{held.getsockname()[1]}"})
        save_cluster(cl, tmp_path / "c.json")
        code, err = _rank(tmp_path, monkeypatch, capsys, {}, str(tmp_path / "c.json"))
    assert code == 2 and len(err) == 1 and "hosting the rendezvous at 127.0.0.1:" in err[0], err
    code, err = _rank(tmp_path, monkeypatch, capsys, {}, extra=["--secret-file", str(tmp_path / "none")])
    assert code == 2 and len(err) == 1 and "no ranks secret at" in err[0]


def test_a_listener_that_never_answers_is_an_error_within_twice_the_timeout(tmp_path, monkeypatch, capsys):
    from fuzz_corpus import listening

    from autoplace.runtime.dist.rendezvous import join_store

    # which ends the wait first — torch's own client timeout or our bound — depends on the machine's speed:
    # either is one line naming the address; the bound alone is the next test's
    with listening("mute") as port:
        cl = Cluster("c", [_device(f"{h}/cpu:0", h, 0) for h in "ab"], default_link=LinkSpec(1e9),
                     meta={"rendezvous": f"127.0.0.1:{port}"})
        with pytest.raises(AutoplaceError, match=rf"^no ranks answer at 127.0.0.1:{port} \(joining the rendezvous"):
            DistributedPool(cl, timeout=1).start()
        assert join_store.last_bound == 2.0                           # the wait had a bound: twice the timeout
        save_cluster(cl, tmp_path / "c.json")
        code, err = _rank(tmp_path, monkeypatch, capsys, {"RANK": "1"}, str(tmp_path / "c.json"))
        assert code == 2 and len(err) == 1 and f"joining the rendezvous at 127.0.0.1:{port}" in err[0], err


def test_a_pool_whose_rendezvous_is_malformed_fails_once_and_closes_cleanly():
    from autoplace.runtime.pool import close_all

    cl = Cluster("c", [_device(f"{h}/cpu:0", h, 0) for h in "ab"], default_link=LinkSpec(1e9),
                 meta={"rendezvous": "127.0.0.1:²"})
    with pytest.raises(AutoplaceError, match="is not ADDRESS:PORT"):
        DistributedPool(cl)
    close_all()                                                      # what runs at exit: no AttributeError


def test_ranks_creates_the_secret_once_and_then_takes_it(tmp_path, capsys):
    import stat

    cl = Cluster("two", [_device("a/cpu:0", "a", 0), _device("b/cpu:0", "b", 1)], default_link=LinkSpec(1e9),
                 meta={"rendezvous": "10.0.0.1:29500"})
    save_cluster(cl, tmp_path / "c.json")
    path = tmp_path / "s" / "ranks.secret"
    args = ["ranks", str(tmp_path / "c.json"), "--host", "a", "--print", "--secret-file", str(path)]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert f"created the ranks' secret {path}" in err and out.split()[-2:] == ["--secret-file", str(path)]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text().strip()) == 64
    first = path.read_text()
    assert main(args) == 0 and "created" not in capsys.readouterr().err and path.read_text() == first
    path.chmod(0o644)
    assert main(args) == 2 and "readable by others" in capsys.readouterr().err


def test_a_store_that_never_comes_is_an_error_at_twice_the_timeout():
    import threading

    from autoplace.runtime.dist.rendezvous import RendezvousError, join_store

    never = threading.Event()
    try:                           # a constructor that would block for a minute: the wait ends at its bound
        with pytest.raises(RendezvousError, match=r"^joining x: no answer within 1 s"):
            join_store(lambda: never.wait(60) or "a store", 0.5, "joining x")
        assert join_store.last_bound == 1.0
    finally:
        never.set()
