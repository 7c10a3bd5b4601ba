"""Micro-batches in the captured step: ``micro_batches=M`` is gradient accumulation over M equal slices of the
batch and one update, equal to eager PyTorch's accumulation (BatchNorm's per-micro-batch statistics too)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import autoplace  # noqa: E402
from autoplace.capture import capture_training_step  # noqa: E402
from autoplace.errors import AutoplaceError  # noqa: E402


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def _accumulated(model, opt, data, m: int) -> list[float]:
    """Eager gradient accumulation: each micro-batch's loss / m backward, one step; the losses summed."""
    losses = []
    for x, y in data:
        opt.zero_grad()
        total = 0.0
        for xm, ym in zip(x.chunk(m), y.chunk(m)):
            loss = nn.functional.cross_entropy(model(xm), ym) / m
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    return losses


def accumulation_case(m: int, seed: int, steps: int = 2):
    """A fresh ``_net``, 2 batches of 8 and what eager accumulation over ``m`` micro-batches with SGD and
    momentum makes of a copy: ``(model, its optimizer, data, expected losses, the trained copy)``."""
    model = _net()
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    data = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(steps)]
    expected = _accumulated(ref, OPTIMIZERS["sgd"](ref.parameters()), data, m)
    return model, OPTIMIZERS["sgd"](model.parameters()), data, expected, ref


OPTIMIZERS = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),   # the gradients' scale matters
              "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2)}


@pytest.mark.parametrize("m, opt_name", [(2, "sgd"), pytest.param(4, "adam", marks=pytest.mark.slow)])
def test_micro_batched_placed_training_equals_eager_gradient_accumulation(m, opt_name):
    model = _net()
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(3)]
    expected = _accumulated(ref, OPTIMIZERS[opt_name](ref.parameters()), data, m)
    opt = OPTIMIZERS[opt_name](model.parameters())
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1], method="metis",
                           micro_batches=m, cache=False, progress=False) as step:
        assert len(set(step.devices.values())) == 2
        losses = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max(float((state[k] - v).abs().max()) for k, v in ref.state_dict().items()) < 1e-5  # running stats too


def test_micro_batches_are_tagged_and_bad_counts_are_clear_errors():
    model = _net()
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = capture_training_step(model, x, nn.functional.cross_entropy, opt, targets=y, micro_batches=2)
    tagged = [op for op in g.ops if "micro_batch" in op.meta]
    assert {op.meta["micro_batch"] for op in tagged} == {0, 1}
    for m in (0, 1):                       # each micro-batch has its own forward and backward
        assert {op.phase for op in tagged if op.meta["micro_batch"] == m} >= {"forward", "backward"}
    one = capture_training_step(model, x, nn.functional.cross_entropy, opt, targets=y)
    assert not any("micro_batch" in op.meta for op in one.ops) and g.n_ops > one.n_ops
    with pytest.raises(AutoplaceError, match="micro_batches=3 does not divide the batch of 8"):
        capture_training_step(model, x, nn.functional.cross_entropy, opt, targets=y, micro_batches=3)
    with pytest.raises(AutoplaceError, match="micro_batches must be a positive integer"):
        capture_training_step(model, x, nn.functional.cross_entropy, opt, targets=y, micro_batches=0)
    with pytest.raises(AutoplaceError, match="batched along its first dimension, of one size"):
        capture_training_step(model, x, nn.functional.cross_entropy, opt, targets=y[:4], micro_batches=2)


