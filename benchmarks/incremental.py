"""Local search with and without incremental re-simulation: evaluations per second, same result.

    .venv/bin/python benchmarks/incremental.py [--graphs inception-v3,gnmt-8,layered-dag] [--cluster p100x8]
        [--budget 10] [--robust] [--json FILE]

For each graph: the ``metis`` placement refined by :func:`autoplace.placers.local_search.refine` under the
simulator (``--robust``: the uncertainty scenarios' worst case, as ``auto`` refines) to ``--budget`` seconds
of nominal work (a fixed number of evaluations), once simulating every candidate from the start and once
incrementally (:class:`autoplace.sim.Incremental`). Both must reach the same placement and score; the
table gives the wall time, evaluations per second and the speed-up. One thread.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from types import SimpleNamespace

import numpy as np
from _common import print_table

from autoplace.cluster import get_cluster
from autoplace.placers import place
from autoplace.placers.local_search import refine
from autoplace.robust import RobustSimulator
from autoplace.sim import Simulator
from autoplace.zoo import build_graph


def from_start(sim):
    """``sim`` without its incremental simulation: every candidate runs from the start."""
    return SimpleNamespace(run_batch=sim.run_batch, sims=getattr(sim, "sims", (sim,)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", default="inception-v3,gnmt-8,layered-dag")
    ap.add_argument("--cluster", default="p100x8")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--robust", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    cluster = get_cluster(args.cluster)
    rows = []
    for name in args.graphs.split(","):
        graph = build_graph(name)
        start = place(graph, cluster, "metis", seed=0)
        sim = RobustSimulator(graph, cluster) if args.robust else Simulator(graph, cluster)
        out = {}
        for mode, s in (("from the start", from_start(sim)), ("incremental", sim)):
            t0 = time.perf_counter()
            p = refine(graph, cluster, start, seed=0, budget=args.budget, simulator=s)
            out[mode] = (time.perf_counter() - t0, p)
        (t_full, p_full), (t_inc, p_inc) = out["from the start"], out["incremental"]
        same = (np.array_equal(p_full.to_array(graph, cluster), p_inc.to_array(graph, cluster))
                and p_full.meta["score_s"] == p_inc.meta["score_s"])
        ev = p_inc.meta["evaluations"]
        rows.append({"graph": name, "ops": graph.n_ops, "evaluations": ev, "wall_s_from_start": t_full,
                     "wall_s_incremental": t_inc, "evals_per_s_from_start": ev / t_full,
                     "evals_per_s_incremental": ev / t_inc, "speedup": t_full / t_inc, "same_result": same,
                     "score_s": p_inc.meta["score_s"], "stop_reason": p_inc.meta["stop_reason"]})
        r = rows[-1]
        print(f"{name}: {ev} evaluations, {t_full:.1f} s -> {t_inc:.1f} s ({r['speedup']:.2f}x), same: {same}",
              file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cluster": args.cluster, "budget": args.budget, "robust": args.robust, "rows": rows}, f,
                      indent=2)
    print_table(["graph", "ops", "evaluations", "from the start: evals/s", "incremental: evals/s", "speed-up",
                 "same result"],
                [[r["graph"], f"{r['ops']:,}", r["evaluations"], f"{r['evals_per_s_from_start']:.0f}",
                  f"{r['evals_per_s_incremental']:.0f}", f"{r['speedup']:.2f}x", "yes" if r["same_result"] else "NO"]
                 for r in rows])
    return 0 if all(r["same_result"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
