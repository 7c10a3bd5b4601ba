"""The verbs that place and compare: clusters, simulate, place, train, compare."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from autoplace.cli.common import (
    EXIT_FAILING,
    _bold,
    _check_json_output,
    _check_output,
    _console,
    _env_kwargs,
    _exit_code,
    _finite_or_none,
    _granular,
    _note_estimates,
    _note_other_cluster,
    _parse_params,
    _placement_or_map,
    _print_json,
    markdown_table,
)
from autoplace.cluster import CLUSTER_PRESETS, Cluster, get_cluster
from autoplace.errors import AutoplaceError, FormatError
from autoplace.formats._json import input_file
from autoplace.graph import Graph
from autoplace.replicas import can_replicate, strategy_graph
from autoplace.resolve import resolve_cluster, resolve_graph


# ---------------------------------------------------------------------- verbs
def settings_markdown(rows: dict) -> str:
    """The ``--set`` keys of each learned placer as Markdown tables (docs/algorithms.md holds this)."""
    out = []
    for n, rs in rows.items():
        out += [f"`{n}`:", "", "| key | default | range |", "|---|---|---|"]
        out += [f"| `{k}` | `{'none' if d is None else d}` | {r} |" for k, d, r, _ in rs]
        out.append("")
    return "\n".join(out)


def cmd_settings(args: argparse.Namespace) -> int:
    """Each learned placer's ``--set`` keys: default, allowed range and what it does."""
    from autoplace.placers import available_placers, get_placer

    learned = [n for n in available_placers() if get_placer(n).config is not None]
    names = learned if args.method is None else [args.method]
    for n in names:
        if n not in learned:
            raise AutoplaceError(f"{n!r} has no settings (the learned placers' are: {', '.join(learned)})")
    rows = {n: get_placer(n).config.describe() for n in names}
    if args.markdown:
        print(settings_markdown(rows), end="")
        return 0
    if args.json:
        _print_json({n: [{"key": k, "default": d, "range": r, "doc": doc} for k, d, r, doc in rs]
                     for n, rs in rows.items()})
        return 0
    from rich.table import Table

    con = _console()
    for n, rs in rows.items():
        table = Table(title=f"{n} --set KEY=VALUE ({get_placer(n).config.__name__})", title_justify="left")
        for col in ("key", "default", "range", "what it does"):
            table.add_column(col, overflow="fold")
        for k, d, r, doc in rs:
            table.add_row(k, "none" if d is None else str(d), r, doc)
        con.print(table)
    return 0


def cmd_clusters(args: argparse.Namespace) -> int:
    from autoplace.formats import cluster_to_dict, save_cluster
    from autoplace.units import fmt_bytes, fmt_flops, fmt_rate

    if args.output is not None:
        _check_output(args.output)
        if not args.name:
            raise FormatError("clusters --output needs a cluster name (or file) to write")
    if args.name:
        cluster = resolve_cluster(args.name)
        if args.output is not None:
            save_cluster(cluster, args.output)
            return 0
        if args.json:
            _print_json(cluster_to_dict(cluster))
            return 0
        clusters = [cluster]
    else:
        clusters = [get_cluster(name) for name in CLUSTER_PRESETS]
    if args.json:
        _print_json([cluster_to_dict(c) for c in clusters])
        return 0
    from rich.table import Table

    table = Table(title="cluster presets" if not args.name else None,
                  caption="FP32 and bandwidth: achievable (peak); copy engines: send/receive, - = no limit")
    for col in ("cluster", "device", "type", "model", "memory", "FP32", "mem bandwidth", "copy engines"):
        table.add_column(col)
    for c in clusters:
        for i, d in enumerate(c.devices):
            engines = "/".join(str(e) if e else "-" for e in d.engines)
            table.add_row(c.name if i == 0 else "", d.name, d.type, str(d.meta.get("model", "")),
                          fmt_bytes(d.memory_bytes),
                          f"{fmt_flops(c.achievable_flops[i])}/s ({fmt_flops(d.peak_flops)}/s)",
                          f"{fmt_rate(c.achievable_bandwidth[i])} ({fmt_rate(d.memory_bandwidth)})", engines,
                          end_section=i == len(c.devices) - 1 and not c.segments)
        if c.segments:
            table.add_row("", "segments: " + ", ".join(f"{seg.name} {fmt_rate(seg.bandwidth)}" for seg in c.segments),
                          end_section=True)
    _console().print(table)
    return 0


