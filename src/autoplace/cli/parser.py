"""The argument parser: every verb, its options and their checks."""

from __future__ import annotations

import argparse

import numpy as np

from autoplace import __version__
from autoplace.cli.common import _add_granularity
from autoplace.cli.placing import cmd_clusters, cmd_compare, cmd_place, cmd_settings, cmd_simulate, cmd_train
from autoplace.cli.running import (
    CAPTURE_HELP,
    cmd_bench,
    cmd_capture,
    cmd_cluster,
    cmd_export,
    cmd_import,
    cmd_measure,
    cmd_profile,
    cmd_ranks,
    cmd_report,
    cmd_zoo,
)
from autoplace.runtime.pool import DEFAULT_TIMEOUT_S
from autoplace.validation import MAX_BUDGET_S


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
_nonnegative_int = _arg_type(int, lambda v: v >= 0, "a non-negative integer")
_seconds = _arg_type(float, lambda v: np.isfinite(v) and 0 <= v <= MAX_BUDGET_S,
                     f"a number of seconds in [0, {MAX_BUDGET_S:g}]")
_positive_seconds = _arg_type(float, lambda v: np.isfinite(v) and 0 < v <= MAX_BUDGET_S,
                              f"a number of seconds in (0, {MAX_BUDGET_S:g}]")
_seed = _arg_type(int, lambda v: 0 <= v < 2**32, f"an integer seed in [0, {2**32 - 1}]")


def _seeds(text: str) -> tuple[int, ...]:
    """Comma-separated distinct seeds, or ``none`` (no seeds)."""
    if text.strip() == "none":
        return ()
    seeds = tuple(_seed(t.strip()) for t in text.split(","))
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct seeds, got {text!r}")
    return seeds


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
    _add_runtime_arg(p, "measured env: ")


_RUNTIME_HELP = ("what runs placed steps: shm (worker processes exchanging tensors through shared memory: one "
                 "host), distributed (torch.distributed ranks: gloo, NCCL between GPUs, many hosts), or auto "
                 "(distributed where the cluster spans hosts or has two GPUs, else shm; the default)")


def _add_runtime_arg(p: argparse.ArgumentParser, prefix: str = "") -> None:
    p.add_argument("--runtime", choices=("auto", "shm", "distributed"), default="auto", help=prefix + _RUNTIME_HELP)


