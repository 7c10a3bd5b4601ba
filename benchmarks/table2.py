"""Mirhoseini et al. 2017 Table 2, side by side: our simulated step times beside the paper's measured ones.

    .venv/bin/python benchmarks/table2.py [--budget 30]

For rnnlm-2, nmt-2 and inception-v3 on k80x2 and k80x4 every registered placer is run (search placers
with --budget seconds) and simulated; speedups are over single-GPU and over the expert placement.
"""

from __future__ import annotations

import argparse
import sys

#: Mirhoseini et al. 2017, Table 2 (seconds; None = OOM): single-CPU, single-GPU, then per #GPUs
#: (2, 4): Scotch, MinCut, Expert, RL.
PAPER = {
    "rnnlm-2": {"single-cpu": 6.89, "single-gpu": 1.57, 2: {"scotch": 13.43, "mincut": 11.94, "expert": 3.81, "rl": 1.57},
                4: {"scotch": 11.52, "mincut": 10.44, "expert": 4.46, "rl": 1.57}},
    "nmt-2": {"single-cpu": 10.72, "single-gpu": None, 2: {"scotch": 14.19, "mincut": 11.54, "expert": 4.99, "rl": 4.04},
              4: {"scotch": 11.23, "mincut": 11.78, "expert": 4.73, "rl": 3.92}},
    "inception-v3": {"single-cpu": 26.21, "single-gpu": 4.60, 2: {"scotch": 25.24, "mincut": 22.88, "expert": 11.22,
                                                                  "rl": 4.60},
                     4: {"scotch": 23.41, "mincut": 24.52, "expert": 10.65, "rl": 3.85}},
}


def fmt(x):
    return "OOM" if x is None else f"{x:.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=30.0)
    args = ap.parse_args(argv)
    from autoplace.cluster import get_cluster
    from autoplace.comparison import compare
    from autoplace.zoo import build_graph

    for model in PAPER:
        g = build_graph(model)
        for gpus in (2, 4):
            cluster = get_cluster(f"k80x{gpus}")
            res = compare(g, cluster, seed=0, budget=args.budget)
            paper = {**{k: v for k, v in PAPER[model].items() if isinstance(k, str)}, **PAPER[model][gpus]}
            gpu, exp = res.step_time("single-gpu"), res.step_time("expert")
            pg, pe = paper["single-gpu"], paper["expert"]
            print(f"\n### {model} on k80x{gpus} (1 CPU + {gpus} K80) — bounds: critical path "
                  f"{res.bounds.critical_path:.3f} s, load {res.bounds.load:.3f} s\n")
            print("| method | ours: step (s) | ours vs single-GPU | ours vs expert | paper: step (s) | "
                  "paper vs single-GPU | paper vs expert |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for r in res.rows:
                st = r.step_time
                ours = "OOM" if r.result is not None and not r.result.ok else (fmt(st) if r.result else "none")
                p = paper.get(r.method, "-")
                pv = fmt(p) if p != "-" else "-"
                psg = f"{pg / p:.2f}x" if isinstance(p, float) and pg else "-"
                pex = f"{pe / p:.2f}x" if isinstance(p, float) else "-"
                print(f"| {r.method} | {ours} | {gpu / st:.2f}x | {exp / st:.2f}x | {pv} | {psg} | {pex} |")
            rl = paper["rl"]
            print(f"| (paper's RL placer) | - | - | - | {fmt(rl)} | "
                  f"{f'{pg / rl:.2f}x' if pg else '-'} | {pe / rl:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
