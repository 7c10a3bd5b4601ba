"""The papers' tables re-simulated: every placer on the papers' settings, beside the papers' measurements.

    .venv/bin/python benchmarks/paper_tables.py mirhoseini [--budget 30] [--json out.json] [--before old.json]
    .venv/bin/python benchmarks/paper_tables.py gdp        [--budget 30] [--json out.json] [--before old.json]
    .venv/bin/python benchmarks/paper_tables.py gdp --from-field docs/results/classic-field/field.json   # no re-run

``mirhoseini``: Mirhoseini et al. 2017 Table 2 — rnnlm-2, nmt-2 and inception-v3 on ``k80x2`` and
``k80x4``; speedups over single-GPU and over the expert placement, the paper's measured figures beside.
``gdp``: the twelve settings of GDP's Table 1 (Zhou et al.) on ``p100x2/4/8``; speedups over the expert
placement ("HP", the paper's human placement), the paper's HP, METIS, HDP and GDP-one beside.

Every registered placer runs with ``--seed`` and ``--budget`` (search placers: deterministic-time or
evaluation budgets, so results do not depend on machine load). ``--json`` writes every row;
``--before`` reads such a file from another version of autoplace and prints before/after columns.
``--from-field`` prints the tables from a ``benchmarks/classic_field.py field`` run (the same settings,
every placer) instead of placing again.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from autoplace.bench.published import GDP_TABLE1 as GDP  # noqa: E402  the papers' figures
from autoplace.bench.published import MIRHOSEINI_TABLE2 as MIRHOSEINI  # noqa: E402


def settings(table: str) -> list[tuple[str, str]]:
    """(model, cluster preset) pairs of a table, in the paper's order."""
    if table == "mirhoseini":
        return [(m, f"k80x{g}") for m in MIRHOSEINI for g in (2, 4)]
    return [(m, f"p100x{g}") for m, g in GDP]


def paper_row(table: str, model: str, cluster: str) -> dict[str, float | None]:
    """The paper's measured seconds for one setting, keyed by our method names (None = OOM)."""
    gpus = int(cluster.split("x")[1])
    if table == "mirhoseini":
        p = MIRHOSEINI[model]
        return {"single-cpu": p["single-cpu"], "single-gpu": p["single-gpu"], **p[gpus]}
    gdp, hp, metis, hdp = GDP[(model, gpus)]
    return {"expert": hp, "metis": metis, "hdp": hdp, "gdp-one": gdp}


