"""``autoplace compare``: placement methods side by side on one graph and cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress
from rich.table import Table

from autoplace.cli.args import (
    MethodsHelp,
    add_env_args,
    add_granularity,
    add_graph_args,
    method_list,
    positive_seconds,
    seconds,
    seed_arg,
)
from autoplace.cli.common import (
    EXIT_FAILING,
    check_output,
    console,
    env_kwargs,
    finite_or_none,
    granular,
    jsonable,
    markdown_table,
    note_estimates,
    parse_params,
    placement_or_map,
    print_json,
)
from autoplace.comparison import auto_choice, compare, failure_reason, row_note, speedup
from autoplace.env import make_env
from autoplace.placers import available_placers, get_placer
from autoplace.plots import comparison_png
from autoplace.progress import progress_to
from autoplace.replicas import can_replicate
from autoplace.resolve import resolve_cluster, resolve_graph
from autoplace.units import fmt_bytes, fmt_ratio, fmt_time


def cmd_compare(args: argparse.Namespace) -> int:
    graph, cluster, result = _run(args)
    if args.plot:

        comparison_png(result, args.plot, title=f"{graph.name} ({graph.n_ops} ops) on {cluster.name}")
    if args.json:
        print_json(_as_json(graph, cluster, result))
    elif args.markdown:
        header, rows, footer = _table(cluster, result)
        print(markdown_table(header, rows))
        print(f"\n{footer}")
    else:
        _print_table(graph, cluster, result, args.env)
    return _compare_exit(result.rows)


def _run(args: argparse.Namespace):
    """``(graph, cluster, comparison)``: the methods of ``args`` run on its graph and cluster, with a
    progress bar on a terminal (each row printed above it as it comes)."""


    check_output(args.plot, "plot")
    for m in args.methods or ():
        get_placer(m)
    graph = granular(resolve_graph(args.graph, parse_params(args.param)), args.granularity, args.keep_whole)
    cluster = resolve_cluster(args.cluster)
    # by default every placer but the learned ones; the strategies where the simulator scores a step it can
    # re-capture with micro-batches (a graph file has no capture to replicate)
    strategies = getattr(args, "env", "simulated") == "simulated" and can_replicate(graph)
    methods = args.methods or ["auto", *(m for m in available_placers(include_learned=False,
                                                                      include_strategies=strategies) if m != "auto")]
    note_estimates(cluster)
    with Progress(transient=True, disable=args.json or args.markdown or not sys.stderr.isatty(),
                  console=console(True)) as bar:
        task = bar.add_task("placing", total=len(methods))
        current = {"method": methods[0], "index": 0}

        def advance(method: str) -> None:
            current.update(method=method, index=methods.index(method))
            bar.update(task, description=f"placing with {method}", completed=current["index"])

        def search(message: str, fraction: float | None) -> None:   # a long search within one method
            bar.update(task, description=f"{current['method']}: {message}",
                       completed=current["index"] + (fraction or 0.0))

        env: Any = args.env
        if env == "measured":

            env = make_env("measured", graph, cluster, **env_kwargs(args))
        try:
            def done(row) -> None:                 # each row as it comes, above the bar (a terminal only)
                if not bar.disable:
                    step = fmt_time(row.step_time) if row.error is None else (row.error or "")[:60]
                    bar.console.print(f"{row.method}: {step}  ({row.wall_time_s:.1f} s)", highlight=False)

            maps = {f"device map {Path(f).name}": placement_or_map(f, graph, cluster) for f in args.device_map}
            with progress_to(search):
                result = compare(graph, cluster, methods, seed=args.seed, budget=args.budget, progress=advance,
                                 env=env, on_row=done, time_limit=args.time_limit, placements=maps)
        finally:
            if env != "simulated":
                env.close()
    return graph, cluster, result


def _notes(result):
    """Each row's note: its own, a warning where its gain is inside the uncertainty range, and ``auto``'s
    choice by regret."""

    why = auto_choice(result)

    def note_of(r) -> str:
        note = _range_note(result.ranges.get(r.method), row_note(r))
        extra = ("auto's pick" if why is not None and r.method == why.picked else
                 f"chosen by regret: {why.note}" if why is not None and r.method == "auto" and why.note else "")
        return "; ".join(x for x in (note, extra) if x)

    return note_of, why


def _as_json(graph, cluster, result) -> dict:
    """The comparison as ``compare --json`` prints it."""

    rows, bounds = result.rows, result.bounds
    gpu_time, expert_time = result.step_time("single-gpu"), result.step_time("expert")
    note_of, why = _notes(result)
    return {"graph": graph.name, "cluster": cluster.name, "ops": graph.n_ops, "env": result.env,
            "bounds": {"critical_path_s": bounds.critical_path, "load_s": bounds.load,
                       "cp_sat_s": bounds.cp_sat, "best_s": bounds.best, "launches_s": bounds.launches,
                       "no_gap": bounds.meaningless, "of": "the simulated step"},
            "rows": [
                {"method": r.method, **_result_dict(r.result, result.env, r.error),
                 "speedup_vs_single_gpu": finite_or_none(speedup(gpu_time, r.step_time)),
                 "speedup_vs_expert": finite_or_none(speedup(expert_time, r.step_time)),
                 "gap_to_bound": finite_or_none(result.gap(r)),
                 "uncertainty": result.ranges[r.method].to_dict() if r.method in result.ranges else None,
                 "search_time_s": r.search_time_s, "wall_time_s": finite_or_none(r.wall_time_s),
                 "details": jsonable(r.details), "note": note_of(r),
                 **({"regret": why.regrets.get(r.method)} if why is not None else {})}
                for r in rows],
            "auto_choice": None if why is None else {"picked": why.picked, "faster": why.faster,
                                                     "scenario": why.scenario, "note": why.note}}


def _table(cluster, result) -> tuple[list[str], list[list[str]], str]:
    """The comparison as a table: its header, its rows and the footer that explains them."""

    rows, bounds = result.rows, result.bounds
    gpu_time, expert_time = result.step_time("single-gpu"), result.step_time("expert")
    note_of, _ = _notes(result)
    names = cluster.device_names
    header = ["method", "step time", "range", "vs single-gpu", "vs expert", "gap to bound",
              *[f"peak {n}" for n in names], "status", "search"]
    table_rows = []
    for r in rows:
        if r.result is None:
            why_none = r.error if r.error.startswith("skipped") else f"no placement: {r.error}"
            table_rows.append([r.method, "-", "-", "-", "-", "-", *["-"] * len(names), why_none,
                               fmt_time(r.search_time_s)])
            continue
        status = failure_reason(r.result) if not r.result.ok else "ok"
        rng = result.ranges.get(r.method)
        note = note_of(r)
        gap = result.gap(r)
        table_rows.append([r.method, fmt_time(r.result.step_time) if r.result.ok else "failing",
                           f"{fmt_time(rng.low)} - {fmt_time(rng.high)}" if rng else "-",
                           fmt_ratio(speedup(gpu_time, r.step_time)), fmt_ratio(speedup(expert_time, r.step_time)),
                           f"{100 * gap:.0f}%" if np.isfinite(gap) else "-",
                           *[fmt_bytes(p) if p else "-" for p in r.result.peak_memory],
                           f"{status}; {note}" if note else status, fmt_time(r.search_time_s)])
    footer = ("range: the step over the cost model's uncertain constants (docs/algorithms.md, Uncertainty); "
              "gain uncertain: faster than one GPU nominally but not in every scenario; "
              if result.ranges else "") + (
             f"lower bounds on the simulated step: critical path {fmt_time(bounds.critical_path)}, load "
              f"{fmt_time(bounds.load)}"
              + (f", CP-SAT {fmt_time(bounds.cp_sat)}" if bounds.cp_sat else "")
              + ("; measured steps are not bounded by them, so no gap is shown" if result.env != "simulated"
                 else f"; no gap is shown: {bounds.meaningless}" if bounds.meaningless
                 else "; gap = step time / best bound - 1"
                 + ("" if not any(r.placement is not None and r.placement.meta.get("strategy") for r in rows)
                    else " (none for a strategy: the bounds are of the step unreplicated)")))
    return header, table_rows, footer


def _print_table(graph, cluster, result, env: str) -> None:
    """The comparison as a table on the terminal."""

    header, rows, footer = _table(cluster, result)
    table = Table(title=f"{graph.name} ({graph.n_ops} ops) on {cluster.name}: {env} training step", caption=footer)
    for col in header:
        table.add_column(col, justify="left" if col in ("method", "status") else "right")
    for row in rows:
        table.add_row(*row)
    console().print(table)


def _range_note(rng, note: str) -> str:
    """A row's note, with a warning where its gain over one GPU is inside the uncertainty range."""
    if rng is None or not rng.gain_inside_range:
        return note
    warn = "gain uncertain"
    return f"{note}; {warn}" if note else warn