class _MethodsHelp(argparse.HelpFormatter):
    """Help whose ``{methods}`` is the registered placers' names, looked up only when help is printed (the
    registry imports every placer)."""

    def _get_help_string(self, action):
        text = super()._get_help_string(action) or ""
        if "{methods}" in text:
            from autoplace.placers import available_placers

            text = text.replace("{methods}", ", ".join(available_placers()))
        return text


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

    p = sub.add_parser("place", help="place a graph with a method and write the placement",
                       formatter_class=_MethodsHelp)
    _add_graph_args(p)
    p.add_argument("--method", "-m", default="auto",
                   help="placement method (default auto: every fast placer, the best refined): {methods}")
    p.add_argument("--output", "-o", required=True, metavar="P", help="placement file to write")
    p.add_argument("--seed", type=_seed, default=0, help="the placer's seed (default 0)")
    p.add_argument("--budget", type=_seconds, default=None,
                   help="search budget in seconds of nominal work, not wall clock (auto: 60): each search turns it "
                        "into a count (local search: budget x 10M / ops simulations; CP-SAT: deterministic time "
                        "units; learned placers: samples), so results do not depend on the machine or its load; the "
                        "wall time is printed beside it (often several times the budget on 2 cores); cap it with "
                        "--time-limit")
    p.add_argument("--time-limit", type=_positive_seconds, default=None, metavar="S",
                   help="stop the search after S seconds of wall clock with the best it has, whatever --budget "
                        "(the step under way finishes first)")
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
                   help="distributed: controllers, each with its own baseline (default: one per "
                        "samples_per_update workers: 8)")
    g.add_argument("--ray-address", metavar="A", default=None, help="join the Ray cluster at A (host:port or auto)")
    g.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the search method's config, repeatable; every key's default and allowed "
                        "range: 'autoplace settings METHOD' (out-of-range values are refused before any work)")
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
                   help="a GDPConfig setting, repeatable (keys and ranges: 'autoplace settings gdp')")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("compare", help="compare placement methods on one graph and cluster",
                       formatter_class=_MethodsHelp)
    _add_graph_args(p)
    p.add_argument("--methods", type=_method_list,
                   help="comma-separated methods (default: all but the learned ones, auto first), of: {methods}")
    p.add_argument("--seed", type=_seed, default=0, help="every placer's seed (default 0)")
    p.add_argument("--budget", type=_seconds, default=None,
                   help="search budget per method, seconds of nominal work, not wall clock (see 'place --help')")
    p.add_argument("--time-limit", type=_positive_seconds, default=None, metavar="S",
                   help="stop each method's search after S seconds of wall clock with the best it has")
    p.add_argument("--device-map", action="append", default=[], metavar="MAP.json",
                   help="also score this Accelerate-style device map (module -> device, as dispatch_model runs it); "
                        "repeatable")
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
    _add_runtime_arg(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_measure)

    p = sub.add_parser("profile", help="measure every op on each device type and write the costs into the graph")
    _add_graph_args(p)
    p.add_argument("--devices", help="comma-separated devices to profile on (default: one of each type)")
    p.add_argument("--steps", type=_positive_int, default=5, help="steps per run (the first is dropped)")
    p.add_argument("--rounds", type=_positive_int, default=3,
                   help="alone/loaded runs alternate this many times; op costs are medians over all (default 3)")
    p.add_argument("--output", "-o", required=True, metavar="GRAPH", help="graph file to write")
    _add_runtime_arg(p)
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("ranks", help="start this host's ranks of a cluster that spans hosts (with torchrun)",
                       description="Start the distributed runtime's ranks of one host of CLUSTER (a cluster file "
                                   "whose devices name their \"host\" and which names a \"rendezvous\" "
                                   "ADDRESS:PORT on the first host). Run it on every host; then measure, "
                                   "compare --env measured and autoplace.compile on any of them join the ranks. "
                                   "The ranks serve only a driver holding their secret: the first run creates it "
                                   "(~/.config/autoplace/ranks.secret, or --secret-file / "
                                   "$AUTOPLACE_RANKS_SECRET_FILE); copy that file to every host and to the "
                                   "driver's machine.")
    p.add_argument("cluster", metavar="CLUSTER", help="cluster file (the same file on every host)")
    p.add_argument("--secret-file", default=None,
                   help="the ranks' secret, created if missing (default: $AUTOPLACE_RANKS_SECRET_FILE, else "
                        "~/.config/autoplace/ranks.secret)")
    p.add_argument("--host", required=True, help="which of the cluster's hosts this is")
    p.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT_S,
                   help="seconds a rank waits on a message before the step fails")
    p.add_argument("--max-restarts", type=_nonnegative_int, default=0,
                   help="times torchrun starts fresh ranks after a failing step ends them (default 0)")
    p.add_argument("--idle", type=_positive_seconds, default=None,
                   help="stop after this many seconds without a driver (default: run until stopped)")
    p.add_argument("--print", action="store_true", help="print the torchrun command instead of running it")
    p.add_argument("--json", action="store_true",
                   help="print the host's place and the torchrun command as JSON instead of running it")
    p.set_defaults(func=cmd_ranks)

    p = sub.add_parser("cluster", help="measure this machine: devices and links")
    csub = p.add_subparsers(dest="cluster_cmd", required=True, metavar="CLUSTER_COMMAND")
    cd = csub.add_parser("detect", help="measure device speeds and transfer latency/bandwidth between devices")
    cd.add_argument("--base", help="cluster whose devices to measure (default: localhost)")
    cd.add_argument("--repeats", type=_positive_int, default=20, help="timed repeats per transfer size")
    cd.add_argument("--output", "-o", help="write the measured cluster as autoplace.cluster/v1 JSON")
    _add_runtime_arg(cd, "whose transfers to measure: ")
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
                   help="each table's small settings and short budgets (about two hours on 2 cores)")
    p.add_argument("--tables", type=_method_list, metavar="T1,T2", help="the tables to run (default: all; --list)")
    p.add_argument("--graph", action="append", default=[], metavar="GRAPH",
                   help="run every table on this graph (file or built-in name) on the table's clusters, "
                        "in place of the paper's models; repeatable")
    p.add_argument("--seed", type=_seed, default=0, help="the seed of every placer but the learned ones (default 0)")
    p.add_argument("--seeds", type=_seeds, default=(0, 1, 2), metavar="S1,S2,...",
                   help="the learned placers' seeds, each a search of its own, each placer beside the same search "
                        "with learning off (default 0,1,2; 'none': --seed alone, unpaired)")
    p.add_argument("--budget", type=_positive_seconds, default=None,
                   help="search placers' budget, about seconds (default 60; --quick 1)")
    p.add_argument("--learned-budget", type=_positive_seconds, default=None,
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

    p = sub.add_parser("capture", help="capture a PyTorch training step (or forward pass) as a graph",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=CAPTURE_HELP)
    p.add_argument("factory", metavar="MODULE:FUNCTION",
                   help="a function (in a module importable from here, or FILE.py:FUNCTION) returning "
                        "(model, example_inputs, loss_fn, optimizer[, targets])")
    p.add_argument("--output", "-o", required=True, metavar="GRAPH", help="graph file to write (.json or .json.gz)")
    p.add_argument("--inference", action="store_true", help="capture the forward pass only")
    p.add_argument("--micro-batches", type=_positive_int, default=1, metavar="M",
                   help="gradient accumulation: M forward/backward passes over equal slices of the batch, "
                        "one update (default 1)")
    p.add_argument("--name", help="graph name (default: the function's name)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_capture)

    p = sub.add_parser("import", help="import an ONNX model (shape-inferred, forward pass) as a graph")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("--output", "-o", required=True, metavar="GRAPH", help="graph file to write (.json or .json.gz)")
    p.add_argument("--name", help="graph name (default: the ONNX graph's name)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("settings", help="the learned placers' --set keys: default, allowed range, meaning")
    p.add_argument("method", nargs="?", help="one learned placer (default: all)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="as the Markdown tables of docs/algorithms.md")
    p.set_defaults(func=cmd_settings)

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
