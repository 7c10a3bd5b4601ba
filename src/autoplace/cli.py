"""The ``autoplace`` command line.

Every verb that takes GRAPH accepts a graph file (``.json`` or ``.json.gz``) or a built-in model name
(``autoplace zoo list``); CLUSTER is a cluster file or a preset (``autoplace clusters``). Bad input
prints one line ``autoplace: error: ...`` and exits 2 (3: no feasible placement); outputs are written
only after everything succeeded, atomically.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from autoplace import __version__
from autoplace.cluster import CLUSTER_PRESETS, Cluster, get_cluster
from autoplace.errors import AutoplaceError, FormatError
from autoplace.graph import Graph
from autoplace.resolve import resolve_cluster, resolve_graph
from autoplace.runtime.workers import DEFAULT_TIMEOUT_S

__all__ = ["main", "resolve_graph", "resolve_cluster"]


def markdown_table(header, rows) -> str:
    """A Markdown table (the ``--markdown`` output of the comparison tables)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------- argument resolution

def _parse_params(pairs: list[str] | None, option: str = "--param") -> dict[str, Any]:
    """``KEY=VALUE`` strings -> a dict, each value read as JSON where it parses, else as text."""
    params: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise FormatError(f"{option} {pair!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


EXIT_FAILING = 1
"""Exit code of ``place``, ``simulate`` and ``measure`` when the placement fails (out of memory, a failed
run); what they write is written all the same. 2: bad input; 3: no feasible placement exists."""


def _written(args, graph: Graph | None = None, **extra) -> bool:
    """With ``--json``: print what was written (the output path, the graph's size, ``extra``) as JSON and
    return True (the caller prints nothing else); without, False."""
    if not getattr(args, "json", False):
        return False
    out: dict[str, Any] = {"output": args.output}
    if graph is not None:
        out.update(graph=graph.name, ops=graph.n_ops, edges=graph.n_edges, param_bytes=int(graph.total_param_bytes),
                   flops=float(graph.total_flops))
    _print_json({**out, **extra})
    return True


def _check_json_output(args) -> None:
    if getattr(args, "json", False) and args.output == "-":
        raise FormatError("--json prints a summary on standard output: write the file with -o FILE, not -")


def _exit_code(result) -> int:
    return 0 if result.ok else EXIT_FAILING


def _note_other_cluster(placement, cluster: Cluster) -> None:
    """One line on standard error when a placement made for another cluster is scored on this one."""
    if placement.cluster != cluster.name:
        _console(True).print(f"note: placement made for cluster {placement.cluster!r}, scored on {cluster.name!r}")


def _granular(graph: Graph, granularity: str) -> Graph:
    """``graph`` at the placement granularity of ``--granularity`` (module: a module's parameters, tied ones
    and its ops kept together, so that the placement exports as a device_map)."""
    from autoplace.grouping import with_granularity

    return with_granularity(graph, granularity)


def _add_granularity(p: argparse.ArgumentParser) -> None:
    p.add_argument("--granularity", choices=("op", "module"), default="op",
                   help="op (default): place every op; module: keep each module with parameters whole (its "
                        "parameters, tied ones, optimizer state and ops on one device), so that the placement "
                        "exports as an Accelerate device_map")


def _check_output(path: str | None, what: str = "output") -> None:
    """Fail early (before any work) where ``path`` cannot be written: empty, a folder, in a folder that does
    not exist or cannot be written to. ``-`` (standard output) is fine."""
    if path is None or path == "-":
        return
    if not path:
        raise FormatError(f"the {what} path is empty")
    p = Path(path)
    if p.is_dir():
        raise FormatError(f"{path}: is a folder, not a file to write the {what} to")
    parent = Path(os.path.realpath(p)).parent if p.is_symlink() else (p.parent if str(p.parent) else Path("."))
    if not parent.is_dir():
        raise FormatError(f"{path}: folder {str(parent)!r} does not exist")
    if not p.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise FormatError(f"{path}: folder {str(parent)!r} is not writable")


def _console(to_stderr: bool = False):
    """Where messages go: standard output (standard error when the output file itself is ``-``). User
    strings (graph, op, device names) are printed as they are: no markup, no emoji codes."""
    from rich.console import Console

    # A pipe or a CI log gets a wide table rather than rich's 80-column default.
    stream = sys.stderr if to_stderr else sys.stdout
    return Console(file=stream, highlight=False, markup=False, emoji=False,
                   width=None if stream.isatty() else 160)


def _bold(*parts):
    """A line with some parts styled: ``_bold("a ", ("b", "bold"))``."""
    from rich.text import Text

    return Text.assemble(*parts)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, allow_nan=False, default=_json_default))


def _json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


