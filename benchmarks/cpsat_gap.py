"""CP-SAT's proven bound on small graphs, and every placer's gap to it.

    .venv/bin/python benchmarks/cpsat_gap.py [--cluster k80x2] [--budget 60]

On graphs of at most 60 ops CP-SAT works on the ops themselves (the op-level model); its model ignores
link contention, lets ops run in any order, rounds durations down and relaxes memory to what every step
holds, so every placement's simulated schedule is feasible in it and no shorter: its proven bound is a
lower bound on every placement's simulated step time, gap = step / bound - 1 (docs/algorithms.md).
``--budget`` is CP-SAT's deterministic time.
"""

from __future__ import annotations

import argparse
import sys

from _common import TableOut

GRAPHS = [("toy-mlp", {"layers": 2}), ("mnist-softmax", {}), ("layered-dag", {"ops": 30, "width": 5})]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", default="k80x2")
    ap.add_argument("--budget", type=float, default=60.0)
    args = ap.parse_args(argv)
    from autoplace.cluster import get_cluster
    from autoplace.errors import InfeasibleError
    from autoplace.placers import available_placers, place
    from autoplace.placers.cpsat import solve_cp_sat
    from autoplace.sim import simulate
    from autoplace.zoo import build_graph

    cluster = get_cluster(args.cluster)
    for name, params in GRAPHS:
        g = build_graph(name, **params)
        r = solve_cp_sat(g, cluster, budget=args.budget)
        if r.bound_s is None:
            print(f"\n### {name}: {g.n_ops} ops, more than the op-level model takes; skipped")
            continue
        print(f"\n### {name} {params or ''} — {g.n_ops} ops on {cluster.name}: CP-SAT {r.status} on {r.model} "
              f"({r.memory_model} memory), model optimum {r.objective_s * 1e3:.4f} ms, proven bound "
              f"{r.bound_s * 1e3:.4f} ms\n")
        out = TableOut(["method", "simulated step", "gap to bound"])
        for m in available_placers(include_learned=False):
            try:
                step = simulate(g, cluster, place(g, cluster, m, seed=0, budget=10.0)).step_time
            except InfeasibleError as e:
                out.row(m, f"no placement ({e})", "-")
                continue
            out.row(m, f"{step * 1e3:.4f} ms", f"{100 * (step / r.bound_s - 1):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
