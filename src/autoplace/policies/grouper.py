"""HDP's grouper (Mirhoseini et al. 2018, "A Hierarchical Model for Device Placement"): a feed-forward
network that gives every node of a graph a distribution over a fixed number of groups; the seq2seq placer
then places the groups (:class:`~autoplace.policies.seq2seq.Seq2SeqPolicy`), and both train jointly.

A node's input is its op types' mean embedding and its dense features
(:func:`~autoplace.policies.features.node_features`: output sizes, FLOPs, parameters, degree, position);
two dense layers map it to ``n_groups`` logits.

:func:`group_inputs` turns sampled groupings into the placer's per-group inputs, the HDP paper's group
embedding: the mean type embedding of the group's ops, the mean of its nodes' dense features, its size,
and multi-hot adjacency over the groups it reads from and writes to.

**Shapes:** ``Grouper.forward(features)`` -> logits ``[N, n_groups]``; ``group_inputs(...)`` ->
``[k, n_groups, type_dim + NODE_DENSE + 1 + 2 n_groups]``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from autoplace.policies.features import N_TYPE_BUCKETS, NODE_DENSE, NodeFeatures

__all__ = ["Grouper", "group_inputs", "group_input_dim"]


class Grouper(nn.Module):
    """Node features -> logits over ``n_groups`` groups, ``hidden`` wide."""

    def __init__(self, n_groups: int, hidden: int = 64, type_dim: int = 16):
        super().__init__()
        self.types = nn.EmbeddingBag(N_TYPE_BUCKETS, type_dim, mode="mean")
        self.net = nn.Sequential(nn.Linear(type_dim + NODE_DENSE, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, n_groups))

    def forward(self, f: NodeFeatures) -> torch.Tensor:
        dev = self.net[0].weight.device
        t = self.types(torch.as_tensor(f.type_index, device=dev), torch.as_tensor(f.type_offsets, device=dev))
        return self.net(torch.cat([t, torch.as_tensor(f.dense, device=dev)], dim=1))


def group_input_dim(n_groups: int) -> int:
    """Dense size of a group's input beside its type embedding."""
    return NODE_DENSE + 1 + 2 * n_groups


def group_inputs(f: NodeFeatures, assign: np.ndarray, n_groups: int, type_embedding: nn.EmbeddingBag
                 ) -> torch.Tensor:
    """The placer's inputs for ``k`` groupings ``assign`` ``[k, N]`` (group of each node): per group, its
    ops' mean type embedding (``type_embedding``, with gradient), then its nodes' mean dense features,
    ``log2(1 + nodes) / 16``, and the groups it reads from and writes to (multi-hot)."""
    k, N = assign.shape
    G = n_groups
    dev = type_embedding.weight.device
    sizes = np.diff(np.append(f.type_offsets, len(f.type_index)))
    op_node = np.repeat(np.arange(N), sizes)                          # the node of each entry of type_index
    bag = (assign[:, op_node] + G * np.arange(k)[:, None]).ravel()     # bag (sample, group) of each op entry
    order = np.argsort(bag, kind="stable")
    offsets = np.searchsorted(bag[order], np.arange(k * G))
    types = type_embedding(torch.as_tensor(np.tile(f.type_index, k)[order], device=dev),
                           torch.as_tensor(offsets, device=dev)).view(k, G, -1)
    dense = np.zeros((k, G, group_input_dim(G)), dtype=np.float32)
    src, dst = f.edge_index[:, :f.edge_index.shape[1] // 2]          # the edges' own direction (the second half
    # of edge_index reverses them)
    for i in range(k):
        a = assign[i]
        count = np.bincount(a, minlength=G)
        sums = np.zeros((G, NODE_DENSE), dtype=np.float64)
        np.add.at(sums, a, f.dense)
        dense[i, :, :NODE_DENSE] = sums / np.maximum(count, 1)[:, None]
        dense[i, :, NODE_DENSE] = np.log2(1 + count) / 16
        ga, gb = a[src], a[dst]
        cross = ga != gb
        dense[i, gb[cross], NODE_DENSE + 1 + ga[cross]] = 1.0          # groups it reads from
        dense[i, ga[cross], NODE_DENSE + 1 + G + gb[cross]] = 1.0      # groups it writes to
    return torch.cat([types, torch.as_tensor(dense, device=dev)], dim=2)
