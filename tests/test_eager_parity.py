"""What a user compares compile with: eager PyTorch. A placement on one device runs in this process as plain
PyTorch (bit for bit, no workers); over several devices the optimizers' foreach and fused settings train
as eager's to 1e-6; compile keeps a placement over several devices only where it is measured faster than
one device, and says so (the measurement itself is replaced here: no test depends on wall-clock speed)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import autoplace  # noqa: E402
from autoplace.capture import capture_training_step  # noqa: E402
from autoplace.cluster import get_cluster  # noqa: E402
from autoplace.placement import Placement  # noqa: E402
from autoplace.runtime.placed import PlacedStep, hyper_inputs, initial_values  # noqa: E402
from autoplace.runtime.shm.pool import WorkerPool  # noqa: E402


class Net(nn.Module):
    """Two layers, a LayerNorm between, a parameter of the root module's own (added to the input)."""

    def __init__(self):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(6))
        self.a, self.norm, self.b = nn.Linear(6, 16), nn.LayerNorm(16), nn.Linear(16, 3)

    def forward(self, x):
        return self.b(torch.relu(self.norm(self.a(x + self.shift))))


#: every optimizer setting the acceptance names: Adam's three implementations, AdamW's, SGD with
#: momentum and with Nesterov momentum, each also as foreach
OPTIMIZERS = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adam-forloop": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=False),
    "adam-foreach": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True),
    "adam-fused": lambda ps: torch.optim.Adam(ps, lr=1e-2, fused=True),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adamw-foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=True),
    "adamw-fused": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True),
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "sgd-momentum-foreach": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, foreach=True),
    "sgd-nesterov": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
}
STEPS = 5


def _data():
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(STEPS)]


def _eager(model, opt, data):
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _case(name):
    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    ref_opt = OPTIMIZERS[name](ref.parameters())
    return model, OPTIMIZERS[name](model.parameters()), _data(), _eager(ref, ref_opt, _data()), ref, ref_opt


def _diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("name", [n if n in ("adam", "adam-foreach", "adam-fused", "sgd-nesterov")
                                  else pytest.param(n, marks=pytest.mark.slow) for n in OPTIMIZERS])
def test_a_placement_on_one_device_trains_in_this_process_bit_for_bit_as_eager(name):
    model, opt, data, expected, ref, ref_opt = _case(name)
    start = copy.deepcopy(model.state_dict())
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                           method="single-cpu", cache=False) as step:
        assert step.runtime == "eager" and step._pool is None              # no worker processes at all
        assert "runtime eager" in repr(step)
        losses = [float(step(x, y)) for x, y in data]
        assert losses == expected                                          # exactly
        assert _diff(step.state_dict(), ref.state_dict()) == 0.0
        params = dict(ref.named_parameters())
        for p, keys in step.optimizer_state().items():
            for k, v in keys.items():
                assert torch.equal(v, ref_opt.state[params[p]][k].cpu()), (p, k)
        assert _diff(model.state_dict(), start) == 0.0                     # the user's module untouched ...
        assert _diff(step.state_dict(), start) > 0                         # ... while the step's trained
        step.load_into(model, opt)
    assert _diff(model.state_dict(), ref.state_dict()) == 0.0


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(get_cluster("localhost")) as p:
        yield p


#: the settings whose update runs another kernel in the default suite; the rest in the slow one
DISTINCT = ("adam-foreach", "adamw-fused", "sgd-nesterov")


@pytest.mark.parametrize("name", [n if n in DISTINCT else pytest.param(n, marks=pytest.mark.slow) for n in OPTIMIZERS])
def test_over_two_devices_every_optimizer_setting_trains_as_eager_to_1e_6(pool, name):
    """The placed step's update runs torch's own arithmetic: foreach as the traced ops (equal to
    ``torch._foreach_*`` bit for bit), fused as ``_fused_adam(w)_`` per parameter."""
    model, opt, data, expected, ref, _ = _case(name)
    graph = capture_training_step(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1])
    cluster = get_cluster("localhost")
    second = {"b.weight", "b.bias", "norm.weight", "norm.bias"}
    dev = [1 if op.colocation_group in second else 0 for op in graph.ops]   # layer b and the norm on cpu:1
    placement = Placement.from_array(graph, cluster, dev, "manual")
    step = PlacedStep(graph, cluster, placement, initial_values(graph, model, opt), optimizer=opt,
                      hyper_inputs=hyper_inputs(graph, model, opt), pool=pool)
    assert step.runtime == "shm" and {step.devices["a.weight"], step.devices["b.weight"]} == {"cpu:0", "cpu:1"}
    losses = [float(step(x, y)) for x, y in data]
    assert np.max(np.abs(np.subtract(losses, expected))) <= 1e-6
    assert _diff(step.state_dict(), ref.state_dict()) <= 1e-6


