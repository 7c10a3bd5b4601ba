"""Three models a user might write, none of them in the zoo: the benchmarks that capture real PyTorch code
(``benchmarks/runtime_models.py``, ``benchmarks/compile_setup.py``) build them here, each at the sizes it
measures.

* :func:`resnet` — a ResNet-style CNN: residual blocks of two 3×3 convolutions with BatchNorm;
* :func:`gpt` — a GPT-style decoder: pre-norm blocks of causal self-attention and a GELU MLP, learned
  positions, its head tied to the token embedding;
* :func:`unet` — a U-Net: two poolings down, two transposed convolutions up, skip connections across.

Each returns a :class:`UserModel`: the module (weights drawn after ``torch.manual_seed(0)``), one batch of
inputs and targets drawn after it, and the loss. The optimizer is the benchmark's choice. torch is imported
when a model is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["UserModel", "resnet", "gpt", "unet", "MODELS"]


class UserModel(NamedTuple):
    name: str
    model: Any          #: a ``torch.nn.Module``
    inputs: Any         #: one batch
    loss: Callable      #: ``loss(output, targets)``
    targets: Any


def resnet(blocks: int = 4, *, stem_norm: bool = True, batch: int = 32, name: str = "resnet-bn") -> UserModel:
    """``blocks`` residual blocks of 64 channels on 32×32 RGB images, 10 classes. ``stem_norm``: the stem is
    a bias-free convolution, BatchNorm and ReLU (else one convolution with a bias)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a, self.bn_a = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.b, self.bn_b = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            y = torch.relu(self.bn_a(self.a(x)))
            return torch.relu(x + self.bn_b(self.b(y)))

    torch.manual_seed(0)
    stem = ([nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU()] if stem_norm
            else [nn.Conv2d(3, 64, 3, padding=1)])
    model = nn.Sequential(*stem, *[Block(64) for _ in range(blocks)], nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(64, 10))
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    return UserModel(name, model, x, nn.functional.cross_entropy, y)


def gpt(vocab: int = 2000, d: int = 256, layers: int = 4, heads: int = 4, seq: int = 64, batch: int = 8, *,
        name: str = "gpt-tied") -> UserModel:
    """A decoder of ``layers`` blocks of width ``d`` over ``seq`` tokens of a ``vocab``-word vocabulary;
    the loss is next-token cross-entropy against random targets."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, mask):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5 + mask, dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.ff(self.ln2(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok.weight  # tied
            self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))
            self.register_buffer("positions", torch.arange(seq))

        def forward(self, idx):
            h = self.tok(idx) + self.pos(self.positions)
            for block in self.blocks:
                h = block(h, self.mask)
            return self.head(self.norm(h))

    def loss(out, t):
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1))

    torch.manual_seed(0)
    model = Decoder()
    idx, tgt = torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch, seq))
    return UserModel(name, model, idx, loss, tgt)


def unet(channels: int = 32, size: int = 64, batch: int = 8, *, name: str = "unet") -> UserModel:
    """A U-Net on ``size``×``size`` one-channel images (``channels``, twice and four times that down the
    levels), two classes per pixel."""
    import torch
    from torch import nn

    def conv(a, b):
        return nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.ReLU(), nn.Conv2d(b, b, 3, padding=1), nn.ReLU())

    c = channels

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.d3 = conv(1, c), conv(c, 2 * c), conv(2 * c, 4 * c)
            self.u2, self.c2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2), conv(4 * c, 2 * c)
            self.u1, self.c1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2), conv(2 * c, c)
            self.out = nn.Conv2d(c, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(nn.functional.max_pool2d(a, 2))
            m = self.d3(nn.functional.max_pool2d(b, 2))
            b2 = self.c2(torch.cat([self.u2(m), b], 1))
            return self.out(self.c1(torch.cat([self.u1(b2), a], 1)))

    torch.manual_seed(0)
    model = UNet()
    x, y = torch.randn(batch, 1, size, size), torch.randint(0, 2, (batch, size, size))
    return UserModel(name, model, x, nn.functional.cross_entropy, y)


#: the builders by the name the benchmarks give them on the command line
MODELS = {"resnet": resnet, "gpt": gpt, "unet": unet}
