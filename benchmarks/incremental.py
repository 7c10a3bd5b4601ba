"""Local search with and without incremental re-simulation: evaluations per second, same result.

    .venv/bin/python benchmarks/incremental.py [--graphs inception-v3,gnmt-8,layered-dag] [--cluster p100x8]
        [--budget 10] [--robust] [--json FILE]

For each graph: the ``metis`` placement refined by :func:`autoplace.placers.local_search.refine` under the
simulator (``--robust``: the uncertainty scenarios' worst case, as ``auto`` refines) to ``--budget`` seconds
of nominal work (a fixed number of evaluations), once simulating every candidate from the start and once
incrementally (:class:`autoplace.sim.Incremental`). Both must reach the same placement and score; the
table gives the wall time, evaluations per second and the speed-up. Then, on the 30k-op DAG placed in
blocks (each device a contiguous range of layers), one op moved at several depths of the step: the time
per placement from the start and incrementally (what a move saves depends on how late it is first read).
Scenarios in one thread (``AUTOPLACE_SIM_THREADS=1``).
"""

from __future__ import annotations

import argparse
import json
import os
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
    os.environ.setdefault("AUTOPLACE_SIM_THREADS", "1")
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
    depths = by_depth(cluster)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cluster": args.cluster, "budget": args.budget, "robust": args.robust, "rows": rows,
                       "by_depth": depths}, f, indent=2)
    print_table(["graph", "ops", "evaluations", "from the start: evals/s", "incremental: evals/s", "speed-up",
                 "same result"],
                [[r["graph"], f"{r['ops']:,}", r["evaluations"], f"{r['evals_per_s_from_start']:.0f}",
                  f"{r['evals_per_s_incremental']:.0f}", f"{r['speedup']:.2f}x", "yes" if r["same_result"] else "NO"]
                 for r in rows])
    print()
    print_table(["op moved at", "from the start", "incremental", "speed-up"],
                [[f"{d['depth']:.1%} of the order", f"{d['from_start_ms']:.2f} ms", f"{d['incremental_ms']:.2f} ms",
                  f"{d['from_start_ms'] / d['incremental_ms']:.1f}x"] for d in depths])
    return 0 if all(r["same_result"] for r in rows) else 1


def by_depth(cluster, repeat: int = 16) -> list[dict]:
    """One op of the 30k-op DAG (in blocks) moved at several depths of its topological order: milliseconds
    per placement from the start and incrementally (``repeat`` placements each)."""
    graph = build_graph("layered-dag")
    sim = Simulator(graph, cluster)
    D = cluster.n_devices
    layer = np.array([op.meta["layer"] for op in graph.ops])
    base = np.minimum(layer * D // (layer.max() + 1), D - 1).astype(np.int64)
    inc = sim.incremental(base)
    out = []
    for depth in (0.999, 0.9, 0.75, 0.5, 0.25, 0.0):
        op = graph.topological_order[int(depth * (graph.n_ops - 1))]
        row = base.copy()
        row[op] = (base[op] + 1) % D
        batch = np.stack([row] * repeat)
        t = time.perf_counter()
        inc.run_batch(batch)
        t_inc = (time.perf_counter() - t) / repeat
        t = time.perf_counter()
        sim.run_batch(batch)
        t_full = (time.perf_counter() - t) / repeat
        out.append({"depth": depth, "op": int(op), "from_start_ms": t_full * 1e3, "incremental_ms": t_inc * 1e3})
    return out


if __name__ == "__main__":
    sys.exit(main())
