"""GDP's placement network (Zhou et al., §3.2–3.3): a Transformer-XL over the nodes in topological order
with segment-level recurrence, and parameter superposition on its dense layers (eq. 4).

*Segment-level recurrence* (Dai et al. 2019): the nodes are read ``segment`` at a time; layer ``l`` of a
segment attends over its own inputs and a memory of the ``memory`` inputs of layer ``l`` that came before
(the previous segments'), cached with the gradient stopped. Attention is causal: node ``i`` sees the
nodes before it and itself, so that with a memory as long as the graph, segments compute exactly what one
long segment would (only the gradient differs). GDP removes the positional embedding (the graph embedding
carries the topology), and so does this network.

*Superposition* (eq. 4): every dense layer ``g`` of the placer reads its input multiplied elementwise by a
conditioning vector of the graph, ``x^{(l+1)} = g^{(l)}(c(x^{(0)}) ⊙ x^{(l)})``. ``c`` is "an additional
transformer layer" over the graph embedding ``x^{(0)}``: here one transformer encoder layer over the
segment means of ``x^{(0)}`` (one token per segment, so its cost stays linear in the graph's size),
mean-pooled, and one linear head per dense layer through ``2 sigmoid(·)``. The heads start at zero, so
``c = 1`` and a fresh network is the plain one.

The output layer gives each node logits over ``max_devices`` devices; :meth:`TransformerXLPlacer.forward`
masks the devices a node's cluster lacks or that cannot run it.

**Shapes:** ``forward(x0 [N, H], mask [N, max_devices])`` -> logits ``[N, max_devices]``.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["XLLayer", "Superposition", "TransformerXLPlacer"]


class XLLayer(nn.Module):
    """One Transformer-XL layer: causal multi-head attention over ``[memory; segment]`` (if ``attention``),
    then a two-layer feed-forward net, each with a residual connection and layer norm (post-norm, as
    Transformer-XL). The feed-forward layers' inputs are scaled by the superposition vectors ``c1`` ``[H]``
    and ``c2`` ``[ff]`` when given (eq. 4)."""

    def __init__(self, hidden: int, heads: int, ff: int, attention: bool = True):
        super().__init__()
        self.attention = attention
        if attention:
            self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
            self.norm1 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, ff)
        self.ff2 = nn.Linear(ff, hidden)
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, mem: torch.Tensor | None, c1=None, c2=None) -> torch.Tensor:
        """``x`` ``[S, H]`` (one segment), ``mem`` ``[M, H]`` or None -> ``[S, H]``."""
        if self.attention:
            kv = x if mem is None else torch.cat([mem, x], dim=0)
            S, M = x.shape[0], kv.shape[0] - x.shape[0]
            # node i of the segment sees the memory and the segment's nodes up to i
            causal = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
            block = torch.cat([torch.zeros(S, M, dtype=torch.bool, device=x.device), causal], dim=1)
            a, _ = self.attn(x.unsqueeze(0), kv.unsqueeze(0), kv.unsqueeze(0), attn_mask=block, need_weights=False)
            x = self.norm1(x + a.squeeze(0))
        y = x if c1 is None else x * c1
        y = torch.relu(self.ff1(y))
        y = y if c2 is None else y * c2
        return self.norm2(x + self.ff2(y))


class Superposition(nn.Module):
    """``c(x^{(0)})`` of eq. 4: conditioning vectors of sizes ``dims`` from a graph's embedding."""

    def __init__(self, hidden: int, heads: int, dims: list[int], segment: int):
        super().__init__()
        self.segment = segment
        self.layer = nn.TransformerEncoderLayer(hidden, heads, dim_feedforward=2 * hidden, dropout=0.0,
                                                batch_first=True)
        self.heads = nn.ModuleList([nn.Linear(hidden, d) for d in dims])
        for h in self.heads:                      # c = 1 at the start: a fresh network is the plain one
            nn.init.zeros_(h.weight)
            nn.init.zeros_(h.bias)

    def forward(self, x0: torch.Tensor) -> list[torch.Tensor]:
        N, H = x0.shape
        n_seg = -(-N // self.segment)
        pad = n_seg * self.segment - N
        xs = torch.cat([x0, x0.new_zeros(pad, H)]) if pad else x0
        counts = torch.full((n_seg, 1), float(self.segment), device=x0.device)
        counts[-1] = self.segment - pad
        tokens = xs.view(n_seg, self.segment, H).sum(1) / counts               # segment means
        z = self.layer(tokens.unsqueeze(0)).squeeze(0).mean(0)
        return [2 * torch.sigmoid(h(z)) for h in self.heads]


class TransformerXLPlacer(nn.Module):
    """The placer: ``layers`` :class:`XLLayer` s of width ``hidden`` over segments of ``segment`` nodes with
    ``memory`` nodes of memory, then a dense output layer to ``max_devices`` logits. ``attention=False``
    drops the attention (a per-node feed-forward placer); ``superposition=False`` drops eq. 4's
    conditioning (the ablations of GDP §4.4)."""

    def __init__(self, hidden: int = 64, max_devices: int = 16, *, layers: int = 2, heads: int = 4,
                 ff: int = 128, segment: int = 128, memory: int = 128, attention: bool = True,
                 superposition: bool = True):
        super().__init__()
        self.segment, self.memory = segment, memory
        self.layers = nn.ModuleList([XLLayer(hidden, heads, ff, attention) for _ in range(layers)])
        self.out = nn.Linear(hidden, max_devices)
        dims = [d for _ in range(layers) for d in (hidden, ff)] + [hidden]
        self.superpose = Superposition(hidden, heads, dims, segment) if superposition else None

    def forward(self, x0: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        c = self.superpose(x0) if self.superpose is not None else None
        mems: list[torch.Tensor | None] = [None] * len(self.layers)
        outs = []
        for s in range(0, x0.shape[0], self.segment):
            h = x0[s:s + self.segment]
            for i, layer in enumerate(self.layers):
                prev = mems[i]
                cache = h.detach() if prev is None else torch.cat([prev, h.detach()])
                h = layer(h, prev, *((c[2 * i], c[2 * i + 1]) if c is not None else ()))
                mems[i] = cache[-self.memory:] if self.memory > 0 else None
            outs.append(h)
        h = torch.cat(outs)
        if c is not None:
            h = h * c[-1]
        return self.out(h) + mask
