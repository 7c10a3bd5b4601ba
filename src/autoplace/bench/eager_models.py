"""Three training steps a PyTorch user writes, none from the zoo or the examples: what ``compile`` is
judged on against eager PyTorch (``benchmarks/eager_parity.py``, and on a GPU ``benchmarks/gpu_check.py``).

- ``llama``: a Llama-style decoder LM (RMSNorm, rotary position tables held by the root module, SwiGLU,
  tied embedding and head), AdamW with a cosine schedule;
- ``vit``: a Vision Transformer (a class token and position embedding held by the root module, patch
  embedding as a strided convolution), SGD with Nesterov momentum and StepLR;
- ``cnn``: a CNN with BatchNorm and dropout, Adam.

Each ``make_<name>(scale)`` returns ``(model, inputs, loss_fn, optimizer, targets, scheduler)``; ``scale``
"small" is a test-sized version (seconds to capture), ``"bench"`` the benchmark's. torch is imported with
this module (the package imports it nowhere else).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["MODELS", "make"]


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate(x, cos, sin):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * cos + torch.cat([-b, a], dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        hidden = 4 * d * 2 // 3
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(LlamaBlock(d, heads) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight                  # tied
        half = d // heads // 2
        freq = 1.0 / (10000 ** (torch.arange(half).float() / half))
        angle = torch.outer(torch.arange(seq).float(), freq)
        # the root module's own buffers: rotary tables
        self.register_buffer("cos", torch.cat([angle.cos(), angle.cos()], -1), persistent=False)
        self.register_buffer("sin", torch.cat([angle.sin(), angle.sin()], -1), persistent=False)

    def forward(self, idx):
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(self.norm(x))


class ViT(nn.Module):
    def __init__(self, image: int, patch: int, d: int, layers: int, heads: int, classes: int):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, stride=patch)
        n = (image // patch) ** 2
        # the root module's own parameters: the class token and the position embedding
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


def _cnn(width: int, classes: int) -> nn.Module:
    def block(a, b):
        return nn.Sequential(nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(),
                             nn.Conv2d(b, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(),
                             nn.MaxPool2d(2))

    return nn.Sequential(block(3, width), block(width, 2 * width), block(2 * width, 4 * width),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(4 * width, classes))


_SIZES = {
    "llama": {"small": dict(vocab=256, d=64, layers=2, heads=4, seq=16, batch=4),
              "bench": dict(vocab=2000, d=128, layers=4, heads=4, seq=64, batch=8)},
    "vit": {"small": dict(image=16, patch=4, d=32, layers=2, heads=4, classes=10, batch=4),
            "bench": dict(image=32, patch=4, d=96, layers=4, heads=4, classes=100, batch=16)},
    "cnn": {"small": dict(width=8, classes=10, image=16, batch=8),
            "bench": dict(width=16, classes=100, image=32, batch=32)},
}


def make(name: str, scale: str = "bench", *, seed: int = 0, **optimizer_flags):
    """``(model, inputs, loss_fn, optimizer, targets, scheduler)`` of user model ``name`` at ``scale``;
    ``optimizer_flags`` (``foreach=``, ``fused=``) go to the optimizer."""
    s = dict(_SIZES[name][scale])
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    batch = s.pop("batch")
    if name == "llama":
        model = Llama(**s)
        idx = torch.randint(0, s["vocab"], (batch, s["seq"] + 1), generator=g)
        inputs, targets = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()

        def loss_fn(logits, y):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, **optimizer_flags)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    elif name == "vit":
        model = ViT(**s)
        inputs = torch.randn(batch, 3, s["image"], s["image"], generator=g)
        targets = torch.randint(0, s["classes"], (batch,), generator=g)
        loss_fn = F.cross_entropy
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, **optimizer_flags)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    elif name == "cnn":
        image = s.pop("image")
        model = _cnn(**s)
        inputs = torch.randn(batch, 3, image, image, generator=g)
        targets = torch.randint(0, s["classes"], (batch,), generator=g)
        loss_fn = F.cross_entropy
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, **optimizer_flags)
        sched = None
    else:
        raise KeyError(name)
    return model, inputs, loss_fn, opt, targets, sched


MODELS = tuple(_SIZES)