# ---------------------------------------------------------------------- measure before committing
def _race(placed: float, one: float):
    def race(contenders, **kw):
        for f in contenders.values():     # each contender really steps (their state is then reset)
            f()
        return {"placed": [placed] * 3, "one device": [one] * 3}
    return race


def _lm():
    from test_placed import TinyLM, batches, lm_loss

    torch.manual_seed(0)
    model = TinyLM()
    data = batches(3)
    return model, data, lm_loss


@pytest.mark.slow
@pytest.mark.parametrize("faster", ["placement", "one device"])
def test_compile_keeps_a_split_only_where_it_is_measured_faster(monkeypatch, tmp_path, faster):
    from test_placed import eager

    import autoplace.runtime.verify as verify_mod

    model, data, loss_fn = _lm()
    ref = copy.deepcopy(model)
    expected = eager(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), loss_fn, data)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    monkeypatch.setattr(verify_mod, "race", _race(0.010, 0.020) if faster == "placement" else _race(0.020, 0.019))
    rng = torch.random.get_rng_state()
    with autoplace.compile(model, data[0][0], loss_fn, opt, targets=data[0][1], method="metis", verify=True,
                           cache=tmp_path) as step:
        assert torch.equal(torch.random.get_rng_state(), rng)            # measuring drew nothing of the user's
        assert not getattr(opt, "_opt_called", False)
        v = step.verdict
        assert v is not None and v.kept == faster and v.method == "metis" and v.device == "cpu:0"
        assert v.simulated > 0 and v.simulated_one_device > 0
        report = step.report()
        assert "measured: placement 10.00 ms" in report or "measured: placement 20.00 ms" in report
        assert "simulated: placement" in report
        if faster == "placement":
            assert step.runtime == "shm" and set(step.devices.values()) == {"cpu:0", "cpu:1"}
            assert "kept the metis placement: 2.00x one device" in report
        else:
            assert step.runtime == "eager" and set(step.devices.values()) == {"cpu:0"}
            assert "runs on cpu:0: the metis placement did not beat it by 5%" in report
        assert step.steps == 0
        losses = [float(step(x, y)) for x, y in data]                    # from the model's own start
    assert losses == pytest.approx(expected, abs=1e-5)

    # compiling again: the verdict comes from the cache with the placement, nothing is measured
    def no_race(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(verify_mod, "race", no_race)
    with autoplace.compile(model, data[0][0], loss_fn, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                           targets=data[0][1], method="metis", verify=True, cache=tmp_path) as again:
        assert again.placement_cached and again.verdict == step.verdict
        assert again.runtime == ("shm" if faster == "placement" else "eager")


def test_a_damaged_cached_verdict_is_measured_again():
    from autoplace.runtime.verdict import Verdict

    good = Verdict("placement", "auto", "cpu:0", [0.01], [0.02], 0.01, 0.02, "m").to_dict()
    assert Verdict.from_dict(good) == Verdict(**good)
    for bad in (None, [], {**good, "kept": "both"}, {**good, "placed": []}, {**good, "placed": ["x"]},
                {**good, "simulated": -1.0}, {k: v for k, v in good.items() if k != "machine"}, {**good, "x": 1}):
        assert Verdict.from_dict(bad) is None


@pytest.mark.parametrize("name, kernel", [("adam-foreach", "autoplace.foreach_adam"),
                                          ("adamw-foreach", "autoplace.foreach_adamw"), ("adam", None),
                                          ("adam-fused", "aten._fused_adam_"), ("adamw-fused", "aten._fused_adamw_")])
def test_each_optimizer_implementation_runs_its_own_kernel(name, kernel):
    """foreach runs torch.optim's foreach update, fused the fused kernel (which rounds otherwise), the
    for-loop its traced ops: each parameter's update is what the user's implementation computes."""
    model, opt, data, *_ = _case(name)
    graph = capture_training_step(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1])
    kernels = {op.type for op in graph.ops if op.phase == "update" and "adam" in op.type}
    assert kernels == ({kernel} if kernel else set())


