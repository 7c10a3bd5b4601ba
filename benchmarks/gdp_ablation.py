"""GDP's ablation (Zhou et al. §4.4): the policy with and without the placer's attention and the
superposition layer, trained on one batch that mixes recurrent, convolutional and attention graphs.

    .venv/bin/python benchmarks/gdp_ablation.py run --json docs/results/gdp/ablation.json
    .venv/bin/python benchmarks/gdp_ablation.py report --json docs/results/gdp/ablation.json

Every variant trains one policy on the batch (``--graphs``) for ``--budget`` seconds of nominal work, seed
``--seed``, in two modes: ``default`` (our search: the prior and structured exploration on) and ``paper``
(the network alone: ``prior=None, unit_moves=0``), where the architecture has to do all the work. A row
per (mode, variant) is appended to the JSON file as soon as it is measured; an interrupted run continues.
``report`` prints each variant's best step per graph and their geometric mean, relative to the full policy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from _common import geo, note, print_table, save_json

GRAPHS = ("rnnlm-2@p100x2", "inception-v3@p100x2", "wavenet-2x18@p100x2", "transformer-xl-2@p100x2")
VARIANTS = {"full": {}, "no attention": {"attention": False}, "no superposition": {"superposition": False},
            "neither": {"attention": False, "superposition": False}}
MODES = {"default": {}, "paper": {"prior": None, "unit_moves": 0}}


def cmd_run(args) -> int:
    from autoplace.cluster import get_cluster
    from autoplace.placers.gdp import gdp_train
    from autoplace.zoo import build_graph

    rows = []
    if os.path.exists(args.json):
        with open(args.json) as f:
            rows = json.load(f)["rows"]
    have = {(r["mode"], r["variant"]) for r in rows}
    settings = args.graphs.split(",")
    graphs = [build_graph(s.split("@")[0]) for s in settings]
    clusters = [get_cluster(s.split("@")[1]) for s in settings]
    for mode in args.modes.split(","):
        for variant, knobs in VARIANTS.items():
            if (mode, variant) in have:
                continue
            t0 = time.perf_counter()
            r = gdp_train(graphs, clusters, budget=args.budget, seed=args.seed, config={**MODES[mode], **knobs})
            rows.append({"mode": mode, "variant": variant, "settings": settings, "budget": args.budget,
                         "steps_s": r.extra["best_steps_s"], "updates": r.updates,
                         "wall_s": time.perf_counter() - t0})
            note(json.dumps(rows[-1]))
            save_json(args.json, {"table": "gdp-ablation", "rows": rows})
    return 0


def cmd_report(args) -> int:
    with open(args.json) as f:
        rows = json.load(f)["rows"]
    for mode in MODES:
        mine = {r["variant"]: r for r in rows if r["mode"] == mode}
        if "full" not in mine:
            continue
        full = mine["full"]
        names = [s.split("@")[0] for s in full["settings"]]
        print(f"\n### Mode {mode!r}: best step (s) per graph, budget {full['budget']:g} s of nominal work, "
              f"{full['updates']} updates\n")
        rel = {v: geo(a / b for a, b in zip(r["steps_s"], full["steps_s"])) for v, r in mine.items()}
        print_table(["variant", *names, "geomean vs full"],
                    [[v, *(f"{x:.4f}" for x in r["steps_s"]), f"{rel[v]:.3f}"] for v, r in mine.items()])
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--json", required=True)
    r.add_argument("--graphs", default=",".join(GRAPHS))
    r.add_argument("--modes", default=",".join(MODES))
    r.add_argument("--budget", type=float, default=150.0)
    r.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("report")
    p.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