def run(table: str, budget: float, seed: int) -> list[dict]:
    from autoplace.cluster import get_cluster
    from autoplace.comparison import compare
    from autoplace.zoo import build_graph

    rows = []
    for model, cname in settings(table):
        graph, cluster = build_graph(model), get_cluster(cname)
        t0 = time.perf_counter()
        res = compare(graph, cluster, seed=seed, budget=budget)
        print(f"{model} on {cname}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        for r in res.rows:
            ok = r.result is not None and r.result.ok
            rows.append({"model": model, "cluster": cname, "method": r.method,
                         "step_s": r.step_time if ok else None,
                         "oom": r.result is not None and not r.result.ok, "error": r.error,
                         "critical_path_s": res.bounds.critical_path, "load_s": res.bounds.load})
    return rows


def _fmt(x: float | None, oom: bool = False) -> str:
    if oom:
        return "OOM"
    return "-" if x is None else f"{x:.3f}"


def _ratio(base: float | None, x: float | None) -> str:
    if base is None or x is None or not x:
        return "-"
    return f"{base / x:.2f}x"


TITLES = {"mirhoseini": "Mirhoseini et al. 2017, Table 2", "gdp": "GDP (Zhou et al.), Table 1"}


def print_tables(table: str, rows: list[dict], before: list[dict] | None, budget: float, seed: int) -> None:
    """One markdown table per setting: ours (and before) against the paper, speedups over the baseline
    (single-GPU for Mirhoseini's table, the expert for GDP's)."""
    base_method = "single-gpu" if table == "mirhoseini" else "expert"
    print(f"# {TITLES[table]}, re-simulated\n\nEvery placer with seed {seed}, search budget {budget:g} "
          f"(`benchmarks/paper_tables.py {table}`); \"paper\" are the paper's measured steps"
          + ("; \"before\" the same settings simulated by an earlier version (a `--before` file)." if before
             else "."))
    old = {(r["model"], r["cluster"], r["method"]): r for r in before or []}
    for model, cname in settings(table):
        mine = [r for r in rows if r["model"] == model and r["cluster"] == cname]
        if not mine:
            continue
        paper = paper_row(table, model, cname)
        base = next((r["step_s"] for r in mine if r["method"] == base_method), None)
        obase = old.get((model, cname, base_method), {}).get("step_s")
        pbase = paper.get(base_method)
        print(f"\n### {model} on {cname} — bounds: critical path {mine[0]['critical_path_s']:.3f} s, "
              f"load {mine[0]['load_s']:.3f} s\n")
        head = "| method | step (s) | vs " + base_method + " |"
        rule = "|---|---:|---:|"
        if before is not None:
            head += " before: step (s) | before: vs " + base_method + " |"
            rule += "---:|---:|"
        head += " paper: step (s) | paper: vs " + base_method + " |"
        rule += "---:|---:|"
        print(head)
        print(rule)
        for r in mine:
            line = f"| {r['method']} | {_fmt(r['step_s'], r['oom'])} | {_ratio(base, r['step_s'])} |"
            if before is not None:
                o = old.get((model, cname, r["method"]))
                line += (f" {_fmt(o['step_s'], o['oom'])} | {_ratio(obase, o['step_s'])} |" if o else " - | - |")
            p = paper.get(r["method"], "-")
            if p == "-":
                line += " - | - |"
            else:
                line += f" {_fmt(p, p is None)} | {_ratio(pbase, p)} |"
            print(line)
        for extra in ("rl", "hdp", "gdp-one"):
            if extra in paper:
                print(f"| (paper's {extra}) | - | - |" + (" - | - |" if before is not None else "")
                      + f" {_fmt(paper[extra], paper[extra] is None)} | {_ratio(pbase, paper[extra])} |")


#: per table: the baseline, then the placers the paper reports (ours / the paper's speedup over the baseline)
COMPARED = {"mirhoseini": ("single-gpu", ("single-cpu", "expert", "scotch", "mincut", "metis", "auto", "rl")),
            "gdp": ("expert", ("single-gpu", "metis", "mincut", "scotch", "auto", "hdp", "gdp-one"))}


def print_compared(table: str, rows: list[dict]) -> None:
    """One compact table: each setting's speedup over the baseline of the placers the paper compares, ours /
    the paper's ("-": none; "OOM": out of memory; the learned placers run only when a field run includes them)."""
    base_method, methods = COMPARED[table]
    ours = {(r["model"], r["cluster"], r["method"]): r for r in rows}
    print(f"\n### Speedup over {base_method}, ours / paper\n")
    print(f"| setting | {' | '.join(methods)} |")
    print("|---|" + "---:|" * len(methods))
    for model, cname in settings(table):
        paper = paper_row(table, model, cname)
        base = ours.get((model, cname, base_method), {}).get("step_s")
        cells = []
        for m in methods:
            r = ours.get((model, cname, m), {})
            mine = "OOM" if r.get("oom") else _ratio(base, r.get("step_s"))
            theirs = "-" if m not in paper else ("OOM" if paper[m] is None
                                                 else _ratio(paper.get(base_method), paper[m]))
            cells.append(f"{mine.rstrip('x')} / {theirs.rstrip('x')}")
        print(f"| {model}, {cname} | {' | '.join(cells)} |")


def print_summary(table: str, rows: list[dict], before: list[dict] | None) -> None:
    """Per method: geometric-mean speedup over the baseline across the settings, and how many settings
    it runs out of memory in — now and before."""
    base_method = "single-gpu" if table == "mirhoseini" else "expert"

    def summary(rs: list[dict]) -> dict[str, tuple[float, int, int]]:
        out: dict[str, list] = {}
        base = {(r["model"], r["cluster"]): r["step_s"] for r in rs if r["method"] == base_method}
        for r in rs:
            b = base.get((r["model"], r["cluster"]))
            acc = out.setdefault(r["method"], [[], 0, 0])
            acc[2] += 1
            if r["oom"]:
                acc[1] += 1
            elif r["step_s"] and b:
                acc[0].append(math.log(b / r["step_s"]))
        return {m: (math.exp(sum(v) / len(v)) if v else float("nan"), oom, n) for m, (v, oom, n) in out.items()}

    now, then = summary(rows), summary(before) if before is not None else {}
    print(f"\n### Summary: geometric mean of each method's speedup over {base_method}, and OOM settings\n")
    head = "| method | speedup | OOM |" + (" before: speedup | before: OOM |" if before is not None else "")
    print(head)
    print("|---|---:|---:|" + ("---:|---:|" if before is not None else ""))
    for m, (g, oom, n) in now.items():
        line = f"| {m} | {g:.2f}x | {oom}/{n} |"
        if before is not None:
            og, ooom, on = then.get(m, (float("nan"), 0, 0))
            line += f" {og:.2f}x | {ooom}/{on} |"
        print(line)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=("mirhoseini", "gdp"))
    ap.add_argument("--budget", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write every row here")
    ap.add_argument("--before", default=None, help="rows of another version (a --json file) to compare with")
    ap.add_argument("--from-json", default=None, help="print the tables of a saved run instead of running")
    ap.add_argument("--from-field", default=None, help="print the tables of a benchmarks/classic_field.py field run")
    args = ap.parse_args(argv)
    if args.from_field:
        with open(args.from_field) as f:
            saved = json.load(f)
        keep = set(settings(args.table))
        rows = [{"model": r["model"], "cluster": r["cluster"], "method": r["method"],
                 "step_s": r["step_s"] if r["ok"] else None, "oom": r["step_s"] is not None and not r["ok"],
                 "error": r["error"], "critical_path_s": r["critical_path_s"], "load_s": r["load_s"]}
                for r in saved["rows"] if (r["model"], r["cluster"]) in keep and not r["params"]]
        args.budget, args.seed = saved["budget"], saved["seed"]
    elif args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        rows, args.budget, args.seed = saved["rows"], saved["budget"], saved["seed"]
    else:
        rows = run(args.table, args.budget, args.seed)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"table": args.table, "budget": args.budget, "seed": args.seed, "rows": rows}, f,
                          indent=1)
    before = None
    if args.before:
        with open(args.before) as f:
            before = json.load(f)["rows"]
    print_tables(args.table, rows, before, args.budget, args.seed)
    print_summary(args.table, rows, before)
    print_compared(args.table, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
