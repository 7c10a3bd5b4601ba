"""HTF-MPR's benchmarks (Alhassan et al.) re-simulated on ``gtx1050tix2`` (an i7-7700 and two GTX 1050 Ti).

    .venv/bin/python benchmarks/htf_mpr.py speedup   --json docs/results/htf-mpr/speedup.json      # alexnet, vgg16,
                                                                                           # mnist-softmax
    .venv/bin/python benchmarks/htf_mpr.py predictor --json docs/results/htf-mpr/predictor.json    # Figure 8
    .venv/bin/python benchmarks/htf_mpr.py enumerate --json docs/results/htf-mpr/enumerate.json
                                                                       # every mnist-softmax mapping
    .venv/bin/python benchmarks/htf_mpr.py table2    --json docs/results/htf-mpr/table2-NAME.json
                                                     [--label L --set KEY=VALUE ...]
    .venv/bin/python benchmarks/htf_mpr.py report    --json docs/results/htf-mpr

``speedup``: HTF-MPR (``--budget`` seconds of nominal work, seed ``--seed``) on each model against the
default mapping (every node on ``gpu:0``, TensorFlow's default with GPUs); its search wall time, real
evaluations, and children the predictor screened. ``predictor``: the paper's Figure 8 — the normalised
Kendall tau distance of six regressors under 5-fold cross-validation, mean ± std over 5 runs, on the
mappings an HTF-MPR run evaluated (the initial mappings and the GA's). ``enumerate``: every mapping of
mnist-softmax's nodes (its co-location groups: ``3^N``) simulated in batches: the share faster than the
default mapping, and where HTF-MPR's answer ranks among them. ``table2``: HTF-MPR (``--set``: an
``HTFMPRConfig`` variant, named ``--label``) on Mirhoseini et al.'s Table 2 settings with the RL placer's
budget (``--budget`` 600 s of nominal work), beside the RL benchmark's rows (``--rl``: the JSON of
``benchmarks/rl_table2.py``: single-GPU, expert, auto, RL); rows are added to ``--json`` one setting at a
time, and a setting already there is skipped (an interrupted run continues). ``report`` prints the tables
(of every ``table2*.json`` in the folder);
with variants ``L`` and ``L-random`` (``--set model=random``), how many real runs the predictor saved.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import numpy as np

MODELS = ("alexnet", "vgg16", "mnist-softmax")
from autoplace.bench.published import HTF_SPEEDUP as PAPER_SPEEDUP  # noqa: E402

CLUSTER = "gtx1050tix2"


def _save(path: str, obj) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)


def _run(model: str, budget: float, seed: int):
    from autoplace.cluster import get_cluster
    from autoplace.placers.htf_mpr import htf_mpr_search
    from autoplace.zoo import build_graph

    g, c = build_graph(model), get_cluster(CLUSTER)
    t0 = time.perf_counter()
    r = htf_mpr_search(g, c, budget=budget, seed=seed)
    return g, c, r, time.perf_counter() - t0


def _default_step(g, c) -> float:
    from autoplace.sim import Simulator

    gpu0 = [d.kind for d in c.devices].index("gpu")
    b = Simulator(g, c).run_batch(np.full((1, g.n_ops), gpu0))
    return float(b.step_time[0]) if not b.oom[0] else float("inf")


def cmd_speedup(args) -> int:
    rows = []
    for model in args.models.split(","):
        g, c, r, wall = _run(model, args.budget, args.seed)
        default = _default_step(g, c)
        m = r.placement.meta
        from autoplace.placers import place
        from autoplace.sim import simulate

        t0 = time.perf_counter()
        auto = simulate(g, c, place(g, c, "auto", seed=args.seed)).step_time
        auto_s = time.perf_counter() - t0
        rows.append({"model": model, "default_step_s": default, "htf_mpr_step_s": m["best_step_s"],
                     "speedup": default / m["best_step_s"], "paper_speedup": PAPER_SPEEDUP.get(model),
                     "family": m["family"], "evaluations": r.samples, "initial": r.extra["initial"],
                     "screened": r.extra["screened"], "generations": r.updates - 1, "wall_s": wall,
                     "nodes": int(r.extra["mappings"].shape[1]), "auto_step_s": float(auto), "auto_s": auto_s,
                     "budget": args.budget, "seed": args.seed})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    _save(args.json, {"rows": rows})
    return 0


def cmd_predictor(args) -> int:
    from autoplace.placers.htf_mpr import fitness
    from autoplace.search.predictor import compare_models

    rows = []
    for model in args.models.split(","):
        g, c, r, _ = _run(model, args.budget, args.seed)
        X, steps = r.extra["mappings"], r.extra["steps"]                # every mapping the run evaluated
        ok = np.isfinite(steps)
        y = fitness(steps)
        table = compare_models(X, y, n_devices=c.n_devices, k=5, runs=5, seed=args.seed)
        rows.append({"model": model, "mappings": int(len(X)), "failed": int((~ok).sum()),
                     "models": {k: {"mean": v[0], "std": v[1], "failed_runs": v[2]} for k, v in table.items()}})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    _save(args.json, {"rows": rows})
    return 0


def cmd_enumerate(args) -> int:
    from autoplace.cluster import get_cluster
    from autoplace.cost import feasible_devices
    from autoplace.grouping import runnable_grouping
    from autoplace.sim import Simulator
    from autoplace.zoo import build_graph

    g, c = build_graph("mnist-softmax"), get_cluster(CLUSTER)
    nodes = runnable_grouping(g, ("colocation",), feasible_devices(g, c))
    N, D = nodes.n_groups, c.n_devices
    total = D ** N
    _, _, r, wall = _run("mnist-softmax", args.budget, args.seed)
    htf = r.placement.meta["best_step_s"]
    default = _default_step(g, c)
    sim = Simulator(g, c)
    powers = D ** np.arange(N, dtype=np.int64)
    better_default = better_htf = equal_htf = failed = 0
    best = np.inf
    t0 = time.perf_counter()
    for start in range(0, total, args.chunk):
        idx = np.arange(start, min(start + args.chunk, total), dtype=np.int64)
        mappings = (idx[:, None] // powers[None, :]) % D
        b = sim.run_batch(nodes.expand_many(mappings))
        ok = ~b.oom & np.isfinite(b.step_time)
        step = np.where(ok, b.step_time, np.inf)
        failed += int((~ok).sum())
        better_default += int((step < default * (1 - 1e-12)).sum())
        better_htf += int((step < htf * (1 - 1e-12)).sum())
        equal_htf += int((np.abs(step - htf) <= htf * 1e-12).sum())
        best = min(best, float(step.min()))
        if start // args.chunk % 20 == 0:
            print(f"{start + len(idx):,} / {total:,} mappings, {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    out = {"model": "mnist-softmax", "cluster": CLUSTER, "nodes": N, "devices": D, "mappings": total,
           "default_step_s": default, "better_than_default": better_default,
           "share_better_than_default": better_default / total, "paper_share": 0.13, "failed": failed,
           "best_step_s": best, "htf_mpr_step_s": htf, "htf_mpr_rank": better_htf + 1, "htf_mpr_ties": equal_htf,
           "htf_mpr_evaluations": r.samples, "htf_mpr_wall_s": wall, "enumeration_s": time.perf_counter() - t0,
           "budget": args.budget, "seed": args.seed}
    print(json.dumps(out), file=sys.stderr)
    _save(args.json, out)
    return 0


TABLE2 = [(m, c) for m in ("rnnlm-2", "nmt-2", "inception-v3") for c in ("k80x2", "k80x4")]


def cmd_table2(args) -> int:
    from autoplace.cli import _settings
    from autoplace.cluster import get_cluster
    from autoplace.placers.htf_mpr import htf_mpr_search
    from autoplace.zoo import build_graph

    settings = _settings(args.settings)
    out = json.load(open(args.json)) if os.path.exists(args.json) else {"rows": []}
    done = {(r["model"], r["cluster"], r["label"]) for r in out["rows"]}
    other = next((r for r in out["rows"] if r["label"] == args.label and r["settings"] != settings), None)
    if other is not None:
        sys.exit(f"{args.json}: variant {args.label!r} was run with --set {other['settings']}; name this one "
                 "another --label")
    only = set(args.only.split(",")) if args.only else None
    for model, cname in TABLE2:
        if (only and f"{model}@{cname}" not in only) or (model, cname, args.label) in done:
            continue
        g, c = build_graph(model), get_cluster(cname)
        t0 = time.perf_counter()
        curve = os.path.join(args.curves, f"{args.label}-{model}-{cname}") if args.curves else None
        r = htf_mpr_search(g, c, budget=args.budget, seed=args.seed, config=settings,
                           curve_csv=curve and curve + ".csv", curve_png=curve and curve + ".png")
        wall = time.perf_counter() - t0
        m = r.placement.meta
        out["rows"].append({"model": model, "cluster": cname, "label": args.label, "settings": settings,
                            "step_s": m["best_step_s"], "family": m["family"], "evaluations": r.samples,
                            "initial": r.extra["initial"], "screened": r.extra["screened"],
                            "generations": r.updates - 1, "stop_reason": r.stop_reason, "wall_s": wall,
                            "nodes": int(r.extra["mappings"].shape[1]),
                            "best_curve": [[p.samples, p.best_step_s] for p in r.curve.points],
                            "budget": args.budget, "seed": args.seed})
        _save(args.json, out)
        print(f"{args.label} {model} on {cname}: {m['best_step_s']:.3f} s in {wall:.0f} s, {r.samples} runs",
              file=sys.stderr, flush=True)
    return 0


def _runs_to_reach(curve: list, step: float) -> int | None:
    """Real runs a search took until its best was ``step`` or faster (None: never)."""
    return next((n for n, best in curve if best <= step * (1 + 1e-9)), None)


def _report_table2(paths: list[str], rl_dir: str) -> None:
    rows = [r for p in paths for r in json.load(open(p))["rows"]]
    rl = {}
    for cname in ("k80x2", "k80x4"):
        p = os.path.join(rl_dir, f"{cname}.json")
        if os.path.exists(p):
            rl.update({(r["model"], r["cluster"]): r for r in json.load(open(p))["rows"]})
    labels = list(dict.fromkeys(r["label"] for r in rows))
    by = {(r["model"], r["cluster"], r["label"]): r for r in rows}
    base = ("single-gpu", "expert", "auto", "rl", "rl+refine")
    print("| setting | " + " | ".join(base + tuple(labels)) + " |")
    print("|---|" + "---:|" * (len(base) + len(labels)))
    for model, cname in TABLE2:
        ref = rl.get((model, cname))
        if ref is None or not any((model, cname, lab) in by for lab in labels):
            continue
        single = ref["single-gpu"]["step_s"]
        cells = [f"{ref[k]['step_s']:.3f} ({single / ref[k]['step_s']:.2f}x)" for k in base]
        for lab in labels:
            r = by.get((model, cname, lab))
            cells.append("" if r is None else f"{r['step_s']:.3f} ({single / r['step_s']:.2f}x)")
        print(f"| {model} {cname} | " + " | ".join(cells) + " |")
    print()
    print("| setting | variant | nodes | real runs (initial) | new children bred | generations | search s "
          "| rl search s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for model, cname in TABLE2:
        for lab in labels:
            r = by.get((model, cname, lab))
            if r is None:
                continue
            ref = rl.get((model, cname))
            rls = f"{ref['rl']['search_s']:.0f}" if ref else ""
            print(f"| {model} {cname} | {lab} | {r['nodes']} | {r['evaluations']} ({r['initial']}) | {r['screened']} | "
                  f"{r['generations']} | {r['wall_s']:.0f} | {rls} |")
    pairs = [lab for lab in labels if lab + "-random" in labels]
    if pairs:
        print()
        print("| setting | variant | step with predictor | its runs to reach it | step with random picks | "
              "random picks' runs to reach the predictor's step |")
        print("|---|---|---:|---:|---:|---:|")
        for model, cname in TABLE2:
            for lab in pairs:
                a, b = by.get((model, cname, lab)), by.get((model, cname, lab + "-random"))
                if a is None or b is None:
                    continue
                need = _runs_to_reach(b["best_curve"], a["step_s"])
                print(f"| {model} {cname} | {lab} | {a['step_s']:.3f} | "
                      f"{_runs_to_reach(a['best_curve'], a['step_s'])} | "
                      f"{b['step_s']:.3f} | {need if need is not None else 'not in ' + str(b['evaluations'])} |")
    print()


def _figure8_cell(m: dict) -> str:
    """``mean ± std``, and how many of the runs failed to fit (left out of the mean)."""
    failed = m.get("failed_runs", 0)
    if m["mean"] != m["mean"]:
        return "every fit failed"
    return f"{m['mean']:.3f} ± {m['std']:.3f}" + (f" ({failed} run{'s' * (failed > 1)} failed)" if failed else "")


def cmd_report(args) -> int:
    d = args.json
    path = os.path.join(d, "speedup.json")
    if os.path.exists(path):
        rows = json.load(open(path))["rows"]
        print("| model (nodes) | default (all gpu:0) ms | htf-mpr ms | speedup | paper | winner | evaluations "
              "(initial) | screened | search s | auto ms | auto s |")
        print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['model']} ({r['nodes']}) | {r['default_step_s'] * 1e3:.4g} | "
                  f"{r['htf_mpr_step_s'] * 1e3:.4g} | "
                  f"{r['speedup']:.2f}x | {r['paper_speedup']:.2f}x | {r['family']} | {r['evaluations']} "
                  f"({r['initial']}) | {r['screened']} | {r['wall_s']:.0f} | {r['auto_step_s'] * 1e3:.4g} | "
                  f"{r['auto_s']:.1f} |")
        print()
    path = os.path.join(d, "predictor.json")
    if os.path.exists(path):
        rows = json.load(open(path))["rows"]
        names = list(rows[0]["models"])
        print("| model (mappings) | " + " | ".join(names) + " |")
        print("|---|" + "---:|" * len(names))
        for r in rows:
            cells = [_figure8_cell(r["models"][n]) for n in names]
            print(f"| {r['model']} ({r['mappings']}) | " + " | ".join(cells) + " |")
        print()
    path = os.path.join(d, "enumerate.json")
    if os.path.exists(path):
        e = json.load(open(path))
        print(f"mnist-softmax: {e['mappings']:,} mappings of {e['nodes']} nodes on {e['devices']} devices, "
              f"simulated in {e['enumeration_s']:.0f} s: {e['share_better_than_default']:.1%} faster than the default "
              f"(paper: 13 %), {e['failed']:,} failed; best {e['best_step_s'] * 1e3:.4f} ms; HTF-MPR's "
              f"{e['htf_mpr_step_s'] * 1e3:.4f} ms ranks {e['htf_mpr_rank']:,} ({e['htf_mpr_ties']:,} mappings tie "
              f"with it) after {e['htf_mpr_evaluations']} evaluations.")
        print()
    paths = sorted(glob.glob(os.path.join(d, "table2*.json")))
    if paths:
        _report_table2(paths, args.rl)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("speedup", "predictor", "enumerate"):
        p = sub.add_parser(name)
        p.add_argument("--json", required=True)
        p.add_argument("--budget", type=float, default=30.0)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--models", default=",".join(MODELS))
        p.add_argument("--chunk", type=int, default=500_000)
    p = sub.add_parser("table2")
    p.add_argument("--json", required=True, help="rows are added here; settings already there are skipped")
    p.add_argument("--budget", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default="htf-mpr", help="the variant's name in the tables")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="an HTFMPRConfig setting (as autoplace place --set)")
    p.add_argument("--only", default=None, help="comma-separated MODEL@CLUSTER settings")
    p.add_argument("--curves", default=None, help="write each search's curve (CSV, PNG) here")
    p = sub.add_parser("report")
    p.add_argument("--json", required=True, help="the folder of the JSON files")
    p.add_argument("--rl", default="docs/results/rl/table2", help="the folder of rl_table2.py's k80x2.json, k80x4.json")
    args = ap.parse_args(argv)
    return {"speedup": cmd_speedup, "predictor": cmd_predictor, "enumerate": cmd_enumerate, "table2": cmd_table2,
            "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
