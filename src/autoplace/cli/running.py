"""The verbs that run, measure and convert: measure, profile, cluster, export, report, bench, zoo, import,
capture."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from autoplace.cli.common import (
    EXIT_FAILING,
    _bold,
    _check_json_output,
    _check_output,
    _console,
    _exit_code,
    _note_estimates,
    _note_other_cluster,
    _parse_params,
    _placement_or_map,
    _print_json,
    _written,
)
from autoplace.cli.placing import _failure, _settings, _sim_table, _spinner, _with_progress
from autoplace.replicas import strategy_graph
from autoplace.resolve import resolve_cluster, resolve_graph


def cmd_ranks(args: argparse.Namespace) -> int:
    """Start this host's ranks of a cluster that spans hosts (torchrun), or print the command."""
    import os
    import shlex
    import subprocess

    from autoplace.runtime.dist.control import hosts_of, rank_order
    from autoplace.runtime.dist.rendezvous import ranks_secret
    from autoplace.runtime.dist.serve import torchrun_command

    cluster = resolve_cluster(args.cluster)
    secret_file = None if args.secret_file is None else os.path.abspath(args.secret_file)
    cmd = torchrun_command(cluster, os.path.abspath(args.cluster), args.host, timeout=args.timeout,
                           max_restarts=args.max_restarts, idle=args.idle, secret_file=secret_file)
    _secret, path, created = ranks_secret(secret_file)
    if created:
        print(f"created the ranks' secret {path} (mode 600): copy it to every host of {cluster.name!r} and to "
              "the driver's machine (the same path, or name it with $AUTOPLACE_RANKS_SECRET_FILE)", file=sys.stderr)
    if args.json:
        hosts = hosts_of(cluster)
        order = rank_order(cluster)
        _print_json({"host": args.host, "hosts": hosts, "node_rank": hosts.index(args.host),
                     "ranks": {r: cluster.devices[k].name for r, k in enumerate(order)},
                     "command": cmd})
        return 0
    if args.print:
        print(shlex.join(cmd))
        return 0
    print(f"starting the ranks of host {args.host!r}: {shlex.join(cmd)}", file=sys.stderr)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 130


def cmd_measure(args: argparse.Namespace) -> int:
    from autoplace.runtime import measure
    from autoplace.sim import simulate
    from autoplace.units import fmt_bytes, fmt_time

    graph = resolve_graph(args.graph, _parse_params(args.param))
    cluster = resolve_cluster(args.cluster)
    placement = _placement_or_map(args.placement, graph, cluster)
    graph = strategy_graph(graph, placement)        # a strategy's placement: the replicated step it runs
    placement.to_array(graph, cluster)  # validate before starting workers (the pool decodes the graph first)
    _note_other_cluster(placement, cluster)
    predicted = simulate(graph, cluster, placement)
    result = measure(graph, cluster, placement, steps=args.steps, timeout=args.timeout, seed=args.data_seed,
                     runtime=args.runtime)
    _note_estimates(cluster)
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
    con.print(_fidelity_note(graph, cluster, result.step_time, predicted.step_time), soft_wrap=True)
    return 0


