"""HDP's networks as its authors released them: the grouper, the group embedding and the bidirectional
seq2seq placer of TensorFlow's ``tensorflow/python/grappler/hierarchical_controller.py``
(``HierarchicalController``, 2018), the hierarchical placer's paper mode
(:class:`~autoplace.placers.learned.hdp.HDPConfig`, ``paper=true``).

Everything here follows that file; the functions named are its own:

* **Node embedding** (``create_op_embeddings``): per node, ``[type, output shapes, adjacency]`` of
  ``1 + 5·5 + 20`` raw numbers — the type's index among the graph's op types; the first 5 dimensions of
  its first 5 outputs (``-1`` where absent); and up to 10 ``(neighbour, ±1)`` pairs (``+1`` a consumer,
  ``-1`` a producer; zero-padded). The file rebuilds a node's list each time the node is met as a consumer
  (its test compares a name with integer keys), so a node keeps its last producer and then its consumers;
  that is reproduced (on co-location groups, whose graph may have cycles the file's ops never have, as the
  file's topological walk would leave it: the last producer, then every consumer). No normalisation.
* **Grouper** (``make_grouping_predictions``): two matrices, no bias and no activation between them:
  ``logits = x W_ff W_softmax``.
* **Group embedding** (``create_group_embeddings``): ``[E, Eᵀ, counts]`` per group, divided by the row's
  maximum plus one, where ``E[a, b]`` counts the edges from group ``a`` to group ``b`` and ``counts`` has a
  column per op type and the summed output shapes (0 where absent) added onto its *first* 25 columns —
  the file writes both into the same columns, and so does this.
* **Placer** (``encode``/``decode``/``lstm``): an LSTM with its own cell (one weight matrix over
  ``[x; h]``, no bias, a learned forget bias initialised to 1), bidirectional with ``hidden / 2`` per
  direction; the decoder starts from the encoder's last state, reads the previous device's embedding (a
  learned start embedding first), attends over the encoder's outputs times ``W_1`` with
  ``v·tanh(h W_2 + mem)``, and its logits ``[h; context] W_softmax`` are bounded by ``c·tanh``.
* **Exploration noise** on both networks' logits: ``N(0, (σ·rms)²)``, ``rms`` the logits' root mean
  square (with gradient through it, as the file's ``random_normal(stddev=...)``), while ``noisy``.
* Glorot-uniform initialisation of every matrix.

Where a device cannot run a group's op this module adds ``-inf`` to that device's logit (the caller's
``mask``); TensorFlow's soft placement would move such an op instead.

**Shapes:** ``released_inputs(...).embedding`` -> ``[N, 46]``; ``group_embedding`` -> ``[k, G, 2G + T + 25]`` (``T``
op types); ``ReleasedGrouper(x)`` -> ``[N, G]``; ``ReleasedPlacer.sample`` -> devices ``[k, G]``,
log-probabilities ``[k]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from autoplace.graph import Graph
from autoplace.grouping import Grouping
from autoplace.policies.features import MAX_DIMS, MAX_OUTPUTS, NodeFeatures, first_ops, output_dims

__all__ = ["MAX_OUTPUTS", "MAX_DIMS", "ADJ_DIM", "EMBED_DIM", "ReleasedInputs", "released_inputs", "group_embedding",
           "ReleasedGrouper", "ReleasedPlacer", "noisy_logits"]

ADJ_DIM = 20        #: ``adj_embed_dim``: (neighbour, ±1) entries per op (``max_num_outputs`` and
#: ``max_output_size``, 5 each, are :data:`~autoplace.policies.features.MAX_OUTPUTS` and ``MAX_DIMS``)
EMBED_DIM = 1 + MAX_OUTPUTS * MAX_DIMS + ADJ_DIM


@dataclass(frozen=True)
class ReleasedInputs:
    """What the released embeddings read of a graph, computed once per search (:func:`released_inputs`):
    the node embedding ``[N, EMBED_DIM]``; each node's type index ``[N]`` and the number of op types; the
    distinct node-to-node edges ``[P, 2]`` (node positions); each node's output dims ``[N, 25]`` (0 absent)."""

    embedding: np.ndarray
    kind: np.ndarray
    n_types: int
    pairs: np.ndarray
    shapes: np.ndarray


