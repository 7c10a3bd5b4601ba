"""The papers' benchmark models, registered in the zoo and captured (with caching) on first use."""

from __future__ import annotations

from typing import Any

from autoplace.graph import Graph
from autoplace.zoo import register_model
from autoplace.zoo._cache import cached_graph

__all__: list[str] = []


def _captured(name: str, params: dict[str, Any], make) -> Graph:
    """Capture ``make(**params) -> (model, inputs, loss_fn, optimizer, targets)`` through the cache."""

    def build() -> Graph:
        import torch

        from autoplace.capture import capture_training_step

        torch.manual_seed(0)
        with torch.device("meta"):  # parameters of the full-size model are never allocated
            model, inputs, loss_fn, optimizer, targets = make(**params)
        return capture_training_step(model, inputs, loss_fn, optimizer, targets=targets, name=name)

    return cached_graph(name, params, build)


def _rnnlm(vocab: int, hidden: int, layers: int, steps: int, batch: int):
    import torch

    from autoplace.zoo.torch_models import RNNLM, sequence_loss

    model = RNNLM(vocab, hidden, layers, steps)
    tokens = torch.zeros(steps, batch, dtype=torch.int64)
    return model, tokens, sequence_loss, torch.optim.Adam(model.parameters(), lr=1e-3), tokens


def _register_rnnlm(name: str, paper: str, **defaults: Any) -> None:
    @register_model(name, description=f"RNN language model, {defaults['layers']} LSTM layers of "
                    f"{defaults['hidden']}, {defaults['steps']} unrolled steps, batch {defaults['batch']}",
                    paper=paper, **defaults)
    def factory(**params: Any) -> Graph:
        return _captured(name, params, _rnnlm)


_register_rnnlm("rnnlm-2", "Mirhoseini et al. 2017 §4.1", vocab=10000, hidden=2048, layers=2, steps=40, batch=64)
_register_rnnlm("rnnlm-2-large", "Mirhoseini et al. 2017 §4.3 (fits no single device)",
                vocab=10000, hidden=4096, layers=2, steps=40, batch=256)
_register_rnnlm("rnnlm-4", "GDP §4 (Zhou et al.)", vocab=10000, hidden=2048, layers=4, steps=40, batch=64)
_register_rnnlm("rnnlm-8", "GDP §4 (Zhou et al.)", vocab=10000, hidden=2048, layers=8, steps=40, batch=64)
