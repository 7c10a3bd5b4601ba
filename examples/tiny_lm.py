"""A small transformer language model's training step, for ``autoplace capture`` (the README's tour).

    autoplace capture examples/tiny_lm.py:make_step -o tiny_lm.json.gz
"""

import torch
from torch import nn


class TinyLM(nn.Module):
    """Token embedding, four transformer encoder layers and a vocabulary head."""

    def __init__(self, vocab: int = 8000, width: int = 512, layers: int = 4, heads: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


def make_step():
    """(model, example inputs, loss, optimizer, targets): one batch of 32 sequences of 128 tokens."""
    torch.manual_seed(0)
    model = TinyLM()
    tokens = torch.randint(0, 8000, (32, 128))

    def loss_fn(logits, targets):
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    return model, tokens, loss_fn, torch.optim.Adam(model.parameters(), lr=1e-3), torch.randint(0, 8000, (32, 128))
