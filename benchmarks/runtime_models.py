"""Three models of our own under the simulator that runs like the runtime, before and after.

    .venv/bin/python benchmarks/runtime_models.py [--before SRC] [--budget 10] [--out DIR] [--json]
    .venv/bin/python benchmarks/runtime_models.py --from-json docs/results/runtime/models.json   # its table again

A ResNet-style CNN with BatchNorm (SGD with momentum), a GPT-style decoder with a tied head (Adam at
PyTorch's default, foreach on GPUs) and a U-Net (Adam), none of them in the zoo or the examples, are
captured here and written to ``DIR`` (graph files). On ``p100x2`` and ``k80x4`` each gets ``single-gpu``
and ``auto`` (budget ``--budget``), simulated: the step, ``auto``'s range over the cost model's
uncertainty and its worst-case speedup over one GPU (docs/algorithms.md, Uncertainty), the share of the
step that is launches and per-op overhead, and the ops on each device.

``--before SRC`` also runs the same graph files through the autoplace source tree ``SRC`` (a checkout
of an earlier commit, its C simulator built: ``git worktree add /tmp/before c1831c7 && cd /tmp/before &&
python setup.py build_ext --inplace``) with ``autoplace place``, in a subprocess: the figures of the
simulator as it was. Its "overhead share" is the per-op overhead it charged in series with each op.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import print_table

CLUSTERS = ("p100x2", "k80x4")


def resnet():
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
    model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                          *[Block(64) for _ in range(4)], nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return "resnet-bn", model, x, nn.functional.cross_entropy, opt, y


def gpt():
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
        def __init__(self, vocab=2000, d=256, layers=4, heads=4, seq=64):
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

    torch.manual_seed(0)
    model = Decoder()
    idx, tgt = torch.randint(0, 2000, (8, 64)), torch.randint(0, 2000, (8, 64))
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    loss = lambda out, t: nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1))  # noqa: E731
    return "gpt-tied", model, idx, loss, opt, tgt


def unet():
    import torch
    from torch import nn

    def conv(a, b):
        return nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.ReLU(), nn.Conv2d(b, b, 3, padding=1), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.d3 = conv(1, 32), conv(32, 64), conv(64, 128)
            self.u2, self.c2 = nn.ConvTranspose2d(128, 64, 2, stride=2), conv(128, 64)
            self.u1, self.c1 = nn.ConvTranspose2d(64, 32, 2, stride=2), conv(64, 32)
            self.out = nn.Conv2d(32, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(nn.functional.max_pool2d(a, 2))
            c = self.d3(nn.functional.max_pool2d(b, 2))
            b2 = self.c2(torch.cat([self.u2(c), b], 1))
            return self.out(self.c1(torch.cat([self.u1(b2), a], 1)))

    torch.manual_seed(0)
    model = UNet()
    x, y = torch.randn(8, 1, 64, 64), torch.randint(0, 2, (8, 64, 64))
    return "unet", model, x, nn.functional.cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-3), y


def capture_all(out: Path) -> list[Path]:
    from autoplace.capture import capture_training_step
    from autoplace.formats import save_graph

    paths = []
    for build in (resnet, gpt, unet):
        name, model, x, loss, opt, y = build()
        g = capture_training_step(model, x, loss, opt, targets=y, name=name)
        path = out / f"{name}.json.gz"
        save_graph(g, path)
        paths.append(path)
        print(f"{name}: {g.n_ops} ops ({sum(op.phase == 'update' for op in g.ops)} update ops, "
              f"{len(g.launch_groups)} launch groups) -> {path}", file=sys.stderr)
    return paths


def after(path: Path, cluster_name: str, budget: float) -> dict:
    from autoplace.cluster import get_cluster
    from autoplace.formats import load_graph
    from autoplace.placers import place
    from autoplace.placers.auto import uncertainty
    from autoplace.sim import simulate

    g, c = load_graph(path), get_cluster(cluster_name)
    one = place(g, c, "single-gpu")
    auto = place(g, c, "auto", seed=0, budget=budget)
    rows = {}
    for label, p in (("single-gpu", one), ("auto", auto)):
        r = simulate(g, c, p)
        rows[label] = {"step_s": r.step_time, "overhead_share": float(r.host_time.sum() / r.step_time),
                       "ops_per_device": {d: int(n) for d, n in zip(c.device_names,
                                                                     np.bincount(p.to_array(g, c),
                                                                                 minlength=c.n_devices))}}
    rng_one, rng_auto = uncertainty(g, c, [one, auto], one)
    rows["auto"].update(rng_auto.to_dict())
    steps_auto = np.array(auto.meta["robust"]["step_s"])
    from autoplace.robust import RobustSimulator

    steps_one = RobustSimulator(g, c).steps(one.to_array(g, c)[None, :])[:, 0]
    rows["auto"]["worst_case_speedup"] = float((steps_one / steps_auto).min())
    rows["single-gpu"].update(rng_one.to_dict())
    return rows


def before(src: Path, path: Path, cluster_name: str, budget: float) -> dict:
    """The same placements and figures from the autoplace tree ``src``, through its command line."""
    env = {**os.environ, "PYTHONPATH": str(src / "src")}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("single-gpu", "auto"):
            out = Path(tmp) / f"{method}.json"
            cmd = [sys.executable, "-m", "autoplace.cli", "place", str(path), "--cluster", cluster_name,
                   "--method", method, "--seed", "0", "--budget", str(budget), "-o", str(out), "--json"]
            res = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
            assignment = json.loads(out.read_text())["assignment"]
            counts: dict[str, int] = {}
            for d in assignment.values():
                counts[d] = counts.get(d, 0) + 1
            code = ("import json, sys; import numpy as np; from autoplace.formats import load_graph; "
                    "from autoplace.cluster import get_cluster; from autoplace.cost import op_time_matrix; "
                    "from autoplace.formats import load_placement; "
                    f"g = load_graph({str(path)!r}); c = get_cluster({cluster_name!r}); "
                    f"d = load_placement({str(out)!r}).to_array(g, c); t = op_time_matrix(g, c); "
                    "print(float(np.minimum(t[np.arange(len(d)), d], c.op_overhead[d]).sum()))")
            overhead = float(subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                                            text=True).stdout)
            rows[method] = {"step_s": res["step_time_s"], "overhead_share": overhead / res["step_time_s"],
                            "ops_per_device": counts}
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, help="an earlier autoplace source tree to run the same graphs through")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=None, help="folder for the captured graphs (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--from-json", type=Path, help="print the table of a saved --json run")
    args = ap.parse_args(argv)
    if args.from_json:
        table(json.loads(args.from_json.read_text()))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        results = []
        for path in capture_all(out):
            for cluster_name in CLUSTERS:
                row = {"model": path.name.split(".")[0], "cluster": cluster_name,
                       "after": after(path, cluster_name, args.budget)}
                if args.before:
                    row["before"] = before(args.before, path, cluster_name, args.budget)
                results.append(row)
                print(f"{row['model']} on {cluster_name} done", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    table(results)
    return 0


def table(results: list[dict]) -> None:
    ms = lambda s: f"{s * 1e3:.2f}"  # noqa: E731
    rows = []
    for row in results:
        a, b = row["after"], row.get("before")
        one = (f"{ms(b['single-gpu']['step_s'])} -> {ms(a['single-gpu']['step_s'])}" if b
               else ms(a["single-gpu"]["step_s"]))
        auto = f"{ms(b['auto']['step_s'])} -> {ms(a['auto']['step_s'])}" if b else ms(a["auto"]["step_s"])
        lo, hi = a["auto"]["step_range_s"]
        share = ((f"{b['single-gpu']['overhead_share']:.0%} -> " if b else "")
                 + f"{a['single-gpu']['overhead_share']:.0%}")
        fmt = lambda c: ", ".join(f"{d} {n}" for d, n in c.items() if n)  # noqa: E731
        devs = (f"{fmt(b['auto']['ops_per_device'])} -> " if b else "") + fmt(a["auto"]["ops_per_device"])
        rows.append([row["model"], row["cluster"], one, auto, f"{ms(lo)}-{ms(hi)}",
                     f"{a['auto']['worst_case_speedup']:.2f}", share, devs])
    print_table(["model", "cluster", "single-GPU step, ms (before -> after)", "auto step, ms (before -> after)",
                 "auto range, ms", "worst-case speedup", "overhead share, single GPU (before -> after)",
                 "auto: ops per device (before -> after)"], rows, "llrrrrrl")


if __name__ == "__main__":
    sys.exit(main())
