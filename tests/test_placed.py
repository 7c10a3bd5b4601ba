"""autoplace.compile: a PyTorch model's training step captured, placed over two CPU worker processes and
trained there, against eager PyTorch step by step; a saved placement; state back into the module."""

from __future__ import annotations

import copy
import json

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import autoplace  # noqa: E402
from autoplace.errors import AutoplaceError  # noqa: E402


class TinyLM(nn.Module):
    """Embedding, two transformer encoder layers, a vocabulary head."""

    def __init__(self, vocab: int = 40, d: int = 32, layers: int = 2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)
                                    for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, x):
        h = self.emb(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def lm_loss(out, y):
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def batches(n: int, vocab: int = 40, shape=(4, 8)):
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, vocab, shape, generator=g), torch.randint(0, vocab, shape, generator=g))
            for _ in range(n)]


def eager(model, optimizer, loss_fn, data):
    losses = []
    for x, y in data:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_a_transformer_lm_placed_over_two_cpu_workers_trains_as_eager_pytorch():
    torch.manual_seed(0)
    model = TinyLM()
    ref, start = copy.deepcopy(model), copy.deepcopy(model.state_dict())
    data = batches(5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    expected = eager(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), lm_loss, data)
    with autoplace.compile(model, data[0][0], lm_loss, opt, targets=data[0][1], cluster="localhost",
                           method="metis") as step:
        assert set(step.devices.values()) == {"cpu:0", "cpu:1"}          # the parameters really are split
        losses = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
        assert max_diff(model.state_dict(), start) == 0.0                # the user's module is untouched ...
        step.load_into(model)                                             # ... until asked
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max_diff(state, ref.state_dict()) < 1e-5
    assert max_diff(model.state_dict(), state) == 0.0
    fresh = TinyLM()
    fresh.load_state_dict(state)                                          # round trip, exactly
    assert max_diff(fresh.state_dict(), state) == 0.0
    with pytest.raises(AutoplaceError, match="closed"):
        step.state_dict()


def test_adam_state_and_a_saved_placement(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(4)]
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    expected = eager(ref, ref_opt, nn.functional.cross_entropy, data)

    from autoplace.capture import capture_training_step
    from autoplace.cluster import get_cluster
    from autoplace.formats import save_placement
    from autoplace.placement import Placement

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    graph = capture_training_step(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1])
    cluster = get_cluster("localhost")
    first = {g for g in (op.colocation_group for op in graph.ops) if g and g.startswith("0.")}
    dev = [1 if (op.colocation_group in first) else 0 for op in graph.ops]   # the first layer on cpu:1
    path = tmp_path / "p.json"
    save_placement(Placement.from_array(graph, cluster, dev, "manual"), path)
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                           placement=path) as step:
        assert step.devices["0.weight"] == "cpu:1" and step.devices["2.weight"] == "cpu:0"
        losses = [float(step(x, y)) for x, y in data]
        assert losses == pytest.approx(expected, abs=1e-5)
        assert max_diff(step.state_dict(), ref.state_dict()) < 1e-5
        st = step.optimizer_state()
        params = dict(ref.named_parameters())
        for name, keys in st.items():
            for k, v in keys.items():
                assert float((v - ref_opt.state[params[name]][k]).abs().max()) < 1e-5, (name, k)
        step.load_into(model, opt)
    # the module and its optimizer carry on in eager PyTorch exactly where the placed steps left off
    x, y = data[0]
    assert eager(model, opt, nn.functional.cross_entropy, [(x, y)]) == \
        pytest.approx(eager(ref, ref_opt, nn.functional.cross_entropy, [(x, y)]), abs=1e-5)


def test_the_python_api_is_importable_from_the_package():
    from autoplace import PlacedStep, Simulator, build_graph, compare, compile, place, simulate  # noqa: F401

    assert callable(compare) and compile is autoplace.compile and isinstance(Simulator, type)


