"""autoplace.compile: a PyTorch model's training step captured, placed over two CPU worker processes and
trained there, against eager PyTorch step by step; a saved placement; state back into the module."""

from __future__ import annotations

import copy

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


def test_a_batch_of_another_shape_and_a_placement_of_another_graph_are_clear_errors(tmp_path):
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 4), torch.randn(3, 2)
    with autoplace.compile(model, x, nn.functional.mse_loss, opt, targets=y, method="single-cpu") as step:
        with pytest.raises(AutoplaceError, match="input0.*shape \\(5, 4\\)"):
            step(torch.randn(5, 4), y)
        with pytest.raises(AutoplaceError, match="takes 2 tensors"):
            step(x)
        assert float(step(x, y)) > 0
    other = autoplace.place(autoplace.build_graph("toy-mlp", layers=1), autoplace.get_cluster("localhost"),
                            "single-cpu")
    with pytest.raises(AutoplaceError, match="not in graph"):
        autoplace.compile(model, x, nn.functional.mse_loss, opt, targets=y, placement=other)


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