def _sim_table(graph: Graph, cluster: Cluster, result: Any, title: str):
    from rich.table import Table

    from autoplace.units import fmt_bytes, fmt_time

    table = Table(title=title)
    host = getattr(result, "host_time", None)
    launched = host is not None and len(host) and cluster.launcher.max(initial=-1) >= 0
    cols = ("device", "busy", "utilisation", *(("launching",) if launched else ()), "peak memory", "capacity", "OOM")
    for col in cols:
        table.add_column(col, justify="right" if col != "device" else "left")
    for d, name in enumerate(result.device_names):
        busy = result.busy_time[d]
        util = busy / result.step_time if result.step_time > 0 else 0.0
        # a GPU's host thread: the time it spent launching the device's ops and submitting its copies
        launch = ((fmt_time(host[d]) if cluster.launcher[d] >= 0 else "-"),) if launched else ()
        table.add_row(name, fmt_time(busy), f"{100 * util:.0f}%", *launch, fmt_bytes(result.peak_memory[d]),
                      fmt_bytes(result.memory_capacity[d]),
                      _bold(("OOM", "bold red")) if result.peak_memory[d] > result.memory_capacity[d] else "")
    return table


def cmd_simulate(args: argparse.Namespace) -> int:
    from autoplace.formats import write_json
    from autoplace.sim import simulate
    from autoplace.sim.trace import chrome_trace
    from autoplace.units import fmt_bytes, fmt_time

    _check_output(args.trace)
    _check_output(args.plot, "plot")
    graph = resolve_graph(args.graph, _parse_params(args.param))
    cluster = resolve_cluster(args.cluster)
    placement = _placement_or_map(args.placement, graph, cluster)
    user_graph, graph = graph, strategy_graph(graph, placement)   # a strategy's placement: the step it runs
    result = simulate(graph, cluster, placement, trace=bool(args.trace or args.plot))
    if args.plot:
        from autoplace.plots import step_png

        step_png(graph, cluster, result, args.plot,
                 title=f"{graph.name} on {cluster.name} ({placement.method}): where the step's time goes")
    _note_other_cluster(placement, cluster)
    _note_estimates(cluster)
    if args.trace:
        write_json(args.trace, chrome_trace(graph, cluster, result), indent=None)
    rng = None
    if result.ok:
        from autoplace.placers.auto import robust_simulator, uncertainty
        from autoplace.robust import strategy_range

        rng = (uncertainty(graph, cluster, [placement])[0] if graph is user_graph
               else strategy_range(robust_simulator(user_graph, cluster), placement))
    if args.json:
        _print_json({"graph": graph.name, "cluster": cluster.name, "method": placement.method,
                     **result.to_dict(), "uncertainty": rng.to_dict() if rng else None})
        return _exit_code(result)
    con = _console()
    status = ("FAILING (OOM on " + ", ".join(result.oom_devices) + ")", "bold red") if not result.ok else "ok"
    con.print(_bold((graph.name, "bold"), " on ", (cluster.name, "bold"), f" ({placement.method}): step time ",
                    (fmt_time(result.step_time), "bold"), ", ", status))
    if rng is not None:
        con.print(f"range over the cost model's uncertainty: {fmt_time(rng.low)} - {fmt_time(rng.high)}"
                  + (f"; one GPU: {fmt_time(rng.one_gpu)}" if rng.one_gpu is not None else "")
                  + ("; its gain over one GPU is inside that range" if rng.gain_inside_range else ""))
    con.print(_sim_table(graph, cluster, result, title=""))
    con.print(f"{result.n_transfers} transfers, {fmt_bytes(result.transfer_bytes)}, link busy "
              f"{fmt_time(result.transfer_time)}")
    if args.trace:
        _console(args.trace == "-").print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
    return _exit_code(result)


