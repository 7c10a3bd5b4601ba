"""GDP's policy network (Zhou et al., Figure 1): a graph embedding (GraphSAGE, §3.1) feeding the
Transformer-XL placer (§3.2–3.3), one distribution over devices per node.

**Shapes:** ``forward(features, mask [N, max_devices])`` -> logits ``[N, max_devices]``, nodes in the
features' (topological) order.
"""

from __future__ import annotations

import torch
from torch import nn

from autoplace.policies.features import META_DENSE, NODE_DENSE, NodeFeatures
from autoplace.policies.graphsage import GraphEmbedding
from autoplace.policies.transformer_xl import TransformerXLPlacer

__all__ = ["GDPPolicy"]


class GDPPolicy(nn.Module):
    """Graph embedding of ``sage_layers`` iterations (over :func:`~autoplace.policies.features.node_features`,
    or with ``features="paper"`` :func:`~autoplace.policies.features.meta_features`), then the placer (see
    :class:`~autoplace.policies.transformer_xl.TransformerXLPlacer` for the other arguments)."""

    def __init__(self, *, hidden: int = 64, type_dim: int = 16, sage_layers: int = 2, placer_layers: int = 2,
                 heads: int = 4, ff: int = 128, segment: int = 128, memory: int = 128, attention: bool = True,
                 superposition: bool = True, max_devices: int = 16, features: str = "ours"):
        super().__init__()
        self.embed = GraphEmbedding(hidden, sage_layers, type_dim, NODE_DENSE if features == "ours" else META_DENSE)
        self.placer = TransformerXLPlacer(hidden, max_devices, layers=placer_layers, heads=heads, ff=ff,
                                          segment=segment, memory=memory, attention=attention,
                                          superposition=superposition)

    def forward(self, f: NodeFeatures, mask: torch.Tensor) -> torch.Tensor:
        return self.placer(self.embed(f), mask)