# ---------------------------------------------------------------------- calibrating by itself
@pytest.mark.slow
def test_compile_calibrates_a_machine_it_has_not_measured_once_and_caches_it(tmp_path, monkeypatch):
    """On an estimated cluster of this machine, compile measures the devices and the captured ops before
    placing (what ``cluster detect`` and ``profile`` do), and a second compile reads both from the cache."""
    import autoplace.runtime.detect as detect
    import autoplace.runtime.profile as profile

    monkeypatch.setenv("AUTOPLACE_CALIBRATE", "1")
    model, opt, data, expected, *_ = _case("adam")
    x, y = data[0]
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, cache=tmp_path, budget=1,
                           verify=False, progress=False) as step:
        assert "profiled" in step.graph.meta and step.setup_seconds["calibrate"] > 0
        assert not step.cluster.estimated                                # measured devices, not /proc's
        assert all(op.cost.get("cpu", 0) > 0 for op in step.graph.ops if op.type.startswith("aten."))
        losses = [float(step(a, b)) for a, b in data]
    assert losses == pytest.approx(expected, abs=1e-6)
    assert (tmp_path / "machines").is_dir()

    def measured_again(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(detect, "detect_cluster", measured_again)
    monkeypatch.setattr(profile, "profile_graph", measured_again)
    model, opt, *_ = _case("adam")
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, cache=tmp_path, budget=1,
                           verify=False, progress=False) as again:
        assert again.placement_cached and again.graph.meta["profiled"] == step.graph.meta["profiled"]


def test_a_profiled_graph_of_another_step_is_one_clear_error():
    from autoplace.errors import AutoplaceError
    from autoplace.graph import Graph
    from autoplace.runtime.profile import with_costs_of

    model, opt, data, *_ = _case("adam")
    graph = capture_training_step(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1])
    with pytest.raises(AutoplaceError, match="carries no measured costs"):
        with_costs_of(graph, graph)
    other = Graph([op for op in graph.ops], name="other", meta={**graph.meta, "profiled": {"cpu": {}}})
    assert with_costs_of(graph, other).meta["profiled"] == {"cpu": {}}
    model2 = nn.Sequential(nn.Linear(6, 3))
    g2 = capture_training_step(model2, data[0][0], nn.functional.cross_entropy,
                               torch.optim.Adam(model2.parameters()), targets=data[0][1])
    with pytest.raises(AutoplaceError, match="is not this step's: it has no op"):
        with_costs_of(graph, Graph(g2.ops, name="g2", meta={**g2.meta, "profiled": {"cpu": {}}}))
    with pytest.raises(AutoplaceError, match="is not this step's"):
        autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                          profiled=Graph(g2.ops, name="g2", meta={**g2.meta, "profiled": {"cpu": {}}}))


class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.unused = nn.Linear(6, 3), nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x)


def test_in_this_process_a_parameter_without_gradient_keeps_its_initial_state():
    """torch.optim makes no state for a parameter that never had a gradient; the captured step holds
    it all the same, so reading it back gives the state it started with."""
    torch.manual_seed(0)
    model = WithUnused()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _data()[0]
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, method="single-cpu",
                           cache=False) as step:
        step(x, y)
        state = step.optimizer_state()
        assert float(state["unused.weight"]["step"]) == 0.0 and float(state["fc.weight"]["step"]) == 1.0
        step.load_into(model, opt)
    assert float(opt.state[model.fc.weight]["step"]) == 1.0


@pytest.mark.parametrize("rows", [6, 4], ids=["does-not-divide", "too-small-for-batchnorm"])
def test_in_this_process_a_last_batch_takes_the_micro_batches_the_captured_step_would(rows):
    """As the captured step of another batch shape: the most micro-batches up to the compiled count that
    divide the batch (6 rows under 4 micro-batches run as 2) and can run (BatchNorm cannot train on one
    row: 4 rows run as 2 too; the captured step's capture of 4 fails and it takes the next count)."""
    from test_micro_batches import OPTIMIZERS as MB
    from test_micro_batches import _accumulated, _net

    model = _net()
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(5)
    data = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)),
            (torch.randn(rows, 6, generator=g), torch.randint(0, 3, (rows,), generator=g))]
    ref_opt = MB["sgd"](ref.parameters())
    expected = _accumulated(ref, ref_opt, data[:1], 4) + _accumulated(ref, ref_opt, data[1:], 2)
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, MB["sgd"](model.parameters()),
                           targets=data[0][1], method="single-cpu", micro_batches=4, cache=False) as step:
        assert step.runtime == "eager"
        losses = [float(step(x, y)) for x, y in data]
        assert _diff(step.state_dict(), ref.state_dict()) < 1e-6
    assert losses == pytest.approx(expected, abs=1e-6)