def _fidelity_note(graph, cluster, measured: float, simulated: float) -> str:
    """How far the measured step is from the simulated one, and what may explain it."""
    ratio = measured / simulated if simulated > 0 else float("inf")
    line = f"measured / simulated: {ratio:.2f}x"
    if abs(ratio - 1.0) <= 0.15:
        return line + " (within 15 %)"
    why = []
    if cluster.estimated:
        why.append("the cluster's speeds are estimates ('autoplace cluster detect' measures them)")
    if not any(op.cost for op in graph.ops):
        why.append("the op costs are the roofline's ('autoplace profile' measures them)")
    why.append("the host's other load and its memory bandwidth, shared by the workers, are not modelled")
    return line + "; it may be because " + "; ".join(why)


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
                                 runtime=args.runtime,
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
        cluster = detect_cluster(base, repeats=args.repeats, runtime=args.runtime,
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
    from autoplace.runtime.export import device_map, export_python, input_device

    _check_output(args.output)
    _check_output(args.device_map)
    _check_json_output(args)
    placement = load_placement(args.placement)
    graph = resolve_graph(args.graph, _parse_params(args.param))
    cluster = resolve_cluster(args.cluster or placement.cluster)
    _note_other_cluster(placement, cluster)
    graph = strategy_graph(graph, placement)        # a strategy's placement: the replicated step it runs
    source = export_python(graph, placement, cluster)
    dmap = device_map(graph, placement, cluster) if args.device_map else None
    batch_on = input_device(graph, placement, cluster) if dmap is not None else None
    from autoplace.formats._json import atomic_write_text

    atomic_write_text(args.output, source)
    if dmap is not None:
        write_json(args.device_map, dmap)
    if _written(args, None, lines=len(source.splitlines()), device_map=args.device_map, device_map_entries=dmap,
                input_device=batch_on):
        return 0
    _console(args.output == "-").print(f"placed program ({len(source.splitlines())} lines) -> {args.output}"
                     + (f"; device_map ({len(dmap)} entries) -> {args.device_map}; put each batch on {batch_on} "
                        "(the loss is computed there)" if dmap is not None else ""))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from autoplace.formats import load_placement
    from autoplace.formats._json import atomic_write_text
    from autoplace.htmlreport import placement_report

    _check_output(args.output)
    if args.png:
        for chart in ("step", "graph", "curve", "compare"):        # every chart the page may write
            _check_output(f"{args.png}.{chart}.png", "--png chart")
    _check_json_output(args)
    graph = resolve_graph(args.graph, _parse_params(args.param))
    placement = load_placement(args.placement)
    cluster = resolve_cluster(args.cluster or placement.cluster)
    _note_other_cluster(placement, cluster)
    graph = strategy_graph(graph, placement)        # a strategy's placement: the replicated step it runs
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


def _bench_against(args: argparse.Namespace) -> int:
    """``bench -o AFTER --against BEFORE``: every job both folders hold, its result compared (exit 1 if any
    differs)."""
    from autoplace.bench.compare import change_text, compare_folders

    c = compare_folders(args.against, args.output)
    if args.json:
        _print_json({"before": args.against, "after": args.output, **c.to_dict()})
        return 0 if c.same else EXIT_FAILING
    con = _console()
    con.print(f"{c.common} jobs in both folders ({len(c.only_before)} only in {args.against}, "
              f"{len(c.only_after)} only in {args.output}); measured seconds left out"
              + (f", and {c.timed} jobs run for another's wall time" if c.timed else ""))
    for job, fields in list(c.changes.items())[:20]:
        con.print(f"differs: {job}: " + ", ".join(change_text(p, *v) for p, v in fields.items()), markup=False)
    if len(c.differ) > 20:
        con.print(f"... and {len(c.differ) - 20} more")
    con.print("every result the same" if c.same else f"{len(c.differ)} results differ" if c.changes
              else "no job in common: nothing compared")
    return 0 if c.same else EXIT_FAILING


def _bench_run(args: argparse.Namespace):
    """The :class:`~autoplace.bench.Run` of ``bench``'s options: budgets, seed, ``--set NAME.KEY=VALUE``
    (NAME a learned placer or a ``--variant`` label) and ``--variant LABEL=PLACER``."""
    from dataclasses import replace

    from autoplace.bench import FULL, QUICK, Variant, make_run
    from autoplace.errors import FormatError

    budgets = QUICK if args.quick else FULL
    if args.budget is not None:
        budgets = replace(budgets, search=args.budget)
    if args.learned_budget is not None:
        budgets = replace(budgets, learned=args.learned_budget)
    placers = {}
    for text in args.variant:
        label, sep, placer = text.partition("=")
        if not sep or not label.strip() or not placer.strip():
            raise FormatError(f"--variant {text!r}: expected LABEL=PLACER (settings: --set LABEL.KEY=VALUE)")
        if label.strip() in placers:
            raise FormatError(f"--variant {text!r}: the label {label.strip()!r} is given twice")
        placers[label.strip()] = placer.strip()
    configs: dict[str, dict] = {}
    for text in args.set:
        name, dot, rest = text.partition(".")
        if not dot or "=" not in rest or "=" in name:
            raise FormatError(f"--set {text!r}: expected NAME.KEY=VALUE (NAME: a learned placer or a --variant label)")
        configs.setdefault(name, {}).update(_settings([rest]))
    variants = tuple(Variant(label, placer, tuple(sorted(configs.pop(label, {}).items())))
                     for label, placer in placers.items())
    versus = []
    for text in args.versus:
        a, sep, b = text.partition(":")
        if not sep or not a.strip() or not b.strip():
            raise FormatError(f"--versus {text!r}: expected A:B (two methods of a table)")
        versus.append((a.strip(), b.strip()))
    return make_run(quick=args.quick, graphs=args.graph, seed=args.seed, budgets=budgets, configs=configs,
                    variants=variants, versus=tuple(versus), seeds=args.seeds)


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from autoplace.bench import TABLES, run_bench, table_names
    from autoplace.bench.suite import nominal_work, table_settings
    from autoplace.formats._json import check_output_folder
    from autoplace.progress import progress_to

    check_output_folder(args.output, "results")
    run = _bench_run(args)
    for g in args.graph:
        resolve_graph(g)                 # an unknown graph is one clear error before any job runs (or a listing)
    if args.list:
        listing, every = [], {}
        for n in table_names(args.tables):
            t = TABLES[n]
            settings = table_settings(t, args.quick, tuple(args.graph))
            jobs = t.jobs(t, settings, run)
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
        mode = "--quick" if args.quick else "full mode (add --quick for the small settings and short budgets)"
        _console().print(f"all: {len(every)} jobs (a job two tables share runs once), "
                         f"{hours(sum(nominal_work(j) for j in every))} of search budget; {mode}")
        return 0
    if args.against is not None:
        return _bench_against(args)
    from autoplace.progress import PlainLines

    quiet = args.json or not sys.stderr.isatty()
    # in a log or a pipe: a plain line per job, and a search's reports every 10 s
    lines = PlainLines() if not args.json and not sys.stderr.isatty() else None
    with Progress(disable=quiet, console=_console(True)) as bar:
        task = bar.add_task("bench", total=None)
        state = {"label": "", "done": 0}

        def on_job(done: int, total: int, label: str) -> None:
            state.update(label=label, done=done)
            bar.update(task, total=max(total, 1), completed=done, description=label)
            if lines is not None:
                lines.stage(f"job {done + 1} of {total}: {label}" if done < total else "writing the tables")

        def on_search(message: str, fraction: float | None) -> None:
            bar.update(task, description=f"{state['label']}: {message}",
                       completed=state["done"] + (fraction or 0.0))
            if lines is not None:
                lines(message, fraction)

        try:
            with progress_to(on_search):
                result = run_bench(args.output, tables=args.tables, quick=args.quick, graphs=args.graph,
                                   seed=args.seed, budgets=run.budgets, configs=dict(
                                       (p, dict(c)) for p, c in run.configs), variants=run.variants,
                                   versus=run.versus, seeds=run.seeds, progress=on_job)
        except KeyboardInterrupt:
            print(f"autoplace: interrupted; finished jobs are kept in {args.output}/jobs.jsonl: run the same "
                  "command to continue", file=sys.stderr)
            return 130
    for line, why in result.rejected:
        print(f"autoplace: warning: {result.folder / 'jobs.jsonl'} line {line} set aside ({why}); its job ran again "
              f"(the line is kept in jobs.rejected.jsonl)", file=sys.stderr)
    if args.json:
        _print_json({"folder": str(result.folder), "ran": result.ran, "reused": result.reused,
                     "wall_s": result.wall_s, "tables": [t.to_dict() for t in result.tables],
                     "rejected_lines": [{"line": n, "reason": why} for n, why in result.rejected]})
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
        graph = capture_from_factory(args.factory, inference=args.inference, name=args.name,
                                     micro_batches=args.micro_batches)
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
