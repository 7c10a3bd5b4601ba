"""GDP's Table 1 (Zhou et al.) re-simulated: GDP-one and HDP beside the expert, METIS and ``auto`` on the
twelve settings (``p100x2/4/8``), the paper's measured seconds beside ours.

    .venv/bin/python benchmarks/gdp_table1.py run --methods gdp --budget 120 --json docs/results/gdp/table1-gdp.json
    .venv/bin/python benchmarks/gdp_table1.py run --methods hdp --budget 120 --json docs/results/gdp/table1-hdp.json
    .venv/bin/python benchmarks/gdp_table1.py run --methods expert,metis,auto --budget 60 \
        --json docs/results/gdp/table1-classic.json
    .venv/bin/python benchmarks/gdp_table1.py report \
        --json docs/results/gdp/table1-gdp.json,docs/results/gdp/table1-hdp.json,docs/results/gdp/table1-classic.json

``run`` places every setting (``--only rnnlm-2@p100x2,...`` for some) with each method and appends one row
per (setting, method) to the JSON file as soon as it has it; a row already there is not run again, so an
interrupted run continues where it stopped. ``--budget`` is the placers' budget (the learned searches'
seconds of nominal work, :func:`autoplace.placers.gdp.work_budget`; ``auto``'s evaluation budget), seed
``--seed``. Each row keeps the search's wall time (GDP's includes its prior, the fast placers) and, for
the learned searches, the wall time at which the final best was first found (``best_at_s``).

``report`` prints the table: step per method, GDP-one's speedup over the expert and over HDP (ours /
the paper's), the search times (whole search, and until its final best), the seconds GDP-one takes to
hold HDP's final step (its prior's time where the prior is already as fast), and the geometric means.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from paper_tables import GDP, settings  # noqa: E402

LEARNED = ("gdp", "hdp")


def _time_to_best(curve, final: float, prior_step: float | None, prior_s: float) -> float:
    """Wall seconds until the search first held its final best: the prior's seconds if that is the prior,
    else the first curve point holding it (a GDP curve's wall times include the prior's)."""
    if prior_step is not None and final >= prior_step * (1 - 1e-9):
        return prior_s
    for point in curve.points:
        if point.best_step_s <= final * (1 + 1e-9):
            return point.wall_s
    return curve.points[-1].wall_s if curve.points else 0.0


def run_one(model: str, cname: str, method: str, budget: float, seed: int) -> dict:
    from autoplace.cluster import get_cluster
    from autoplace.errors import AutoplaceError
    from autoplace.placers import get_placer, place
    from autoplace.sim import simulate
    from autoplace.zoo import build_graph

    graph, cluster = build_graph(model), get_cluster(cname)
    row = {"model": model, "cluster": cname, "method": method, "budget": budget, "seed": seed}
    t0 = time.perf_counter()
    try:
        if method in LEARNED:
            res = get_placer(method).search(graph, cluster, budget=budget, seed=seed)
            p = res.placement
            prior_s = p.meta.get("prior_s") or 0.0
            row.update(samples=res.samples, updates=res.updates, prior=p.meta.get("prior"),
                       prior_step_s=p.meta.get("prior_step_s"), prior_s=prior_s,
                       best_at_s=_time_to_best(res.curve, p.meta["best_step_s"], p.meta.get("prior_step_s"), prior_s))
        else:
            p = place(graph, cluster, method, seed=seed, budget=budget)
    except AutoplaceError as e:
        row.update(step_s=None, ok=False, error=str(e), wall_s=time.perf_counter() - t0)
        return row
    wall = time.perf_counter() - t0
    r = simulate(graph, cluster, p)
    row.update(step_s=float(r.step_time), ok=bool(r.ok), error=None, wall_s=wall)
    return row


def cmd_run(args) -> int:
    rows = []
    if os.path.exists(args.json):
        with open(args.json) as f:
            rows = json.load(f)["rows"]
    done = {(r["model"], r["cluster"], r["method"]) for r in rows}
    todo = settings("gdp")
    if args.only:
        keep = {tuple(s.split("@")) for s in args.only.split(",")}
        todo = [s for s in todo if s in keep]
    for model, cname in todo:
        for method in args.methods.split(","):
            if (model, cname, method) in done:
                continue
            row = run_one(model, cname, method, args.budget, args.seed)
            print(f"{model} on {cname}, {method}: {row['step_s']} s in {row['wall_s']:.0f} s", file=sys.stderr,
                  flush=True)
            rows.append(row)
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"table": "gdp-table1", "rows": rows}, f, indent=1)
            os.replace(tmp, args.json)
    return 0



def _geo(xs) -> float:
    from autoplace.stats import geomean

    return geomean(xs, empty=float("nan"))


def cmd_report(args) -> int:
    rows = []
    for path in args.json.split(","):
        with open(path) as f:
            rows += json.load(f)["rows"]
    by = {(r["model"], r["cluster"], r["method"]): r for r in rows}

    def step(m, c, method):
        r = by.get((m, c, method))
        return r["step_s"] if r and r["ok"] else None

    def cell(x):
        return "-" if x is None else f"{x:.3f}"

    def ratio(a, b):
        return None if a is None or b is None else a / b

    budgets = sorted({(r["method"], r["budget"]) for r in rows})
    print("Steps in seconds (simulated; paper: measured on P100s). Speedups of GDP-one over the expert (HP) "
          "and over HDP, ours / paper. Budgets: " + ", ".join(f"{m} {b:g}" for m, b in budgets) + ".\n")
    print("| setting | expert | metis | auto | hdp | gdp-one (prior) | paper: HP | METIS | HDP | GDP-one "
          "| gdp-one vs expert | vs hdp | auto vs gdp-one | search s: auto | hdp (to best) | gdp-one (to best) "
          "| gdp-one at hdp's step, s |")
    print("|---|" + "---:|" * 16)
    sp_e, sp_h, sp_a, p_e, p_h, t_h, t_g, b_h, b_g, at_h, t_a = ([] for _ in range(11))
    for m, c in settings("gdp"):
        gpus = int(c.split("x")[1])
        pg, ph, pm, phd = GDP[(m, gpus)]
        e, me, a, h, g = (step(m, c, k) for k in ("expert", "metis", "auto", "hdp", "gdp"))
        gr, hr, ar = by.get((m, c, "gdp"), {}), by.get((m, c, "hdp"), {}), by.get((m, c, "auto"), {})
        t_a.append(ar.get("wall_s"))
        ge, gh, ag = ratio(e, g), ratio(h, g), ratio(g, a)
        pe, pgh = ratio(ph, pg), ratio(phd, pg)
        sp_e.append(ge), sp_h.append(gh), sp_a.append(ag), p_e.append(pe), p_h.append(pgh)
        t_h.append(hr.get("wall_s")), t_g.append(gr.get("wall_s")), b_h.append(hr.get("best_at_s"))
        b_g.append(gr.get("best_at_s"))
        # the prior alone is HDP's equal: GDP-one holds HDP's result as soon as its prior is scored
        beat = gr.get("prior_s") if (h is not None and gr.get("prior_step_s") is not None
                                     and gr["prior_step_s"] <= h) else None
        at_h.append(beat)
        prior = f" ({gr['prior']} {gr['prior_step_s']:.3f})" if gr.get("prior") and gr.get("prior_step_s") else ""

        def x(v):
            return "-" if v is None else f"{v:.2f}x"

        def s(v):
            return "-" if v is None else f"{v:.0f}"
        print(f"| {m}, {c} | {cell(e)} | {cell(me)} | {cell(a)} | {cell(h)} | {cell(g)}{prior} | {cell(ph)} | "
              f"{cell(pm) if pm else 'OOM'} | {cell(phd)} | {cell(pg)} | {x(ge)} / {x(pe)} | {x(gh)} / {x(pgh)} | "
              f"{x(ag)} | {s(ar.get('wall_s'))} | {s(hr.get('wall_s'))} ({s(hr.get('best_at_s'))}) | "
              f"{s(gr.get('wall_s'))} "
              f"({s(gr.get('best_at_s'))}) | {'-' if beat is None else f'{beat:.1f}'} |")
    print(f"| **geomean** | | | | | | | | | | {_geo(sp_e):.2f}x / {_geo(p_e):.2f}x | {_geo(sp_h):.2f}x / "
          f"{_geo(p_h):.2f}x | {_geo(sp_a):.2f}x | {_geo(t_a):.0f} | {_geo(t_h):.0f} ({_geo(b_h):.0f}) | "
          f"{_geo(t_g):.0f} "
          f"({_geo(b_g):.0f}) | {_geo(at_h):.1f} |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--methods", default="gdp,hdp")
    r.add_argument("--budget", type=float, default=120.0)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--only", default=None, help="model@cluster,... (default: all twelve)")
    r.add_argument("--json", required=True)
    p = sub.add_parser("report")
    p.add_argument("--json", required=True, help="one or more (comma-separated) files of run")
    args = ap.parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
