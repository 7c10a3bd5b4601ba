"""An RL search killed with ``kill -9`` and resumed, against the same search never interrupted.

    .venv/bin/python benchmarks/rl_resume.py [--model rnnlm-2] [--cluster k80x4] [--samples 40000] [--seed 0]
                                             [--kill-at 0.5] [--checkpoint-every 5]

Runs ``autoplace place MODEL -m rl --samples N --seed S --checkpoint DIR`` as a subprocess, sends it
SIGKILL once its checkpoint holds ``--kill-at`` of the samples, half a checkpoint interval later (so the
kill lands between two checkpoints, at whatever moment the machine is at), resumes it with ``--resume DIR``,
and runs the same command once more uninterrupted. Prints when the kill came and what the last checkpoint before it
holds (where the resumed search starts: the work since, at most one checkpoint interval, is done again), and
whether the two runs end with the same placement and the same curve.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autoplace.search import load_checkpoint
from autoplace.search.checkpoint import CHECKPOINT_FILE


def _place(args, *extra: str) -> list[str]:
    return [sys.executable, "-m", "autoplace.cli", "place", args.model, "--cluster", args.cluster, "-m", "rl",
            "--seed", str(args.seed), "--samples", str(args.samples), "--checkpoint-every", str(args.checkpoint_every),
            *extra]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="rnnlm-2")
    ap.add_argument("--cluster", default="k80x4")
    ap.add_argument("--samples", type=int, default=40000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kill-at", type=float, default=0.5, help="fraction of the samples reached before the kill")
    ap.add_argument("--checkpoint-every", type=float, default=5.0, help="seconds between checkpoints")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rl-resume-"))
    ck = tmp / "ck"

    t0 = time.perf_counter()
    killed_out = tmp / "killed.json"
    proc = subprocess.Popen(_place(args, "--checkpoint", str(ck), "-o", str(killed_out)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    saved = 0
    while proc.poll() is None:
        if (ck / CHECKPOINT_FILE).exists():
            saved = load_checkpoint(ck)["samples"]
            if saved >= args.kill_at * args.samples:
                break
        time.sleep(0.2)
    time.sleep(args.checkpoint_every / 2)             # kill between two checkpoints, not right after one
    if proc.poll() is not None:
        print(f"the search ended before the kill (exit {proc.returncode}): raise --samples or lower --kill-at")
        return 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.returncode != -signal.SIGKILL or killed_out.exists():
        print(f"the search was not killed mid-run (exit {proc.returncode}): raise --samples or lower --kill-at")
        return 1
    killed = load_checkpoint(ck)
    first_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    subprocess.run(_place(args, "--resume", str(ck), "--curve", str(tmp / "resumed"), "-o", str(tmp / "resumed.json")),
                   check=True, stdout=subprocess.DEVNULL)
    resumed_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    subprocess.run(_place(args, "--curve", str(tmp / "whole"), "-o", str(tmp / "whole.json")), check=True,
                   stdout=subprocess.DEVNULL)
    whole_s = time.perf_counter() - t2

    resumed, whole = (json.loads((tmp / f"{n}.json").read_text()) for n in ("resumed", "whole"))
    curves = [[r["mean_step_s"] for r in csv.DictReader(open(tmp / f"{n}.csv"))] for n in ("resumed", "whole")]
    shutil.rmtree(tmp)
    same = resumed["assignment"] == whole["assignment"]
    print(f"{args.model} on {args.cluster}, {args.samples} samples, seed {args.seed}:")
    print(f"  killed with SIGKILL after {first_s:.0f} s; its last checkpoint: update {killed['updates']} "
          f"({killed['samples']} samples, {killed['wall_s']:.0f} s of search)")
    print(f"  resumed from there: {resumed_s:.0f} s to the end; uninterrupted run: {whole_s:.0f} s")
    print(f"  best step: resumed {resumed['best_step_s'] * 1e3:.3f} ms, "
          f"uninterrupted {whole['best_step_s'] * 1e3:.3f} ms")
    print(f"  same placement: {'yes' if same else 'NO'}; same curve (every update's sampled mean): "
          f"{'yes' if curves[0] == curves[1] else 'NO'} ({len(curves[1])} updates)")
    return 0 if same and curves[0] == curves[1] else 1


if __name__ == "__main__":
    raise SystemExit(main())