def test_a_batch_that_cannot_be_captured_and_a_placement_of_another_graph_are_clear_errors(tmp_path, capsys,
                                                                                          monkeypatch):
    import sys

    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 4), torch.randn(3, 2)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)            # on a terminal: what it is doing
    with autoplace.compile(model, x, nn.functional.mse_loss, opt, targets=y, method="single-cpu",
                           cache=False, runtime="shm") as step:              # on a worker, as asked
        assert step.runtime == "shm"
        err = capsys.readouterr().err
        assert "capturing Linear" in err and "placing" in err and "setting up 2 workers" in err
        with pytest.raises(AutoplaceError, match="cannot trace"):
            step(torch.randn(5, 4), y)                                 # 5 inputs, 3 targets
        with pytest.raises(AutoplaceError, match="takes 2 tensors"):
            step(x)
        assert float(step(x, y)) > 0
    other = autoplace.place(autoplace.build_graph("toy-mlp", layers=1), autoplace.get_cluster("localhost"),
                            "single-cpu")
    with pytest.raises(AutoplaceError, match="not in graph"):
        autoplace.compile(model, x, nn.functional.mse_loss, opt, targets=y, placement=other)


def test_numpy_and_torch_scalars_stand_for_the_numbers_they_hold():
    import numpy as np

    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 4), torch.randn(4, 2)
    with autoplace.compile(model, x, nn.functional.mse_loss, opt, targets=y, method="single-cpu", cache=False,
                           seed=np.int64(3), micro_batches=torch.tensor(2), timeout=np.float32(60),
                           budget=np.float64(1.0), progress=np.bool_(False)) as step:
        assert step.micro_batches == 2 and type(step.micro_batches) is int
        assert float(step(x, y)) > 0
    with pytest.raises(AutoplaceError, match=r"^micro_batches must be one number, got a ndarray of shape \(2,\)$"):
        autoplace.compile(model, x, nn.functional.mse_loss, opt, targets=y, micro_batches=np.array([2, 2]))


class Normed(nn.Module):
    def __init__(self):
        super().__init__()
        # no bias before the norm: its gradient is zero but for rounding, which Adam would magnify
        self.net = nn.Sequential(nn.Linear(6, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)


def test_a_smaller_last_batch_trains_to_the_end_of_every_epoch_as_eager(tmp_path):
    torch.manual_seed(0)
    model = Normed()
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(6)
    data = [(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)) for n in (8, 8, 5)]
    epochs = data * 2                                                   # back to the full batch after the last
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    expected = eager(ref, ref_opt, nn.functional.cross_entropy, epochs)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                           method="metis", cache=tmp_path) as step:
        first = dict(step.placement.assignment)
        losses = [float(step(x, y)) for x, y in epochs]
        assert step.variants == 2 and dict(step.placement.assignment) == first
        state = step.state_dict()
        step.load_into(model, opt)
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max_diff(state, ref.state_dict()) < 1e-5                   # BatchNorm's running statistics too
    for name, p in ref.named_parameters():
        for k, v in ref_opt.state[p].items():
            assert float((v - opt.state[dict(model.named_parameters())[name]][k]).abs().max()) < 1e-5


def test_the_placement_cache_keys_on_graph_cluster_method_seed_and_budget(tmp_path):
    from autoplace.capture import capture_training_step
    from autoplace.cluster import get_cluster
    from autoplace.placement import Placement
    from autoplace.runtime.cache import cached_placement

    model = Normed()
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    capture = lambda lr: capture_training_step(model, x, nn.functional.cross_entropy,  # noqa: E731
                                               torch.optim.SGD(model.parameters(), lr=lr), targets=y)
    graph, cluster = capture(0.1), get_cluster("localhost")
    searches = []

    def search(g=graph):
        searches.append(1)
        return Placement.from_array(g, cluster, [len(searches) % 2] * g.n_ops, "stub")

    first, hit = cached_placement(graph, cluster, "stub", 0, None, search, tmp_path)
    assert not hit and len(searches) == 1
    again, hit = cached_placement(capture(0.5), cluster, "stub", 0, None, search, tmp_path)  # lr: an input
    assert hit and again == first and len(searches) == 1
    for args in (("stub", 1, None), ("stub", 0, 2.0), ("other", 0, None)):
        assert not cached_placement(graph, cluster, *args, search, tmp_path)[1]
    assert not cached_placement(graph, get_cluster("p100x2"), "stub", 0, None,
                                lambda: Placement.from_array(graph, get_cluster("p100x2"), [1] * graph.n_ops, "stub"),
                                tmp_path)[1]
    cached_placement(graph, cluster, "stub", 0, None, search, tmp_path / "one")
    path, = (tmp_path / "one").iterdir()
    path.write_text(json.dumps({**json.loads(path.read_text()), "assignment": {"nonsense": "cpu:0"}}))
    n = len(searches)
    _, hit = cached_placement(graph, cluster, "stub", 0, None, search, tmp_path / "one")  # damaged: searched again
    assert not hit and len(searches) == n + 1