# ---------------------------------------------------------------------- verbs
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
    from autoplace.formats import load_placement, write_json
    from autoplace.sim import simulate
    from autoplace.sim.trace import chrome_trace
    from autoplace.units import fmt_bytes, fmt_time

    _check_output(args.trace)
    _check_output(args.plot, "plot")
    graph = resolve_graph(args.graph, _parse_params(args.param))
    cluster = resolve_cluster(args.cluster)
    placement = load_placement(args.placement)
    result = simulate(graph, cluster, placement, trace=bool(args.trace or args.plot))
    if args.plot:
        from autoplace.plots import step_png

        step_png(graph, cluster, result, args.plot,
                 title=f"{graph.name} on {cluster.name} ({placement.method}): where the step's time goes")
    _note_other_cluster(placement, cluster)
    if args.trace:
        write_json(args.trace, chrome_trace(graph, cluster, result), indent=None)
    rng = None
    if result.ok:
        from autoplace.placers.auto import uncertainty

        rng = uncertainty(graph, cluster, [placement])[0]
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
    if args.policy and not Path(args.policy).is_file():
        raise FormatError(f"--policy {args.policy}: no such file")
    if args.curve:
        for ext in (".csv", ".png"):
            _check_output(args.curve + ext, "curve")
    for option, folder in (("--checkpoint", args.checkpoint), ("--resume", args.resume)):
        if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
            raise FormatError(f"{option} {folder}: is a file, not a folder for the checkpoint")
    graph = _granular(resolve_graph(args.graph, _parse_params(args.param)), args.granularity)
    cluster = resolve_cluster(args.cluster)
    with make_env(args.env, graph, cluster, **_env_kwargs(args)) as env:
        if info.learned:
            placement = _with_progress(f"placing with {args.method}", args.json or args.output == "-",
                                       lambda: _learned_search(info, graph, cluster, env, args))
        else:
            placement = _with_progress(f"placing with {args.method}", args.json or args.output == "-",
                                       lambda: place(graph, cluster, args.method, seed=args.seed, budget=args.budget))
        if args.refine:
            from autoplace.placers.auto import robust_simulator
            from autoplace.placers.local_search import refine

            # under the simulator, the refine minimises the worst case over the cost model's uncertainty
            placement = refine(graph, cluster, placement, seed=args.seed, budget=args.refine_budget,
                               env=None if args.env == "simulated" else env,
                               simulator=robust_simulator(graph, cluster) if args.env == "simulated" else None)
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
    return _exit_code(result)


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
    from autoplace.placers.gdp import gdp_train
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
    if args.policy and not Path(args.policy).is_file():
        raise FormatError(f"--policy {args.policy}: no such file")
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
    """Run ``work()`` showing a progress bar on a terminal, fed by the searches' progress reports."""
    from rich.progress import Progress

    from autoplace.progress import progress_to

    with Progress(transient=True, disable=quiet or not sys.stderr.isatty(), console=_console(True)) as bar:
        task = bar.add_task(title, total=1.0)

        def update(message: str, fraction: float | None) -> None:
            bar.update(task, description=message, **({} if fraction is None else {"completed": fraction}))

        with progress_to(update):
            return work()


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from autoplace.comparison import compare, row_note, speedup
    from autoplace.placers import available_placers, get_placer
    from autoplace.units import fmt_bytes, fmt_ratio, fmt_time

    _check_output(args.plot, "plot")
    methods = args.methods or ["auto", *(m for m in available_placers(include_learned=False) if m != "auto")]
    for m in methods:
        get_placer(m)
    graph = _granular(resolve_graph(args.graph, _parse_params(args.param)), args.granularity)
    cluster = resolve_cluster(args.cluster)
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

            with progress_to(search):
                result = compare(graph, cluster, methods, seed=args.seed, budget=args.budget, progress=advance,
                                 env=env)
        finally:
            if env != "simulated":
                env.close()
    rows, bounds = result.rows, result.bounds
    gpu_time, expert_time = result.step_time("single-gpu"), result.step_time("expert")
    names = cluster.device_names
    if args.plot:
        from autoplace.plots import comparison_png

        comparison_png(result, args.plot, title=f"{graph.name} ({graph.n_ops} ops) on {cluster.name}")

    if args.json:
        _print_json({"graph": graph.name, "cluster": cluster.name, "ops": graph.n_ops, "env": result.env,
                     "bounds": {"critical_path_s": bounds.critical_path, "load_s": bounds.load,
                                "cp_sat_s": bounds.cp_sat, "best_s": bounds.best,
                                "of": "the simulated step"},
                     "rows": [
            {"method": r.method, **_result_dict(r.result, result.env, r.error),
             "speedup_vs_single_gpu": _finite_or_none(speedup(gpu_time, r.step_time)),
             "speedup_vs_expert": _finite_or_none(speedup(expert_time, r.step_time)),
             "gap_to_bound": _finite_or_none(result.gap(r)),
             "uncertainty": result.ranges[r.method].to_dict() if r.method in result.ranges else None,
             "search_time_s": r.search_time_s, "wall_time_s": _finite_or_none(r.wall_time_s),
             "details": _jsonable(r.details), "note": _range_note(result.ranges.get(r.method), row_note(r))}
            for r in rows]})
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
        note = _range_note(rng, row_note(r))
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
              + ("; gap = step time / best bound - 1" if result.env == "simulated"
                 else "; measured steps are not bounded by them, so no gap is shown"))
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
        return result.to_dict()
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
    error = getattr(result, "error", None)
    return error if error else "OOM: " + ", ".join(result.oom_devices)


