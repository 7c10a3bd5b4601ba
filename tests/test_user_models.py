"""The three user models the capture benchmarks build (``autoplace.bench.user_models``): each at the sizes
asked, reproducible, and trainable as written."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from autoplace.bench import user_models  # noqa: E402


@pytest.mark.parametrize("key, sizes, n_params", [
    ("resnet", {"blocks": 1}, 2 * 64 * 64 * 9 + 4 * 64 + 3 * 64 * 9 + 2 * 64 + 64 * 10 + 10),
    ("resnet", {"blocks": 1, "stem_norm": False}, 2 * 64 * 64 * 9 + 4 * 64 + 3 * 64 * 9 + 64 + 64 * 10 + 10),
    ("gpt", {"vocab": 50, "d": 16, "layers": 1, "heads": 2, "seq": 8, "batch": 2},
     50 * 16 + 8 * 16 + (4 * 16 + 16 * 48 + 48 + 16 * 16 + 16 + 16 * 64 + 64 + 64 * 16 + 16) + 2 * 16),
    ("unet", {"channels": 4, "size": 16, "batch": 2}, None),
])
def test_each_model_builds_at_its_sizes_and_trains(key, sizes, n_params):
    name, model, x, loss, y = user_models.MODELS[key](**sizes)
    if n_params is not None:   # the tied head counts once
        assert sum(p.numel() for p in model.parameters()) == n_params
    out = model(x)
    value = loss(out, y)
    value.backward()
    assert torch.isfinite(value) and all(p.grad is not None for p in model.parameters())
    again = user_models.MODELS[key](**sizes)
    assert torch.equal(again.inputs, x) and all(torch.equal(a, b) for a, b in zip(again.model.parameters(),
                                                                                   model.parameters()))


def test_the_gpt_head_is_the_embedding():
    m = user_models.gpt(vocab=50, d=16, layers=1, heads=2, seq=8, batch=2).model
    assert m.head.weight is m.tok.weight


def test_unet_keeps_the_image_size():
    u = user_models.unet(channels=4, size=16, batch=2)
    assert u.model(u.inputs).shape == (2, 2, 16, 16)