@pytest.mark.slow
def test_placements_are_cached_saved_and_given_back(tmp_path):
    torch.manual_seed(0)
    model = Normed()
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cache = tmp_path / "cache"
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, method="metis",
                           cache=cache) as step:
        assert not step.placement_cached and set(step.setup_seconds) == {"capture", "place", "workers"}
        searched = dict(step.placement.assignment)
        step.save(tmp_path / "p.json")
    files = sorted(cache.glob("Normed-*.json"))
    assert len(files) == 1 and len(list(cache.glob("compile-Normed-*.json.gz"))) == 1   # the placement, the graph
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, method="metis",
                           cache=cache) as step:                        # the same model again: no search
        assert step.placement_cached and dict(step.placement.assignment) == searched
    opt.param_groups[0]["lr"] = 0.05                                    # a learning rate is no part of the key
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, method="metis",
                           cache=cache) as step:
        assert step.placement_cached
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, method="metis", seed=1,
                           cache=cache) as step:                        # another seed: another search
        assert not step.placement_cached
    files[0].write_text("{damaged")
    next(cache.glob("compile-Normed-*.json.gz")).write_bytes(b"\x1f\x8b damaged")
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, method="metis",
                           cache=cache) as step:                        # searched again, never trusted
        assert not step.placement_cached and dict(step.placement.assignment) == searched
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, placement=tmp_path / "p.json",
                           cache=False) as step:
        assert dict(step.placement.assignment) == searched and step.setup_seconds["place"] < 5
    with pytest.raises(AutoplaceError, match="cache must be"):
        autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, cache=3)


def test_the_capture_key_holds_what_the_trace_reads():
    from autoplace.capture.cache import capture_key

    torch.manual_seed(0)
    model = Normed()
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    key = capture_key(model, x, nn.functional.cross_entropy, opt, y)
    assert key is not None and key == capture_key(model, x, nn.functional.cross_entropy, opt, y)
    assert __file__ in key["files"]                                    # the file defining Normed, hashed
    opt.param_groups[0]["lr"] = 0.5                                    # an input, not part of the trace
    assert capture_key(model, x, nn.functional.cross_entropy, opt, y) == key
    model.act, model.cfg, model._causal = torch.relu, {"double": True}, True
    key = capture_key(model, x, nn.functional.cross_entropy, opt, y)
    assert key is not None and "relu" in json.dumps(key["modules"][0])
    changes = [
        lambda m, o: setattr(m.net[1], "momentum", 0.5),               # configuration a forward reads
        lambda m, o: setattr(m, "act", torch.tanh),                    # (the copy's key has act = relu)
        lambda m, o: setattr(m, "cfg", {"double": False}),
        lambda m, o: setattr(m, "_causal", False),
        lambda m, o: m.eval(),
        lambda m, o: m.net[3].weight.requires_grad_(False),
        lambda m, o: o.param_groups[0].update(eps=1e-3),
    ]
    for change in changes:
        m2 = copy.deepcopy(model)
        o2 = torch.optim.Adam(m2.parameters(), lr=1e-2)
        change(m2, o2)
        assert capture_key(m2, x, nn.functional.cross_entropy, o2, y) != key
    assert capture_key(model, torch.randn(5, 6), nn.functional.cross_entropy, opt, y) != key   # another shape
    weights = torch.ones(3)
    assert capture_key(model, x, lambda o, t: nn.functional.cross_entropy(o, t, weight=weights), opt, y) is None


