"""``autoplace bench``: the papers' tables in simulation, resumable; ``--against`` compares two results folders."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from rich.progress import Progress

from autoplace.bench import FULL, QUICK, TABLES, Variant, make_run, run_bench, table_names
from autoplace.bench.compare import change_text, compare_folders
from autoplace.bench.suite import nominal_work, table_settings
from autoplace.cli.args import (
    method_list,
    positive_seconds,
    seed_arg,
    seeds_arg,
)
from autoplace.cli.common import (
    EXIT_FAILING,
    bold,
    console,
    print_json,
)
from autoplace.cli.place import settings_dict
from autoplace.errors import FormatError
from autoplace.formats.files import check_output_folder
from autoplace.progress import PlainLines, progress_to
from autoplace.resolve import resolve_graph


def _bench_against(args: argparse.Namespace) -> int:
    """``bench -o AFTER --against BEFORE``: every job both folders hold, its result compared (exit 1 if any
    differs)."""

    c = compare_folders(args.against, args.output)
    if args.json:
        print_json({"before": args.against, "after": args.output, **c.to_dict()})
        return 0 if c.same else EXIT_FAILING
    con = console()
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
        configs.setdefault(name, {}).update(settings_dict([rest]))
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
            print_json(listing)
            return 0

        def hours(s: float) -> str:
            return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"

        for t in listing:
            console().print(bold((t["name"], "bold"), f"  {t['title']}: {len(t['settings'])} settings, "
                                   f"{t['jobs']} jobs, {hours(t['search_budget_s'])} of search budget"))
        mode = "--quick" if args.quick else "full mode (add --quick for the small settings and short budgets)"
        console().print(f"all: {len(every)} jobs (a job two tables share runs once), "
                         f"{hours(sum(nominal_work(j) for j in every))} of search budget; {mode}")
        return 0
    if args.against is not None:
        return _bench_against(args)

    quiet = args.json or not sys.stderr.isatty()
    # in a log or a pipe: a plain line per job, and a search's reports every 10 s
    lines = PlainLines() if not args.json and not sys.stderr.isatty() else None
    with Progress(disable=quiet, console=console(True)) as bar:
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
        print_json({"folder": str(result.folder), "ran": result.ran, "reused": result.reused,
                     "wall_s": result.wall_s, "tables": [t.to_dict() for t in result.tables],
                     "rejected_lines": [{"line": n, "reason": why} for n, why in result.rejected]})
        return 0
    con = console()
    for t in result.tables:
        con.print(bold((t.title, "bold"), f" -> {result.folder / t.name}.md, .json, .png"))
    con.print(f"{result.ran} jobs run, {result.reused} from earlier runs, {result.wall_s:.0f} s; "
              f"index: {result.folder / 'README.md'}")
    return 0


def add_bench_parser(sub) -> None:
    """The ``bench`` verb's arguments."""
    p = sub.add_parser("bench", help="the papers' tables, simulated beside the papers' figures (resumable)",
                       description="Run the papers' experiments in simulation and write one Markdown, JSON and "
                                   "PNG per table under the results folder. Finished jobs are kept there "
                                   "(jobs.jsonl): an interrupted bench continues where it stopped.")
    p.add_argument("--output", "-o", default="bench-results", metavar="DIR",
                   help="results folder (default: bench-results)")
    p.add_argument("--quick", action="store_true",
                   help="each table's small settings and short budgets (about two hours on 2 cores)")
    p.add_argument("--tables", type=method_list, metavar="T1,T2", help="the tables to run (default: all; --list)")
    p.add_argument("--graph", action="append", default=[], metavar="GRAPH",
                   help="run every table on this graph (file or built-in name) on the table's clusters, "
                        "in place of the paper's models; repeatable")
    p.add_argument("--seed", type=seed_arg, default=0, help="the seed of every placer but the learned ones (default 0)")
    p.add_argument("--seeds", type=seeds_arg, default=(0, 1, 2), metavar="S1,S2,...",
                   help="the learned placers' seeds, each a search of its own, each placer beside the same search "
                        "with learning off (default 0,1,2; 'none': --seed alone, unpaired)")
    p.add_argument("--budget", type=positive_seconds, default=None,
                   help="search placers' budget, about seconds (default 60; --quick 1)")
    p.add_argument("--learned-budget", type=positive_seconds, default=None,
                   help="learned placers' budget, seconds of nominal work (default 600; --quick 2)")
    p.add_argument("--set", action="append", default=[], metavar="NAME.KEY=VALUE",
                   help="a learned placer's setting wherever it runs (--set rl.learning_rate=1e-3), or a --variant's "
                        "(--set frozen.learn=false); results under other settings are kept apart; repeatable")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL=PLACER",
                   help="a method column LABEL beside PLACER in every table that has it: PLACER under the settings "
                        "--set LABEL.KEY=VALUE gives (the same search with learning off, another policy); repeatable")
    p.add_argument("--versus", action="append", default=[], metavar="A:B",
                   help="compare methods A and B head to head in every table that has both (A's speedup over B, "
                        "its samples to reach B's step); repeatable")
    p.add_argument("--list", action="store_true", help="list the tables and their settings, run nothing")
    p.add_argument("--against", metavar="DIR",
                   help="run nothing: compare the results folder's jobs with DIR's (another commit's), leaving out "
                        "measured seconds; exit 1 if any result differs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)
