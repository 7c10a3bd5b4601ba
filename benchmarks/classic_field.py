"""The classic field on the papers' settings: every placer's simulated step and search time, ``auto`` first.

    .venv/bin/python benchmarks/classic_field.py field  [--budget 60] [--json out.json] [--only MODEL@CLUSTER,...]
    .venv/bin/python benchmarks/classic_field.py memory [--budget 60] [--json out.json]
    .venv/bin/python benchmarks/classic_field.py schedulers [--json out.json]
    .venv/bin/python benchmarks/classic_field.py {field,memory,schedulers} --from-json saved.json

``field``: Mirhoseini et al.'s Table 2 settings (rnnlm-2, nmt-2, inception-v3 on ``k80x2``/``k80x4``) and
GDP's twelve (``p100x2/4/8``): every registered placer, seed 0. The search placers get ``--budget``
(``auto``, ``local-search``; CP-SAT's deterministic time is ``--cpsat-budget``, default 10: a unit of it
takes seconds on a 60-task model here). Prints one table of step times (speedup over ``expert``), one of
search times, and per placer its geometric-mean speedup over ``expert`` and where it loses to ``auto``.

``memory``: graphs one GPU cannot hold — ``rnnlm-2-large`` and ``nmt-2-large`` on ``k80x2``/``k80x4``,
``vgg16 -P batch=64`` on ``gtx1050tix2`` and ``transformer-xl-8 -P batch=192`` on ``p100x2``: every
placer; a memory-aware placer must fit or say it cannot, and ``auto`` must fit wherever ``dp-split`` does
and be at least as fast.

``schedulers``: the list schedulers on every ``field`` setting against single-GPU, with each scheduler's
two estimates of its step beside the simulated one: its schedule model replayed in the runtime's order
(``estimated_step_time_s``) and the schedule as built, in its own order (``decision_order_estimate_s``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

FIELD = [("rnnlm-2", {}, "k80x2"), ("rnnlm-2", {}, "k80x4"), ("nmt-2", {}, "k80x2"), ("nmt-2", {}, "k80x4"),
         ("inception-v3", {}, "k80x2"), ("inception-v3", {}, "k80x4"),
         ("rnnlm-2", {}, "p100x2"), ("rnnlm-4", {}, "p100x4"), ("gnmt-2", {}, "p100x2"), ("gnmt-4", {}, "p100x4"),
         ("gnmt-8", {}, "p100x8"), ("transformer-xl-2", {}, "p100x2"), ("transformer-xl-4", {}, "p100x4"),
         ("transformer-xl-8", {}, "p100x8"), ("inception-v3", {}, "p100x2"), ("amoebanet", {}, "p100x4"),
         ("wavenet-2x18", {}, "p100x2"), ("wavenet-4x36", {}, "p100x4")]
MEMORY = [("rnnlm-2-large", {}, "k80x2"), ("rnnlm-2-large", {}, "k80x4"), ("nmt-2-large", {}, "k80x2"),
          ("nmt-2-large", {}, "k80x4"), ("vgg16", {"batch": 64}, "gtx1050tix2"),
          ("transformer-xl-8", {"batch": 192}, "p100x2")]
SCHEDULERS = ("tf-greedy", "heft", "m-topo", "m-etf", "m-sct")


def label(model: str, params: dict, cluster: str) -> str:
    return model + "".join(f" -P {k}={v}" for k, v in params.items()) + f" on {cluster}"


def run(settings, methods, budget: float, cpsat_budget: float, seed: int) -> list[dict]:
    from autoplace.bounds import lower_bounds
    from autoplace.cluster import get_cluster
    from autoplace.errors import InfeasibleError
    from autoplace.placers import available_placers, place
    from autoplace.sim import Simulator
    from autoplace.zoo import build_graph

    methods = methods or ["auto", *(m for m in available_placers(include_learned=False) if m != "auto")]
    rows = []
    for model, params, cname in settings:
        graph, cluster = build_graph(model, **params), get_cluster(cname)
        sim = Simulator(graph, cluster)
        b = lower_bounds(graph, cluster, sim.op_times)
        bounds = {"critical_path_s": b.critical_path, "load_s": b.load}
        t_setting = time.perf_counter()
        for method in methods:
            b = cpsat_budget if method == "cp-sat" else budget
            t0 = time.perf_counter()
            try:
                p = place(graph, cluster, method, seed=seed, budget=b)
            except InfeasibleError as e:
                rows.append({"model": model, "params": params, "cluster": cname, "method": method, "step_s": None,
                             "ok": False, "error": str(e), "search_s": time.perf_counter() - t0, **bounds})
                continue
            r = sim.run(p)
            rows.append({"model": model, "params": params, "cluster": cname, "method": method,
                         "step_s": r.step_time, "ok": r.ok, "oom": list(r.oom_devices), "error": None,
                         "search_s": float(p.meta["search_time_s"]),
                         "estimate_s": p.meta.get("estimated_step_time_s"),
                         "decision_estimate_s": p.meta.get("decision_order_estimate_s"),
                         "peak_gib": [round(float(x) / 2**30, 2) for x in r.peak_memory],
                         "devices_used": int(len(set(p.assignment.values()))), **bounds,
                         "meta": {k: v for k, v in p.meta.items() if k in ("from", "improved_by", "stop_reason",
                                                                           "returned", "hint", "order", "objective",
                                                                           "memory_tries", "cp_sat_status", "model")}})
        print(f"{label(model, params, cname)}: {time.perf_counter() - t_setting:.0f} s", file=sys.stderr, flush=True)
    return rows


def _settings_of(rows):
    seen = []
    for r in rows:
        key = (r["model"], json.dumps(r["params"], sort_keys=True), r["cluster"])
        if key not in seen:
            seen.append(key)
    return seen


def _step(r) -> str:
    if r is None:
        return "-"
    if r["step_s"] is None:
        return "none"
    return f"{r['step_s']:.3f}" + ("" if r["ok"] else " OOM")


def print_field(rows: list[dict], baseline: str = "expert") -> None:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    by = {(r["model"], json.dumps(r["params"], sort_keys=True), r["cluster"], r["method"]): r for r in rows}
    print("### Simulated step (s), and speedup over " + baseline + "\n")
    print("| setting | " + " | ".join(methods) + " |")
    print("|---|" + "---:|" * len(methods))
    logs: dict[str, list[float]] = {m: [] for m in methods}
    losses: dict[str, list[str]] = {m: [] for m in methods}
    for key in _settings_of(rows):
        base = by.get((*key, baseline))
        auto = by.get((*key, "auto"))
        cells = []
        for m in methods:
            r = by.get((*key, m))
            cell = _step(r)
            if r and r["ok"] and base and base["ok"]:
                cell += f" ({base['step_s'] / r['step_s']:.2f}x)"
                logs[m].append(math.log(base["step_s"] / r["step_s"]))
            if r and r["ok"] and auto and auto["ok"] and r["step_s"] < auto["step_s"] * (1 - 1e-9):
                losses["auto"].append(f"{m} on {key[0]} {key[2]}")
            cells.append(cell)
        print(f"| {key[0]} {key[2]} | " + " | ".join(cells) + " |")
    print("\n### Search time (s)\n")
    print("| setting | " + " | ".join(methods) + " |")
    print("|---|" + "---:|" * len(methods))
    for key in _settings_of(rows):
        cells = [f"{by[(*key, m)]['search_s']:.1f}" if (*key, m) in by else "-" for m in methods]
        print(f"| {key[0]} {key[2]} | " + " | ".join(cells) + " |")
    print(f"\n### Geometric-mean speedup over {baseline} (settings where both fit)\n")
    print("| method | geomean | settings |")
    print("|---|---:|---:|")
    for m in methods:
        v = logs[m]
        print(f"| {m} | {math.exp(sum(v) / len(v)):.3f}x | {len(v)} |" if v else f"| {m} | - | 0 |")
    print("\nRows faster than auto: " + ("; ".join(losses["auto"]) if losses["auto"] else "none") + ".")


def print_memory(rows: list[dict]) -> None:
    from autoplace.placers import get_placer

    methods = list(dict.fromkeys(r["method"] for r in rows))
    by = {(r["model"], json.dumps(r["params"], sort_keys=True), r["cluster"], r["method"]): r for r in rows}
    print("| setting | " + " | ".join(methods) + " |")
    print("|---|" + "---:|" * len(methods))
    problems = []
    for key in _settings_of(rows):
        cells = []
        for m in methods:
            r = by.get((*key, m))
            cells.append(_step(r))
            if r and get_placer(m).memory_aware and r["step_s"] is not None and not r["ok"]:
                problems.append(f"{m} runs out of memory on {key[0]} {key[2]}")
        dp, auto = by.get((*key, "dp-split")), by.get((*key, "auto"))
        if dp and dp["ok"] and auto and (not auto["ok"] or auto["step_s"] > dp["step_s"] * (1 + 1e-9)):
            problems.append(f"auto is not at least as fast as dp-split on {key[0]} {key[2]}")
        print(f"| {label(key[0], json.loads(key[1]), key[2])} | " + " | ".join(cells) + " |")
    print("\n" + ("Problems: " + "; ".join(problems) if problems else
                  "Every memory-aware placer fits or says it cannot; auto fits wherever dp-split does, at least "
                  "as fast."))


def print_schedulers(rows: list[dict]) -> None:
    """Each list scheduler's step (speedup over single-GPU) and its two estimates' errors against the
    simulated step: the schedule model replayed in the runtime's order, and the schedule as built."""
    by = {(r["model"], json.dumps(r["params"], sort_keys=True), r["cluster"], r["method"]): r for r in rows}
    print("| setting | single-gpu | " + " | ".join(f"{m}: step (x single) / replayed / as built" for m in SCHEDULERS)
          + " |")
    print("|---|---:|" + "---:|" * len(SCHEDULERS))
    slower, off, off_built, n_placed = [], [], [], 0
    for key in _settings_of(rows):
        base = by[(*key, "single-gpu")]
        cells = []
        for m in SCHEDULERS:
            r = by.get((*key, m))
            if r is None or r["step_s"] is None:
                cells.append("none" if r else "-")
                continue
            n_placed += 1
            err = _error_pct(r.get("estimate_s"), r["step_s"])
            built = _error_pct(r.get("decision_estimate_s"), r["step_s"])
            cells.append(f"{r['step_s']:.3f}{'' if r['ok'] else ' OOM'} ({base['step_s'] / r['step_s']:.2f}x) / "
                         f"{err:+.0f} % / {built:+.0f} %")
            if base["ok"] and r["step_s"] > base["step_s"] * (1 + 1e-9):
                slower.append(f"{m} on {key[0]} {key[2]} ({base['step_s'] / r['step_s']:.2f}x)")
            if not abs(err) <= 15:                      # a missing estimate (NaN) counts as off
                off.append(f"{m} on {key[0]} {key[2]} ({err:+.0f} %)")
            if not abs(built) <= 15:
                off_built.append(f"{m} on {key[0]} {key[2]} ({built:+.0f} %)")
        print(f"| {key[0]} {key[2]} | {_step(base)} | " + " | ".join(cells) + " |")
    print(f"\nSlower than single-GPU ({len(slower)} of {len(_settings_of(rows)) * len(SCHEDULERS)}): "
          + ("; ".join(slower) or "none") + ".")
    print(f"\nReplayed estimate more than 15 % off the simulated step ({len(off)} of {n_placed}): "
          + ("; ".join(off) or "none") + ".")
    print(f"\nSchedule as built more than 15 % off the simulated step ({len(off_built)} of {n_placed}): "
          + ("; ".join(off_built) or "none") + ".")


def _error_pct(estimate, step) -> float:
    """``estimate`` against ``step`` in per cent; NaN where there is no estimate."""
    return (estimate / step - 1) * 100 if estimate else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("field", "memory", "schedulers"))
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--cpsat-budget", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default=None, help="comma-separated placers (default: all, auto first)")
    ap.add_argument("--only", default=None, help="comma-separated MODEL@CLUSTER settings")
    ap.add_argument("--json", default=None, help="write every row here")
    ap.add_argument("--from-json", default=None, help="print the tables of a saved run instead of running")
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            rows = json.load(f)["rows"]
    else:
        settings = MEMORY if args.what == "memory" else FIELD
        if args.only:
            keep = set(args.only.split(","))
            settings = [s for s in settings if f"{s[0]}@{s[2]}" in keep]
        methods = args.methods.split(",") if args.methods else None
        if args.what == "schedulers":
            methods = ["single-gpu", *SCHEDULERS]
        rows = run(settings, methods, args.budget, args.cpsat_budget, args.seed)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"what": args.what, "budget": args.budget, "cpsat_budget": args.cpsat_budget,
                           "seed": args.seed, "rows": rows}, f, indent=1)
    {"field": print_field, "memory": print_memory, "schedulers": print_schedulers}[args.what](rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
