"""Does learning pay? Each learned search against the same search with learning off, over seeds, and
against ``auto`` given the same wall time.

    .venv/bin/python benchmarks/learning_pays.py                       # RL on Mirhoseini et al.'s Table 2
    .venv/bin/python benchmarks/learning_pays.py --placer gdp          # GDP on its Table 1 settings
    .venv/bin/python benchmarks/learning_pays.py --set attention=additive --out results.json

Per setting and seed, three runs: the placer's search at ``--budget`` seconds of nominal work (the samples
``autoplace place`` would take), the same search with ``learn=false`` (its policy frozen at its
initialisation: same samples, same random streams, no gradient step), and ``auto`` with a budget of the
learned search's wall time. Printed: each one's best step as mean ± sd and min over the seeds; the paired
ratio frozen / learned (above 1: learning found faster placements) as the geometric mean over seeds with
its range; and over every setting, the geometric mean of the paired ratios with the per-seed range.

Runs are independent processes (``--jobs`` at a time); each result is appended to ``--cache`` as it comes,
so a stopped run continues where it stopped (a run's key holds the placer, setting, seed, settings and
budget). Wall times are this machine's: ``auto``'s budget depends on them, the learned and frozen steps
do not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from concurrent.futures import ProcessPoolExecutor, as_completed

from _common import note, print_table, save_json

SETTINGS = {
    "rl": [(m, f"k80x{g}") for m in ("rnnlm-2", "nmt-2", "inception-v3") for g in (2, 4)],
    "hdp": [(m, f"k80x{g}") for m in ("rnnlm-2", "nmt-2", "inception-v3") for g in (2, 4)],
}


def _gdp_settings():
    from autoplace.bench.published import GDP_TABLE1

    return [(m, f"p100x{g}") for m, g in GDP_TABLE1]


def run_one(kind: str, placer: str, model: str, cluster: str, seed: int, config: dict, budget: float,
            auto_budget: float | None = None) -> dict:
    """One run in a fresh process: ``kind`` is "learned", "frozen" or "auto"."""
    import time

    from autoplace.cluster import get_cluster
    from autoplace.placers import get_placer, place
    from autoplace.sim import simulate
    from autoplace.zoo import build_graph

    graph, c = build_graph(model), get_cluster(cluster)
    t0 = time.perf_counter()
    if kind == "auto":
        p = place(graph, c, "auto", seed=seed, budget=auto_budget)
        meta = {}
    else:
        cfg = {**config, **({"learn": False} if kind == "frozen" else {})}
        r = get_placer(placer).search(graph, c, budget=budget, seed=seed, config=cfg)
        p, meta = r.placement, {"samples": r.samples, "updates": r.updates}
    wall = time.perf_counter() - t0
    sim = simulate(graph, c, p)
    return {"step_s": float(sim.step_time) if sim.ok else None, "wall_s": wall, **meta}


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
    ap.add_argument("--placer", default="rl", choices=("rl", "hdp", "gdp"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds of nominal work per search (default 60)")
    ap.add_argument("--settings", default="", help="MODEL@CLUSTER,... (default: the placer's paper's table)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="the placer's settings")
    ap.add_argument("--no-auto", action="store_true", help="leave out auto at the same wall time")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cache", default="learning-pays.jsonl", help="results so far (appended; default %(default)s)")
    ap.add_argument("--out", default=None, help="write the table's figures as JSON")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = ([tuple(s.split("@")) for s in args.settings.split(",")] if args.settings
                else _gdp_settings() if args.placer == "gdp" else SETTINGS[args.placer])
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
                    auto_budget = None
                    if kind == "auto":
                        auto_budget = done[k_of("learned", model, cluster, seed)]["wall_s"]
                        k = key("auto", model, cluster, seed, round(auto_budget))
                        if k in done:
                            continue
                    futs[pool.submit(run_one, kind, args.placer, model, cluster, seed, config, args.budget,
                                     auto_budget)] = (k, kind, model, cluster, seed)
        with open(args.cache, "a") as f:
            for fut in as_completed(futs):
                k, kind, model, cluster, seed = futs[fut]
                done[k] = fut.result()
                f.write(json.dumps({"key": k, "result": done[k]}) + "\n")
                f.flush()
                note(f"{kind} {model} on {cluster}, seed {seed}: "
                     f"{(done[k]['step_s'] or math.nan) * 1e3:.1f} ms in {done[k]['wall_s']:.0f} s")

    with ProcessPoolExecutor(args.jobs, max_tasks_per_child=1) as pool:
        submit_all(pool, ("learned", "frozen"))
        if not args.no_auto:
            submit_all(pool, ("auto",))

    rows, out, per_seed = [], [], {s: [] for s in seeds}
    for model, cluster in settings:
        learned = [done[k_of("learned", model, cluster, s)] for s in seeds]
        frozen = [done[k_of("frozen", model, cluster, s)] for s in seeds]
        ratios = [f["step_s"] / r["step_s"] for r, f in zip(learned, frozen)]
        for s, x in zip(seeds, ratios):
            per_seed[s].append(x)
        auto = ([done[key("auto", model, cluster, s, round(r["wall_s"]))] for s, r in zip(seeds, learned)]
                if not args.no_auto else [])
        rows.append([f"{model} on {cluster}", learned[0].get("samples", ""), stats([r["step_s"] for r in learned]),
                     stats([f["step_s"] for f in frozen]), f"{geo(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})",
                     f"{statistics.mean(r['wall_s'] for r in learned):.0f}",
                     stats([a["step_s"] for a in auto]) if auto else "–"])
        out.append({"setting": f"{model} on {cluster}", "learned_s": [r["step_s"] for r in learned],
                    "frozen_s": [f["step_s"] for f in frozen], "auto_s": [a["step_s"] for a in auto],
                    "learned_wall_s": [r["wall_s"] for r in learned], "samples": learned[0].get("samples")})
    seed_geo = [geo(v) for v in per_seed.values()]
    all_ratios = [x for v in per_seed.values() for x in v]
    print_table([f"{args.placer} (best step, ms: mean ± sd (min))", "samples", "learned", "learning off",
                 "off / learned (range)", "learned wall (s)", "auto, same wall time"], rows)
    print(f"\nGeometric mean of off / learned over {len(settings)} settings and {len(seeds)} seeds: "
          f"{geo(all_ratios):.3f} (per seed {min(seed_geo):.3f}–{max(seed_geo):.3f}); settings: {config or 'defaults'}")
    if args.out:
        save_json(args.out, {"placer": args.placer, "config": config, "budget_s": args.budget, "seeds": seeds,
                             "settings": out, "geomean_off_over_learned": geo(all_ratios),
                             "per_seed_geomean": dict(zip(map(str, seeds), seed_geo))})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
