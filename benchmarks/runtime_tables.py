"""The papers' settings (Mirhoseini et al. Table 2, GDP Table 1) under the simulator that runs like the
runtime, every non-learned placer before and after, and ``auto``'s worst-case speedup over one GPU.

    .venv/bin/python benchmarks/runtime_tables.py [--before SRC] [--budget 5] [--only MODEL] [--json]
    .venv/bin/python benchmarks/runtime_tables.py --from-json RUN.jsonl [LATER.jsonl]  # the tables of saved runs

For each setting (the zoo model at its default size on the paper's cluster) ``autoplace compare`` runs
every non-learned placer (budget ``--budget``) and records each one's simulated step; ``auto``'s
worst-case speedup is the least, over the cost model's uncertainty scenarios (docs/algorithms.md,
Uncertainty), of one GPU's step over auto's. ``--before SRC`` runs the same comparison through the
autoplace source tree ``SRC`` (a checkout of an earlier commit with its C simulator built, see
benchmarks/runtime_models.py), which builds the zoo graphs with its own capture, in a subprocess.
Results are printed as they come (one JSON line per setting with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

SETTINGS = [(m, f"k80x{g}") for m in ("rnnlm-2", "nmt-2", "inception-v3") for g in (2, 4)] + [
    (m, f"p100x{g}") for m, g in (("rnnlm-2", 2), ("rnnlm-4", 4), ("gnmt-2", 2), ("gnmt-4", 4), ("gnmt-8", 8),
                                  ("transformer-xl-2", 2), ("transformer-xl-4", 4), ("transformer-xl-8", 8),
                                  ("inception-v3", 2), ("amoebanet", 4), ("wavenet-2x18", 2), ("wavenet-4x36", 4))]


def methods() -> list[str]:
    from autoplace.placers import available_placers

    return ["auto", *(m for m in available_placers(include_learned=False) if m != "auto")]


def after(model: str, cluster_name: str, budget: float) -> dict:
    from autoplace.cluster import get_cluster
    from autoplace.comparison import compare
    from autoplace.robust import RobustSimulator
    from autoplace.zoo import build_graph

    g, c = build_graph(model), get_cluster(cluster_name)
    result = compare(g, c, methods(), seed=0, budget=budget)
    rows = {r.method: (r.step_time if np.isfinite(r.step_time) else None) for r in result.rows}
    out = {"ops": g.n_ops, "steps": rows,
           "gain_uncertain": sorted(m for m, x in result.ranges.items() if x.gain_inside_range)}
    by = {r.method: r for r in result.rows}
    one, auto = by.get("single-gpu"), by.get("auto")
    if one is not None and auto is not None and one.result is not None and one.result.ok and auto.placement:
        rs = RobustSimulator(g, c)
        steps = rs.steps(np.stack([one.placement.to_array(g, c), auto.placement.to_array(g, c)]))
        out["auto_worst_case_speedup"] = float((steps[:, 0] / steps[:, 1]).min())
        out["auto_speedup"] = float(steps[0, 0] / steps[0, 1])
        out["auto_ops_per_device"] = np.bincount(auto.placement.to_array(g, c), minlength=c.n_devices).tolist()
    return out


def before(src: Path, model: str, cluster_name: str, budget: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src / "src")}
    cmd = [sys.executable, "-m", "autoplace.cli", "compare", model, "--cluster", cluster_name, "--methods",
           ",".join(methods()), "--seed", "0", "--budget", str(budget), "--json"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)   # its error is reported
    if not res.stdout.strip():
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"}
    d = json.loads(res.stdout)
    return {"steps": {r["method"]: r["step_time_s"] for r in d["rows"]}}



def _geo(xs) -> float:
    from autoplace.stats import geomean

    return geomean(xs, empty=float("nan"))


def tables(rows: list[dict]) -> None:
    """Markdown: per setting, one GPU and auto before and after with auto's worst-case speedup; per
    placer, its geometric-mean speedup over one GPU before and after."""
    ms = lambda s: "-" if s is None else f"{s * 1e3:.1f}"  # noqa: E731
    print("| setting | ops | single-GPU, ms (before -> after) | auto, ms (before -> after) "
          "| auto speedup (before -> after) "
          "| auto worst case | best other placer (after) | gain uncertain (after) |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    speed: dict[str, tuple[list, list]] = {}
    for row in rows:
        a, b = row["after"]["steps"], row.get("before", {}).get("steps", {})
        for m in a:
            pair = speed.setdefault(m, ([], []))
            for k, steps in enumerate((b, a)):
                one, x = steps.get("single-gpu"), steps.get(m)
                if one and x:
                    pair[k].append(one / x)
        others = {m: x for m, x in a.items() if m not in ("auto", "local-search", "single-gpu") and x}
        best = min(others, key=others.get) if others else None
        sp = lambda st: f"{st['single-gpu'] / st['auto']:.2f}" if st.get("single-gpu") and st.get("auto") else "-"  # noqa: E731
        print(f"| {row['model']} on {row['cluster']} | {row['after']['ops']:,} | {ms(b.get('single-gpu'))} -> "
              f"{ms(a.get('single-gpu'))} | {ms(b.get('auto'))} -> {ms(a.get('auto'))} | {sp(b)} -> {sp(a)} | "
              f"{row['after'].get('auto_worst_case_speedup', float('nan')):.2f} | "
              f"{best} {ms(others.get(best))} | {', '.join(row['after']['gain_uncertain']) or '-'} |")
    print()
    print("| placer | speedup over one GPU, geometric mean (before -> after) | settings |")
    print("|---|---:|---:|")
    for m, (before, after) in speed.items():
        print(f"| {m} | {_geo(before):.2f} -> {_geo(after):.2f} | {len(before)} / {len(after)} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path)
    ap.add_argument("--budget", type=float, default=5.0)
    ap.add_argument("--only", default=None, help="comma-separated models to run (default: every setting)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--from-json", type=Path, nargs="+", help="print the tables of saved --json runs (JSON lines; "
                    "a later file's 'after' replaces an earlier one's, 'before' is kept)")
    args = ap.parse_args(argv)
    if args.from_json:
        merged: dict[tuple[str, str], dict] = {}
        for path in args.from_json:
            for line in path.read_text().splitlines():
                row = json.loads(line)
                merged.setdefault((row["model"], row["cluster"]), {}).update(row)
        tables([merged[k] for k in ((m, c) for m, c in SETTINGS) if k in merged])
        return 0
    only = set(args.only.split(",")) if args.only else None
    for model, cluster_name in SETTINGS:
        if only and model not in only:
            continue
        row = {"model": model, "cluster": cluster_name, "after": after(model, cluster_name, args.budget)}
        if args.before:
            row["before"] = before(args.before, model, cluster_name, args.budget)
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        a, b = row["after"], row.get("before", {}).get("steps", {})
        cells = []
        for m, s in a["steps"].items():
            was = b.get(m)
            cells.append(f"{m} {'-' if was is None else f'{was * 1e3:.1f}'} -> "
                         f"{'-' if s is None else f'{s * 1e3:.1f}'}")
        print(f"{model} on {cluster_name} ({a['ops']} ops): auto worst-case speedup over one GPU "
              f"{a.get('auto_worst_case_speedup', float('nan')):.2f}; steps in ms, before -> after: "
              + "; ".join(cells),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
