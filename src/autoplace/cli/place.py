"""``autoplace place`` (a graph placed with a method) and ``autoplace train`` (one GDP policy over several
graphs)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from autoplace.cli.args import (
    MethodsHelp,
    add_env_args,
    add_granularity,
    add_graph_args,
    positive_int,
    positive_seconds,
    seconds,
    seed_arg,
)
from autoplace.cli.common import (
    check_json_output,
    check_output,
    console,
    env_kwargs,
    exit_code,
    finite_or_none,
    granular,
    parse_params,
    print_json,
    with_progress,
)
from autoplace.comparison import failure_reason
from autoplace.env import make_env
from autoplace.errors import AutoplaceError, FormatError
from autoplace.formats import save_placement
from autoplace.formats.files import check_output_folder, input_file
from autoplace.placers import get_placer, place
from autoplace.placers.auto import robust_simulator
from autoplace.placers.learned.gdp import gdp_train
from autoplace.placers.local_search import refine
from autoplace.resolve import resolve_cluster, resolve_graph
from autoplace.search import SearchBudget
from autoplace.search.budget import time_limit
from autoplace.search.work import DEFAULT_BUDGET_S
from autoplace.sim import simulate
from autoplace.units import fmt_time


def _check_checkpoint_folders(args: argparse.Namespace) -> None:
    """``--checkpoint`` a folder that can be written, ``--resume`` an existing folder: before any work."""

    check_output_folder(args.checkpoint or args.resume, "checkpoint")
    if args.resume is not None and not Path(args.resume).is_dir():
        raise FormatError(f"--resume {args.resume}: no such folder (a folder --checkpoint wrote)")


def cmd_place(args: argparse.Namespace) -> int:

    check_output(args.output)
    check_json_output(args)
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
            check_output(args.curve + ext, "curve")
    _check_checkpoint_folders(args)
    graph = granular(resolve_graph(args.graph, parse_params(args.param)), args.granularity, args.keep_whole)
    cluster = resolve_cluster(args.cluster)

    if info.strategy and args.env != "simulated":
        raise AutoplaceError(f"{args.method} places replicas of the step, which the simulator judges: --env "
                             "measured runs placements of the step itself")
    # measured runs execute placements of the step: auto weighs no replicated strategy then
    options = {"strategies": False} if args.method == "auto" and args.env != "simulated" else {}
    with make_env(args.env, graph, cluster, **env_kwargs(args)) as env:
        t0 = time.perf_counter()
        if info.learned:
            with time_limit(args.time_limit):
                placement = with_progress(f"placing with {args.method}", args.json or args.output == "-",
                                           lambda: _learned_search(info, graph, cluster, env, args))
        else:
            placement = with_progress(f"placing with {args.method}", args.json or args.output == "-",
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
        print_json({"placement": args.output, **result.to_dict()})
        return exit_code(result)
    else:
        counts = ", ".join(f"{d}: {n}" for d, n in sorted(placement.counts().items()))
        status = "ok" if result.ok else "FAILING (" + failure_reason(result) + ")"
        console(args.output == "-").print(f"{placement.method}: {args.env} step time {fmt_time(result.step_time)}, "
                         f"{status}; ops per device "
                         f"{counts}; written to {args.output}")
        if args.curve:
            console(args.output == "-").print(f"training curve written to {args.curve}.csv and {args.curve}.png")
        console(args.output == "-").print(_budget_line(args, placement if refined is None else None, wall,
                                                        refined), soft_wrap=True)
    return exit_code(result)


def _budget_line(args: argparse.Namespace, placement, wall: float, refined=None) -> str:
    """What the budget bought: nominal work, the count it became, the wall time it took, why it stopped (the
    refinement's too, with ``--refine``)."""

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


def settings_dict(items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` strings -> a dict: values as ``--param`` reads them (JSON, else text), and
    ``none``/``true``/``false`` in any case as JSON's null/true/false; ``-`` in a key reads as ``_``."""
    words = {"none": None, "true": True, "false": False}
    return {k.strip().replace("-", "_"): words.get(v.strip().lower(), v) if isinstance(v, str) else v
            for k, v in parse_params(items, "--set").items()}


def _learned_search(info, graph, cluster, env, args):
    """A learned placer's search with the command line's options: ``--samples`` or ``--budget`` (nominal
    work, or wall-clock seconds with ``--wall-clock``), ``--checkpoint``/``--resume``, ``--curve``."""
    r = info.search(graph, cluster, budget=_search_budget(args), seed=args.seed, env=env, checkpoint=args.checkpoint,
                    resume=args.resume, curve_csv=args.curve and args.curve + ".csv",
                    curve_png=args.curve and args.curve + ".png", checkpoint_every_s=args.checkpoint_every,
                    workers=args.workers or 1, controllers=args.controllers, ray_address=args.ray_address,
                    env_kwargs=env_kwargs(args), config=settings_dict(args.settings),
                    **({"policy": args.policy, "zero_shot_only": args.zero_shot} if args.policy else {}))
    return r.placement


def _search_budget(args: argparse.Namespace):
    """A learned search's budget from ``--samples``, ``--budget`` and ``--wall-clock``: samples (and wall-clock
    seconds), wall-clock seconds, or seconds of nominal work (``None``: the placer's default)."""

    if args.samples:
        return SearchBudget(samples=args.samples, seconds=args.budget if args.wall_clock else None)
    if args.wall_clock:
        return SearchBudget(seconds=args.budget if args.budget is not None else 60.0)
    return args.budget


def cmd_train(args: argparse.Namespace) -> int:

    check_output(args.output, "policy")
    if args.curve:
        for ext in (".csv", ".png"):
            check_output(args.curve + ext, "curve")
    names = [n for n in args.graphs.split(",") if n.strip()]
    cnames = [n for n in args.cluster.split(",") if n.strip()]
    if not names:
        raise AutoplaceError("--graphs: give at least one graph")
    if len(cnames) not in (1, len(names)):
        raise AutoplaceError(f"--cluster: give one cluster, or one per graph ({len(names)}), not {len(cnames)}")
    if args.policy:
        input_file(args.policy, "policy file")
    _check_checkpoint_folders(args)
    params = parse_params(args.param)
    graphs = [resolve_graph(n.strip(), params) for n in names]
    clusters = [resolve_cluster(n.strip()) for n in (cnames if len(cnames) > 1 else cnames * len(names))]
    budget = _search_budget(args)
    r = with_progress("training gdp", args.json, lambda: gdp_train(
        graphs, clusters, budget=budget, config=settings_dict(args.settings), seed=args.seed, policy=args.policy,
        output=args.output, checkpoint=args.checkpoint, resume=args.resume,
        curve_csv=args.curve and args.curve + ".csv", curve_png=args.curve and args.curve + ".png",
        checkpoint_every_s=args.checkpoint_every, workers=args.workers or 1, ray_address=args.ray_address))
    steps = r.extra["best_steps_s"]
    if args.json:
        print_json({"policy": args.output, "samples": r.samples, "updates": r.updates, "stop_reason": r.stop_reason,
                     "graphs": [{"graph": g.name, "cluster": c.name, "best_step_s": finite_or_none(s)}
                                for g, c, s in zip(graphs, clusters, steps)]})
    else:
        con = console(False)
        for g, c, s in zip(graphs, clusters, steps):
            con.print(f"{g.name} on {c.name}: best step {fmt_time(s) if math.isfinite(s) else 'none ran'}")
        con.print(f"{r.samples} samples, {r.updates} updates ({r.stop_reason}); policy written to {args.output}")
    return 0


def add_place_parser(sub) -> None:
    """The ``place`` verb's arguments."""
    p = sub.add_parser("place", help="place a graph with a method and write the placement",
                       formatter_class=MethodsHelp)
    add_graph_args(p)
    p.add_argument("--method", "-m", default="auto",
                   help="placement method (default auto: every fast placer, the best refined): {methods}")
    p.add_argument("--output", "-o", required=True, metavar="P", help="placement file to write")
    p.add_argument("--seed", type=seed_arg, default=0, help="the placer's seed (default 0)")
    p.add_argument("--budget", type=seconds, default=None,
                   help="search budget in seconds of nominal work, not wall clock (auto: 60): each search turns it "
                        "into a count (local search: budget x 10M / ops simulations; CP-SAT: deterministic time "
                        "units; learned placers: samples), so results do not depend on the machine or its load; the "
                        "wall time is printed beside it (often several times the budget on 2 cores); cap it with "
                        "--time-limit")
    p.add_argument("--time-limit", type=positive_seconds, default=None, metavar="S",
                   help="stop the search after S seconds of wall clock with the best it has, whatever --budget "
                        "(the step under way finishes first)")
    p.add_argument("--refine", action="store_true", help="improve the result by local search under the simulator "
                   "(its worst case over the cost model's uncertainty)")
    add_granularity(p)
    p.add_argument("--refine-budget", type=seconds, default=None,
                   help="local-search budget, about seconds of simulation (default 10)")
    g = p.add_argument_group("search methods (rl, hdp, gdp, htf-mpr)")
    g.add_argument("--samples", type=positive_int, default=None,
                   help="stop after this many sampled placements (reproducible for a seed)")
    g.add_argument("--wall-clock", action="store_true", help="--budget is wall-clock seconds, not nominal work")
    g.add_argument("--checkpoint", metavar="DIR", default=None, help="checkpoint the search into DIR")
    g.add_argument("--checkpoint-every", type=seconds, default=30.0, metavar="S",
                   help="seconds between checkpoints (default 30)")
    g.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the search checkpointed in DIR (and keep checkpointing there)")
    g.add_argument("--curve", metavar="PREFIX", default=None,
                   help="write the training curve to PREFIX.csv and PREFIX.png")
    g.add_argument("--workers", type=positive_int, default=None,
                   help="evaluation workers; more than 1 runs the search distributed on Ray "
                   "(local unless --ray-address)")
    g.add_argument("--controllers", type=positive_int, default=None,
                   help="distributed: controllers, each with its own baseline (default: one per "
                        "samples_per_update workers: 8)")
    g.add_argument("--ray-address", metavar="A", default=None, help="join the Ray cluster at A (host:port or auto)")
    g.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the search method's config, repeatable; every key's default and allowed "
                        "range: 'autoplace settings METHOD' (out-of-range values are refused before any work)")
    g.add_argument("--policy", metavar="FILE", default=None,
                   help="gdp: start from this trained policy ('autoplace train') and fine-tune it")
    g.add_argument("--zero-shot", action="store_true", help="gdp: place with --policy as it is, without training")
    add_env_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_place)


def add_train_parser(sub) -> None:
    """The ``train`` verb's arguments."""
    p = sub.add_parser("train", help="train one GDP policy over several graphs (and save it)")
    p.add_argument("--graphs", required=True, metavar="A,B,C", help="graph files or built-in model names")
    p.add_argument("--cluster", "-c", required=True, metavar="C[,C2,...]",
                   help="cluster file or preset, one for all graphs or one per graph")
    p.add_argument("--param", "-P", action="append", metavar="KEY=VALUE", help="parameter of the built-in models")
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="policy file to write")
    p.add_argument("--policy", metavar="FILE", default=None, help="start from this policy")
    p.add_argument("--seed", type=seed_arg, default=0, help="the search's seed (default 0)")
    p.add_argument("--budget", type=seconds, default=None, help="about seconds of work (default 60), or wall-clock "
                                                                   "seconds with --wall-clock")
    p.add_argument("--samples", type=positive_int, default=None, help="stop after this many samples (all graphs)")
    p.add_argument("--wall-clock", action="store_true", help="--budget is wall-clock seconds, not nominal work")
    p.add_argument("--checkpoint", metavar="DIR", default=None, help="checkpoint the search into DIR")
    p.add_argument("--checkpoint-every", type=seconds, default=30.0, metavar="S", help="seconds between checkpoints")
    p.add_argument("--resume", metavar="DIR", default=None, help="continue the search checkpointed in DIR")
    p.add_argument("--curve", metavar="PREFIX", default=None, help="write the training curve to PREFIX.csv/.png")
    p.add_argument("--workers", type=positive_int, default=None, help="score samples on this many Ray workers")
    p.add_argument("--ray-address", metavar="A", default=None, help="join the Ray cluster at A")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a GDPConfig setting, repeatable (keys and ranges: 'autoplace settings gdp')")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)