def _env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"steps": args.steps, "timeout": args.timeout} if args.env == "measured" else {}


def cmd_measure(args: argparse.Namespace) -> int:
    from autoplace.formats import load_placement
    from autoplace.runtime import measure
    from autoplace.sim import simulate
    from autoplace.units import fmt_bytes, fmt_time

    graph = resolve_graph(args.graph, _parse_params(args.param))
    cluster = resolve_cluster(args.cluster)
    placement = load_placement(args.placement)
    placement.to_array(graph, cluster)  # validate before starting workers (the pool decodes the graph first)
    _note_other_cluster(placement, cluster)
    predicted = simulate(graph, cluster, placement)
    result = measure(graph, cluster, placement, steps=args.steps, timeout=args.timeout, seed=args.data_seed)
    if args.json:
        _print_json({"graph": graph.name, "cluster": cluster.name, "method": placement.method,
                     "simulated_step_time_s": predicted.step_time, **result.to_dict()})
        return _exit_code(result)
    con = _console()
    if not result.ok:
        con.print(_bold((graph.name, "bold"), " on ", (cluster.name, "bold"), f" ({placement.method}): ",
                        ("FAILING", "bold red"), f": {_failure(result)}"))
        return _exit_code(result)
    steps = np.asarray(result.step_times[1:] if len(result.step_times) > 1 else result.step_times)
    con.print(_bold((graph.name, "bold"), " on ", (cluster.name, "bold"), f" ({placement.method}): measured step "
                    "time ", (fmt_time(result.step_time), "bold"),
                    (f" (mean of {len(steps)} steps after the first: min {fmt_time(steps.min())}, median "
                     f"{fmt_time(float(np.median(steps)))}, max {fmt_time(steps.max())}" if len(result.step_times) > 1
                     else " (one step)") + f"; simulated {fmt_time(predicted.step_time)})"))
    con.print(_sim_table(graph, cluster, result, title=""))
    con.print(f"{result.n_transfers} transfers per step, {fmt_bytes(result.transfer_bytes)}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from rich.console import Console

    from autoplace.formats import save_graph
    from autoplace.runtime.profile import profile_graph

    _check_output(args.output)
    _check_json_output(args)
    graph = resolve_graph(args.graph, _parse_params(args.param))
    cluster = resolve_cluster(args.cluster)
    devices = [d.strip() for d in args.devices.split(",")] if args.devices else None
    for d in devices or []:
        cluster.index(d)
    err = Console(stderr=True, highlight=False)
    with err.status("profiling") as status:
        profiled = profile_graph(graph, cluster, steps=args.steps, rounds=args.rounds, devices=devices,
                                 progress=lambda what: status.update(f"profiling {graph.name} on {what}"))
    save_graph(profiled, args.output)
    from autoplace.units import fmt_time

    if _written(args, profiled, profiled=profiled.meta["profiled"]):
        return 0
    for dtype, info in profiled.meta["profiled"].items():
        _console(args.output == "-").print(f"{graph.name}: {graph.n_ops} ops timed on {info['device']} ({dtype}): "
                         f"{fmt_time(info['step_s'])} per step -> {args.output}")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    from rich.console import Console

    from autoplace.formats import cluster_to_dict, save_cluster
    from autoplace.units import fmt_flops, fmt_rate, fmt_time

    _check_output(args.output)
    from autoplace.runtime.profile import detect_cluster, speed_warnings

    base = resolve_cluster(args.base) if args.base else None
    err = Console(stderr=True, highlight=False)
    with err.status("measuring") as status:
        cluster = detect_cluster(base, repeats=args.repeats,
                                 progress=lambda what: status.update(f"measuring {what}"))
    for line in speed_warnings(cluster):
        _console(True).print(line)
    if args.output:
        save_cluster(cluster, args.output)
    if args.json:
        _print_json(cluster_to_dict(cluster))
        return 0
    con = _console(args.output == "-")
    for d in cluster.devices:
        send, recv = d.engines
        con.print(f"{d.name}: {fmt_flops(d.peak_flops)}/s matmul, {fmt_rate(d.memory_bandwidth)} copy, "
                  f"{fmt_time(d.op_overhead_s)} per op, "
                  f"sends at {fmt_rate(1 / d.send_cost_s_per_byte) if d.send_cost_s_per_byte else '-'}, "
                  f"{fmt_time(d.send_overhead_s)} per tensor sent, {fmt_time(d.recv_overhead_s)} per tensor received, "
                  f"{send or 'unlimited'} send / {recv or 'unlimited'} receive at once")
    for ln in cluster.links:
        con.print(f"{ln.src} -> {ln.dst}: latency {fmt_time(ln.latency_s)}")
    if args.output:
        con.print(f"written to {args.output}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autoplace.formats import load_placement, write_json
    from autoplace.runtime.export import device_map, export_python

    _check_output(args.output)
    _check_output(args.device_map)
    _check_json_output(args)
    placement = load_placement(args.placement)
    graph = resolve_graph(args.graph, _parse_params(args.param))
    cluster = resolve_cluster(args.cluster or placement.cluster)
    source = export_python(graph, placement, cluster)
    dmap = device_map(graph, placement, cluster) if args.device_map else None
    from autoplace.formats._json import atomic_write_text

    atomic_write_text(args.output, source)
    if dmap is not None:
        write_json(args.device_map, dmap)
    if _written(args, None, lines=len(source.splitlines()), device_map=args.device_map, device_map_entries=dmap):
        return 0
    _console(args.output == "-").print(f"placed program ({len(source.splitlines())} lines) -> {args.output}"
                     + (f"; device_map ({len(dmap)} entries) -> {args.device_map}" if dmap is not None else ""))
    return 0


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def cmd_report(args: argparse.Namespace) -> int:
    from autoplace.formats import load_placement
    from autoplace.formats._json import atomic_write_text
    from autoplace.htmlreport import placement_report

    _check_output(args.output)
    if args.png:
        _check_output(f"{args.png}.step.png", "--png chart")
    _check_json_output(args)
    graph = resolve_graph(args.graph, _parse_params(args.param))
    placement = load_placement(args.placement)
    cluster = resolve_cluster(args.cluster or placement.cluster)
    curve = None
    if args.curve:
        from autoplace.search.curve import Curve

        curve = Curve.read_csv(args.curve)
    comparison = None
    if args.compare:
        from autoplace.comparison import compare

        comparison = _with_progress("compare", args.json, lambda: compare(
            graph, cluster, args.compare, seed=args.seed, budget=args.budget))
    from autoplace.sim import simulate

    result = simulate(graph, cluster, placement, trace=True)
    page = placement_report(graph, cluster, placement, curve=curve, comparison=comparison, result=result)
    pngs = []
    if args.png:
        from autoplace.htmlreport import report_pngs

        pngs = report_pngs(graph, cluster, placement, args.png, curve=curve, comparison=comparison, result=result)
    atomic_write_text(args.output, page)
    if _written(args, graph, bytes=len(page.encode()), pngs=pngs):
        return 0
    for path in pngs:
        _console(args.output == "-").print(f"chart -> {path}")
    _console(args.output == "-").print(f"report of {placement.method} on {cluster.name} ({len(page) // 1024} KiB) -> "
                                       f"{args.output} (open it in a browser)")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from rich.progress import Progress

    from autoplace.bench import FULL, QUICK, TABLES, run_bench, table_names
    from autoplace.bench.suite import nominal_work, table_settings
    from autoplace.progress import progress_to

    budgets = QUICK if args.quick else FULL
    if args.budget is not None:
        budgets = replace(budgets, search=args.budget)
    if args.learned_budget is not None:
        budgets = replace(budgets, learned=args.learned_budget)
    if args.list:
        listing, every = [], {}
        for n in table_names(args.tables):
            t = TABLES[n]
            settings = table_settings(t, args.quick, tuple(args.graph))
            jobs = t.jobs(settings, budgets, args.seed)
            every.update(dict.fromkeys(jobs))
            listing.append({"name": n, "title": t.title, "settings": [s.key for s in settings], "jobs": len(jobs),
                            "search_budget_s": sum(nominal_work(j) for j in jobs)})
        if args.json:
            _print_json(listing)
            return 0

        def hours(s: float) -> str:
            return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"

        for t in listing:
            _console().print(_bold((t["name"], "bold"), f"  {t['title']}: {len(t['settings'])} settings, "
                                   f"{t['jobs']} jobs, {hours(t['search_budget_s'])} of search budget"))
        _console().print(f"all: {len(every)} jobs (a job two tables share runs once), "
                         f"{hours(sum(nominal_work(j) for j in every))} of search budget")
        return 0
    for g in args.graph:
        resolve_graph(g)                 # an unknown graph is one clear error before any job runs
    quiet = args.json or not sys.stderr.isatty()
    with Progress(disable=quiet, console=_console(True)) as bar:
        task = bar.add_task("bench", total=None)
        state = {"label": "", "done": 0}

        def on_job(done: int, total: int, label: str) -> None:
            state.update(label=label, done=done)
            bar.update(task, total=max(total, 1), completed=done, description=label)

        def on_search(message: str, fraction: float | None) -> None:
            bar.update(task, description=f"{state['label']}: {message}",
                       completed=state["done"] + (fraction or 0.0))

        try:
            with progress_to(on_search):
                result = run_bench(args.output, tables=args.tables, quick=args.quick, graphs=args.graph,
                                   seed=args.seed, budgets=budgets, progress=on_job)
        except KeyboardInterrupt:
            print(f"autoplace: interrupted; finished jobs are kept in {args.output}/jobs.jsonl: run the same "
                  "command to continue", file=sys.stderr)
            return 130
    if args.json:
        _print_json({"folder": str(result.folder), "ran": result.ran, "reused": result.reused,
                     "wall_s": result.wall_s, "tables": [t.to_dict() for t in result.tables]})
        return 0
    con = _console()
    for t in result.tables:
        con.print(_bold((t.title, "bold"), f" -> {result.folder / t.name}.md, .json, .png"))
    con.print(f"{result.ran} jobs run, {result.reused} from earlier runs, {result.wall_s:.0f} s; "
              f"index: {result.folder / 'README.md'}")
    return 0


def cmd_zoo(args: argparse.Namespace) -> int:
    from autoplace.formats import save_graph
    from autoplace.zoo import build_graph, get_model, zoo_names

    if args.zoo_cmd == "export":
        _check_output(args.output)
        _check_json_output(args)
        get_model(args.name)
        with _spinner(f"building {args.name}", args.output == "-" or args.json):
            graph = build_graph(args.name, **_parse_params(args.param))
        save_graph(graph, args.output)
        if _written(args, graph):
            return 0
        _console(args.output == "-").print(f"{args.name}: {graph.n_ops} ops, {graph.n_edges} edges -> {args.output}")
        return 0
    if args.json:
        _print_json([{"name": n, "description": get_model(n).description, "paper": get_model(n).paper,
                      "defaults": get_model(n).defaults} for n in zoo_names()])
        return 0
    from rich.table import Table

    table = Table(title="built-in graphs")
    for col in ("name", "description", "parameters"):
        table.add_column(col)
    for n in zoo_names():
        info = get_model(n)
        table.add_row(n, info.description, ", ".join(f"{k}={v}" for k, v in info.defaults.items()))
    _console().print(table)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from autoplace.capture.onnx_import import import_onnx
    from autoplace.formats import save_graph
    from autoplace.units import fmt_bytes, fmt_flops

    _check_output(args.output)
    _check_json_output(args)
    graph = import_onnx(args.model, name=args.name)
    save_graph(graph, args.output)
    if _written(args, graph):
        return 0
    _console(args.output == "-").print(f"{graph.name}: {graph.n_ops} ops, {graph.n_edges} edges, "
                     f"{fmt_bytes(graph.total_param_bytes)} of parameters, {fmt_flops(graph.total_flops)} "
                     f"per forward pass -> {args.output}")
    return 0


CAPTURE_HELP = """Capture one training step of a PyTorch model (forward, backward, the optimizer's update) as a graph.

FACTORY is MODULE:FUNCTION (a module importable from the current directory) or FILE.py:FUNCTION. The
function takes no arguments and returns (model, example_inputs, loss_fn, optimizer[, targets]), or a
dict with those keys (inputs for example_inputs):
  model           an nn.Module instance, or a torch.export ExportedProgram (its example inputs by default)
  example_inputs  one batch: a tensor, a tuple of positional arguments, a dict of keyword arguments
                  (model(**inputs), as Hugging Face models take them), or (args, kwargs)
  loss_fn         loss_fn(outputs, *targets) -> a scalar tensor
  optimizer       a torch.optim optimizer instance over the model's parameters
  targets         a tensor or a tuple of them, passed to loss_fn after the outputs
Nothing is computed: the step is traced on fake tensors.

  # mymodels.py
  def make_step():
      model = MyNet()
      return model, torch.randn(32, 3, 224, 224), nn.functional.cross_entropy, \\
          torch.optim.SGD(model.parameters(), lr=0.1), torch.randint(0, 1000, (32,))

  autoplace capture mymodels:make_step -o mine.json.gz
"""


def cmd_capture(args: argparse.Namespace) -> int:
    from autoplace.capture import capture_from_factory
    from autoplace.formats import save_graph
    from autoplace.units import fmt_bytes, fmt_flops

    _check_output(args.output)
    _check_json_output(args)
    with _spinner(f"capturing {args.factory}", args.output == "-" or args.json):
        graph = capture_from_factory(args.factory, inference=args.inference, name=args.name)
    save_graph(graph, args.output)
    if _written(args, graph, phases={p: sum(op.phase == p for op in graph.ops)
                                     for p in ("forward", "backward", "update")}):
        return 0
    phases = {p: sum(op.phase == p for op in graph.ops) for p in ("forward", "backward", "update")}
    _console(args.output == "-").print(f"{graph.name}: {graph.n_ops} ops "
                     f"({', '.join(f'{n} {p}' for p, n in phases.items() if n)}), "
                     f"{graph.n_edges} edges, {fmt_bytes(graph.total_param_bytes)} resident, "
                     f"{fmt_flops(graph.total_flops)} per step -> {args.output}")
    return 0


# ---------------------------------------------------------------------- parser
def _add_graph_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", metavar="GRAPH", help="graph file (.json/.json.gz) or built-in model name")
    p.add_argument("--cluster", "-c", required=True, metavar="CLUSTER", help="cluster file or preset name")
    p.add_argument("--param", "-P", action="append", metavar="KEY=VALUE",
                   help="parameter of a built-in model (repeatable), e.g. -P batch=32")


def _arg_type(parse, ok, expected: str):
    """An argparse type: ``parse(text)`` must succeed and satisfy ``ok``, else a one-line error."""
    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return convert


_positive_int = _arg_type(int, lambda v: v >= 1, "a positive integer")
_seconds = _arg_type(float, lambda v: np.isfinite(v) and v >= 0, "a finite number of seconds >= 0")
_positive_seconds = _arg_type(float, lambda v: np.isfinite(v) and v > 0, "a positive number of seconds")
_seed = _arg_type(int, lambda v: 0 <= v < 2**32, f"an integer seed in [0, {2**32 - 1}]")


def _method_list(text: str) -> list[str]:
    """Comma-separated placer names, none empty."""
    methods = [m.strip() for m in text.split(",")]
    if not text.strip() or any(not m for m in methods):
        raise argparse.ArgumentTypeError(f"expected comma-separated method names, got {text!r}")
    return methods


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``autoplace place: error: ...``) like every other error here."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def _add_placement_output_args(p: argparse.ArgumentParser, graph_help: str, output: str, output_help: str) -> None:
    """GRAPH, a placement file, its cluster (default: the placement's), and a file to write (``export``,
    ``report``)."""
    p.add_argument("graph", metavar="GRAPH", help=graph_help)
    p.add_argument("--placement", "-p", required=True, metavar="P", help="placement file")
    p.add_argument("--cluster", "-c", metavar="CLUSTER", help="cluster (default: the placement's, a preset)")
    p.add_argument("--param", "-P", action="append", metavar="KEY=VALUE", help="parameter of a built-in model")
    p.add_argument("--output", "-o", required=True, metavar=output, help=output_help)
    p.add_argument("--json", action="store_true", help="print what was written as JSON")


def _add_env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", choices=("simulated", "measured"), default="simulated",
                   help="score placements with the simulator (default) or by real runs on this machine")
    p.add_argument("--steps", type=_positive_int, default=10, help="measured env: steps per run (the first is dropped)")
    p.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT_S,
                   help="measured env: seconds before a run fails")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autoplace", description="Device placement for ML dataflow graphs.")
    parser.add_argument("--version", action="version", version=f"autoplace {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("simulate", help="simulate one training step of a placement")
    _add_graph_args(p)
    p.add_argument("--placement", "-p", required=True, metavar="P", help="placement file")
    p.add_argument("--trace", metavar="OUT", help="write the timeline as a Chrome trace (Perfetto)")
    p.add_argument("--plot", metavar="FILE.png", help="draw compute time per device by phase, memory-copy time per "
                                                       "device pair and peak memory against capacity")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("place", help="place a graph with a method and write the placement")
    _add_graph_args(p)
    p.add_argument("--method", "-m", default="auto",
                   help="placement method (default auto: every fast placer, the best refined; see 'autoplace compare')")
    p.add_argument("--output", "-o", required=True, metavar="P", help="placement file to write")
    p.add_argument("--seed", type=_seed, default=0, help="the placer's seed (default 0)")
    p.add_argument("--budget", type=_seconds, default=None,
                   help="search budget, about seconds (auto: 60); searches count it as work (CP-SAT's deterministic "
                        "time, local search's evaluations), so results do not depend on machine load")
    p.add_argument("--refine", action="store_true", help="improve the result by local search under the simulator "
                   "(its worst case over the cost model's uncertainty)")
    _add_granularity(p)
    p.add_argument("--refine-budget", type=_seconds, default=None,
                   help="local-search budget, about seconds of simulation (default 10)")
    g = p.add_argument_group("search methods (rl, hdp, gdp, htf-mpr)")
    g.add_argument("--samples", type=_positive_int, default=None,
                   help="stop after this many sampled placements (reproducible for a seed)")
    g.add_argument("--wall-clock", action="store_true", help="--budget is wall-clock seconds, not nominal work")
    g.add_argument("--checkpoint", metavar="DIR", default=None, help="checkpoint the search into DIR")
    g.add_argument("--checkpoint-every", type=_seconds, default=30.0, metavar="S",
                   help="seconds between checkpoints (default 30)")
    g.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the search checkpointed in DIR (and keep checkpointing there)")
    g.add_argument("--curve", metavar="PREFIX", default=None,
                   help="write the training curve to PREFIX.csv and PREFIX.png")
    g.add_argument("--workers", type=_positive_int, default=None,
                   help="evaluation workers; more than 1 runs the search distributed on Ray "
                   "(local unless --ray-address)")
    g.add_argument("--controllers", type=_positive_int, default=None,
                   help="distributed: controllers, each with its own baseline (default: one per 8 workers)")
    g.add_argument("--ray-address", metavar="A", default=None, help="join the Ray cluster at A (host:port or auto)")
    g.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the search method's config (RLConfig, HDPConfig, GDPConfig, HTFMPRConfig: "
                        "docs/algorithms.md), repeatable")
    g.add_argument("--policy", metavar="FILE", default=None,
                   help="gdp: start from this trained policy ('autoplace train') and fine-tune it")
    g.add_argument("--zero-shot", action="store_true", help="gdp: place with --policy as it is, without training")
    _add_env_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_place)

    p = sub.add_parser("train", help="train one GDP policy over several graphs (and save it)")
    p.add_argument("--graphs", required=True, metavar="A,B,C", help="graph files or built-in model names")
    p.add_argument("--cluster", "-c", required=True, metavar="C[,C2,...]",
                   help="cluster file or preset, one for all graphs or one per graph")
    p.add_argument("--param", "-P", action="append", metavar="KEY=VALUE", help="parameter of the built-in models")
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="policy file to write")
    p.add_argument("--policy", metavar="FILE", default=None, help="start from this policy")
    p.add_argument("--seed", type=_seed, default=0, help="the search's seed (default 0)")
    p.add_argument("--budget", type=_seconds, default=None, help="about seconds of work (default 60), or wall-clock "
                                                                   "seconds with --wall-clock")
    p.add_argument("--samples", type=_positive_int, default=None, help="stop after this many samples (all graphs)")
    p.add_argument("--wall-clock", action="store_true", help="--budget is wall-clock seconds, not nominal work")
    p.add_argument("--checkpoint", metavar="DIR", default=None, help="checkpoint the search into DIR")
    p.add_argument("--checkpoint-every", type=_seconds, default=30.0, metavar="S", help="seconds between checkpoints")
    p.add_argument("--resume", metavar="DIR", default=None, help="continue the search checkpointed in DIR")
    p.add_argument("--curve", metavar="PREFIX", default=None, help="write the training curve to PREFIX.csv/.png")
    p.add_argument("--workers", type=_positive_int, default=None, help="score samples on this many Ray workers")
    p.add_argument("--ray-address", metavar="A", default=None, help="join the Ray cluster at A")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a GDPConfig setting (docs/algorithms.md), repeatable")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("compare", help="compare placement methods on one graph and cluster")
    _add_graph_args(p)
    p.add_argument("--methods", type=_method_list, help="comma-separated methods (default: all, auto first)")
    p.add_argument("--seed", type=_seed, default=0, help="every placer's seed (default 0)")
    p.add_argument("--budget", type=_seconds, default=None,
                   help="search budget per method, about seconds (counted as work, see 'place --help')")
    _add_granularity(p)
    _add_env_args(p)
    p.add_argument("--plot", metavar="FILE.png", help="also draw step time per method (with the bound) and each "
                                                       "method's peak memory per device against capacity")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--markdown", action="store_true")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("measure", help="run a placement on this machine's devices and measure its step")
    _add_graph_args(p)
    p.add_argument("--placement", "-p", required=True, metavar="P", help="placement file")
    p.add_argument("--steps", type=_positive_int, default=10, help="steps to run (the first is dropped; default 10)")
    p.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT_S,
                   help="seconds before a run counts as failing")
    p.add_argument("--data-seed", type=_seed, default=0,
                   help="seed of the synthetic parameters and inputs (--seed is always a placer's seed)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_measure)

    p = sub.add_parser("profile", help="measure every op on each device type and write the costs into the graph")
    _add_graph_args(p)
    p.add_argument("--devices", help="comma-separated devices to profile on (default: one of each type)")
    p.add_argument("--steps", type=_positive_int, default=5, help="steps per run (the first is dropped)")
    p.add_argument("--rounds", type=_positive_int, default=3,
                   help="alone/loaded runs alternate this many times; op costs are medians over all (default 3)")
    p.add_argument("--output", "-o", required=True, metavar="GRAPH", help="graph file to write")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("cluster", help="measure this machine: devices and links")
    csub = p.add_subparsers(dest="cluster_cmd", required=True, metavar="CLUSTER_COMMAND")
    cd = csub.add_parser("detect", help="measure device speeds and transfer latency/bandwidth between devices")
    cd.add_argument("--base", help="cluster whose devices to measure (default: localhost)")
    cd.add_argument("--repeats", type=_positive_int, default=20, help="timed repeats per transfer size")
    cd.add_argument("--output", "-o", help="write the measured cluster as autoplace.cluster/v1 JSON")
    cd.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("export", help="write a placement as runnable Python (and an Accelerate device_map)")
    _add_placement_output_args(p, "the captured graph the placement places (file or built-in name)", "placed.py",
                               "Python file to write")
    p.add_argument("--device-map", metavar="MAP.json", help="also write an Accelerate device_map")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("report", help="one placement on one HTML page: summary, charts, an interactive timeline")
    _add_placement_output_args(p, "graph file or built-in model name", "report.html", "HTML file to write")
    p.add_argument("--curve", metavar="PREFIX.csv", help="a search's training curve (as place --curve writes it)")
    p.add_argument("--compare", type=_method_list, metavar="M1,M2",
                   help="also compare these placers on the graph and cluster: their chart and table on the page")
    p.add_argument("--seed", type=_seed, default=0, help="the compared placers' seed (default 0)")
    p.add_argument("--budget", type=_seconds, default=None, help="the compared placers' search budget (see compare)")
    p.add_argument("--png", metavar="PREFIX", help="also write the page's charts as PREFIX.step.png, PREFIX.graph.png, "
                                                   "PREFIX.curve.png, PREFIX.compare.png")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("bench", help="the papers' tables, simulated beside the papers' figures (resumable)",
                       description="Run the papers' experiments in simulation and write one Markdown, JSON and "
                                   "PNG per table under the results folder. Finished jobs are kept there "
                                   "(jobs.jsonl): an interrupted bench continues where it stopped.")
    p.add_argument("--output", "-o", default="bench-results", metavar="DIR",
                   help="results folder (default: bench-results)")
    p.add_argument("--quick", action="store_true",
                   help="each table's small settings and short budgets (about 15 minutes on 2 cores)")
    p.add_argument("--tables", type=_method_list, metavar="T1,T2", help="the tables to run (default: all; --list)")
    p.add_argument("--graph", action="append", default=[], metavar="GRAPH",
                   help="run every table on this graph (file or built-in name) on the table's clusters, "
                        "in place of the paper's models; repeatable")
    p.add_argument("--seed", type=_seed, default=0, help="every placer's seed (default 0)")
    p.add_argument("--budget", type=_positive_seconds, default=None,
                   help="search placers' budget, about seconds (default 60; --quick 1)")
    p.add_argument("--learned-budget", type=_positive_seconds, default=None,
                   help="learned placers' budget, seconds of nominal work (default 600; --quick 2)")
    p.add_argument("--list", action="store_true", help="list the tables and their settings, run nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("capture", help="capture a PyTorch training step (or forward pass) as a graph",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=CAPTURE_HELP)
    p.add_argument("factory", metavar="MODULE:FUNCTION",
                   help="a function (in a module importable from here, or FILE.py:FUNCTION) returning "
                        "(model, example_inputs, loss_fn, optimizer[, targets])")
    p.add_argument("--output", "-o", required=True, metavar="GRAPH", help="graph file to write (.json or .json.gz)")
    p.add_argument("--inference", action="store_true", help="capture the forward pass only")
    p.add_argument("--name", help="graph name (default: the function's name)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_capture)

    p = sub.add_parser("import", help="import an ONNX model (shape-inferred, forward pass) as a graph")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("--output", "-o", required=True, metavar="GRAPH", help="graph file to write (.json or .json.gz)")
    p.add_argument("--name", help="graph name (default: the ONNX graph's name)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("clusters", help="list cluster presets, or show/export one")
    p.add_argument("name", nargs="?", help="a preset or cluster file to show")
    p.add_argument("--output", "-o", help="write the cluster as autoplace.cluster/v1 JSON")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_clusters)

    p = sub.add_parser("zoo", help="built-in graphs")
    zsub = p.add_subparsers(dest="zoo_cmd", required=True, metavar="ZOO_COMMAND")
    zl = zsub.add_parser("list", help="list built-in graphs")
    zl.add_argument("--json", action="store_true")
    ze = zsub.add_parser("export", help="write a built-in graph as autoplace.graph/v1 JSON")
    ze.add_argument("name")
    ze.add_argument("--output", "-o", required=True)
    ze.add_argument("--param", "-P", action="append", metavar="KEY=VALUE")
    ze.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_zoo)
    return parser


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a name no terminal can show is escaped, not a crash
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except AutoplaceError as e:
        print(f"autoplace: error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"autoplace: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autoplace: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