@pytest.mark.slow
def test_the_readme_python_section_runs_as_written(tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "readme_example.py"
    script.write_text(code)                                 # no __main__ guard, as a user would write it
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", out.stdout)]
    assert len(losses) == 5 and losses[-1] < losses[0]
    assert "cpu:0" in out.stdout and "PlacedStep" in out.stdout


class TiedLM(TinyLM):
    """TinyLM whose output layer shares the embedding's matrix."""

    def __init__(self):
        super().__init__()
        self.head.weight = self.emb.weight


def covering_keys(device_map: dict, name: str) -> list[str]:
    return [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]


def test_module_granularity_trains_as_eager_and_exports_a_device_map_accelerate_applies(tmp_path):
    torch.manual_seed(0)
    model = TiedLM()
    ref = copy.deepcopy(model)
    data = batches(5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    expected = eager(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), lm_loss, data)
    with autoplace.compile(model, data[0][0], lm_loss, opt, targets=data[0][1], method="metis",
                           granularity="module") as step:
        assert step.graph.meta["tied"] == {"head.weight": "emb.weight"}
        assert len(set(step.devices.values())) == 2
        losses = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
        dmap = step.device_map()
        owner = {n: step.placement.assignment[n] for n in step.parameters}
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max_diff(state, ref.state_dict()) < 1e-5                  # tied names included
    TiedLM().load_state_dict(state)                                   # strict
    modules = dict(model.named_modules())
    assert all(k in modules for k in dmap)                            # every key is a module of the model
    for name, _ in model.named_parameters(remove_duplicate=False):    # every parameter, tied ones too, once
        assert len(covering_keys(dmap, name)) == 1, name
    for name, d in owner.items():                                     # where the placement put it
        assert step.cluster.devices[[x.name for x in step.cluster.devices].index(d)].kind == "cpu"
    assert covering_keys(dmap, "head.weight") and owner["emb.weight"] == owner["head.bias"]   # tied: together
    accelerate = pytest.importorskip("accelerate")
    dispatched = accelerate.dispatch_model(copy.deepcopy(ref), device_map=dmap)
    x = data[0][0]
    assert torch.allclose(dispatched(x), ref(x))
    # localhost's workers are all torch's "cpu": the same module-granular graph on four GPUs, by two placers
    from autoplace.cluster import get_cluster
    from autoplace.runtime.export import device_map

    gpus = get_cluster("k80x4")
    for method in ("metis", "scotch"):
        dmap = device_map(step.graph, autoplace.place(step.graph, gpus, method, seed=0), gpus)
        assert len(set(dmap.values())) >= 2 and all(k in modules for k in dmap), (method, dmap)
        for name, _ in model.named_parameters(remove_duplicate=False):
            assert len(covering_keys(dmap, name)) == 1, (method, name)
        assert dmap[covering_keys(dmap, "head.weight")[0]] == dmap[covering_keys(dmap, "emb.weight")[0]]


def test_an_op_granularity_split_of_a_module_says_how_to_get_a_device_map():
    torch.manual_seed(0)
    model = TinyLM()
    data = batches(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    from autoplace.capture import capture_training_step
    from autoplace.cluster import get_cluster
    from autoplace.placement import Placement
    from autoplace.runtime.export import device_map

    graph = capture_training_step(model, data[0][0], lm_loss, opt, targets=data[0][1])
    cluster = get_cluster("k80x2")                                       # cpu:0, gpu:0, gpu:1
    split = [2 if op.colocation_group == "head.bias" else 1 for op in graph.ops]
    with pytest.raises(AutoplaceError, match="module 'head'.*granularity module"):
        device_map(graph, Placement.from_array(graph, cluster, split, "manual"), cluster)
    from autoplace.granularity import with_granularity
    from autoplace.placers import place

    whole = with_granularity(graph, "module")
    dmap = device_map(whole, place(whole, cluster, "metis", seed=0), cluster)
    assert len(set(dmap.values())) == 2                                   # a real split, kept whole per module
    for name, _ in model.named_parameters():
        assert len(covering_keys(dmap, name)) == 1


def test_place_with_module_granularity_then_export_a_device_map_from_the_command_line(tmp_path, capsys):
    import json

    from autoplace.capture import capture_training_step
    from autoplace.cli import main
    from autoplace.formats import save_graph

    torch.manual_seed(0)
    model = TiedLM()
    data = batches(1)
    graph = capture_training_step(model, data[0][0], lm_loss, torch.optim.SGD(model.parameters(), lr=0.1),
                                  targets=data[0][1])
    save_graph(graph, tmp_path / "lm.json")
    g, p, dm = (str(tmp_path / n) for n in ("lm.json", "p.json", "dm.json"))
    assert main(["place", g, "-c", "k80x2", "-m", "metis", "--granularity", "module", "-o", p]) == 0
    assert main(["export", g, "-p", p, "-c", "k80x2", "-o", str(tmp_path / "placed.py"), "--device-map", dm]) == 0
    dmap = json.loads(open(dm).read())
    assert len(set(dmap.values())) == 2
    for name, _ in model.named_parameters(remove_duplicate=False):
        assert len(covering_keys(dmap, name)) == 1, name
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["place", g, "-c", "k80x2", "-m", "metis", "--granularity", "layer", "-o", p])
    assert e.value.code == 2 and "granularity" in capsys.readouterr().err


def test_keyword_inputs_train_through_compile_as_eager():
    from test_capture import Keyworded

    torch.manual_seed(0)
    model = Keyworded()
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(3)
    data = [({"input_ids": torch.randint(0, 20, (4, 5), generator=g), "attention_mask": torch.ones(4, 5)},
             torch.randint(0, 3, (4,), generator=g)) for _ in range(3)]
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    expected = []
    for x, y in data:
        ref_opt.zero_grad()
        loss = nn.functional.cross_entropy(ref(**x), y)
        loss.backward()
        ref_opt.step()
        expected.append(loss.item())
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                           method="metis") as step:
        assert [float(step(x, y)) for x, y in data] == pytest.approx(expected, abs=1e-5)
        assert max_diff(step.state_dict(), ref.state_dict()) < 1e-5


