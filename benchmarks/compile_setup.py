"""How long ``autoplace.compile`` takes to set a model up, the first time and again in a new process (the
placement then comes from the on-disk cache).

    .venv/bin/python benchmarks/compile_setup.py [--method auto] [--budget SECONDS]

Three models a user might write (``autoplace.bench.user_models``, at :data:`SIZES`): a ResNet-style CNN of
16 residual blocks (BatchNorm, residual adds), a GPT-style decoder of 12 layers with its head tied to the
embedding, a U-Net on 128×128 images (skip connections across the resolutions); Adam on each, this
machine's CPU workers (``localhost``). Each compile runs in a fresh process (imports not counted) with its
own empty cache folder for the first; the second process finds the first's placement. Seconds: the whole
``compile`` call, then where it went (:data:`STAGES`).
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

from autoplace.bench import user_models

MODELS = tuple(user_models.MODELS)
#: where ``compile``'s set-up goes (``step.setup_seconds``): tracing the step, measuring this machine and the
#: step's op costs, searching, starting the workers (and checking the placement against one device)
STAGES = ("capture", "calibrate", "place", "workers")


#: each model's sizes here (``autoplace.bench.user_models``)
SIZES = {"resnet": {"blocks": 16, "stem_norm": False}, "gpt": {"vocab": 8192, "d": 384, "layers": 12},
         "unet": {"size": 128}}


def one(name: str, method: str, budget: float | None) -> dict:
    import torch

    import autoplace

    _, model, x, loss, y = user_models.MODELS[name](**SIZES[name], name=name)
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
        split = lambda r: " / ".join(f"{r.get(k, 0.0):.1f}" for k in STAGES)  # noqa: E731
        rows.append([name, first["ops"], f"{first['total']:.1f}", split(first), f"{again['total']:.1f}",
                     split(again), f"{again['total'] / first['total']:.2f}"])
        print(f"# {name} done", file=sys.stderr, flush=True)
    stages = " / ".join(STAGES)
    print_table(["model", "ops", "first compile (s)", stages, "again, new process (s)", stages, "again / first"], rows)
    print(f"\nmethod {args.method}, budget {args.budget}; localhost CPU workers")


if __name__ == "__main__":
    main()
