"""GDP at scale: time per PPO update and peak memory when placing a large graph op by op.

    .venv/bin/python benchmarks/gdp_scale.py                   # gnmt-8 on p100x8, 3 updates of 32 samples
    .venv/bin/python benchmarks/gdp_scale.py --model gnmt-4 --cluster p100x4 --updates 5

Prints the graph's ops and GDP nodes, its prior (the fast placers' best), the seconds of each update
(sampling and scoring, then the PPO epochs) and the process's peak resident memory (``ru_maxrss``)
before and after the search.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20     # kilobytes on Linux


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gnmt-8")
    ap.add_argument("--cluster", default="p100x8")
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from autoplace.cluster import get_cluster
    from autoplace.placers.learned.gdp import GDPConfig, GDPSearch
    from autoplace.zoo import build_graph

    t0 = time.perf_counter()
    graph, cluster = build_graph(args.model), get_cluster(args.cluster)
    print(f"{args.model}: {graph.n_ops:,} ops, built in {time.perf_counter() - t0:.1f} s; "
          f"peak RSS {peak_gib():.2f} GiB")
    t0 = time.perf_counter()
    search = GDPSearch([graph], [cluster], GDPConfig(), seed=args.seed)
    prob = search.problems[0]
    print(f"GDP nodes: {prob.features.n_nodes:,}; features, policy and prior ({prob.prior_method}, "
          f"{prob.prior_step:.3f} s, found in {prob.prior_s:.1f} s) ready in {time.perf_counter() - t0:.1f} s; "
          f"peak RSS {peak_gib():.2f} GiB")
    before = dict(search.timings)
    for i in range(args.updates):
        t0 = time.perf_counter()
        p = search.update()
        parts = {k: search.timings[k] - before.get(k, 0.0) for k in search.timings}
        before = dict(search.timings)
        print(f"update {i + 1}: {time.perf_counter() - t0:.1f} s (sample + score {parts['sample_and_evaluate']:.1f} s, "
              f"PPO epochs {parts['ppo']:.1f} s); best {p.best_step_s:.3f} s, mean sampled {p.mean_step_s:.3f} s",
              flush=True)
    print(f"peak RSS {peak_gib():.2f} GiB")
    search.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