class Mixed(nn.Module):
    """A frozen layer, a layer the loss never reaches, a non-persistent buffer."""

    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(6, 8)
        self.frozen.weight.requires_grad_(False)
        self.fc = nn.Linear(8, 3)
        self.unused = nn.Linear(3, 3)
        self.register_buffer("scale", torch.tensor(2.0), persistent=False)

    def forward(self, x):
        return self.fc(torch.tanh(self.frozen(x)) * self.scale)


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    lambda ps: torch.optim.NAdam(ps, lr=1e-2),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True),              # traced ops, run as foreach does
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True),
], ids=["adamw", "nadam", "sgd-nesterov", "adam-foreach", "adamw-fused"])
def test_optimizers_frozen_unused_and_unsaved_state_train_as_eager(make_opt):
    torch.manual_seed(0)
    model = Mixed()
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(4)
    data = [(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)) for _ in range(4)]
    expected = eager(ref, make_opt(ref.parameters()), nn.functional.cross_entropy, data)
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, make_opt(model.parameters()),
                           targets=data[0][1], method="metis") as step:
        before = step.state_dict()                                     # before any step: the module's own
        assert max_diff(before, model.state_dict()) == 0.0
        losses = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
    assert losses == pytest.approx(expected, abs=1e-5)
    assert list(state) == list(ref.state_dict()) and "scale" not in state
    assert max_diff(state, ref.state_dict()) < 1e-5                   # frozen and unused weights untouched
    Mixed().load_state_dict(state)                                     # strict


def eager_scheduled(model, optimizer, scheduler, loss_fn, data):
    losses = eager(model, optimizer, loss_fn, data[:1])
    scheduler.step()
    for batch in data[1:]:
        losses += eager(model, optimizer, loss_fn, [batch])
        scheduler.step()
    return losses


