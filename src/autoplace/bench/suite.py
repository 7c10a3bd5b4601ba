"""The benchmark suite: the papers' experiments as jobs, a store that makes them resumable, tables.

A *job* is one unit of work whose result is a small JSON object: one placer on one setting
(:func:`place_job`), one GDP policy trained over a batch of settings (:func:`gdp_batch_job`), a policy
pre-trained without one setting then placing it zero-shot and fine-tuned (:func:`gdp_holdout_job`), or
HTF-MPR's fitness predictors compared on the mappings of one search (:func:`predictor_job`). A job's key
holds everything its result depends on (settings, method, budget, seed), so results of runs with other
budgets never mix, and jobs shared by two tables run once.

The :class:`Store` appends each finished job's result to ``jobs.jsonl`` in the results folder (a line
per job, flushed and synced): a bench stopped at any point continues with the first job it had not
finished. A *table spec* (:data:`TABLES`) names the jobs a table needs for a choice of settings and
builds the :class:`~autoplace.bench.render.Table` from their results.

Why one long file: the job kinds, the store and the tables are read together (a table's columns are
its jobs' fields); the rendering is in :mod:`autoplace.bench.render`, the papers' figures in
:mod:`autoplace.bench.published`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import autoplace.bench.published as published
from autoplace.bench.render import Table, fmt_seconds, fmt_speedup
from autoplace.errors import AutoplaceError
from autoplace.stats import geomean

__all__ = ["Setting", "Job", "Store", "Budgets", "TableSpec", "TABLES", "QUICK", "FULL",
           "place_job", "gdp_batch_job", "gdp_holdout_job", "predictor_job", "run_job", "table_settings"]


# ---------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Setting:
    """A graph on a cluster: a zoo model (with its parameters, or a graph file) on a cluster preset or file.

    ``gpu_memory`` makes the setting memory-tight: each GPU's memory is cut to that fraction of the graph's
    peak memory on one GPU (the single-GPU placement's), so that the graph fits no single GPU."""

    model: str
    cluster: str
    params: tuple[tuple[str, Any], ...] = ()
    gpu_memory: float | None = None
    digest: str = ""          #: a graph file's content hash: its results are keyed by content, not by path

    @property
    def key(self) -> str:
        p = "".join(f" -P {k}={v}" for k, v in self.params)
        d = f" [{self.digest}]" if self.digest else ""
        m = f" (GPU memory {self.gpu_memory:.0%} of one-GPU peak)" if self.gpu_memory is not None else ""
        return f"{self.model}{d}{p} on {self.cluster}{m}"

    @property
    def identity(self) -> str:
        """What a job's key holds of the setting: its key, with a graph file named by its content's hash
        alone (the same file under another path is the same setting)."""
        return replace(self, model="graph file").key if self.digest else self.key

    @property
    def n_gpus(self) -> int:
        """The GPUs of a preset named ``...xN`` (the papers' tables key their figures by it)."""
        tail = self.cluster.rsplit("x", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    def problem(self):
        """``(graph, cluster)``, built once per process."""
        return _problem(self)


@functools.lru_cache(maxsize=32)
def _problem(s: Setting):
    from autoplace.resolve import resolve_cluster, resolve_graph

    graph = resolve_graph(s.model, dict(s.params) or None)
    cluster = resolve_cluster(s.cluster)
    if s.gpu_memory is not None:
        cluster = tight_cluster(graph, cluster, s.gpu_memory)
    return graph, cluster


def tight_cluster(graph, cluster, fraction: float):
    """``cluster`` with each GPU's memory cut to ``fraction`` of ``graph``'s peak on one GPU (the
    single-GPU placement, simulated), so that with ``fraction`` < 1 the graph fits no single GPU."""
    from autoplace.cluster import Cluster
    from autoplace.placers import place
    from autoplace.sim import simulate

    if not 0 < fraction:
        raise AutoplaceError(f"a memory-tight setting needs a positive GPU memory fraction, got {fraction!r}")
    r = simulate(graph, cluster, place(graph, cluster, "single-gpu"))
    gpus = [i for i, d in enumerate(cluster.devices) if d.kind == "gpu"]
    if not gpus:
        raise AutoplaceError(f"cluster {cluster.name!r} has no GPU to make memory-tight")
    cap = max(1, int(fraction * max(float(r.peak_memory[i]) for i in gpus)))
    devices = [replace(d, memory_bytes=cap) if d.kind == "gpu" else d for d in cluster.devices]
    return Cluster(f"{cluster.name}-tight", devices, cluster.links, cluster.default_link,
                   {**cluster.meta, "gpu_memory_fraction": fraction}, cluster.segments)


# ---------------------------------------------------------------------- jobs
@dataclass(frozen=True)
class Job:
    """One unit of work: ``kind`` names its function, ``args`` its JSON-able arguments."""

    kind: str
    args: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, kind: str, **args) -> Job:
        return cls(kind, tuple(sorted(args.items())))

    @property
    def key(self) -> str:
        return json.dumps({"kind": self.kind, **{k: _jsonable(v) for k, v in self.args}}, sort_keys=True)

    @property
    def label(self) -> str:
        a = dict(self.args)
        what = a.get("method") or self.kind
        where = a.get("setting") or a.get("held_out") or f"{len(a.get('settings', ()))} settings"
        return f"{what} · {where.key if isinstance(where, Setting) else where}"


def _jsonable(v):
    if isinstance(v, Setting):
        return v.identity
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    return v


def place_job(setting: Setting, method: str, budget: float, seed: int) -> dict:
    """Place ``setting`` with ``method`` and simulate the placement: its step (``None`` where it fails),
    whether it ran, the devices out of memory, the placer's error, its search time and the job's wall
    time."""
    from autoplace.errors import InfeasibleError, UnavailableError
    from autoplace.placers import place
    from autoplace.sim import simulate

    graph, cluster = setting.problem()
    t0 = time.perf_counter()
    try:
        p = place(graph, cluster, method, seed=seed, budget=budget)
    except (InfeasibleError, UnavailableError) as e:
        return {"step_s": None, "ok": False, "oom": [], "error": str(e), "search_s": time.perf_counter() - t0,
                "wall_s": time.perf_counter() - t0}
    _check_finished(p.meta.get("stop_reason"))
    r = simulate(graph, cluster, p)
    return {"step_s": float(r.step_time) if r.ok else None, "ok": bool(r.ok), "oom": list(r.oom_devices),
            "error": None, "search_s": float(p.meta["search_time_s"]), "wall_s": time.perf_counter() - t0,
            "peak_gib": [round(float(x) / 2**30, 3) for x in r.peak_memory],
            "devices_used": len(set(p.assignment.values()))}


def gdp_batch_job(settings: tuple[Setting, ...], budget: float, seed: int) -> dict:
    """GDP-batch (Zhou et al. §4.3): one policy trained over every setting with ``budget`` seconds of
    nominal work for each (the same work GDP-one spends on each alone); each setting's best step."""
    from autoplace.placers.gdp import gdp_train

    probs = [s.problem() for s in settings]
    t0 = time.perf_counter()
    r = gdp_train([g for g, _ in probs], [c for _, c in probs], budget=budget * len(settings), seed=seed)
    _check_finished(r.stop_reason)
    return {"steps_s": {s.key: _finite(x) for s, x in zip(settings, r.extra["best_steps_s"])},
            "updates": r.updates, "samples": r.samples, "wall_s": time.perf_counter() - t0}


def gdp_holdout_job(held_out: Setting, others: tuple[Setting, ...], budget: float, fine_tune_updates: int,
                    seed: int) -> dict:
    """GDP's generalisation (Figure 2): a policy pre-trained on ``others`` (``budget`` seconds of nominal
    work each) places ``held_out`` zero-shot, then is fine-tuned on it for ``fine_tune_updates`` PPO
    updates; the steps and the wall time of each part."""
    import tempfile

    from autoplace.placers.gdp import gdp_search, gdp_train, load_policy, zero_shot
    from autoplace.search import SearchBudget

    probs = [s.problem() for s in others]
    graph, cluster = held_out.problem()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pretrained.pt")
        t0 = time.perf_counter()
        _check_finished(gdp_train([g for g, _ in probs], [c for _, c in probs], budget=budget * len(others),
                                  seed=seed, output=path).stop_reason)
        pretrain_s = time.perf_counter() - t0
        net, cfg = load_policy(path)
        t0 = time.perf_counter()
        zs = zero_shot(net, graph, cluster, cfg, seed=seed)
        zero_shot_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        samples = SearchBudget(samples=fine_tune_updates * cfg.samples_per_update)
        tuned = gdp_search(graph, cluster, policy=path, budget=samples, seed=seed)
        _check_finished(tuned.stop_reason)
        fine_tune_s = time.perf_counter() - t0
    return {"zero_shot_s": _finite(zs.meta["best_step_s"]), "fine_tune_s": _finite(tuned.placement.meta["best_step_s"]),
            "pretrain_wall_s": pretrain_s, "zero_shot_wall_s": zero_shot_s, "fine_tune_wall_s": fine_tune_s,
            "fine_tune_updates": tuned.updates}


def predictor_job(setting: Setting, budget: float, seed: int, folds: int = 5, runs: int = 5) -> dict:
    """HTF-MPR's Figure 8: every fitness predictor's Kendall tau distance (``folds``-fold cross-validation,
    mean and standard deviation over ``runs`` runs) on the mappings one HTF-MPR search (``budget`` seconds
    of nominal work) evaluated."""
    from autoplace.placers.htf_mpr import fitness, htf_mpr_search
    from autoplace.search.predictor import compare_models

    graph, cluster = setting.problem()
    t0 = time.perf_counter()
    r = htf_mpr_search(graph, cluster, budget=budget, seed=seed)
    _check_finished(r.stop_reason)
    search_s = time.perf_counter() - t0
    X, steps = r.extra["mappings"], r.extra["steps"]
    table = compare_models(X, fitness(steps), n_devices=cluster.n_devices, k=min(folds, len(X)), runs=runs,
                           seed=seed)
    return {"mappings": int(len(X)), "models": {k: {"mean": _finite(v[0]), "std": _finite(v[1]), "failed_runs": v[2]}
                                                for k, v in table.items()},
            "search_s": search_s, "wall_s": time.perf_counter() - t0}


JOBS: dict[str, Callable[..., dict]] = {"place": place_job, "gdp-batch": gdp_batch_job,
                                        "gdp-holdout": gdp_holdout_job, "predictor": predictor_job}


#: Placers whose budget is spent in full (the others return as soon as they have placed).
BUDGETED = ("auto", "local-search", "cp-sat")


def nominal_work(job: Job) -> float:
    """Seconds of search budget ``job`` spends (nominal work for the learned placers, about seconds for
    ``auto``, ``local-search`` and ``cp-sat``; 0 for placers that take no budget): a plan's size, not a
    measured time."""
    a = dict(job.args)
    if job.kind == "place":
        return a["budget"] if a["method"] in LEARNED + BUDGETED else 0.0
    if job.kind == "gdp-batch":
        return a["budget"] * len(a["settings"])
    if job.kind == "gdp-holdout":
        return a["budget"] * len(a["others"])
    return a["budget"]


def run_job(job: Job) -> dict:
    return JOBS[job.kind](**dict(job.args))


def _check_finished(stop_reason: str | None) -> None:
    """A learned search stopped by Ctrl-C returns its best so far: a bench job stops instead of keeping a
    result short of its budget."""
    if stop_reason == "interrupted":
        raise KeyboardInterrupt


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


# ---------------------------------------------------------------------- the store
class Store:
    """Finished jobs' results in ``folder/jobs.jsonl``, one JSON line per job, appended as each finishes."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / "jobs.jsonl"
        self.results: dict[str, dict] = {}
        if self.path.exists():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):   # a line cut short by a kill: dropped (that job runs again)
                data = data[:data.rfind(b"\n") + 1]
                with open(self.path, "r+b") as f:
                    f.truncate(len(data))
            for line in data.decode("utf-8", errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                    self.results[rec["job"]] = rec["result"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue

    def __contains__(self, job: Job) -> bool:
        return job.key in self.results

    def __getitem__(self, job: Job) -> dict:
        return self.results[job.key]

    def add(self, job: Job, result: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"job": job.key, "result": result}, allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.results[job.key] = result


# ---------------------------------------------------------------------- budgets and modes
@dataclass(frozen=True)
class Budgets:
    """How much work each kind of placer gets (seconds: the search placers' own budgets, and the learned
    placers' nominal work, which does not depend on the machine's speed)."""

    search: float                 #: auto, local-search and the other placers that take a budget
    learned: float                #: rl, hdp, gdp, htf-mpr on one setting
    fine_tune_updates: int        #: GDP's fine-tune on a held-out graph (the paper: under 50)
    predictor_runs: int           #: HTF-MPR's Figure 8: cross-validation runs per predictor


QUICK = Budgets(search=1.0, learned=2.0, fine_tune_updates=2, predictor_runs=2)
FULL = Budgets(search=60.0, learned=600.0, fine_tune_updates=40, predictor_runs=5)

LEARNED = ("rl", "hdp", "gdp", "htf-mpr")


def _method_budget(method: str, b: Budgets) -> float:
    return b.learned if method in LEARNED else b.search


# ---------------------------------------------------------------------- tables
@dataclass(frozen=True)
class TableSpec:
    """One table of the suite: its settings (full and ``--quick``), the jobs it needs for a choice of
    settings, and how its :class:`Table` is built from their results."""

    name: str
    title: str
    full: tuple[Setting, ...]
    quick: tuple[Setting, ...]
    jobs: Callable[[tuple[Setting, ...], Budgets, int], list[Job]]
    build: Callable[[TableSpec, tuple[Setting, ...], Budgets, int, Store], Table]
    about: str = ""
    methods: tuple[str, ...] = ()
    baseline: str = ""
    paper: Callable[[Setting, str], float | None] | None = field(default=None, repr=False)
    memory_tight: float | None = None   #: a graph given by ``--graph`` runs with this GPU memory fraction
    paper_unit: str = "s"               #: what the paper's steps are in


def _placer_jobs(methods):
    def jobs(settings, b, seed):
        return [Job.of("place", setting=s, method=m, budget=_method_budget(m, b), seed=seed)
                for s in settings for m in methods]
    return jobs


def _paper_cell(spec: TableSpec, s: Setting, method: str) -> tuple[str, float | None]:
    """(text, seconds) of the paper's figure for a cell: ``–`` where the paper has none."""
    if spec.paper is None:
        return "–", None
    try:
        v = spec.paper(s, method)
    except KeyError:
        return "–", None
    return ("OOM", None) if v is None else (f"{v:.4g}", v)


def build_placer_table(spec: TableSpec, settings, b: Budgets, seed: int, store: Store) -> Table:
    """Per setting and method: our simulated step and speedup over the baseline, the paper's step and
    speedup, the search and wall time; a wide table of speedups (ours / paper); per method the geometric
    mean of our speedups over the settings where the method and the baseline ran, of the paper's over the
    settings where it prints both, and of ours over those same settings."""
    methods = spec.methods or _all_placers()
    has_paper = spec.paper is not None          # a table of our own settings shows no paper columns
    rows, wide, ours_sp, paper_sp = [], [], {m: [] for m in methods}, {m: [] for m in methods}
    both = {m: [] for m in methods}             # ours, on the settings where the paper has a figure too
    plot = {}
    for s in settings:
        res = {m: store[Job.of("place", setting=s, method=m, budget=_method_budget(m, b), seed=seed)]
               for m in methods}
        base = res[spec.baseline]["step_s"]
        pbase = _paper_cell(spec, s, spec.baseline)[1]
        cells = []
        for m in methods:
            r = res[m]
            sp = base / r["step_s"] if base and r["step_s"] else None
            ptext, psec = _paper_cell(spec, s, m)
            psp = pbase / psec if pbase and psec else None
            if sp is not None:
                ours_sp[m].append(sp)
            if psp is not None:
                paper_sp[m].append(psp)
                if sp is not None:
                    both[m].append(sp)
            plot.setdefault(s.key, {})[m] = (sp, psp)
            paper_cols = [ptext, fmt_speedup(psp)] if has_paper else []
            rows.append([s.key, m, _step_text(r), fmt_speedup(sp), *paper_cols, f"{r['search_s']:.2f}",
                         f"{r['wall_s']:.2f}"])
            cells.append(f"{fmt_speedup(sp)} / {fmt_speedup(psp)}" if has_paper else fmt_speedup(sp))
        wide.append([s.key, *cells])
    summary = [[m, fmt_speedup(geomean(ours_sp[m])), f"{len(ours_sp[m])}/{len(settings)}",
                *([fmt_speedup(geomean(paper_sp[m])), str(len(paper_sp[m])), fmt_speedup(geomean(both[m]))]
                  if has_paper else [])] for m in methods]
    t = Table(spec.name, spec.title, spec.about, budgets=b, seed=seed)
    t.add_section(f"Speedup over {spec.baseline}" + (", ours / paper" if has_paper else ""), ["setting", *methods],
                  wide)
    t.add_section(f"Geometric mean of the speedup over {spec.baseline}",
                  ["method", "ours", "settings that ran",
                   *(["paper", "paper's settings", "ours on the paper's settings"] if has_paper else [])],
                  summary)
    t.add_section("Every cell", ["setting", "method", "step (s)", f"vs {spec.baseline}",
                                 *([f"paper step ({spec.paper_unit})", f"paper vs {spec.baseline}"]
                                   if has_paper else []),
                                 "search (s)", "wall (s)"], rows)
    t.plot = ("speedup", spec.baseline, plot)
    return t


def _step_text(r: dict) -> str:
    if r["ok"]:
        return f"{r['step_s']:.4g}"
    if r["oom"]:
        return "OOM (" + ", ".join(r["oom"]) + ")"
    why = (r["error"] or "no placement").split(": ", 1)[-1]         # the placer's message, less its name
    return "none: " + (why if len(why) <= 70 else why[:69] + "…")


def _all_placers() -> tuple[str, ...]:
    from autoplace.placers import available_placers

    names = available_placers()
    return ("auto", *(n for n in names if n != "auto"))


# GDP Table 2: batch against one
def _gdp_batch_jobs(settings, b, seed):
    return [Job.of("gdp-batch", settings=tuple(settings), budget=b.learned, seed=seed),
            *[Job.of("place", setting=s, method=m, budget=_method_budget(m, b), seed=seed)
              for s in settings for m in ("gdp", "expert")]]


def build_gdp_batch(spec: TableSpec, settings, b: Budgets, seed: int, store: Store) -> Table:
    batch = store[Job.of("gdp-batch", settings=tuple(settings), budget=b.learned, seed=seed)]
    rows, gains, pgains, plot = [], [], [], {}
    for s in settings:
        one = store[Job.of("place", setting=s, method="gdp", budget=b.learned, seed=seed)]["step_s"]
        expert = store[Job.of("place", setting=s, method="expert", budget=b.search, seed=seed)]["step_s"]
        bs = batch["steps_s"][s.key]
        gain = 1 - bs / one if bs and one else None
        if gain is not None:
            gains.append(1 - gain)
        paper = published.GDP_TABLE2.get((s.model, s.n_gpus))
        if paper is not None:
            pgains.append(1 - paper)
        plot[s.key] = {"gdp-batch vs gdp-one": (gain, paper)}
        rows.append([s.key, fmt_seconds(one), fmt_seconds(bs), fmt_seconds(expert),
                     "–" if gain is None else f"{gain:+.1%}", "–" if paper is None else f"{paper:+.1%}"])
    g, pg = geomean(gains), geomean(pgains)
    rows.append(["geometric mean", "–", "–", "–", "–" if g is None else f"{1 - g:+.1%}",
                 "–" if pg is None else f"{1 - pg:+.1%}"])
    t = Table(spec.name, spec.title, spec.about, budgets=b, seed=seed)
    t.add_section(f"GDP-batch against GDP-one (one policy trained {batch['updates']} updates over "
                  f"{len(settings)} graphs in {batch['wall_s']:.0f} s)",
                  ["setting", "gdp-one (s)", "gdp-batch (s)", "expert (s)", "batch run-time gain", "paper's gain"],
                  rows)
    t.plot = ("gain", "gdp-one", plot)
    return t


# GDP Figure 2: hold-out graphs
def _holdout_jobs(settings, b, seed):
    jobs = []
    for held in settings:
        others = tuple(s for s in settings if s != held) or (held,)
        jobs.append(Job.of("gdp-holdout", held_out=held, others=others, budget=b.learned,
                           fine_tune_updates=b.fine_tune_updates, seed=seed))
        jobs += [Job.of("place", setting=held, method=m, budget=_method_budget(m, b), seed=seed)
                 for m in ("gdp", "hdp", "expert")]
    return jobs


def build_holdout(spec: TableSpec, settings, b: Budgets, seed: int, store: Store) -> Table:
    rows, plot = [], {}
    beats = {"zero-shot": 0, "fine-tune": 0}
    for held in settings:
        others = tuple(s for s in settings if s != held) or (held,)
        h = store[Job.of("gdp-holdout", held_out=held, others=others, budget=b.learned,
                         fine_tune_updates=b.fine_tune_updates, seed=seed)]
        ref = {m: store[Job.of("place", setting=held, method=m, budget=_method_budget(m, b), seed=seed)]["step_s"]
               for m in ("gdp", "hdp", "expert")}
        e = ref["expert"]
        for name, v in (("zero-shot", h["zero_shot_s"]), ("fine-tune", h["fine_tune_s"])):
            if v is not None and e is not None and v <= e and (ref["hdp"] is None or v <= ref["hdp"]):
                beats[name] += 1
        plot[held.key] = {m: (e / v if e and v else None, None) for m, v in
                          (("zero-shot", h["zero_shot_s"]), ("fine-tune", h["fine_tune_s"]), ("gdp-one", ref["gdp"]),
                           ("hdp", ref["hdp"]))}
        rows.append([held.key + ("" if others != (held,) else " (trained on itself: one graph given)"),
                     fmt_seconds(h["zero_shot_s"]), fmt_seconds(h["fine_tune_s"]), fmt_seconds(ref["gdp"]),
                     fmt_seconds(ref["hdp"]), fmt_seconds(e), f"{h['pretrain_wall_s']:.1f}",
                     f"{h['zero_shot_wall_s']:.2f}", f"{h['fine_tune_wall_s']:.1f} ({h['fine_tune_updates']} updates)"])
    n = len(settings)
    claims = [["fine-tune", published.GDP_FIGURE2_CLAIMS["fine-tune"],
               f"at least as fast as expert and HDP on {beats['fine-tune']}/{n}"],
              ["zero-shot", published.GDP_FIGURE2_CLAIMS["zero-shot"],
               f"at least as fast as expert and HDP on {beats['zero-shot']}/{n}"]]
    t = Table(spec.name, spec.title, spec.about, budgets=b, seed=seed)
    t.add_section("Held-out graphs (step in seconds)",
                  ["held out", "zero-shot", "fine-tune", "gdp-one", "hdp", "expert", "pre-train (s)",
                   "zero-shot (s)", "fine-tune (s)"], rows)
    t.add_section("The paper's claims (Figure 2 has no printed numbers)", ["placement", "paper", "ours"], claims)
    t.plot = ("speedup", "expert", plot)
    return t


# HTF-MPR Figure 8: the fitness predictors
def _predictor_jobs(settings, b, seed):
    return [Job.of("predictor", setting=s, budget=b.learned, seed=seed, runs=b.predictor_runs) for s in settings]


def build_predictor(spec: TableSpec, settings, b: Budgets, seed: int, store: Store) -> Table:
    rows, plot, names = [], {}, None
    for s in settings:
        r = store[Job.of("predictor", setting=s, budget=b.learned, seed=seed, runs=b.predictor_runs)]
        names = names or list(r["models"])
        cells = []
        for n in names:
            m = r["models"][n]
            cells.append("every fit failed" if m["mean"] is None else
                         f"{m['mean']:.3f} ± {m['std']:.3f}"
                         + (f" ({m['failed_runs']} failed)" if m["failed_runs"] else ""))
        plot[s.key] = {n: (r["models"][n]["mean"], r["models"][n]["std"]) for n in names}
        best = min((n for n in names if r["models"][n]["mean"] is not None), key=lambda n: r["models"][n]["mean"],
                   default="none")
        rows.append([f"{s.key} ({r['mappings']} mappings)", *cells, best, f"{r['wall_s']:.1f}"])
    t = Table(spec.name, spec.title, spec.about, budgets=b, seed=seed)
    t.add_section("Normalised Kendall tau distance (lower ranks better), mean ± std over runs; "
                  f"paper: {published.HTF_FIGURE8_CLAIM}", ["setting", *(names or []), "best", "wall (s)"], rows)
    t.plot = ("tau", "", plot)
    return t


def _s(model: str, cluster: str, gpu_memory: float | None = None, **params) -> Setting:
    return Setting(model, cluster, tuple(sorted(params.items())), gpu_memory)


def _mirhoseini_paper(s: Setting, m: str):
    return published.mirhoseini_seconds(s.model, s.n_gpus, m)


def _large_paper(s: Setting, m: str):
    return {"rl": published.MIRHOSEINI_LARGE_RL[s.model]}[m]


def _gdp_paper(s: Setting, m: str):
    return published.gdp_table1_seconds(s.model, s.n_gpus, m)


def _htf_paper(s: Setting, m: str):
    speedup = published.HTF_SPEEDUP[s.model]
    return {"single-gpu": 1.0, "htf-mpr": 1.0 / speedup}[m]


_MIRHOSEINI_METHODS = ("single-cpu", "single-gpu", "scotch", "mincut", "expert", "rl", "auto", "dp-split", "hdp",
                       "gdp", "htf-mpr")
_GDP_METHODS = ("expert", "single-gpu", "metis", "hdp", "gdp", "auto")
_GDP_SETTINGS = tuple(_s(m, f"p100x{g}") for m, g in published.GDP_TABLE1)
_GDP_BATCH = tuple(_s(m, f"p100x{g}") for m, g in published.GDP_TABLE2)
_HOLDOUT = (_s("transformer-xl-2", "p100x2"), _s("transformer-xl-4", "p100x4"), _s("wavenet-2x18", "p100x2"),
            _s("wavenet-4x36", "p100x4"), _s("inception-v3", "p100x2"), _s("amoebanet", "p100x4"))
_HTF = tuple(_s(m, "gtx1050tix2") for m in published.HTF_SPEEDUP)

TABLES: dict[str, TableSpec] = {spec.name: spec for spec in (
    TableSpec("mirhoseini-table2", "Mirhoseini et al. 2017, Table 2",
              full=tuple(_s(m, f"k80x{g}") for m in published.MIRHOSEINI_TABLE2 for g in (2, 4)),
              quick=(_s("rnnlm-2", "k80x2"), _s("rnnlm-2", "k80x4"), _s("nmt-2", "k80x2"),
                     _s("inception-v3", "k80x2"), _s("inception-v3", "k80x4")),
              jobs=_placer_jobs(_MIRHOSEINI_METHODS), build=build_placer_table, methods=_MIRHOSEINI_METHODS,
              baseline="single-gpu", paper=_mirhoseini_paper,
              about="The paper's baselines and RL placer, then ours, on K80 machines; speedup over one GPU."),
    TableSpec("mirhoseini-large", "Mirhoseini et al.'s models made too large for one GPU",
              full=(_s("rnnlm-2-large", "k80x2"), _s("rnnlm-2-large", "k80x4"), _s("nmt-2-large", "k80x2"),
                    _s("nmt-2-large", "k80x4")),
              quick=(_s("rnnlm-2-large", "k80x2"), _s("nmt-2-large", "k80x4")),
              jobs=_placer_jobs(_MIRHOSEINI_METHODS), build=build_placer_table, methods=_MIRHOSEINI_METHODS,
              baseline="single-cpu", memory_tight=0.6, paper=_large_paper,
              about="The models of Table 2 at sizes no single K80 die holds; speedup over the CPU (which holds them). "
                    "The paper prints only its RL placer's steps (its section 4.3; the number of GPUs unstated)."),
    TableSpec("gdp-table1", "GDP (Zhou et al.), Table 1", full=_GDP_SETTINGS,
              quick=tuple(s for s in _GDP_SETTINGS if s.cluster == "p100x2" and s.model != "gnmt-2"),
              jobs=_placer_jobs(_GDP_METHODS), build=build_placer_table, methods=_GDP_METHODS, baseline="expert",
              paper=_gdp_paper, about="GDP-one (`gdp`), HDP, METIS and the human placement (`expert`) on P100s; "
                                      "speedup over the expert."),
    TableSpec("gdp-table2", "GDP (Zhou et al.), Table 2: GDP-batch against GDP-one", full=_GDP_BATCH,
              quick=(_s("rnnlm-2", "p100x2"), _s("transformer-xl-2", "p100x2"), _s("wavenet-2x18", "p100x2")),
              jobs=_gdp_batch_jobs, build=build_gdp_batch,
              about="One GDP policy trained over a batch of graphs against one policy per graph, the same work "
                    "per graph."),
    TableSpec("gdp-generalisation", "GDP (Zhou et al.), Figure 2: graphs the policy never saw", full=_HOLDOUT,
              quick=(_s("rnnlm-2", "p100x2"), _s("transformer-xl-2", "p100x2"), _s("wavenet-2x18", "p100x2")),
              jobs=_holdout_jobs, build=build_holdout,
              about="Leave-one-out: a policy pre-trained on the other graphs places the held-out one zero-shot, "
                    "then fine-tuned."),
    TableSpec("htf-mpr", "HTF-MPR (Alhassan et al.): speedup over the default mapping", full=_HTF,
              quick=_HTF,
              jobs=_placer_jobs(("single-gpu", "htf-mpr", "auto")), build=build_placer_table,
              methods=("single-gpu", "htf-mpr", "auto"), baseline="single-gpu", paper=_htf_paper,
              paper_unit="x default",
              about="The default mapping is every op on the first GPU (`single-gpu`); the paper prints speedups, "
                    "not steps: its steps are shown relative to the default."),
    TableSpec("htf-mpr-predictor", "HTF-MPR (Alhassan et al.), Figure 8: the fitness predictors", full=_HTF,
              quick=(_s("alexnet", "gtx1050tix2"), _s("mnist-softmax", "gtx1050tix2")),
              jobs=_predictor_jobs, build=build_predictor,
              about="Every predictor ranked on the mappings one HTF-MPR search evaluated."),
    TableSpec("memory-tight", "Memory-tight settings: every placer where no single GPU holds the graph",
              full=(_s("rnnlm-2-large", "k80x2"), _s("nmt-2-large", "k80x4"), _s("vgg16", "gtx1050tix2", batch=64),
                    _s("transformer-xl-8", "p100x2", batch=192), _s("inception-v3", "k80x2", gpu_memory=0.6)),
              quick=(_s("rnnlm-2-large", "k80x2"), _s("inception-v3", "k80x2", gpu_memory=0.6)),
              jobs=lambda settings, b, seed: _placer_jobs(_all_placers())(settings, b, seed),
              build=build_placer_table, baseline="single-cpu", memory_tight=0.6,
              about="Every registered placer; a failing placement runs out of memory (OOM), `none` says the placer "
                    "found no placement that fits. Speedup over the CPU, which holds every graph."),
)}


def table_settings(spec: TableSpec, quick: bool, graphs: tuple[str, ...] = ()) -> tuple[Setting, ...]:
    """The settings ``spec`` runs: its own (``quick`` or full), or each graph of ``graphs`` on the
    table's clusters (memory-tight where the table is)."""
    own = spec.quick if quick else spec.full
    if not graphs:
        return own
    clusters = list(dict.fromkeys(s.cluster for s in own))
    if spec.name == "gdp-generalisation" and len(graphs) == 1 and len(clusters) < 2:
        clusters = list(dict.fromkeys(s.cluster for s in spec.full))[:2]   # leave-one-out needs two settings
    return tuple(Setting(g, c, (), spec.memory_tight, file_digest(g)) for g in graphs for c in clusters)


def file_digest(graph: str) -> str:
    """``sha256:`` and the first 12 hex digits of a graph file's bytes; ``""`` for a built-in name."""
    import hashlib

    from autoplace.resolve import looks_like_file

    if not (looks_like_file(graph) or graph.endswith(".onnx")) or not os.path.isfile(graph):
        return ""
    with open(graph, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()[:12]
