"""GDP's ablation (Zhou et al. §4.4): the policy with and without the placer's attention and the
superposition layer, trained on one batch that mixes recurrent, convolutional and attention graphs.

    .venv/bin/python benchmarks/gdp_ablation.py run --json docs/results/gdp/ablation.json
    .venv/bin/python benchmarks/gdp_ablation.py report --json docs/results/gdp/ablation.json

Every variant trains one policy on the batch (``--graphs``) for ``--budget`` seconds of nominal work (over
the batch), once per seed of ``--seeds``, in two modes: ``default`` (our search: the prior and structured
exploration on) and ``paper`` (the network alone: ``prior=None, unit_moves=0``), where the architecture has
to do all the work. Beside the full policy, per seed and mode, its three baselines: the same training with
learning off (``learn=false``: the policy never updated, the same samples), the same for the full
training's wall time, and ``auto`` on each graph for an equal share of that time. Each run's best step and
robust step (the worst scenario's weight: docs/algorithms.md, Uncertainty) per graph. A row per (mode,
variant, seed) is appended to the JSON file as soon as it is measured; an interrupted run continues.
``report`` prints each variant's best step per graph over the seeds and its geometric mean relative to the
full policy (paired by seed), then the full policy against its baselines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _common import geo, note, print_table, save_json

GRAPHS = ("rnnlm-2@p100x2", "inception-v3@p100x2", "wavenet-2x18@p100x2", "transformer-xl-2@p100x2")
VARIANTS = {"full": {}, "no attention": {"attention": False}, "no superposition": {"superposition": False},
            "neither": {"attention": False, "superposition": False}}
#: the full policy's baselines: learning off at equal samples, learning off at equal wall time, auto
OFF, OFF_WALL, AUTO = "learning off", "learning off, equal wall", "auto, equal wall"
MODES = {"default": {}, "paper": {"prior": None, "unit_moves": 0}}


def _train(settings, graphs, clusters, budget, seed: int, config: dict) -> dict:
    from autoplace.bench.jobs import batch_steps
    from autoplace.placers.learned.gdp import gdp_train

    t0 = time.perf_counter()
    r = gdp_train(graphs, clusters, budget=budget, seed=seed, config=config)
    wall = time.perf_counter() - t0
    steps, robust = batch_steps(settings, r)
    return {"steps_s": steps, "robust_steps_s": robust, "updates": r.updates, "samples": r.samples, "wall_s": wall}


def _auto(settings, seconds: float, seed: int) -> dict:
    from autoplace.bench.jobs import place_job

    t0 = time.perf_counter()
    rs = [place_job(s, "auto", seed=seed, time_s=seconds / len(settings)) for s in settings]
    return {"steps_s": [r["step_s"] for r in rs], "robust_steps_s": [r.get("robust_step_s") for r in rs],
            "updates": 0, "samples": 0, "wall_s": time.perf_counter() - t0}


def cmd_run(args) -> int:
    from autoplace.bench.jobs import Setting
    from autoplace.cluster import get_cluster
    from autoplace.search import SearchBudget
    from autoplace.zoo import build_graph

    rows = []
    if os.path.exists(args.json):
        with open(args.json) as f:
            rows = json.load(f)["rows"]
    have = {(r["mode"], r["variant"], r["seed"]): r for r in rows if _complete(r)}
    names = args.graphs.split(",")
    settings = [Setting(*s.split("@")) for s in names]
    graphs = [build_graph(s.split("@")[0]) for s in names]
    clusters = [get_cluster(s.split("@")[1]) for s in names]
    for seed in map(int, args.seeds.split(",")):
        for mode in args.modes.split(","):
            off = {**MODES[mode], "learn": False}
            plan = [*((v, lambda k=k: _train(settings, graphs, clusters, args.budget, seed, {**MODES[mode], **k}))
                      for v, k in VARIANTS.items()),
                    (OFF, lambda: _train(settings, graphs, clusters, args.budget, seed, off)),
                    (OFF_WALL, lambda: _train(settings, graphs, clusters, SearchBudget(seconds=full["wall_s"]), seed,
                                              off)),
                    (AUTO, lambda: _auto(settings, full["wall_s"], seed))]
            for variant, run in plan:
                if (mode, variant, seed) not in have:
                    row = {"mode": mode, "variant": variant, "seed": seed, "settings": names, "budget": args.budget,
                           **run()}
                    rows.append(row)
                    have[(mode, variant, seed)] = row
                    note(json.dumps(row))
                    save_json(args.json, {"table": "gdp-ablation", "rows": rows})
                if variant == "full":
                    full = have[(mode, variant, seed)]
    return 0


def _complete(row: dict) -> bool:
    """A row of this script's form: over seeds, with robust steps (a file may keep rows of an earlier form,
    one seed without them: left as they are, neither reported nor counted as done)."""
    return "seed" in row and "robust_steps_s" in row


def _cell(xs: list) -> str:
    if any(x is None for x in xs):
        return "failed on a seed"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.4g} ± {sd:.2g}"


def _ratio(pairs: list[tuple[float | None, float | None]]) -> str:
    r = [b / a for a, b in pairs if a is not None and b is not None]
    return f"{geo(r):.3f} ({min(r):.3f}–{max(r):.3f})" if r and len(r) == len(pairs) else "–"


def cmd_report(args) -> int:
    with open(args.json) as f:
        rows = [r for r in json.load(f)["rows"] if _complete(r)]
    for mode in MODES:
        mine: dict[str, dict[int, dict]] = {}
        for r in rows:
            if r["mode"] == mode:
                mine.setdefault(r["variant"], {})[r["seed"]] = r
        if "full" not in mine:
            continue
        full = mine["full"]
        seeds = sorted(full)
        first = full[seeds[0]]
        names = [s.split("@")[0] for s in first["settings"]]
        updates = ", ".join(str(full[s]["updates"]) for s in seeds)
        print(f"\n### Mode {mode!r}: best step (s) per graph, mean ± sd over seeds {', '.join(map(str, seeds))}, "
              f"{first['budget']:g} s of nominal work ({updates} updates)\n")
        table = []
        for v in VARIANTS:
            if v in mine and sorted(mine[v]) == seeds:
                vs = [mine[v][s] for s in seeds]
                rel = _ratio([(a, b) for s, r in zip(seeds, vs)
                              for a, b in zip(full[s]["steps_s"], r["steps_s"])])
                table.append([v, *(_cell([r["steps_s"][i] for r in vs]) for i in range(len(names))), rel])
        print_table(["variant", *names, "geomean vs full (range)"], table)
        for kind, field in (("nominal", "steps_s"), ("robust", "robust_steps_s")):
            print(f"\n**Mode {mode!r}: the full policy against its baselines, {kind} step (baseline / learned, "
                  "geometric mean over the seeds (range); above 1: learning is faster)**\n")
            base = [b for b in (OFF, OFF_WALL, AUTO) if b in mine and sorted(mine[b]) == seeds]
            table = []
            for i, name in enumerate(names):
                table.append([name, _cell([full[s][field][i] for s in seeds]),
                              *(f"{_cell([mine[b][s][field][i] for s in seeds])}; "
                                f"{_ratio([(full[s][field][i], mine[b][s][field][i]) for s in seeds])}" for b in base)])
            table.append(["geometric mean", "–", *(_ratio([(full[s][field][i], mine[b][s][field][i]) for s in seeds
                                                           for i in range(len(names))]) for b in base)])
            print_table(["graph", "full (s)", *(f"{b} (s); / full" for b in base)], table)
        walls = {v: statistics.mean(mine[v][s]["wall_s"] for s in seeds) for v in (*VARIANTS, OFF, OFF_WALL, AUTO)
                 if v in mine and sorted(mine[v]) == seeds}
        print("\nMean wall seconds: " + ", ".join(f"{v} {w:.0f}" for v, w in walls.items()))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--json", required=True)
    r.add_argument("--graphs", default=",".join(GRAPHS))
    r.add_argument("--modes", default=",".join(MODES))
    r.add_argument("--budget", type=float, default=150.0)
    r.add_argument("--seeds", default="0,1,2")
    p = sub.add_parser("report")
    p.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
