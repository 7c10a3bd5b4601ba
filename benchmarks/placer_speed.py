"""Placement time of every scalable placer on >= 30,000-op graphs, and whether the searches converge.

    .venv/bin/python benchmarks/placer_speed.py [--methods m-etf,m-sct,...] [--graphs layered-dag,gnmt-8]
        [--cluster k80x4] [--ops 30000]

Search placers (``local-search``, ``auto``) run with budget 60; the note says where a search started,
how its levels ended (groups, passes, converged) and why it stopped.
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import TableOut


def _note(meta: dict) -> str:
    """What a row's placement says of its search: favourites, start, levels, stop reason."""
    parts = []
    if "favourites" in meta:
        parts.append(f"favourites: {meta['favourites']}")
    start = meta.get("from", meta.get("refined_from"))
    if start is not None:
        parts.append(f"from {start}" + "".join(f" + {s}" for s in meta.get("improved_by", [])))
    search = meta.get("refine", meta)
    if "levels" in search:
        levels = ", ".join(f"{lv['groups']} groups: {lv['passes']} passes"
                           + (" (converged)" if lv["converged"] else "") for lv in search["levels"])
        parts.append(f"{search['evaluations']} evaluations, {levels}; stop: {search['stop_reason']}")
    return "; ".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods",
                    default="m-etf,m-sct,m-topo,tf-greedy,heft,metis,scotch,mincut,expert,dp-split,local-search,auto")
    ap.add_argument("--graphs", default="layered-dag,gnmt-8")
    ap.add_argument("--cluster", default="k80x4")
    ap.add_argument("--ops", type=int, help="the layered DAG's ops (default 30,000)")
    args = ap.parse_args(argv)
    from autoplace.cluster import get_cluster
    from autoplace.errors import InfeasibleError
    from autoplace.placers import place
    from autoplace.sim import simulate
    from autoplace.zoo import build_graph

    cluster = get_cluster(args.cluster)
    out = TableOut(["graph", "ops", "method", "placement time", "simulated step", "OOM", "note"], "lrlrrll")
    for name in args.graphs.split(","):
        g = build_graph(name, ops=args.ops) if name == "layered-dag" and args.ops else build_graph(name)
        for m in args.methods.split(","):
            t0 = time.perf_counter()
            try:
                p = place(g, cluster, m, seed=0, budget=60.0)
            except InfeasibleError as e:
                out.row(name, f"{g.n_ops:,}", m, f"{time.perf_counter() - t0:.1f} s", "none", "-", e)
                continue
            el = time.perf_counter() - t0
            r = simulate(g, cluster, p)
            note = _note(p.meta)
            out.row(name, f"{g.n_ops:,}", m, f"{el:.1f} s", f"{r.step_time:.3f} s", ", ".join(r.oom_devices) or "-",
                    note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
