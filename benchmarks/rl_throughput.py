"""Throughput of the RL placer in single-process mode, and where an update's time goes.

    .venv/bin/python benchmarks/rl_throughput.py [--samples 800] [--models rnnlm-2,nmt-2,inception-v3] [--cluster k80x4]

Per model: samples per second over ``--samples`` samples (after a warm-up update), and the share of the
time in the policy's forward pass (sampling K placements: encoder + one decoder step per group), in
scoring (the evaluator: cache look-ups and the simulator's batched run) and in the policy update
(backward pass, gradient clipping, Adam).
"""

from __future__ import annotations

import argparse
import time

from autoplace.cluster import get_cluster
from autoplace.placers.rl import RLConfig, RLSearch
from autoplace.zoo import build_graph


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=800)
    ap.add_argument("--models", default="rnnlm-2,nmt-2,inception-v3")
    ap.add_argument("--cluster", default="k80x4")
    ap.add_argument("--threads", type=int, default=1, help="the policy's CPU threads")
    args = ap.parse_args(argv)
    cluster = get_cluster(args.cluster)
    print(f"| model | ops | groups | samples/s | policy forward | scoring | policy update | sim ms/placement |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for model in args.models.split(","):
        graph = build_graph(model)
        search = RLSearch(graph, cluster, RLConfig(torch_threads=args.threads), seed=0)
        search.update()                                   # warm-up: first-call costs
        search.timings.clear()
        evals0 = search.evaluate.evaluations
        t0 = time.perf_counter()
        n0 = search.samples
        while search.samples - n0 < args.samples:
            search.update()
        wall = time.perf_counter() - t0
        total = sum(search.timings.values())
        share = {k: v / total for k, v in search.timings.items()}
        evals = search.evaluate.evaluations - evals0
        print(f"| {model} | {graph.n_ops:,} | {search.features.n_groups} | {(search.samples - n0) / wall:.1f} | "
              f"{share['policy_forward']:.0%} | {share['evaluate']:.0%} | {share['policy_update']:.0%} | "
              f"{search.timings['evaluate'] / max(evals, 1) * 1e3:.2f} |", flush=True)
        search.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
