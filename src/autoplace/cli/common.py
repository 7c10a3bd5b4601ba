"""What the verbs share: output checks, exit codes, JSON, tables, the console."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.text import Text

from autoplace.cluster import Cluster
from autoplace.errors import AutoplaceError, FormatError
from autoplace.formats import placement_from_dict, read_json
from autoplace.formats.files import check_output_path
from autoplace.granularity import with_granularity
from autoplace.graph import Graph
from autoplace.progress import PlainLines, progress_to
from autoplace.runtime.export import from_device_map, is_device_map


def markdown_table(header, rows) -> str:
    """A Markdown table (the ``--markdown`` output of the comparison tables)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------- argument resolution

def parse_params(pairs: list[str] | None, option: str = "--param") -> dict[str, Any]:
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
        except (ValueError, RecursionError):           # past Python's 4,300-digit integers, or nested too deep
            raise FormatError(f"{option} {key}=...: a value too long or too deep to read") from None
    return params


EXIT_FAILING = 1
"""Exit code of ``place``, ``simulate`` and ``measure`` when the placement fails (out of memory, a failed
run); what they write is written all the same. 2: bad input; 3: no feasible placement exists."""


def written(args, graph: Graph | None = None, **extra) -> bool:
    """With ``--json``: print what was written (the output path, the graph's size, ``extra``) as JSON and
    return True (the caller prints nothing else); without, False."""
    if not getattr(args, "json", False):
        return False
    out: dict[str, Any] = {"output": args.output}
    if graph is not None:
        out.update(graph=graph.name, ops=graph.n_ops, edges=graph.n_edges, param_bytes=int(graph.total_param_bytes),
                   flops=float(graph.total_flops))
    print_json({**out, **extra})
    return True


def check_json_output(args) -> None:
    if getattr(args, "json", False) and args.output == "-":
        raise FormatError("--json prints a summary on standard output: write the file with -o FILE, not -")


def exit_code(result) -> int:
    return 0 if result.ok else EXIT_FAILING


def note_other_cluster(placement, cluster: Cluster) -> None:
    """One line on standard error when a placement made for another cluster is scored on this one."""
    if placement.cluster != cluster.name:
        console(True).print(f"note: placement made for cluster {placement.cluster!r}, scored on {cluster.name!r}")


def placement_or_map(path: str, graph: Graph, cluster: Cluster | None):
    """A placement file, or an Accelerate-style device map (module -> device JSON) read as the placement
    ``dispatch_model`` runs (:func:`~autoplace.runtime.export.from_device_map`; needs the cluster)."""

    obj = read_json(path)
    if is_device_map(obj):
        if cluster is None:
            raise AutoplaceError(f"{path}: a device map names no cluster: give one with --cluster")
        return from_device_map(graph, cluster, obj, where=path, method=f"device map {Path(path).name}")
    return placement_from_dict(obj, str(path))


def note_estimates(cluster: Cluster) -> None:
    """One line on standard error when the cluster's figures are estimates, naming the commands that
    measure them."""
    hint = cluster.calibration_hint()
    if hint:
        console(True).print(hint, soft_wrap=True)


def granular(graph: Graph, granularity: str, keep_whole: str | None = None) -> Graph:
    """``graph`` at the placement granularity of ``--granularity`` (module: a module's parameters, tied ones
    and its ops kept together, so that the placement exports as a device_map), ``--keep-whole``'s classes
    whole."""

    return with_granularity(graph, granularity, [c for c in (keep_whole or "").split(",") if c.strip()])


def check_output(path: str | None, what: str = "output") -> None:
    """Fail early (before any work) where ``path`` cannot be written
    (:func:`~autoplace.formats.files.check_output_path`)."""

    check_output_path(path, what)


def console(to_stderr: bool = False):
    """Where messages go: standard output (standard error when the output file itself is ``-``). User
    strings (graph, op, device names) are printed as they are: no markup, no emoji codes."""

    # A pipe or a CI log gets a wide table rather than rich's 80-column default.
    stream = sys.stderr if to_stderr else sys.stdout
    return Console(file=stream, highlight=False, markup=False, emoji=False,
                   width=None if stream.isatty() else 160)


def bold(*parts):
    """A line with some parts styled: ``bold("a ", ("b", "bold"))``."""

    return Text.assemble(*parts)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, allow_nan=False, default=json_default))


def json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"steps": args.steps, "timeout": args.timeout, "runtime": args.runtime} if args.env == "measured" else {}


def finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def spinner(title: str, quiet: bool):
    """A spinner on standard error while long work runs with nothing to count (capture, a zoo export);
    nothing when it is not a terminal."""

    if quiet or not sys.stderr.isatty():
        return contextlib.nullcontext()
    return console(True).status(f"{title} …")


def with_progress(title: str, quiet: bool, work):
    """Run ``work()`` showing a progress bar on a terminal, fed by the searches' progress reports; where
    standard error is a log or a pipe, plain lines (:class:`~autoplace.progress.PlainLines`: a search's
    first report, then one every 10 s; nothing from work that reports nothing)."""


    if not quiet and not sys.stderr.isatty():
        lines = PlainLines()
        lines.stage(title, write=False)
        with progress_to(lines):
            return work()
    with Progress(transient=True, disable=quiet or not sys.stderr.isatty(), console=console(True)) as bar:
        task = bar.add_task(title, total=1.0)

        def update(message: str, fraction: float | None) -> None:
            bar.update(task, description=message, **({} if fraction is None else {"completed": fraction}))

        with progress_to(update):
            return work()




def jsonable(x: Any) -> Any:
    """Placer metadata as plain JSON: non-finite numbers become null, numpy scalars plain numbers."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x
