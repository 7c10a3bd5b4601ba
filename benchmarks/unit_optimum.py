"""The best placement that moves whole structural units: every unit-level placement of the RL placer's
groups, simulated.

    .venv/bin/python benchmarks/unit_optimum.py [--settings rnnlm-2@k80x2,rnnlm-2@k80x4] [--limit 200000]

The RL placer's exploration noise is drawn once per structural unit (a layer with its weights at every
time step: docs/algorithms.md), so a random search through it samples mostly placements that keep each
unit on one device. Where a graph has few units (rnnlm-2: 6), those placements are few enough to list:
this script scores each (every group on its unit's device, devices a unit's groups cannot all run
excluded) and prints the best, beside the number of them, so that a learned search's best can be read
against what a search over units alone reaches. Settings with more than ``--limit`` unit placements are
skipped.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
from _common import note, print_table

from autoplace.cluster import get_cluster
from autoplace.env import make_env
from autoplace.grouping import grouped_graph
from autoplace.placers.learned.rl import RLConfig, policy_parts
from autoplace.search.evaluation import Evaluator
from autoplace.zoo import build_graph


def unit_optimum(model: str, cluster_name: str, limit: int, batch: int = 512):
    graph, cluster = build_graph(model), get_cluster(cluster_name)
    grouping, features, _, _ = policy_parts(graph, cluster, RLConfig(decide="group"), 0)   # units of groups
    feasible = grouped_graph(graph, grouping, cluster).feasible               # [groups, devices]
    unit = np.empty(features.n_groups, dtype=np.int64)
    unit[features.order] = features.unit                                      # group id -> its unit
    n_units = int(unit.max()) + 1
    choices = [np.flatnonzero(feasible[unit == u].all(axis=0)) for u in range(n_units)]
    total = int(np.prod([len(c) for c in choices], dtype=float))
    if total > limit:
        return model, cluster_name, n_units, total, None, None
    ev = Evaluator(make_env("simulated", graph, cluster), grouping)
    best, t0 = np.inf, time.perf_counter()
    combos = itertools.product(*choices)
    while True:
        chunk = np.array(list(itertools.islice(combos, batch)), dtype=np.int64)
        if not len(chunk):
            break
        s = ev(chunk[:, unit])
        if s.ok.any():
            best = min(best, float(s.step_time[s.ok].min()))
    note(f"{model} on {cluster_name}: {total:,} unit placements in {time.perf_counter() - t0:.0f} s")
    return model, cluster_name, n_units, total, best, features.n_groups


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="rnnlm-2@k80x2,rnnlm-2@k80x4")
    ap.add_argument("--limit", type=int, default=200_000)
    args = ap.parse_args(argv)
    rows = []
    for s in args.settings.split(","):
        model, cluster, n_units, total, best, groups = unit_optimum(*s.split("@"), args.limit)
        rows.append([f"{model} on {cluster}", groups or "–", n_units, f"{total:,}",
                     "–" if best is None else f"{best * 1e3:.1f}"])
    print_table(["setting", "groups", "units", "unit placements", "best unit placement (ms)"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
