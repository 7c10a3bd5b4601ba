"""HTF-MPR's tables: its fitness predictors compared (Figure 8) and the enumeration of every mapping of a
small graph beside its search."""

from __future__ import annotations

import autoplace.bench.published as published
from autoplace.bench.builders import new_table
from autoplace.bench.jobs import Job, Setting
from autoplace.bench.plan import Run, TableSpec
from autoplace.bench.render import Table, fmt_seconds
from autoplace.bench.store import Store

__all__ = ["predictor_jobs", "build_predictor", "enumerate_jobs", "build_enumerate", "QUICK_MAPPINGS"]


def _predictor_job(s: Setting, run: Run) -> Job:
    return Job.of("predictor", setting=s, budget=run.budgets.learned, seed=run.seed, runs=run.budgets.predictor_runs,
                  config=run.config("htf-mpr"))


def predictor_jobs(spec: TableSpec, settings, run: Run) -> list[Job]:
    return [_predictor_job(s, run) for s in settings]


def build_predictor(spec: TableSpec, settings, run: Run, store: Store) -> Table:
    rows, plot, names = [], {}, None
    for s in settings:
        r = store[_predictor_job(s, run)]
        names = names or list(r["models"])
        cells = []
        for n in names:
            m = r["models"].get(n)
            if m is None:                                  # a row an earlier run wrote without this model
                cells.append("–")
                continue
            cells.append("every fit failed" if m["mean"] is None else
                         f"{m['mean']:.3f} ± {m['std']:.3f}"
                         + (f" ({m['failed_runs']} failed)" if m["failed_runs"] else ""))
        plot[s.key] = {n: (r["models"][n]["mean"], r["models"][n]["std"]) for n in names if n in r["models"]}
        best = min((n for n in names if r["models"].get(n, {}).get("mean") is not None),
                   key=lambda n: r["models"][n]["mean"], default="none")
        rows.append([f"{s.key} ({r['mappings']} mappings)", *cells, best, f"{r['wall_s']:.1f}"])
    t = new_table(spec, run)
    t.add_section("Normalised Kendall tau distance (lower ranks better), mean ± std over runs; "
                  f"paper: {published.HTF_FIGURE8_CLAIM}", ["setting", *(names or []), "best", "wall (s)"], rows)
    t.plot = ("tau", "", plot)
    return t


#: ``--quick``: the most mappings an enumeration simulates (more nodes are coarsened)
QUICK_MAPPINGS = 3 ** 9


def _enumerate_job(s: Setting, run: Run) -> Job:
    return Job.of("enumerate", setting=s, budget=run.budgets.learned, seed=run.seed, config=run.config("htf-mpr"),
                  max_mappings=QUICK_MAPPINGS if run.quick else None)


def enumerate_jobs(spec: TableSpec, settings, run: Run) -> list[Job]:
    return [_enumerate_job(s, run) for s in settings]


def build_enumerate(spec: TableSpec, settings, run: Run, store: Store) -> Table:
    rows, plot = [], {}
    for s in settings:
        e = store[_enumerate_job(s, run)]
        share = e["better_than_default"] / e["mappings"]
        coarse = " (coarsened)" if e["coarsened"] else ""
        rows.append([s.key, f"{e['devices']}^{e['nodes']} = {e['mappings']:,}{coarse}",
                     fmt_seconds(e["default_step_s"]),
                     f"{share:.1%}", f"{published.HTF_ENUMERATION_SHARE:.0%}", f"{e['failed']:,}",
                     fmt_seconds(e["best_step_s"]), fmt_seconds(e["htf_mpr_step_s"]),
                     f"{e['htf_mpr_rank']:,} ({e['htf_mpr_ties']:,} tie)", str(e["htf_mpr_evaluations"]),
                     f"{e['enumeration_s']:.0f}"])
        best = e["best_step_s"]
        plot[s.key] = {"htf-mpr vs best": (best / e["htf_mpr_step_s"] if best and e["htf_mpr_step_s"] else None, None)}
    t = new_table(spec, run)
    t.add_section("Every mapping of the HTF-MPR nodes, simulated (steps in seconds)",
                  ["setting", "mappings", "default step", "faster than the default", "paper", "failed", "best",
                   "htf-mpr", "htf-mpr's rank", "htf-mpr evaluations", "enumeration (s)"], rows)
    t.plot = ("speedup", "the best mapping", plot)
    return t
