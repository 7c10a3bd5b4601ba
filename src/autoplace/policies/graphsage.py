"""GraphSAGE-style graph embedding of GDP (Zhou et al., §3.1, eq. 2–3; Hamilton et al. 2017).

Each iteration ``l`` aggregates a node's neighbours by max-pooling an affine transform through a sigmoid
(eq. 2) and feeds the node's own representation concatenated with that aggregate through a dense layer
(eq. 3):

.. math::

    h^{(l)}_{\\mathcal N(v)} = \\max_{u \\in \\mathcal N(v)} \\sigma(W^{(l)} h^{(l)}_u + b^{(l)}) \\qquad (2)

    h^{(l+1)}_v = f^{(l+1)}\\big(\\mathrm{concat}(h^{(l)}_v, h^{(l)}_{\\mathcal N(v)})\\big) \\qquad (3)

A node without neighbours aggregates zeros. PyTorch Geometric's ``SAGEConv(aggr="max", project=True)``
projects the neighbours through a ReLU, not eq. 2's sigmoid, so the layer is the few lines of torch
below (``scatter_reduce`` with ``amax``). Here ``f`` is a linear layer and a ReLU.

The input representation ``h^{(0)}`` of a node (:class:`~autoplace.policies.features.NodeFeatures`) is
its op types' mean embedding concatenated with its dense features through one linear layer.

**Shapes:** :class:`SageLayer` maps ``x [N, in_dim]``, ``edge_index [2, E]`` (messages flow from
``edge_index[0]`` to ``edge_index[1]``) to ``[N, out_dim]``; :class:`GraphEmbedding` maps a
:class:`NodeFeatures` to ``[N, hidden]``.
"""

from __future__ import annotations

import torch
from torch import nn

from autoplace.policies.features import N_TYPE_BUCKETS, NODE_DENSE, NodeFeatures

__all__ = ["SageLayer", "GraphEmbedding"]


class SageLayer(nn.Module):
    """One iteration of eq. 2–3: ``in_dim`` -> ``out_dim``, neighbours pooled at ``pool_dim``."""

    def __init__(self, in_dim: int, out_dim: int, pool_dim: int | None = None):
        super().__init__()
        pool_dim = pool_dim or in_dim
        self.pool = nn.Linear(in_dim, pool_dim)               # W^(l), b^(l) of eq. 2
        self.dense = nn.Linear(in_dim + pool_dim, out_dim)    # f^(l+1) of eq. 3

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        msg = torch.sigmoid(self.pool(x))                                          # σ(W h_u + b)
        src, dst = edge_index[0], edge_index[1]
        agg = msg.new_zeros(x.shape[0], msg.shape[1])
        if src.numel():
            agg = agg.scatter_reduce(0, dst.unsqueeze(1).expand(-1, msg.shape[1]), msg[src], reduce="amax",
                                     include_self=False)                          # max over u ∈ N(v)
        return torch.relu(self.dense(torch.cat([x, agg], dim=1)))


class GraphEmbedding(nn.Module):
    """``layers`` SAGE iterations over a graph's nodes from their features (``dense_dim`` dense ones);
    ``hidden`` wide."""

    def __init__(self, hidden: int = 64, layers: int = 2, type_dim: int = 16, dense_dim: int = NODE_DENSE):
        super().__init__()
        self.types = nn.EmbeddingBag(N_TYPE_BUCKETS, type_dim, mode="mean")
        self.inp = nn.Linear(type_dim + dense_dim, hidden)
        self.layers = nn.ModuleList([SageLayer(hidden, hidden) for _ in range(layers)])

    def forward(self, f: NodeFeatures) -> torch.Tensor:
        dev = self.inp.weight.device
        t = self.types(torch.as_tensor(f.type_index, device=dev), torch.as_tensor(f.type_offsets, device=dev))
        h = torch.relu(self.inp(torch.cat([t, torch.as_tensor(f.dense, device=dev)], dim=1)))
        edges = torch.as_tensor(f.edge_index, device=dev)
        for layer in self.layers:
            h = layer(h, edges)
        return h
