"""``auto`` on a large layered DAG: wall time, peak memory and where the time went.

    .venv/bin/python benchmarks/scale.py [--ops 200000] [--cluster p100x8] [--budget 60] [--json FILE]

Builds the ``layered-dag`` model with ``--ops`` ops (layers of 64) and places it with ``auto`` (seed 0,
``--budget`` seconds of nominal work). Prints the graph's build time, ``auto``'s wall time, the process's
peak resident memory, the simulated step and each fast placer's time (from the placement's meta). One
process, one thread.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from autoplace.cluster import get_cluster
from autoplace.placers import place
from autoplace.sim import simulate
from autoplace.zoo import build_graph


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--cluster", default="p100x8")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    graph = build_graph("layered-dag", ops=args.ops, width=64)
    build_s = time.perf_counter() - t0
    cluster = get_cluster(args.cluster)
    t0 = time.perf_counter()
    p = place(graph, cluster, "auto", seed=0, budget=args.budget)
    auto_s = time.perf_counter() - t0
    step = simulate(graph, cluster, p).step_time
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    m = p.meta
    out = {"ops": graph.n_ops, "edges": graph.n_edges, "cluster": args.cluster, "budget": args.budget,
           "graph_build_s": build_s, "auto_wall_s": auto_s, "peak_rss_mib": rss, "step_s": step,
           "method": p.method, "from": m.get("from"), "improved_by": m.get("improved_by"),
           "candidates": [{k: c.get(k) for k in ("method", "search_time_s", "step_time_s", "ok", "error")}
                          for c in m.get("candidates", [])]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    print(f"layered DAG: {graph.n_ops:,} ops, {graph.n_edges:,} edges, built in {build_s:.1f} s")
    print(f"auto on {args.cluster}, budget {args.budget:g}: {auto_s:.1f} s wall, peak RSS {rss:,.0f} MiB, "
          f"step {step * 1e3:.2f} ms (from {m.get('from')}, improved by {', '.join(m.get('improved_by', [])) or '-'})")
    for c in out["candidates"]:
        t = c["search_time_s"]
        print(f"  {c['method']:<11} {'' if t is None else f'{t:7.1f} s'}  "
              + (f"{c['step_time_s'] * 1e3:.2f} ms" if c.get("step_time_s") else (c.get("error") or "")[:90]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
