"""How long ``autoplace.compile`` takes to set a model up, the first time and again in a new process (the
placement then comes from the on-disk cache).

    .venv/bin/python benchmarks/compile_setup.py [--method auto] [--budget SECONDS]

Three models a user might write: a ResNet-style CNN (BatchNorm, residual adds), a GPT-style decoder with
its head tied to the embedding, a U-Net (skip connections across the resolutions); Adam on each, this
machine's CPU workers (``localhost``). Each compile runs in a fresh process (imports not counted) with its
own empty cache folder for the first; the second process finds the first's placement. Seconds: the whole
``compile`` call, then where it went (capture, place, workers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import print_table

MODELS = ("resnet", "gpt", "unet")


def build(name: str):
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "resnet":
        class Block(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.a, self.na = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
                self.b, self.nb = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

            def forward(self, x):
                return torch.relu(x + self.nb(self.b(torch.relu(self.na(self.a(x))))))

        model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), *[Block(64) for _ in range(16)],
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
        return model, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,)), nn.functional.cross_entropy
    if name == "gpt":
        class GPT(nn.Module):
            def __init__(self, vocab=8192, d=384, layers=12):
                super().__init__()
                self.emb, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(64, d))
                self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True,
                                                                       norm_first=True) for _ in range(layers))
                self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
                self.head.weight = self.emb.weight

            def forward(self, x):
                h = self.emb(x) + self.pos[: x.shape[1]]
                mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
                for b in self.blocks:
                    h = b(h, src_mask=mask, is_causal=True)
                return self.head(self.norm(h))

        def loss(out, y):
            return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

        return GPT(), torch.randint(0, 8192, (8, 64)), torch.randint(0, 8192, (8, 64)), loss

    class UNet(nn.Module):
        def __init__(self, c=32):
            super().__init__()
            conv = lambda i, o: nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.ReLU(),  # noqa: E731
                                              nn.Conv2d(o, o, 3, padding=1), nn.ReLU())
            self.d1, self.d2, self.mid = conv(1, c), conv(c, 2 * c), conv(2 * c, 4 * c)
            self.u2, self.c2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2), conv(4 * c, 2 * c)
            self.u1, self.c1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2), conv(2 * c, c)
            self.out = nn.Conv2d(c, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(nn.functional.max_pool2d(a, 2))
            m = self.mid(nn.functional.max_pool2d(b, 2))
            b = self.c2(torch.cat([self.u2(m), b], 1))
            return self.out(self.c1(torch.cat([self.u1(b), a], 1)))

    return UNet(), torch.randn(8, 1, 128, 128), torch.randint(0, 2, (8, 128, 128)), nn.functional.cross_entropy


def one(name: str, method: str, budget: float | None) -> dict:
    import torch

    import autoplace

    model, x, y, loss = build(name)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    t = time.perf_counter()
    step = autoplace.compile(model, x, loss, opt, targets=y, method=method, budget=budget, name=name)
    total = time.perf_counter() - t
    out = {"total": total, **step.setup_seconds, "cached": step.placement_cached, "ops": step.graph.n_ops}
    step.close()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", default="auto")
    ap.add_argument("--budget", type=float, default=None)
    ap.add_argument("--one", choices=MODELS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.method, args.budget)))
        return
    rows = []
    for name in MODELS:
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "AUTOPLACE_CACHE_DIR": cache}
            cmd = [sys.executable, __file__, "--one", name, "--method", args.method,
                   *(["--budget", str(args.budget)] if args.budget is not None else [])]
            runs = [json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True
                                              ).stdout.strip().splitlines()[-1]) for _ in range(2)]
        first, again = runs
        assert not first["cached"] and again["cached"]
        split = lambda r: f"{r['capture']:.1f} / {r['place']:.1f} / {r['workers']:.1f}"  # noqa: E731
        rows.append([name, first["ops"], f"{first['total']:.1f}", split(first), f"{again['total']:.1f}",
                     split(again), f"{again['total'] / first['total']:.2f}"])
        print(f"# {name} done", file=sys.stderr, flush=True)
    print_table(["model", "ops", "first compile (s)", "capture / place / workers", "again, new process (s)",
                 "capture / place / workers", "again / first"], rows)
    print(f"\nmethod {args.method}, budget {args.budget}; localhost CPU workers")


if __name__ == "__main__":
    main()
