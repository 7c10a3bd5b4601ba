"""What the benchmark scripts share: Markdown tables, JSON files written whole, geometric means.

The papers' tables are ``autoplace bench`` (src/autoplace/bench); the scripts here measure the rest —
the simulator's and the placers' speed, the zoo, co-location groups, the learned searches' throughput
and resume, fidelity against real runs, the GPU machine. Import as ``from _common import ...`` (a script's
own folder is on ``sys.path`` when it runs).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from autoplace.bench.render import markdown_table
from autoplace.formats.files import atomic_write_text
from autoplace.stats import geomean

__all__ = ["print_table", "TableOut", "save_json", "geo", "note", "settings_args"]


def print_table(columns: list[str], rows: Iterable[list], align: str = "") -> None:
    """Print a Markdown table (``align``: ``l``/``r`` per column; default first left, the rest right)."""
    print(markdown_table(columns, list(rows), align), flush=True)


class TableOut:
    """A Markdown table printed row by row as the results come (a long run shows its progress)."""

    def __init__(self, columns: list[str], align: str = ""):
        print(markdown_table(columns, [], align), flush=True)

    def row(self, *cells) -> None:
        print(markdown_table([""] * len(cells), [list(cells)]).splitlines()[-1], flush=True)


def save_json(path: str, obj) -> None:
    """Write ``obj`` as JSON to ``path`` whole (a temporary file renamed over it): an interrupted run never
    leaves half a file. NaN and infinities are written as JSON's extension allows (``NaN``)."""
    import json

    atomic_write_text(path, json.dumps(obj, indent=1) + "\n")


def geo(xs) -> float:
    """The geometric mean of the positive numbers of ``xs`` (NaN where there are none)."""
    return geomean([x for x in xs if x], empty=float("nan"))


def note(message: str) -> None:
    """Progress for the person running the script, on stderr (stdout holds the tables)."""
    print(message, file=sys.stderr, flush=True)


def settings_args(doc: str, argv: list[str] | None, budget: float) -> argparse.Namespace:
    """The arguments of a script that runs ``auto`` on zoo settings: ``MODEL@CLUSTER`` ..., ``--budget``
    (default ``budget``), ``--seed``, ``--json`` (a file to write)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("settings", nargs="+", help="MODEL@CLUSTER")
    ap.add_argument("--budget", type=float, default=budget)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    return ap.parse_args(argv)
