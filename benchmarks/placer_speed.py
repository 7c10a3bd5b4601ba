"""Placement time of the scalable placers on >= 30,000-op graphs (the target: m-ETF and m-SCT
in <= 60 s).

    .venv/bin/python benchmarks/placer_speed.py [--methods m-etf,m-sct,...] [--graphs layered-dag,gnmt-8]
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default="m-etf,m-sct,m-topo,tf-greedy,heft,metis,scotch,mincut,expert")
    ap.add_argument("--graphs", default="layered-dag,gnmt-8")
    ap.add_argument("--cluster", default="k80x4")
    args = ap.parse_args(argv)
    from autoplace.cluster import get_cluster
    from autoplace.placers import place
    from autoplace.sim import simulate
    from autoplace.zoo import build_graph

    cluster = get_cluster(args.cluster)
    print("| graph | ops | method | placement time | simulated step | OOM | note |")
    print("|---|---:|---|---:|---:|---|---|")
    for name in args.graphs.split(","):
        g = build_graph(name)
        for m in args.methods.split(","):
            t0 = time.perf_counter()
            p = place(g, cluster, m, seed=0, budget=60.0)
            el = time.perf_counter() - t0
            r = simulate(g, cluster, p)
            note = f"favourites: {p.meta['favourites']}" if "favourites" in p.meta else ""
            print(f"| {name} | {g.n_ops:,} | {m} | {el:.1f} s | {r.step_time:.3f} s | "
                  f"{', '.join(r.oom_devices) or '-'} | {note} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
