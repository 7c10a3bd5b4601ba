"""The benchmark suite: the papers' experiments, simulated, side by side with the papers' figures.

:func:`run_bench` runs the tables of :data:`~autoplace.bench.suite.TABLES` (``autoplace bench --list``)
into a results folder: one ``NAME.md``, ``NAME.json`` and ``NAME.png`` per table, ``README.md``
gathering them, and ``jobs.jsonl``, the finished jobs, from which an interrupted bench continues.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from autoplace.bench.render import Table
from autoplace.bench.suite import FULL, QUICK, TABLES, Budgets, Job, Setting, Store, run_job, table_settings
from autoplace.errors import FormatError, UnknownNameError

__all__ = ["run_bench", "table_names", "BenchResult", "TABLES", "QUICK", "FULL", "Budgets", "Setting", "Table"]


@dataclass
class BenchResult:
    """What :func:`run_bench` did: the tables it wrote, the jobs it ran and those it found done."""

    tables: list[Table]
    ran: int
    reused: int
    folder: Path
    wall_s: float


def table_names(tables: Sequence[str] | None = None) -> list[str]:
    """``tables`` (default: every table), each checked to be one: an unknown name is one clear error."""
    names = list(tables or TABLES)
    for n in names:
        if n not in TABLES:
            raise UnknownNameError(f"unknown bench table {n!r} (known: {', '.join(TABLES)})")
    return names


def run_bench(folder: str | Path, *, tables: Sequence[str] | None = None, quick: bool = False,
              graphs: Sequence[str] = (), seed: int = 0, budgets: Budgets | None = None,
              progress: Callable[[int, int, str], None] | None = None) -> BenchResult:
    """Run ``tables`` (default: all) into ``folder``: each table's jobs not already in the folder's store,
    then its Markdown, JSON and PNG. ``quick`` takes each table's small settings and :data:`QUICK`
    budgets; ``graphs`` puts these graphs (zoo names or files) in place of each table's models, on the
    table's clusters. ``progress(done, total, label)`` is called before each job runs."""
    from autoplace.formats._json import atomic_write_text, write_json

    names = table_names(tables)
    b = budgets or (QUICK if quick else FULL)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)       # an unusable folder fails now, not after the first job
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FormatError(f"{folder}: the results folder is not writable")
    store = Store(folder)
    plan = [(TABLES[n], table_settings(TABLES[n], quick, tuple(graphs))) for n in names]
    jobs: list[Job] = list(dict.fromkeys(j for spec, settings in plan for j in spec.jobs(settings, b, seed)))
    todo = [j for j in jobs if j not in store]
    t0 = time.perf_counter()
    for i, job in enumerate(todo):
        if progress is not None:
            progress(i, len(todo), job.label)
        store.add(job, run_job(job))
    if progress is not None:
        progress(len(todo), len(todo), "tables")
    built = []
    for spec, settings in plan:
        t = spec.build(spec, settings, b, seed, store)
        atomic_write_text(folder / f"{spec.name}.md", t.markdown())
        write_json(folder / f"{spec.name}.json", t.to_dict())
        t.png(folder / f"{spec.name}.png")
        built.append(t)
    index = ["# Benchmark results", "",
             f"`autoplace bench{' --quick' if quick else ''}" + "".join(f" --graph {g}" for g in graphs)
             + (f" --tables {','.join(names)}" if tables else "") + f" --seed {seed}`: {len(jobs)} jobs "
             f"({len(todo)} run now, {len(jobs) - len(todo)} from earlier runs); search placers {b.search:g} s, "
             f"learned placers {b.learned:g} s of nominal work.", ""]
    index += [f"- [{t.title}]({t.name}.md) — ![{t.name}]({t.name}.png)" for t in built]
    atomic_write_text(folder / "README.md", "\n".join(index) + "\n")
    return BenchResult(built, len(todo), len(jobs) - len(todo), folder, time.perf_counter() - t0)
