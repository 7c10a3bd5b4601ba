"""The RL placer on Mirhoseini et al.'s Table 2 settings, beside expert, single-GPU, auto and the paper's RL.

    .venv/bin/python benchmarks/rl_table2.py [--budget 600 | --samples N] [--json out.json] [--curves DIR]
                                               [--only MODEL@CLUSTER,...]
                                               [--set KEY=VALUE ...]
    .venv/bin/python benchmarks/rl_table2.py --from-json saved.json          # the tables of a saved run

Per setting (rnnlm-2, nmt-2, inception-v3 on ``k80x2`` and ``k80x4``): the RL search with the samples a work
budget of ``--budget`` seconds allows (as ``autoplace place -m rl --budget``; or ``--samples``), seed ``--seed``,
reproducible, its wall time reported; then the same placement refined by
local search (``--refine-budget``, as ``autoplace place --refine``), against single-GPU, the expert and
``auto`` (``--auto-budget``), all simulated; the paper's RL speedup over single-GPU beside. ``--curves DIR``
writes each search's curve (CSV and PNG).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from paper_tables import MIRHOSEINI

from autoplace.cli import _settings
from autoplace.cluster import get_cluster
from autoplace.placers import place
from autoplace.placers.local_search import refine
from autoplace.placers.rl import rl_search, work_budget
from autoplace.search import SearchBudget
from autoplace.sim import simulate
from autoplace.zoo import build_graph

SETTINGS = [(m, c) for m in ("rnnlm-2", "nmt-2", "inception-v3") for c in ("k80x2", "k80x4")]


def run(args) -> list[dict]:
    rows = []
    only = set(args.only.split(",")) if args.only else None
    for model, cname in SETTINGS:
        if only and f"{model}@{cname}" not in only:
            continue
        graph, cluster = build_graph(model), get_cluster(cname)
        row = {"model": model, "cluster": cname}
        for method, budget in (("single-gpu", None), ("expert", None), ("auto", args.auto_budget)):
            t0 = time.perf_counter()
            r = simulate(graph, cluster, place(graph, cluster, method, seed=args.seed, budget=budget))
            row[method] = {"step_s": r.step_time, "ok": r.ok, "search_s": time.perf_counter() - t0}
        t0 = time.perf_counter()
        curve = None if args.curves is None else Path(args.curves) / f"{model}-{cname}"
        budget = (SearchBudget(samples=args.samples) if args.samples
                  else work_budget(graph, cluster, args.budget, args.config))
        res = rl_search(graph, cluster, budget=budget, seed=args.seed, config=args.config,
                        curve_csv=curve and f"{curve}.csv", curve_png=curve and f"{curve}.png")
        wall = time.perf_counter() - t0
        r = simulate(graph, cluster, res.placement)
        row["rl"] = {"step_s": r.step_time, "ok": r.ok, "search_s": wall, "samples": res.samples,
                     "stop_reason": res.stop_reason, "groups": res.placement.meta["groups"],
                     "first_best_s": res.curve.points[0].best_step_s}
        t0 = time.perf_counter()
        refined = refine(graph, cluster, res.placement, seed=args.seed, budget=args.refine_budget)
        r = simulate(graph, cluster, refined)
        row["rl+refine"] = {"step_s": r.step_time, "ok": r.ok, "search_s": time.perf_counter() - t0}
        rows.append(row)
        print(f"{model} on {cname}: rl {row['rl']['step_s']:.3f} s in {wall:.0f} s", file=sys.stderr, flush=True)
    return rows


def print_tables(rows: list[dict]) -> None:
    methods = ("single-gpu", "expert", "auto", "rl", "rl+refine")
    print("| setting | " + " | ".join(methods) + " | rl search | paper: rl / single-gpu |")
    print("|---|" + "---:|" * (len(methods) + 2))
    for row in rows:
        base = row["single-gpu"]["step_s"]
        cells = [f"{row[m]['step_s']:.3f}{'' if row[m]['ok'] else ' OOM'} ({base / row[m]['step_s']:.2f}x)"
                 for m in methods]
        paper = MIRHOSEINI[row["model"]]
        pr = paper[2 if row["cluster"] == "k80x2" else 4]["rl"]
        ps = paper["single-gpu"]
        theirs = f"{ps / pr:.2f}x" if ps else "single-GPU OOM"
        rl = row["rl"]
        print(f"| {row['model']} {row['cluster']} | " + " | ".join(cells)
              + f" | {rl['samples']} samples ({rl['stop_reason']}), {rl['search_s']:.0f} s, {rl['groups']} groups"
              + f" | {theirs} |")
    beats = [r for r in rows if r["rl"]["ok"]
             and r["rl"]["step_s"] < min(r["expert"]["step_s"], r["single-gpu"]["step_s"]) * (1 - 1e-3)]
    print(f"\nRL faster than both expert and single-GPU (by more than 0.1 %): {len(beats)} of {len(rows)} settings.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=600.0, help="work budget per setting, seconds")
    ap.add_argument("--samples", type=int, default=None, help="samples per setting (instead of --budget)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--auto-budget", type=float, default=60.0)
    ap.add_argument("--refine-budget", type=float, default=60.0)
    ap.add_argument("--only", default=None, help="comma-separated MODEL@CLUSTER settings")
    ap.add_argument("--curves", default=None, help="write each search's curve here")
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="an RLConfig setting (as autoplace place --set)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--from-json", default=None)
    args = ap.parse_args(argv)
    args.config = _settings(args.settings)
    if args.from_json:
        rows = json.load(open(args.from_json))["rows"]
    else:
        if args.curves:
            Path(args.curves).mkdir(parents=True, exist_ok=True)
        rows = run(args)
        if args.json:
            json.dump({"budget": args.budget, "samples": args.samples, "seed": args.seed, "settings": args.config,
                       "rows": rows},
                      open(args.json, "w"), indent=1)
    print_tables(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