def _check_checkpoint_folders(args: argparse.Namespace) -> None:
    """``--checkpoint`` a folder that can be written, ``--resume`` an existing folder: before any work."""
    from autoplace.formats._json import check_output_folder

    check_output_folder(args.checkpoint or args.resume, "checkpoint")
    if args.resume is not None and not Path(args.resume).is_dir():
        raise FormatError(f"--resume {args.resume}: no such folder (a folder --checkpoint wrote)")


def cmd_place(args: argparse.Namespace) -> int:
    from autoplace.env import make_env
    from autoplace.formats import save_placement
    from autoplace.placers import get_placer, place
    from autoplace.sim import simulate
    from autoplace.units import fmt_time

    _check_output(args.output)
    _check_json_output(args)
    info = get_placer(args.method)  # unknown method: fail before loading anything big
    search_args = [f for f in ("samples", "wall_clock", "checkpoint", "resume", "curve", "workers", "controllers",
                               "ray_address", "settings", "policy", "zero_shot") if getattr(args, f)]
    if search_args and not info.learned:
        raise AutoplaceError(f"--{search_args[0].replace('_', '-')} applies to the learned methods only "
                         f"({args.method!r} is not one)")
    if (args.policy or args.zero_shot) and args.method != "gdp":
        raise AutoplaceError(f"--{'policy' if args.policy else 'zero-shot'} applies to the gdp method only")
    if args.zero_shot and not args.policy:
        raise AutoplaceError("--zero-shot places with a trained policy: give it with --policy FILE")
    if args.policy:
        input_file(args.policy, "policy file")
    if args.curve:
        for ext in (".csv", ".png"):
            _check_output(args.curve + ext, "curve")
    _check_checkpoint_folders(args)
    graph = _granular(resolve_graph(args.graph, _parse_params(args.param)), args.granularity, args.keep_whole)
    cluster = resolve_cluster(args.cluster)
    from autoplace.search.budget import time_limit

    if info.strategy and args.env != "simulated":
        raise AutoplaceError(f"{args.method} places replicas of the step, which the simulator judges: --env "
                             "measured runs placements of the step itself")
    # measured runs execute placements of the step: auto weighs no replicated strategy then
    options = {"strategies": False} if args.method == "auto" and args.env != "simulated" else {}
    with make_env(args.env, graph, cluster, **_env_kwargs(args)) as env:
        t0 = time.perf_counter()
        if info.learned:
            with time_limit(args.time_limit):
                placement = _with_progress(f"placing with {args.method}", args.json or args.output == "-",
                                           lambda: _learned_search(info, graph, cluster, env, args))
        else:
            placement = _with_progress(f"placing with {args.method}", args.json or args.output == "-",
                                       lambda: place(graph, cluster, args.method, seed=args.seed, budget=args.budget,
                                                     time_limit=args.time_limit, **options))
        refined = None
        if args.refine and placement.meta.get("strategy") is not None:
            print(f"note: {placement.method}'s placement is of the replicated step (its strategy): it is not refined",
                  file=sys.stderr)
        elif args.refine and placement.schedule is not None:
            print(f"note: {placement.method}'s placement carries a schedule (its stages' order), which moving ops "
                  "would break: it is not refined", file=sys.stderr)
        elif args.refine:
            from autoplace.placers.auto import robust_simulator
            from autoplace.placers.local_search import refine

            # under the simulator, the refine minimises the worst case over the cost model's uncertainty;
            # the time limit covers the search and its refinement together
            left = None if args.time_limit is None else max(args.time_limit - (time.perf_counter() - t0), 0.01)
            with time_limit(left):
                refined = placement = refine(graph, cluster, placement, seed=args.seed, budget=args.refine_budget,
                                             env=None if args.env == "simulated" else env,
                                             simulator=robust_simulator(graph, cluster)
                                             if args.env == "simulated" else None)
        wall = time.perf_counter() - t0
        result = simulate(graph, cluster, placement) if args.env == "simulated" else env.evaluate(placement)
    save_placement(placement, args.output, result)
    if args.json:
        _print_json({"placement": args.output, **result.to_dict()})
        return _exit_code(result)
    else:
        counts = ", ".join(f"{d}: {n}" for d, n in sorted(placement.counts().items()))
        status = "ok" if result.ok else "FAILING (" + _failure(result) + ")"
        _console(args.output == "-").print(f"{placement.method}: {args.env} step time {fmt_time(result.step_time)}, "
                         f"{status}; ops per device "
                         f"{counts}; written to {args.output}")
        if args.curve:
            _console(args.output == "-").print(f"training curve written to {args.curve}.csv and {args.curve}.png")
        _console(args.output == "-").print(_budget_line(args, placement if refined is None else None, wall,
                                                        refined), soft_wrap=True)
    return _exit_code(result)


