"""Throughput of the RL placer in single-process mode, and where an update's time goes.

    .venv/bin/python benchmarks/rl_throughput.py [--samples 800] [--models rnnlm-2,nmt-2,inception-v3] [--cluster k80x4]
    .venv/bin/python benchmarks/rl_throughput.py --ray-workers 2      # the distributed search on local Ray

Per model: samples per second over ``--samples`` samples (after a warm-up update), and the share of the
time in the policy's forward pass (sampling K placements: encoder + one decoder step per group), in
scoring (the evaluator: cache look-ups and the simulator's batched run) and in the policy update
(backward pass, gradient clipping, Adam). With ``--ray-workers N``: samples per second of the distributed
search (one controller, N workers, a parameter server; Ray's start-up not counted).
"""

from __future__ import annotations

import argparse
import json
import time

from _common import TableOut

from autoplace.cluster import get_cluster
from autoplace.placers.learned.rl import RLConfig, RLSearch
from autoplace.zoo import build_graph


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=800)
    ap.add_argument("--models", default="rnnlm-2,nmt-2,inception-v3")
    ap.add_argument("--cluster", default="k80x4")
    ap.add_argument("--threads", type=int, default=1, help="the policy's CPU threads")
    ap.add_argument("--ray-workers", type=int, default=0, help="measure the distributed search with N workers")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an RL setting (attention=additive samples_per_update=8: the paper's decoder and update)")
    args = ap.parse_args(argv)
    cluster = get_cluster(args.cluster)
    args.config = RLConfig.from_dict({"torch_threads": args.threads, **dict(_setting(kv) for kv in args.set)})
    if args.ray_workers:
        return distributed(args, cluster)
    out = TableOut(["model", "ops", "groups", "samples/s", "policy forward", "scoring", "policy update",
                    "sim ms/placement"])
    for model in args.models.split(","):
        graph = build_graph(model)
        search = RLSearch(graph, cluster, args.config, seed=0)
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
        out.row(model, f"{graph.n_ops:,}", search.features.n_groups, f"{(search.samples - n0) / wall:.1f}",
                f"{share['policy_forward']:.0%}", f"{share['evaluate']:.0%}", f"{share['policy_update']:.0%}",
                f"{search.timings['evaluate'] / max(evals, 1) * 1e3:.2f}")
        search.close()
    return 0


def _setting(kv: str) -> tuple[str, object]:
    k, v = kv.split("=", 1)
    try:
        return k, json.loads(v)
    except json.JSONDecodeError:
        return k, v


def distributed(args, cluster) -> int:
    from autoplace.placers.learned.rl import rl_distributed
    from autoplace.search import SearchBudget
    from autoplace.search.distributed import ray_session

    out = TableOut(["model", "ops", "groups", "workers", "samples/s", "evaluations", "cache hits"])
    with ray_session():
        for model in args.models.split(","):
            graph = build_graph(model)
            r = rl_distributed(graph, cluster, budget=SearchBudget(samples=args.samples), workers=args.ray_workers,
                               config=args.config, seed=0)
            first = r.curve.points[0]                 # the rate after the first update (actors started)
            rate = (r.samples - first.samples) / max(r.curve.points[-1].wall_s - first.wall_s, 1e-9)
            out.row(model, f"{graph.n_ops:,}", r.placement.meta["groups"], args.ray_workers, f"{rate:.1f}",
                    r.evaluations, r.cache_hits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