def test_capture_takes_micro_batches_from_the_command_line(tmp_path, capsys):
    from autoplace.cli import main
    from autoplace.formats import load_graph

    (tmp_path / "fac.py").write_text(
        "import torch\nfrom torch import nn\n\n\ndef make():\n    torch.manual_seed(0)\n"
        "    m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))\n"
        "    return m, torch.randn(8, 6), nn.functional.cross_entropy, torch.optim.SGD(m.parameters(), lr=0.1), "
        "torch.randint(0, 3, (8,))\n")
    out = tmp_path / "g.json"
    assert main(["capture", f"{tmp_path / 'fac.py'}:make", "--micro-batches", "4", "-o", str(out)]) == 0
    assert {op.meta.get("micro_batch") for op in load_graph(out).ops} == {0, 1, 2, 3, None}
    assert main(["capture", f"{tmp_path / 'fac.py'}:make", "--micro-batches", "3", "-o", str(tmp_path / "x.json")]) == 2
    assert "micro_batches=3 does not divide the batch of 8" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_compile_chooses_the_micro_batch_count_and_trains_as_eager_accumulation():
    """``micro_batches="auto"``: each count of AUTO_MICRO_BATCHES dividing the batch is captured and placed,
    the fastest simulated kept; the step then equals eager accumulation over that count."""
    from autoplace.api import AUTO_MICRO_BATCHES

    model = _net()
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(4)
    # batches of 16: every count's micro-batch has 2 rows or more, which BatchNorm needs
    data = [(torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(2)]
    opt = OPTIMIZERS["sgd"](model.parameters())
    from autoplace.cluster import get_cluster
    from autoplace.placers import place
    from autoplace.sim import simulate

    cluster = get_cluster("localhost")
    simulated = {}
    for m in AUTO_MICRO_BATCHES:                      # what compile weighs, done by hand
        try:
            graph = capture_training_step(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                                          micro_batches=m)
        except AutoplaceError:                        # BatchNorm cannot train on micro-batches of 1
            continue
        simulated[m] = simulate(graph, cluster, place(graph, cluster, "metis", seed=0)).step_time
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1], method="metis",
                           micro_batches="auto", cache=False, progress=False) as step:
        assert step.micro_batches == min(simulated, key=simulated.get)
        assert step.setup_seconds["capture"] > 0 and step.setup_seconds["place"] > 0
        losses = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
    expected = _accumulated(ref, OPTIMIZERS["sgd"](ref.parameters()), data, step.micro_batches)
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max(float((state[k] - v).abs().max()) for k, v in ref.state_dict().items()) < 1e-5
    with pytest.raises(AutoplaceError, match="micro_batches='auto' chooses the placement too"):
        autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                          placement="p.json", micro_batches="auto")



@pytest.mark.slow
def test_auto_micro_batches_ranks_every_count_cheaply_and_searches_the_best_once(monkeypatch, capsys):
    """With ``method="auto"`` each count is ranked by the fast placers (and the pipeline placer), auto's
    search runs on the best count only, and what each count simulated is recorded and logged."""
    import autoplace.api

    model = _net()
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
    searched = []
    real = autoplace.api.place

    def counting(graph, cluster, method, **kw):
        searched.append((method, graph.n_ops))
        return real(graph, cluster, method, **kw)

    monkeypatch.setattr(autoplace.api, "place", counting)
    with autoplace.compile(model, x, nn.functional.cross_entropy, OPTIMIZERS["sgd"](model.parameters()),
                           targets=y, micro_batches="auto", cache=False, budget=1, verify=False) as step:
        records = step.micro_batch_choice
        assert [r["micro_batches"] for r in records] == [1, 2, 4, 8]
        ranked = [r for r in records if "skipped" not in r]
        assert all(r["simulated_s"] > 0 and r["ranked_by"] for r in ranked)
        chosen = [r for r in records if r["chosen"]]
        assert len(chosen) == 1 and chosen[0]["micro_batches"] == step.micro_batches
        assert chosen[0] == min(ranked, key=lambda r: (not r["fits"], r["simulated_s"]))
        assert [s for s in searched if s[0] == "auto"] == [("auto", chosen[0]["ops"])]   # one search: the best
        assert chosen[0]["search_budget_s"] == 1                                  # the budget given
        assert "micro-batches: " in step.report() and "* " in step.report()
        assert float(step(x, y)) > 0
    err = capsys.readouterr().err
    assert "ranking 2 micro-batches" in err and "[autoplace +" in err      # plain lines: stderr is no terminal


def test_auto_micro_batches_searches_the_chosen_count_with_the_default_budget_over_the_count(monkeypatch):
    """On two P100s a 4-layer MLP pipelines best over 2 micro-batches: the search there gets 60 s / 2."""
    import autoplace.api
    from autoplace.api import _choose_micro_batches
    from autoplace.cluster import get_cluster
    from autoplace.placers import place
    from autoplace.search.work import DEFAULT_BUDGET_S

    with torch.device("meta"):
        model = nn.Sequential(*[nn.Sequential(nn.Linear(2048, 2048), nn.ReLU()) for _ in range(4)],
                              nn.Linear(2048, 10))
        x, y = torch.randn(256, 2048), torch.randint(0, 10, (256,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cluster = get_cluster("p100x2")
    monkeypatch.setattr(autoplace.api, "AUTO_MICRO_BATCHES", (1, 2))   # the counts that matter here
    asked = []

    def capture(inputs, targets, name, m):
        return capture_training_step(model, inputs, nn.functional.cross_entropy, opt, targets=targets,
                                     micro_batches=m)

    def search(graph, work=None):                               # the budget asked for; a quick placement
        asked.append(work)
        return place(graph, cluster, "pipeline", seed=0), False

    m, _, _, _, records = _choose_micro_batches(capture, search, x, y, "mlp", cluster, "auto", 0, None,
                                                lambda _s: None, {})
    assert m == 2 and asked == [DEFAULT_BUDGET_S["auto"] / 2]
    assert [r["search_budget_s"] for r in records if r["chosen"]] == asked
