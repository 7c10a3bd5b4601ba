"""The benchmark suite: the papers' experiments, simulated, side by side with the papers' figures.

:func:`run_bench` runs the tables of :data:`~autoplace.bench.suite.TABLES` (``autoplace bench --list``)
into a results folder: one ``NAME.md``, ``NAME.json`` and ``NAME.png`` per table, ``README.md``
gathering them, and ``jobs.jsonl``, the finished jobs, from which an interrupted bench continues.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autoplace.bench.jobs import Job, Setting, run_job
from autoplace.bench.plan import FULL, QUICK, Budgets, Run, Variant
from autoplace.bench.render import Table
from autoplace.bench.store import Store
from autoplace.bench.suite import TABLES, table_settings
from autoplace.errors import FormatError, UnknownNameError
from autoplace.formats.files import atomic_write_text, check_output_folder, check_output_path, write_json

__all__ = ["run_bench", "make_run", "table_names", "BenchResult", "TABLES", "QUICK", "FULL", "Budgets", "Run",
           "Variant", "Setting", "Table"]


@dataclass
class BenchResult:
    """What :func:`run_bench` did: the tables it wrote, the jobs it ran and those it found done."""

    tables: list[Table]
    ran: int
    reused: int
    folder: Path
    wall_s: float
    rejected: list = field(default_factory=list)   #: damaged lines of jobs.jsonl set aside: (line, reason)


def table_names(tables: Sequence[str] | None = None) -> list[str]:
    """``tables`` (default: every table), each checked to be one: an unknown name is one clear error."""
    names = list(tables or TABLES)
    for n in names:
        if n not in TABLES:
            raise UnknownNameError(f"unknown bench table {n!r} (known: {', '.join(TABLES)})")
    return names


def run_bench(folder: str | Path, *, tables: Sequence[str] | None = None, quick: bool = False,
              graphs: Sequence[str] = (), seed: int = 0, budgets: Budgets | None = None,
              configs: dict[str, dict] | None = None, variants: Sequence[Variant] = (),
              versus: Sequence[tuple[str, str]] = (), seeds: Sequence[int] = (),
              progress: Callable[[int, int, str], None] | None = None) -> BenchResult:
    """Run ``tables`` (default: all) into ``folder``: each table's jobs not already in the folder's store,
    then its Markdown, JSON and PNG. ``quick`` takes each table's small settings and :data:`QUICK`
    budgets; ``graphs`` puts these graphs (zoo names or files) in place of each table's models, on the
    table's clusters. ``configs`` (placer -> settings) runs learned placers under other settings wherever
    they run; each :class:`Variant` is a method column of its own beside its placer. ``seeds``: each learned
    search runs once per seed, beside its learning-off self (``PLACER-off``); empty: ``seed`` alone.
    ``progress(done, total, label)`` is called before each job runs."""

    names = table_names(tables)
    check_output_folder(folder, "results")
    run = make_run(quick=quick, graphs=graphs, seed=seed, budgets=budgets, configs=configs, variants=variants,
                   versus=versus, seeds=seeds)
    b = run.budgets
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)       # an unusable folder fails now, not after the first job
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FormatError(f"{folder}: the results folder is not writable")
    for name in ("README.md", *(f"{n}.{ext}" for n in names for ext in ("md", "json", "png"))):
        check_output_path(folder / name, "bench table")   # every output writable before the first job
    store = Store(folder)
    plan = [(TABLES[n], table_settings(TABLES[n], quick, tuple(graphs))) for n in names]
    jobs: list[Job] = list(dict.fromkeys(j for spec, settings in plan for j in spec.jobs(spec, settings, run)))
    todo = [j for j in jobs if j not in store]
    t0 = time.perf_counter()
    for i, job in enumerate(todo):
        if progress is not None:
            progress(i, len(todo), job.label)
        store.add(job, run_job(job, store.results))
    if progress is not None:
        progress(len(todo), len(todo), "tables")
    built = []
    for spec, settings in plan:
        t = spec.build(spec, settings, run, store)
        atomic_write_text(folder / f"{spec.name}.md", t.markdown())
        write_json(folder / f"{spec.name}.json", t.to_dict())
        t.png(folder / f"{spec.name}.png")
        built.append(t)
    index = ["# Benchmark results", "", f"`{command(names if tables else None, run)}`: {len(jobs)} jobs "
             f"({len(todo)} run now, {len(jobs) - len(todo)} from earlier runs); search placers {b.search:g} s, "
             f"learned placers {b.learned:g} s of nominal work.", ""]
    index += [f"- [{t.title}]({t.name}.md) — ![{t.name}]({t.name}.png)" for t in built]
    earlier = [n for n in TABLES if n not in names and (folder / f"{n}.md").exists()]
    if earlier:
        index += ["", "Tables an earlier run wrote in this folder (each says its budgets and settings):", ""]
        index += [f"- [{TABLES[n].title}]({n}.md) — ![{n}]({n}.png)" for n in earlier]
    atomic_write_text(folder / "README.md", "\n".join(index) + "\n")
    return BenchResult(built, len(todo), len(jobs) - len(todo), folder, time.perf_counter() - t0, store.rejected)


def command(tables: Sequence[str] | None, run: Run) -> str:
    """The ``autoplace bench`` command line that makes ``run``'s jobs (its results folder left out)."""
    default = QUICK if run.quick else FULL
    parts = ["autoplace bench", *(["--quick"] if run.quick else []), *(f"--graph {g}" for g in run.graphs)]
    if tables:
        parts.append(f"--tables {','.join(tables)}")
    if run.budgets.search != default.search:
        parts.append(f"--budget {run.budgets.search:g}")
    if run.budgets.learned != default.learned:
        parts.append(f"--learned-budget {run.budgets.learned:g}")
    parts += [f"--variant {v.label}={v.placer}" for v in run.variants]
    parts += [f"--versus {a}:{b}" for a, b in run.versus]
    parts += [f"--set {name}.{k}={json.dumps(x)}" for name, c in (*run.configs, *((v.label, v.config)
                                                                                   for v in run.variants))
              for k, x in c]
    parts.append(f"--seeds {','.join(map(str, run.seeds)) or 'none'}")
    return " ".join([*parts, f"--seed {run.seed}"])


def make_run(*, quick: bool = False, graphs: Sequence[str] = (), seed: int = 0, budgets: Budgets | None = None,
             configs: dict[str, dict] | None = None, variants: Sequence[Variant] = (),
             versus: Sequence[tuple[str, str]] = (), seeds: Sequence[int] = ()) -> Run:
    """The :class:`Run` of a bench: ``budgets`` (default :data:`QUICK` or :data:`FULL`), ``configs`` as
    sorted pairs (the same settings make the same job keys); bad settings are one clear error."""
    pairs = tuple((p, tuple(sorted(c.items()))) for p, c in sorted((configs or {}).items()) if c)
    return Run(budgets or (QUICK if quick else FULL), seed, pairs, tuple(variants), quick, tuple(graphs),
               tuple(tuple(p) for p in versus), tuple(seeds))