@pytest.mark.parametrize("make", [
    pytest.param(lambda m: (o := torch.optim.SGD(m.parameters(), lr=1, momentum=0.5),   # an int: an input too
                            torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.3)),
                 id="sgd-int-steplr", marks=pytest.mark.slow),
    pytest.param(lambda m: (o := torch.optim.Adam(m.parameters(), lr=2e-2),
                            torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5)), id="adam-cosine"),
    pytest.param(lambda m: (o := torch.optim.Adam(m.parameters(), lr=2e-2),      # cycles Adam's beta1 too
                            torch.optim.lr_scheduler.OneCycleLR(o, max_lr=5e-2, total_steps=6)), id="adam-onecycle"),
    pytest.param(lambda m: (o := torch.optim.AdamW([{"params": m[0].parameters()},
                                                    {"params": m[2].parameters(), "lr": 5e-2}],
                                                   lr=1e-2, weight_decay=0.1, fused=True),  # two groups, one kernel
                            torch.optim.lr_scheduler.LambdaLR(o, [lambda s: min(1.0, (s + 1) / 3),
                                                                  lambda s: 0.5 ** s])),
                 id="adamw-fused-warmup", marks=pytest.mark.slow),
])
def test_learning_rate_schedulers_reach_the_placed_step_as_in_eager(make):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(5)
    data = [(torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)) for _ in range(6)]
    expected = eager_scheduled(ref, *make(ref), nn.functional.cross_entropy, data)
    opt, sched = make(model)
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                           method="metis") as step:
        assert len(set(step.devices.values())) == 2                       # the parameters really are split
        losses = []
        for x, y in data:
            losses.append(float(step(x, y)))
            sched.step()                                                    # unchanged: it sets param_groups' lr
        state = step.state_dict()
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max_diff(state, ref.state_dict()) < 1e-5
    assert opt.param_groups[-1]["lr"] != opt.param_groups[-1]["initial_lr"]  # the schedule did move


def test_mistakes_with_a_compiled_step_are_clear_errors():
    from test_capture import Keyworded

    model = Keyworded()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, dampening=0.5)
    x = {"input_ids": torch.randint(0, 20, (4, 5)), "attention_mask": torch.ones(4, 5)}
    y = torch.randint(0, 3, (4,))
    with pytest.raises(AutoplaceError, match="dampening"):
        autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y)
    with pytest.raises(AutoplaceError, match="input 'scale' is a float, not a tensor"):
        autoplace.compile(model, {**x, "scale": 2.0}, nn.functional.cross_entropy,
                          torch.optim.SGD(model.parameters(), lr=0.1), targets=y)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref = copy.deepcopy(model)
    with autoplace.compile(model, x, nn.functional.cross_entropy, opt, targets=y, method="metis") as step:
        ids = torch.randint(0, 20, (4, 5))
        mask = (torch.rand(4, 5) > 0.5).float()                        # given in the other order: matched by name
        swapped = float(step({"attention_mask": mask, "input_ids": ids}, y))
        expected = nn.functional.cross_entropy(ref(input_ids=ids, attention_mask=mask), y).item()
        assert swapped == pytest.approx(expected, abs=1e-6)
        with pytest.raises(AutoplaceError, match="keyword inputs"):
            step({"input_ids": ids}, y)
        torch.optim.lr_scheduler.StepLR(opt, step_size=100)             # attaching one changes nothing yet
        step(x, y)
        opt.param_groups[0]["weight_decay"] = 0.1                      # a constant of the captured step
        with pytest.raises(AutoplaceError, match=r"param_groups\[0\]\['weight_decay'\] changed after compile"):
            step(x, y)
        opt.param_groups[0]["weight_decay"] = 0.0
        other = nn.Sequential(nn.Linear(3, 2))                        # another model: nothing copied in silence
        before = [p.detach().clone() for p in other.parameters()]
        with pytest.raises(AutoplaceError, match="another model"):
            step.load_into(other)
        assert all(torch.equal(a, b) for a, b in zip(before, other.parameters()))
        resized = Keyworded()
        resized.emb = nn.Embedding(21, 8)                              # one parameter of another shape
        with pytest.raises(AutoplaceError, match="has shape"):
            step.load_into(resized)
        same = copy.deepcopy(ref)
        step.load_into(same)                                           # the same model: every parameter copied
        assert not torch.equal(same.fc.weight, ref.fc.weight)
    for make in (torch.optim.ASGD, torch.optim.Adagrad):               # optimizers that cannot run: one line
        other = Keyworded()
        with pytest.raises(AutoplaceError, match="ASGD cannot be captured|Adagrad and Rprop"):
            autoplace.compile(other, x, nn.functional.cross_entropy, make(other.parameters(), lr=0.1), targets=y)