def _budget_line(args: argparse.Namespace, placement, wall: float, refined=None) -> str:
    """What the budget bought: nominal work, the count it became, the wall time it took, why it stopped (the
    refinement's too, with ``--refine``)."""
    from autoplace.search.work import DEFAULT_BUDGET_S

    def bought(meta: dict) -> str:
        inner = meta.get("refine") if isinstance(meta.get("refine"), dict) else {}   # auto: its refinement's
        count = next((f"{m[k]:,} {k}" for m in (meta, inner) for k in ("samples", "evaluations")
                      if isinstance(m.get(k), int)), None)
        stop = meta.get("stop_reason") or meta.get("stopped_by") or inner.get("stop_reason")
        return (f" = {count}" if count else "") + (f" (stopped: {stop})" if stop else "")

    if args.wall_clock:
        spent = f"budget {args.budget if args.budget is not None else 60:g} s of wall clock"
    elif args.budget is not None or args.method in DEFAULT_BUDGET_S:
        b = args.budget if args.budget is not None else DEFAULT_BUDGET_S[args.method]
        spent = f"budget {b:g} s of nominal work"
    else:
        spent = "no budget (a one-shot placer)"
    line = spent + (bought(dict(placement.meta)) if placement is not None else "")
    if refined is not None:
        b = args.refine_budget if args.refine_budget is not None else DEFAULT_BUDGET_S["local-search"]
        line += f"; refined with {b:g} s of nominal work" + bought(dict(refined.meta))
    reduced = placement.meta.get("paper_reduced") if placement is not None else None
    return (line + f"; took {wall:.1f} s of wall clock"
            + (f"; --time-limit {args.time_limit:g} s" if args.time_limit else "")
            + (f"; paper mode ran {reduced}" if reduced else ""))


