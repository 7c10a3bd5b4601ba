"""Does learning pay? Each learned search against the same search with learning off, at equal samples and at
equal wall time, and against ``auto`` at equal wall time, over seeds, by nominal and robust step.

    .venv/bin/python benchmarks/learning_pays.py                       # RL on Mirhoseini et al.'s Table 2
    .venv/bin/python benchmarks/learning_pays.py --placer gdp          # GDP on its Table 1 settings
    .venv/bin/python benchmarks/learning_pays.py --set attention=additive --out results.json

Per setting and seed, four runs, each the bench's ``place`` job (:func:`autoplace.bench.jobs.place_job`: the
step, and the robust step under the cost model's uncertainty): the placer's search at ``--budget`` seconds
of nominal work (the samples ``autoplace place`` would take); the same search with learning off
(``learn=false``: its policy frozen at its initialisation, same samples, same random streams); the same
learning-off search for the learned search's wall time; and ``auto`` under a time limit of that wall time.
Printed: each one's best step as mean ± sd and min over the seeds, nominal and robust; the paired ratios
baseline / learned (above 1: learning found faster placements) as the geometric mean over seeds with its
range; and over every setting, the geometric means with the per-seed range.

Runs are independent processes (``--jobs`` at a time; the equal-wall runs after every learned one, so that
their wall time is known); each result is appended to ``--cache`` as it comes, so a stopped run continues
where it stopped (a run's key holds the placer, setting, seed, settings and budget). Wall times are this
machine's: the equal-wall runs depend on them, the learned and equal-sample steps do not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from concurrent.futures import ProcessPoolExecutor, as_completed

from _common import note, print_table, save_json

from autoplace.bench.published import GDP_TABLE1, HTF_SPEEDUP, MIRHOSEINI_TABLE2

#: each placer's paper's settings: Mirhoseini et al.'s Table 2 (RL, and HDP, which its authors ran on it),
#: GDP's Table 1, HTF-MPR's three models
_MIRHOSEINI = [(m, f"k80x{g}") for m in MIRHOSEINI_TABLE2 for g in (2, 4)]
SETTINGS = {"rl": _MIRHOSEINI, "hdp": _MIRHOSEINI, "gdp": [(m, f"p100x{g}") for m, g in GDP_TABLE1],
            "htf-mpr": [(m, "gtx1050tix2") for m in HTF_SPEEDUP]}


def run_one(kind: str, placer: str, model: str, cluster: str, seed: int, config: dict, budget: float,
            wall_s: float | None = None) -> dict:
    """One run in a fresh process: ``kind`` is "learned", "frozen" (learning off, equal samples),
    "frozen-wall" (learning off for ``wall_s`` seconds) or "auto" (under a time limit of ``wall_s``)."""
    from autoplace.bench.jobs import Setting, place_job
    from autoplace.bench.plan import OFF

    cfg = {**config, **(OFF[placer] if kind.startswith("frozen") else {})}
    method = "auto" if kind == "auto" else placer
    r = place_job(Setting(model, cluster), method, None if kind == "auto" else budget, seed,
                  () if kind == "auto" else tuple(sorted(cfg.items())), time_s=wall_s)
    search = r.get("search", {})
    return {"step_s": r["step_s"], "robust_step_s": r.get("robust_step_s"), "wall_s": r["search_s"],
            "samples": search.get("samples"), "updates": search.get("updates")}


#: the runs timed by the learned search's wall time (submitted once every learned run is done)
WALL_KINDS = ("frozen-wall", "auto")
TITLES = {"frozen": "off, equal samples", "frozen-wall": "off, equal wall", "auto": "auto, equal wall"}


def key(*parts) -> str:
    return json.dumps(parts, sort_keys=True)


def stats(xs: list[float]) -> str:
    ms = [x * 1e3 for x in xs]
    sd = statistics.stdev(ms) if len(ms) > 1 else 0.0
    return f"{statistics.mean(ms):.1f} ± {sd:.1f} ({min(ms):.1f})"


def geo(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--placer", default="rl", choices=("rl", "hdp", "gdp", "htf-mpr"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds of nominal work per search (default 60)")
    ap.add_argument("--settings", default="", help="MODEL@CLUSTER,... (default: the placer's paper's table)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="the placer's settings")
    ap.add_argument("--no-auto", action="store_true", help="leave out auto at equal wall time")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cache", default="learning-pays.jsonl", help="results so far (appended; default %(default)s)")
    ap.add_argument("--out", default=None, help="write the table's figures as JSON")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = ([tuple(s.split("@")) for s in args.settings.split(",")] if args.settings
                else SETTINGS[args.placer])
    config = {}
    for kv in args.set:
        k, v = kv.split("=", 1)
        try:
            config[k] = None if v == "none" else json.loads(v)
        except json.JSONDecodeError:
            config[k] = v
    from autoplace.placers import get_placer

    get_placer(args.placer).config.from_dict(config)           # a bad setting: one error before any run
    done = {}
    if os.path.exists(args.cache):
        with open(args.cache) as f:
            for line in f:
                r = json.loads(line)
                done[r["key"]] = r["result"]

    def k_of(kind, model, cluster, seed):
        return key(kind, args.placer, model, cluster, seed, config, args.budget)

    def submit_all(pool, kinds):
        futs = {}
        for model, cluster in settings:
            for seed in seeds:
                for kind in kinds:
                    k = k_of(kind, model, cluster, seed)
                    if k in done:
                        continue
                    wall = done[k_of("learned", model, cluster, seed)]["wall_s"] if kind in WALL_KINDS else None
                    futs[pool.submit(run_one, kind, args.placer, model, cluster, seed, config, args.budget,
                                     wall)] = (k, kind, model, cluster, seed)
        with open(args.cache, "a") as f:
            for fut in as_completed(futs):
                k, kind, model, cluster, seed = futs[fut]
                done[k] = fut.result()
                f.write(json.dumps({"key": k, "result": done[k]}) + "\n")
                f.flush()
                note(f"{kind} {model} on {cluster}, seed {seed}: "
                     f"{(done[k]['step_s'] or math.nan) * 1e3:.1f} ms in {done[k]['wall_s']:.0f} s")

    baselines = ("frozen", "frozen-wall", *(() if args.no_auto else ("auto",)))
    with ProcessPoolExecutor(args.jobs, max_tasks_per_child=1) as pool:
        submit_all(pool, ("learned", "frozen"))
        submit_all(pool, tuple(k for k in baselines if k in WALL_KINDS))

    out, geomeans = [], {}
    for field, label in (("step_s", "nominal"), ("robust_step_s", "robust")):
        rows, per_seed = [], {b: {s: [] for s in seeds} for b in baselines}
        for model, cluster in settings:
            learned = [done[k_of("learned", model, cluster, s)] for s in seeds]
            runs = {b: [done[k_of(b, model, cluster, s)] for s in seeds] for b in baselines}
            cells = []
            for b in baselines:
                ratios = [x[field] / r[field] for r, x in zip(learned, runs[b])]
                for s, v in zip(seeds, ratios):
                    per_seed[b][s].append(v)
                cells += [stats([x[field] for x in runs[b]]),
                          f"{geo(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})"]
            rows.append([f"{model} on {cluster}", learned[0].get("samples", ""), stats([r[field] for r in learned]),
                         *cells, " / ".join(f"{statistics.mean(x['wall_s'] for x in rs):.0f}"
                                            for rs in (learned, *(runs[b] for b in baselines if b in WALL_KINDS)))])
            if field == "step_s":
                out.append({"setting": f"{model} on {cluster}", "samples": learned[0].get("samples"),
                            **{f"{k}_{f}": [x.get(f) for x in rs] for k, rs in (("learned", learned), *runs.items())
                               for f in ("step_s", "robust_step_s", "wall_s", "samples")}})
        print_table([f"{args.placer}, {label} step (ms: mean ± sd (min))", "samples", "learned",
                     *(c for b in baselines for c in (TITLES[b], f"{TITLES[b]} / learned")),
                     "wall (s): learned / " + " / ".join(TITLES[b] for b in baselines if b in WALL_KINDS)], rows)
        for b in baselines:
            seed_geo = [geo(v) for v in per_seed[b].values()]
            geomeans[f"{b}_over_learned_{label}"] = geo([x for v in per_seed[b].values() for x in v])
            print(f"{label}: geometric mean of {TITLES[b]} / learned over {len(settings)} settings and {len(seeds)} "
                  f"seeds: {geomeans[f'{b}_over_learned_{label}']:.3f} (per seed {min(seed_geo):.3f}–"
                  f"{max(seed_geo):.3f})")
        print()
    print(f"settings: {config or 'defaults'}")
    if args.out:
        save_json(args.out, {"placer": args.placer, "config": config, "budget_s": args.budget, "seeds": seeds,
                             "settings": out, **geomeans})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