def test_compile_refuses_what_it_cannot_honour_and_calibrates_only_with_a_cache(monkeypatch):
    import autoplace.api as api_mod
    from autoplace.errors import AutoplaceError

    monkeypatch.setenv("AUTOPLACE_CALIBRATE", "1")
    monkeypatch.setattr(api_mod, "calibrate", lambda *a, **k: (_ for _ in ()).throw(AssertionError("calibrated")))
    model, opt, data, *_ = _case("adam")
    x, y = data[0]
    with pytest.raises(AutoplaceError, match="give a fixed micro_batches with it"):
        autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, micro_batches="auto",
                          profiled="p.json")
    real = api_mod.place
    monkeypatch.setattr(api_mod, "place", lambda g, c, m, **k: real(g, c, "single-cpu"))   # "auto", but fast
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, cache=False,
                           progress=False) as step:                       # no cache: no calibration
        assert "profiled" not in step.graph.meta


class Dropped(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.drop, self.b = nn.Linear(6, 32), nn.Dropout(0.3), nn.Linear(32, 3)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.a(x))))


@pytest.mark.parametrize("eager_rng", [True, False])
def test_with_eager_rng_dropout_over_two_devices_draws_as_eager(pool, eager_rng):
    """The random ops' draws are made in this process from its generator, in eager's order, and handed to
    their devices: under one ``torch.manual_seed`` the placed step drops what eager drops."""
    torch.manual_seed(0)
    model = Dropped()
    ref = copy.deepcopy(model)
    data = _data()
    torch.manual_seed(123)
    expected = _eager(ref, torch.optim.SGD(ref.parameters(), lr=0.1), data)
    after_eager = torch.random.get_rng_state()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    graph = capture_training_step(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1])
    cluster = get_cluster("localhost")
    dev = [1 if op.colocation_group in ("b.weight", "b.bias") else 0 for op in graph.ops]
    step = PlacedStep(graph, cluster, Placement.from_array(graph, cluster, dev, "manual"),
                      initial_values(graph, model, opt), optimizer=opt, hyper_inputs=hyper_inputs(graph, model, opt),
                      pool=pool, eager_rng=eager_rng)
    torch.manual_seed(123)
    losses = [float(step(x, y)) for x, y in data]
    if eager_rng:
        assert np.max(np.abs(np.subtract(losses, expected))) <= 1e-6
        assert _diff(step.state_dict(), ref.state_dict()) <= 1e-6
        assert torch.equal(torch.random.get_rng_state(), after_eager)     # the generator advanced as eager's
    else:                                                                  # the workers' own draws: other masks
        assert np.max(np.abs(np.subtract(losses, expected))) > 1e-3


def test_eager_rng_refuses_a_random_op_that_reads_the_steps_values(pool):
    from autoplace.errors import AutoplaceError

    class Sampled(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(6, 3)

        def forward(self, x):
            h = self.a(x)
            return h * torch.bernoulli(torch.sigmoid(h))             # draws with probabilities of the step

    torch.manual_seed(0)
    model = Sampled()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data()[0]
    graph = capture_training_step(model, x, nn.functional.cross_entropy, opt, targets=y)
    cluster = get_cluster("localhost")
    with pytest.raises(AutoplaceError, match=r"eager_rng: random op '.*' \(aten.bernoulli.default\) draws from "
                                             r"values computed in the step"):
        PlacedStep(graph, cluster, Placement.from_array(graph, cluster, [0] * graph.n_ops, "one"),
                   initial_values(graph, model, opt), optimizer=opt, pool=pool, eager_rng=True)


def test_one_slow_round_does_not_decide_a_verdict():
    """Each contender's fastest round decides: a burst of other work in one round of one device (measured on
    this machine: 642 ms among rounds of 43 and 57) does not make a slower placement look faster."""
    from autoplace.runtime.verdict import Verdict

    times = {"placed": [0.0490, 0.0504, 0.0594], "one device": [0.0428, 0.0567, 0.6419]}
    v = Verdict.decide("auto", "cpu:0", times, 0.035, 0.063, "m")
    assert v.kept == "one device" and v.speedup == pytest.approx(0.0428 / 0.0490)
    assert Verdict.decide("auto", "cpu:0", {"placed": [0.030, 0.5], "one device": [0.040, 0.041]}, 0.0, 0.0,
                          "m").kept == "placement"
