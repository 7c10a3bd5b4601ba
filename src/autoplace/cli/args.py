"""What the verbs' parsers share: argument types with one-line errors, the parser class, the option groups
several verbs take (a graph and its cluster, an env, a runtime, a placement and an output, granularity)."""

from __future__ import annotations

import argparse

import numpy as np

from autoplace.placers import available_placers
from autoplace.runtime.backends import RUNTIMES
from autoplace.runtime.pool import DEFAULT_TIMEOUT_S, Runtime
from autoplace.validation import MAX_BUDGET_S


def add_graph_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", metavar="GRAPH", help="graph file (.json/.json.gz) or built-in model name")
    p.add_argument("--cluster", "-c", required=True, metavar="CLUSTER", help="cluster file or preset name")
    p.add_argument("--param", "-P", action="append", metavar="KEY=VALUE",
                   help="parameter of a built-in model (repeatable), e.g. -P batch=32")


def arg_type(parse, ok, expected: str):
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


positive_int = arg_type(int, lambda v: v >= 1, "a positive integer")


nonnegative_int = arg_type(int, lambda v: v >= 0, "a non-negative integer")


seconds = arg_type(float, lambda v: np.isfinite(v) and 0 <= v <= MAX_BUDGET_S,
                     f"a number of seconds in [0, {MAX_BUDGET_S:g}]")


positive_seconds = arg_type(float, lambda v: np.isfinite(v) and 0 < v <= MAX_BUDGET_S,
                              f"a number of seconds in (0, {MAX_BUDGET_S:g}]")


seed_arg = arg_type(int, lambda v: 0 <= v < 2**32, f"an integer seed in [0, {2**32 - 1}]")


def seeds_arg(text: str) -> tuple[int, ...]:
    """Comma-separated distinct seeds, or ``none`` (no seeds)."""
    if text.strip() == "none":
        return ()
    seeds = tuple(seed_arg(t.strip()) for t in text.split(","))
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct seeds, got {text!r}")
    return seeds


def method_list(text: str) -> list[str]:
    """Comma-separated placer names, none empty."""
    methods = [m.strip() for m in text.split(",")]
    if not text.strip() or any(not m for m in methods):
        raise argparse.ArgumentTypeError(f"expected comma-separated method names, got {text!r}")
    return methods


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``autoplace place: error: ...``) like every other error here."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def add_placement_output_args(p: argparse.ArgumentParser, graph_help: str, output: str, output_help: str) -> None:
    """GRAPH, a placement file, its cluster (default: the placement's), and a file to write (``export``,
    ``report``)."""
    p.add_argument("graph", metavar="GRAPH", help=graph_help)
    p.add_argument("--placement", "-p", required=True, metavar="P", help="placement file")
    p.add_argument("--cluster", "-c", metavar="CLUSTER", help="cluster (default: the placement's, a preset)")
    p.add_argument("--param", "-P", action="append", metavar="KEY=VALUE", help="parameter of a built-in model")
    p.add_argument("--output", "-o", required=True, metavar=output, help=output_help)
    p.add_argument("--json", action="store_true", help="print what was written as JSON")


def add_env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", choices=("simulated", "measured"), default="simulated",
                   help="score placements with the simulator (default) or by real runs on this machine")
    p.add_argument("--steps", type=positive_int, default=10, help="measured env: steps per run (the first is dropped)")
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S,
                   help="measured env: seconds before a run fails")
    add_runtime_arg(p, "measured env: ")


RUNTIME_HELP = ("what runs placed steps: shm (worker processes exchanging tensors through shared memory: one "
                 "host), distributed (torch.distributed ranks: gloo, NCCL between GPUs, many hosts), or auto "
                 "(distributed where the cluster spans hosts or has two GPUs, else shm; the default)")


def add_runtime_arg(p: argparse.ArgumentParser, prefix: str = "") -> None:
    p.add_argument("--runtime", choices=RUNTIMES, default=Runtime.AUTO, help=prefix + RUNTIME_HELP)


class MethodsHelp(argparse.HelpFormatter):
    """Help whose ``{methods}`` is the registered placers' names, looked up only when help is printed (the
    registry imports every placer)."""

    def _get_help_string(self, action):
        text = super()._get_help_string(action) or ""
        if "{methods}" in text:

            text = text.replace("{methods}", ", ".join(available_placers()))
        return text


def add_granularity(p: argparse.ArgumentParser) -> None:
    p.add_argument("--granularity", choices=("op", "module"), default="op",
                   help="op (default): place every op; module: keep each module with parameters whole (its "
                        "parameters, tied ones, optimizer state and ops on one device), so that the placement "
                        "exports as an Accelerate device_map")
    p.add_argument("--keep-whole", metavar="CLASS[,CLASS]", default=None,
                   help="with --granularity module: module classes kept on one device with everything run in "
                        "them (Accelerate's no_split_module_classes, e.g. a residual block)")