def _result_dict(result, env: str, why_none: str | None) -> dict:
    """A row's step in the one result schema (:meth:`autoplace.result.StepResult.to_dict`); a method that
    found no placement gets the same keys, empty, and ``error`` saying why."""
    if result is not None:
        d = result.to_dict()
        return {**d, "error": d.get("error") or why_none}   # a failing row says why (out of memory on ...)
    return {"env": env, "step_time_s": None, "ok": False, "error": why_none, "oom_devices": [], "step_times_s": [],
            "devices": [], "links": [], "transfers": 0, "transfer_bytes": 0}


def _compare_exit(rows) -> int:
    """``compare`` follows the failing-placement rule too: 1 when no method found a placement that runs."""
    return 0 if any(r.result is not None and r.result.ok for r in rows) else EXIT_FAILING


def add_compare_parser(sub) -> None:
    """The ``compare`` verb's arguments."""
    p = sub.add_parser("compare", help="compare placement methods on one graph and cluster",
                       formatter_class=MethodsHelp)
    add_graph_args(p)
    p.add_argument("--methods", type=method_list,
                   help="comma-separated methods (default: all but the learned ones, auto first), of: {methods}")
    p.add_argument("--seed", type=seed_arg, default=0, help="every placer's seed (default 0)")
    p.add_argument("--budget", type=seconds, default=None,
                   help="search budget per method, seconds of nominal work, not wall clock (see 'place --help')")
    p.add_argument("--time-limit", type=positive_seconds, default=None, metavar="S",
                   help="stop each method's search after S seconds of wall clock with the best it has")
    p.add_argument("--device-map", action="append", default=[], metavar="MAP.json",
                   help="also score this Accelerate-style device map (module -> device, as dispatch_model runs it); "
                        "repeatable")
    add_granularity(p)
    add_env_args(p)
    p.add_argument("--plot", metavar="FILE.png", help="also draw step time per method (with the bound) and each "
                                                       "method's peak memory per device against capacity")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--markdown", action="store_true")
    p.set_defaults(func=cmd_compare)