def released_inputs(graph: Graph, nodes: Grouping, features: NodeFeatures) -> ReleasedInputs:
    """The released code's op embedding of every node (nodes in ``features``' topological order): a node is
    its first op — its type and outputs — and its neighbours are the nodes it exchanges edges with
    (``features.edge_index``'s own direction)."""
    first = first_ops(graph, nodes, features.order)
    types = sorted({op.type for op in graph.ops})
    type_id = {t: i for i, t in enumerate(types)}
    kind = np.array([type_id[graph.ops[i].type] for i in first.tolist()], dtype=np.int64)
    pairs = features.edge_index[:, :features.edge_index.shape[1] // 2].T
    # the file walks ops in topological order, and each producer rebuilds its consumer's list: a node keeps
    # its last producer, then the consumers it lists when its own turn comes. Nodes of co-location groups
    # can form cycles, where a walk would let a later producer drop a node's consumers; the file's ops never
    # do, so its outcome is built directly: the last producer, then every consumer
    consumers: dict[int, list[int]] = {}
    last: dict[int, int] = {}
    for a, b in pairs.tolist():
        consumers.setdefault(a, []).extend([b, 1])
        last[b] = a
    adj = {p: ([last[p], -1] if p in last else []) + consumers.get(p, []) for p in {*last, *consumers}}
    S = MAX_OUTPUTS * MAX_DIMS
    emb = np.zeros((len(first), EMBED_DIM), dtype=np.float32)
    emb[:, 0] = kind
    for p, op in enumerate(first.tolist()):
        emb[p, 1:1 + S] = output_dims(graph, op, -1.0)
        nb = adj.get(p, [])[:ADJ_DIM]
        emb[p, 1 + S:1 + S + len(nb)] = nb
    shapes = (np.stack([output_dims(graph, op, 0.0) for op in first.tolist()]) if len(first)
              else np.zeros((0, S), np.float32))
    return ReleasedInputs(emb, kind, len(types), pairs, shapes)


def group_embedding(inputs: ReleasedInputs, assign: np.ndarray, n_groups: int) -> np.ndarray:
    """The placer's inputs ``[k, G, 2G + T + 25]`` for groupings ``assign`` ``[k, N]`` (each node's group,
    nodes in order), as ``create_group_embeddings`` builds them (see the module docstring)."""
    pairs, kind, shapes = inputs.pairs, inputs.kind, inputs.shapes
    k, G, S = assign.shape[0], n_groups, MAX_OUTPUTS * MAX_DIMS
    out = np.zeros((k, G, 2 * G + inputs.n_types + S), dtype=np.float32)
    for i in range(k):
        a = assign[i]
        dag = np.zeros((G, G), dtype=np.float32)
        np.add.at(dag, (a[pairs[:, 0]], a[pairs[:, 1]]), 1.0)
        counts = np.zeros((G, inputs.n_types + S), dtype=np.float32)
        np.add.at(counts, (a, kind), 1.0)
        np.add.at(counts[:, :S], a, shapes)                   # onto the first columns, as the file does
        row = np.concatenate([dag, dag.T, counts], axis=1)
        out[i] = row / (row.max(axis=1, keepdims=True) + 1.0)
    return out


def noisy_logits(logits: torch.Tensor, sigma: float, generator: torch.Generator | None) -> torch.Tensor:
    """``logits`` plus ``N(0, (sigma·rms)²)`` noise, ``rms`` the logits' root mean square (with gradient)."""
    if sigma <= 0:
        return logits
    rms = torch.linalg.vector_norm(logits) / logits.numel() ** 0.5
    z = torch.randn(logits.shape, generator=generator).to(logits.device)
    return logits + sigma * rms * z


def _glorot(*shape: int) -> nn.Parameter:
    w = torch.empty(*shape)
    nn.init.xavier_uniform_(w)           # U(±sqrt(6 / (fan_in + fan_out))), TensorFlow's glorot_uniform
    return nn.Parameter(w)


def _lstm(x, c, h, w, forget_bias):
    """The file's ``lstm``: one matrix over ``[x; h]``, gates i, f, o, g, the forget bias added to f."""
    i, f, o, g = (torch.cat([x, h], dim=1) @ w).chunk(4, dim=1)
    c = torch.sigmoid(i) * torch.tanh(g) + torch.sigmoid(f + forget_bias) * c
    return c, torch.sigmoid(o) * torch.tanh(c)


class ReleasedGrouper(nn.Module):
    """``logits = x W_ff W_softmax``: node embeddings ``[N, EMBED_DIM]`` -> group logits ``[N, G]``."""

    def __init__(self, n_groups: int, hidden: int = 64):
        super().__init__()
        self.w_ff = _glorot(EMBED_DIM, hidden)
        self.w_softmax = _glorot(hidden, n_groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w_ff @ self.w_softmax


class ReleasedPlacer(nn.Module):
    """The released seq2seq placer over ``G`` group embeddings of ``embed_dim`` for ``n_devices`` devices:
    a bidirectional encoder of ``hidden / 2`` per direction, an attentional decoder of ``hidden``, logits
    bounded by ``tanh_constant · tanh`` (None: unbounded)."""

    def __init__(self, embed_dim: int, n_devices: int, hidden: int = 512, tanh_constant: float | None = 1.0):
        super().__init__()
        if hidden % 2:
            raise ValueError(f"hidden must be even (two directions of hidden / 2), got {hidden}")
        H, half = hidden, hidden // 2
        self.hidden, self.n_devices, self.tanh_constant = H, n_devices, tanh_constant
        self.encoder_forward = _glorot(embed_dim + half, 4 * half)
        self.encoder_backward = _glorot(embed_dim + half, 4 * half)
        self.encoder_forget_bias = nn.Parameter(torch.ones(1))
        self.device_embeddings = _glorot(n_devices, H)
        self.device_go_embedding = _glorot(1, H)
        self.decoder_lstm = _glorot(2 * H, 4 * H)
        self.decoder_forget_bias = nn.Parameter(torch.ones(1))
        self.device_softmax = _glorot(2 * H, n_devices)
        self.attn_w_1 = _glorot(H, H)
        self.attn_w_2 = _glorot(H, H)
        self.attn_v = _glorot(H, 1)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x`` ``[k, G, E]`` -> last ``c``, last ``h`` ``[k, H]`` and the attention memory ``[k, G, H]``."""
        k, G, _ = x.shape
        half = self.hidden // 2
        cf = hf = cb = hb = x.new_zeros(k, half)
        outs = []
        for i in range(G):
            cf, hf = _lstm(x[:, i], cf, hf, self.encoder_forward, self.encoder_forget_bias)
            cb, hb = _lstm(x[:, G - 1 - i], cb, hb, self.encoder_backward, self.encoder_forget_bias)
            outs.append(torch.cat([hf, hb], dim=1))       # step i: forward at i beside backward at G-1-i
        mem = torch.stack(outs, dim=1) @ self.attn_w_1
        return torch.cat([cf, cb], dim=1), torch.cat([hf, hb], dim=1), mem

    def sample(self, x: torch.Tensor, mask: torch.Tensor, *, devices: torch.Tensor | None = None,
               noise: float = 0.0, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Devices ``[k, G]`` (sampled, or ``devices`` given: the file's ``target`` mode) and their
        log-probabilities ``[k]`` under the noisy logits they were drawn from; ``mask`` ``[k, G, D]``."""
        c, h, mem = self.encode(x)
        k, G = x.shape[0], x.shape[1]
        signal = self.device_go_embedding.expand(k, -1)
        chosen, logp = [], x.new_zeros(k)
        for t in range(G):
            c, h = _lstm(signal, c, h, self.decoder_lstm, self.decoder_forget_bias)
            q = torch.tanh((h @ self.attn_w_2).unsqueeze(1) + mem) @ self.attn_v           # [k, G, 1]
            context = (mem * torch.softmax(q, dim=1)).sum(1)
            logits = torch.cat([h, context], dim=1) @ self.device_softmax
            if self.tanh_constant is not None:
                logits = self.tanh_constant * torch.tanh(logits)
            logits = noisy_logits(logits, noise, generator) + mask[:, t]
            log_probs = torch.log_softmax(logits, dim=1)
            if devices is None:
                d = torch.multinomial(log_probs.detach().exp().cpu(), 1, generator=generator).squeeze(1)
                d = d.to(x.device)
            else:
                d = devices[:, t]
            logp = logp + log_probs.gather(1, d.unsqueeze(1)).squeeze(1)
            chosen.append(d)
            signal = self.device_embeddings[d]
        return torch.stack(chosen, dim=1), logp