def test_a_module_with_its_own_parameters_keeps_its_submodules_with_it():
    from autoplace.capture import capture_training_step
    from autoplace.granularity import with_granularity

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Parameter(torch.ones(8))
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return self.fc(x) * self.gate

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.block(x))

    model = Net()
    g = capture_training_step(model, torch.randn(4, 8), nn.functional.cross_entropy,
                              torch.optim.SGD(model.parameters(), lr=0.1), targets=torch.randint(0, 3, (4,)))
    whole = with_granularity(g, "module")
    group = {op.name: op.colocation_group for op in whole.ops}
    assert group["block.gate"] == group["block.fc.weight"] == group["block.fc.bias"]   # the subtree with its owner
    assert group["head.weight"] != group["block.gate"]                                  # siblings stay apart


class Residual(nn.Module):
    """Blocks without parameters of their own: the residual add and the activation belong to no module
    that has parameters (dispatch_model runs them where their inputs are)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.ModuleDict({"a": nn.Linear(8, 8), "b": nn.Linear(8, 8)}) for _ in range(3))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        for blk in self.blocks:
            x = x + blk["b"](torch.relu(blk["a"](x)))
        return self.head(x)


def test_module_granularity_places_what_no_module_owns_as_dispatch_model_runs_it(tmp_path, capsys):
    from autoplace.capture import capture_training_step
    from autoplace.cli import main
    from autoplace.cluster import get_cluster
    from autoplace.formats import save_graph
    from autoplace.granularity import with_granularity
    from autoplace.runtime.export import device_map, from_device_map, input_device
    from autoplace.runtime.program import torch_device as torch_device_of

    torch.manual_seed(0)
    model = Residual()
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    graph = capture_training_step(model, x, nn.functional.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1),
                                  targets=y)
    g = with_granularity(graph, "module")
    group = {op.name: op.colocation_group for op in g.ops}
    io = {group[op.name] for op in g.ops if op.type == "input" or (op.scope or "").startswith("loss")}
    assert io == {"module:(inputs and loss)"}
    for op in g.ops:                                   # a residual add: with the op producing its first input
        if op.type == "aten.add" and op.phase == "forward" and op.scope and op.scope.startswith("blocks."):
            assert group[op.name] == group[op.inputs[0].split(":")[0]] is not None
    assert group["blocks.0.a.weight"] != group["blocks.0.b.weight"]
    whole = {op.name: op.colocation_group for op in with_granularity(graph, "module", ["ModuleDict"]).ops}
    assert whole["blocks.0.a.weight"] == whole["blocks.0.b.weight"] != whole["blocks.1.a.weight"]
    with pytest.raises(AutoplaceError, match="no module of class 'Block' \\(its classes: Linear, ModuleDict"):
        with_granularity(graph, "module", ["Block"])
    cluster = get_cluster("k80x4")
    placement = autoplace.place(g, cluster, "metis")
    assert len(set(placement.assignment.values())) >= 2
    dmap = device_map(g, placement, cluster)
    back = from_device_map(g, cluster, dmap, inputs_on=placement.assignment["input0"])
    assert dict(back.assignment) == dict(placement.assignment)           # the map runs as placed
    assert input_device(g, placement, cluster) == torch_device_of(placement.assignment["input0"])
    path = tmp_path / "g.json"
    save_graph(graph, path)
    (tmp_path / "map.json").write_text(json.dumps({"blocks": 0, "head": 1}))
    capsys.readouterr()
    assert main(["simulate", str(path), "-c", "k80x4", "-p", str(tmp_path / "map.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    assert main(["compare", str(path), "-c", "k80x4", "--methods", "single-gpu", "--device-map",
                 str(tmp_path / "map.json"), "--json"]) == 0
    rows = [r["method"] for r in json.loads(capsys.readouterr().out)["rows"]]
    assert rows == ["single-gpu", "device map map.json"]
    for bad, why in (({"blocks": 7}, "'blocks' -> 7: cluster 'k80x4' has 4 GPUs"),
                     ({"blocks": "cuda:a"}, "'blocks' -> 'cuda:a': not a device of cluster 'k80x4'"),
                     ({"blocks": "cudagraph"}, "'blocks' -> 'cudagraph': not a device"),
                     ({"blokcs": 0, "head": 1}, "'blokcs' is not a module of")):
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        assert main(["simulate", str(path), "-c", "k80x4", "-p", str(tmp_path / "bad.json")]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, err
