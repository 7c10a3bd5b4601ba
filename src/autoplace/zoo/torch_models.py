"""The papers' benchmark models in plain torch (no torchvision), unrolled like the papers' graphs.

Recurrent models run explicit per-step LSTM cells (each cell of each layer at each time step is its own
set of ops, as in TensorFlow's unrolled graphs) and tag every op with its structural metadata through
:func:`autoplace.capture.tag`: ``layer``, ``step`` and ``role`` (``embedding``, ``lstm``,
``attention``, ``softmax``, ``encoder``/``decoder`` ...), which expert placements and grouping read.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autoplace.capture import tag

__all__ = ["LSTMCell", "RNNLM"]


class LSTMCell(nn.Module):
    """One LSTM cell (Hochreiter & Schmidhuber 1997), written out so FLOP counters see its matmuls::

        i, f, g, o = split(x W_ih^T + h W_hh^T + b)
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c')
    """

    def __init__(self, input_size: int, hidden: int):
        super().__init__()
        self.hidden = hidden
        self.weight_ih = nn.Parameter(torch.randn(4 * hidden, input_size) * input_size ** -0.5)
        self.weight_hh = nn.Parameter(torch.randn(4 * hidden, hidden) * hidden ** -0.5)
        self.bias = nn.Parameter(torch.zeros(4 * hidden))

    def forward(self, x, h, c):
        gates = F.linear(x, self.weight_ih, self.bias) + F.linear(h, self.weight_hh)
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class RNNLM(nn.Module):
    """Recurrent neural network language model (Zaremba et al. 2014; Jozefowicz et al. 2016), as in
    Mirhoseini et al. 2017 §4.1: ``layers`` LSTM layers of ``hidden`` units unrolled for ``steps`` steps,
    a softmax prediction at every step. Input ``tokens`` is ``[steps, batch]``."""

    def __init__(self, vocab: int, hidden: int, layers: int, steps: int):
        super().__init__()
        self.steps = steps
        self.embedding = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(LSTMCell(hidden, hidden) for _ in range(layers))
        self.softmax = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        batch = tokens.shape[1]
        h = [tokens.new_zeros(batch, cell.hidden, dtype=torch.float32) for cell in self.layers]
        c = [x.clone() for x in h]
        logits = []
        for t in range(self.steps):
            with tag(step=t, layer=0, role="embedding"):
                x = self.embedding(tokens[t])
            for k, cell in enumerate(self.layers):
                with tag(step=t, layer=k, role="lstm"):
                    h[k], c[k] = cell(x, h[k], c[k])
                x = h[k]
            with tag(step=t, layer=len(self.layers) - 1, role="softmax"):
                logits.append(self.softmax(x))
        return logits


def sequence_loss(logits, targets):
    """Mean cross-entropy over steps; each step's softmax loss is its own group of ops (role=softmax)."""
    total = 0.0
    for t, step_logits in enumerate(logits):
        with tag(step=t, role="softmax"):
            total = total + F.cross_entropy(step_logits, targets[t])
    return total / len(logits)