def _settings(items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` strings -> a dict: values as ``--param`` reads them (JSON, else text), and
    ``none``/``true``/``false`` in any case as JSON's null/true/false; ``-`` in a key reads as ``_``."""
    words = {"none": None, "true": True, "false": False}
    return {k.strip().replace("-", "_"): words.get(v.strip().lower(), v) if isinstance(v, str) else v
            for k, v in _parse_params(items, "--set").items()}


def _learned_search(info, graph, cluster, env, args):
    """A learned placer's search with the command line's options: ``--samples`` or ``--budget`` (nominal
    work, or wall-clock seconds with ``--wall-clock``), ``--checkpoint``/``--resume``, ``--curve``."""
    r = info.search(graph, cluster, budget=_search_budget(args), seed=args.seed, env=env, checkpoint=args.checkpoint,
                    resume=args.resume, curve_csv=args.curve and args.curve + ".csv",
                    curve_png=args.curve and args.curve + ".png", checkpoint_every_s=args.checkpoint_every,
                    workers=args.workers or 1, controllers=args.controllers, ray_address=args.ray_address,
                    env_kwargs=_env_kwargs(args), config=_settings(args.settings),
                    **({"policy": args.policy, "zero_shot_only": args.zero_shot} if args.policy else {}))
    return r.placement


def _search_budget(args: argparse.Namespace):
    """A learned search's budget from ``--samples``, ``--budget`` and ``--wall-clock``: samples (and wall-clock
    seconds), wall-clock seconds, or seconds of nominal work (``None``: the placer's default)."""
    from autoplace.search import SearchBudget

    if args.samples:
        return SearchBudget(samples=args.samples, seconds=args.budget if args.wall_clock else None)
    if args.wall_clock:
        return SearchBudget(seconds=args.budget if args.budget is not None else 60.0)
    return args.budget


def cmd_train(args: argparse.Namespace) -> int:
    from autoplace.placers.learned.gdp import gdp_train
    from autoplace.units import fmt_time

    _check_output(args.output, "policy")
    if args.curve:
        for ext in (".csv", ".png"):
            _check_output(args.curve + ext, "curve")
    names = [n for n in args.graphs.split(",") if n.strip()]
    cnames = [n for n in args.cluster.split(",") if n.strip()]
    if not names:
        raise AutoplaceError("--graphs: give at least one graph")
    if len(cnames) not in (1, len(names)):
        raise AutoplaceError(f"--cluster: give one cluster, or one per graph ({len(names)}), not {len(cnames)}")
    if args.policy:
        input_file(args.policy, "policy file")
    _check_checkpoint_folders(args)
    params = _parse_params(args.param)
    graphs = [resolve_graph(n.strip(), params) for n in names]
    clusters = [resolve_cluster(n.strip()) for n in (cnames if len(cnames) > 1 else cnames * len(names))]
    budget = _search_budget(args)
    r = _with_progress("training gdp", args.json, lambda: gdp_train(
        graphs, clusters, budget=budget, config=_settings(args.settings), seed=args.seed, policy=args.policy,
        output=args.output, checkpoint=args.checkpoint, resume=args.resume,
        curve_csv=args.curve and args.curve + ".csv", curve_png=args.curve and args.curve + ".png",
        checkpoint_every_s=args.checkpoint_every, workers=args.workers or 1, ray_address=args.ray_address))
    steps = r.extra["best_steps_s"]
    if args.json:
        _print_json({"policy": args.output, "samples": r.samples, "updates": r.updates, "stop_reason": r.stop_reason,
                     "graphs": [{"graph": g.name, "cluster": c.name, "best_step_s": _finite_or_none(s)}
                                for g, c, s in zip(graphs, clusters, steps)]})
    else:
        con = _console(False)
        for g, c, s in zip(graphs, clusters, steps):
            con.print(f"{g.name} on {c.name}: best step {fmt_time(s) if math.isfinite(s) else 'none ran'}")
        con.print(f"{r.samples} samples, {r.updates} updates ({r.stop_reason}); policy written to {args.output}")
    return 0


def _spinner(title: str, quiet: bool):
    """A spinner on standard error while long work runs with nothing to count (capture, a zoo export);
    nothing when it is not a terminal."""
    import contextlib

    if quiet or not sys.stderr.isatty():
        return contextlib.nullcontext()
    return _console(True).status(f"{title} …")


def _with_progress(title: str, quiet: bool, work):
    """Run ``work()`` showing a progress bar on a terminal, fed by the searches' progress reports; where
    standard error is a log or a pipe, plain lines (:class:`~autoplace.progress.PlainLines`: a search's
    first report, then one every 10 s; nothing from work that reports nothing)."""
    from rich.progress import Progress

    from autoplace.progress import PlainLines, progress_to

    if not quiet and not sys.stderr.isatty():
        lines = PlainLines()
        lines.stage(title, write=False)
        with progress_to(lines):
            return work()
    with Progress(transient=True, disable=quiet or not sys.stderr.isatty(), console=_console(True)) as bar:
        task = bar.add_task(title, total=1.0)

        def update(message: str, fraction: float | None) -> None:
            bar.update(task, description=message, **({} if fraction is None else {"completed": fraction}))

        with progress_to(update):
            return work()


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from autoplace.comparison import auto_choice, compare, row_note, speedup
    from autoplace.placers import available_placers, get_placer
    from autoplace.units import fmt_bytes, fmt_ratio, fmt_time

    _check_output(args.plot, "plot")
    for m in args.methods or ():
        get_placer(m)
    graph = _granular(resolve_graph(args.graph, _parse_params(args.param)), args.granularity, args.keep_whole)
    cluster = resolve_cluster(args.cluster)
    # by default every placer but the learned ones; the strategies where the simulator scores a step it can
    # re-capture with micro-batches (a graph file has no capture to replicate)
    strategies = getattr(args, "env", "simulated") == "simulated" and can_replicate(graph)
    methods = args.methods or ["auto", *(m for m in available_placers(include_learned=False,
                                                                      include_strategies=strategies) if m != "auto")]
    _note_estimates(cluster)
    with Progress(transient=True, disable=args.json or args.markdown or not sys.stderr.isatty(),
                  console=_console(True)) as bar:
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
            from autoplace.env import make_env

            env = make_env("measured", graph, cluster, **_env_kwargs(args))
        try:
            from autoplace.progress import progress_to

            def done(row) -> None:                 # each row as it comes, above the bar (a terminal only)
                if not bar.disable:
                    step = fmt_time(row.step_time) if row.error is None else (row.error or "")[:60]
                    bar.console.print(f"{row.method}: {step}  ({row.wall_time_s:.1f} s)", highlight=False)

            maps = {f"device map {Path(f).name}": _placement_or_map(f, graph, cluster) for f in args.device_map}
            with progress_to(search):
                result = compare(graph, cluster, methods, seed=args.seed, budget=args.budget, progress=advance,
                                 env=env, on_row=done, time_limit=args.time_limit, placements=maps)
        finally:
            if env != "simulated":
                env.close()
    rows, bounds = result.rows, result.bounds
    gpu_time, expert_time = result.step_time("single-gpu"), result.step_time("expert")
    why = auto_choice(result)

    def note_of(r) -> str:
        note = _range_note(result.ranges.get(r.method), row_note(r))
        extra = ("auto's pick" if why is not None and r.method == why.picked else
                 f"chosen by regret: {why.note}" if why is not None and r.method == "auto" and why.note else "")
        return "; ".join(x for x in (note, extra) if x)

    names = cluster.device_names
    if args.plot:
        from autoplace.plots import comparison_png

        comparison_png(result, args.plot, title=f"{graph.name} ({graph.n_ops} ops) on {cluster.name}")

    if args.json:
        _print_json({"graph": graph.name, "cluster": cluster.name, "ops": graph.n_ops, "env": result.env,
                     "bounds": {"critical_path_s": bounds.critical_path, "load_s": bounds.load,
                                "cp_sat_s": bounds.cp_sat, "best_s": bounds.best, "launches_s": bounds.launches,
                                "no_gap": bounds.meaningless, "of": "the simulated step"},
                     "rows": [
            {"method": r.method, **_result_dict(r.result, result.env, r.error),
             "speedup_vs_single_gpu": _finite_or_none(speedup(gpu_time, r.step_time)),
             "speedup_vs_expert": _finite_or_none(speedup(expert_time, r.step_time)),
             "gap_to_bound": _finite_or_none(result.gap(r)),
             "uncertainty": result.ranges[r.method].to_dict() if r.method in result.ranges else None,
             "search_time_s": r.search_time_s, "wall_time_s": _finite_or_none(r.wall_time_s),
             "details": _jsonable(r.details), "note": note_of(r),
             **({"regret": why.regrets.get(r.method)} if why is not None else {})}
            for r in rows],
                     "auto_choice": None if why is None else {"picked": why.picked, "faster": why.faster,
                                                              "scenario": why.scenario, "note": why.note}})
        return _compare_exit(rows)
    header = ["method", "step time", "range", "vs single-gpu", "vs expert", "gap to bound",
              *[f"peak {n}" for n in names], "status", "search"]
    table_rows = []
    for r in rows:
        if r.result is None:
            why = r.error if r.error.startswith("skipped") else f"no placement: {r.error}"
            table_rows.append([r.method, "-", "-", "-", "-", "-", *["-"] * len(names), why,
                               fmt_time(r.search_time_s)])
            continue
        status = _failure(r.result) if not r.result.ok else "ok"
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
    if args.markdown:
        print(markdown_table(header, table_rows))
        print(f"\n{footer}")
        return _compare_exit(rows)
    from rich.table import Table

    table = Table(title=f"{graph.name} ({graph.n_ops} ops) on {cluster.name}: {args.env} training step",
                  caption=footer)
    for col in header:
        table.add_column(col, justify="left" if col in ("method", "status") else "right")
    for row in table_rows:
        table.add_row(*row)
    _console().print(table)
    return _compare_exit(rows)


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


def _jsonable(x: Any) -> Any:
    """Placer metadata as plain JSON: non-finite numbers become null, numpy scalars plain numbers."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def _failure(result: Any) -> str:
    """Why a result is failing: the run's error, or the devices out of memory."""
    from autoplace.comparison import failure_reason

    return failure_reason(result)
