"""How each kind of bench table lists its jobs and builds its :class:`~autoplace.bench.render.Table` from
their results: placers side by side (:func:`build_placer_table`), the list schedulers and their own
estimates, the strategies over the batch dimension; GDP's tables are in :mod:`autoplace.bench.gdp_tables`,
HTF-MPR's in :mod:`autoplace.bench.htf_tables`.

A table's jobs come from ``jobs(settings, run)`` and its table from ``build(spec, settings, run, store)``;
the two must name the same jobs (both go through :meth:`~autoplace.bench.plan.Run.place` for placements).
"""

from __future__ import annotations

from autoplace.bench.jobs import LEARNED, Job, Setting
from autoplace.bench.plan import Run, TableSpec
from autoplace.bench.render import Table, fmt_seconds, fmt_speedup
from autoplace.bench.store import Store
from autoplace.placers import available_placers, get_placer
from autoplace.stats import geomean

__all__ = ["placer_jobs", "build_placer_table", "schedulers_jobs", "build_schedulers", "build_strategies_table",
           "all_placers", "classic_placers", "new_table", "baseline_sections", "SCHEDULERS"]

SCHEDULERS = ("tf-greedy", "heft", "m-topo", "m-etf", "m-sct")
#: placers the papers' tables leave out: ``pipeline`` needs a micro-batched step, and the papers' graphs are
#: captured whole (on them it is a contiguous split, which ``dp-split`` already is)
NOT_BENCHED = ("pipeline",)


def all_placers() -> tuple[str, ...]:
    """Every registered placer (but :data:`NOT_BENCHED`), ``auto`` first."""

    return ("auto", *(n for n in available_placers() if n not in ("auto", *NOT_BENCHED)))


def classic_placers() -> tuple[str, ...]:
    """Every registered placer but the learned ones (and :data:`NOT_BENCHED`), ``auto`` first."""

    return ("auto", *(n for n in available_placers(include_learned=False) if n not in ("auto", *NOT_BENCHED)))


def new_table(spec: TableSpec, run: Run, learned: bool = False, paired: bool = True) -> Table:
    """The table's header; ``learned``: it shows learned searches run over the run's seeds, ``paired``:
    beside their learning-off selves."""
    return Table(spec.name, spec.title, spec.about, budgets=run.budgets, seed=run.seed,
                 note=run.note(learned, paired))


def _methods(spec: TableSpec, run: Run) -> tuple[str, ...]:
    return run.methods(spec.methods or (classic_placers() if spec.classic else all_placers()))


# ---------------------------------------------------------------------- placers side by side
def placer_jobs(spec: TableSpec, settings, run: Run) -> list[Job]:
    """The bounds, every method's placements, then the jobs that run for a learned search's wall time (after
    the searches they time themselves by)."""
    methods = _methods(spec, run)
    return [*(Job.of("bounds", setting=s) for s in settings),
            *(j for s in settings for m in methods for j in run.place_all(s, m)),
            *(j for s in settings for m in methods for jobs in run.equal_wall_jobs(s, m).values() for j in jobs)]


def _paper_cell(spec: TableSpec, s: Setting, method: str) -> tuple[str, float | None]:
    """(text, seconds) of the paper's figure for a cell: ``–`` where the paper has none."""
    if spec.paper is None:
        return "–", None
    try:
        v = spec.paper(s, method)
    except KeyError:
        return "–", None
    return ("OOM", None) if v is None else (f"{v:.4g}", v)


def build_placer_table(spec: TableSpec, settings, run: Run, store: Store) -> Table:
    """Per setting and method: our simulated step and speedup over the baseline, the paper's step and
    speedup, the search and wall time; a wide table of speedups (ours / paper); per method the geometric
    mean of our speedups over the settings where the method and the baseline ran, of the paper's over the
    settings where it prints both, and of ours over those same settings. Then each setting's lower bounds
    beside the best step found, the learned searches (samples, when they first held their best, their
    prior; a variant's samples to reach its placer's step), the refined placements before and after, the
    placements faster than ``auto``'s, and (``spec.memory_checks``) whether the memory-aware placers kept
    their promise."""
    methods = _methods(spec, run)
    has_paper = spec.paper is not None          # a table of our own settings shows no paper columns
    rows, wide, ours_sp, paper_sp = [], [], {m: [] for m in methods}, {m: [] for m in methods}
    both = {m: [] for m in methods}             # ours, on the settings where the paper has a figure too
    plot, results = {}, {}
    for s in settings:
        res = results[s] = {m: run.result(store, s, m) for m in methods}
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
    one_gpu = (spec.baseline != "single-gpu" and "single-gpu" in methods      # also each one's speedup over one GPU
               and any(results[s]["single-gpu"]["ok"] for s in settings))
    summary = [[m, fmt_speedup(geomean(ours_sp[m])), f"{len(ours_sp[m])}/{len(settings)}",
                *([fmt_speedup(geomean(paper_sp[m])), str(len(paper_sp[m])), fmt_speedup(geomean(both[m]))]
                  if has_paper else []),
                *([fmt_speedup(geomean([results[s]["single-gpu"]["step_s"] / results[s][m]["step_s"]
                                        for s in settings if results[s]["single-gpu"]["ok"] and results[s][m]["ok"]]))]
                  if one_gpu else [])] for m in methods]
    t = new_table(spec, run, any(run.resolve(m)[0] in LEARNED for m in methods))
    t.add_section(f"Speedup over {spec.baseline}" + (", ours / paper" if has_paper else ""), ["setting", *methods],
                  wide)
    t.add_section(f"Geometric mean of the speedup over {spec.baseline}",
                  ["method", "ours", "settings that ran",
                   *(["paper", "paper's settings", "ours on the paper's settings"] if has_paper else []),
                   *(["ours over single-gpu"] if one_gpu else [])],
                  summary)
    t.add_section("Every cell", ["setting", "method", "step (s)", f"vs {spec.baseline}",
                                 *([f"paper step ({spec.paper_unit})", f"paper vs {spec.baseline}"]
                                   if has_paper else []),
                                 "search (s)", "wall (s)"], rows)
    _bounds_section(t, settings, results, store)
    _versus_section(t, spec, settings, methods, results, run)
    _seeds_section(t, settings, methods, run, store)
    _learned_section(t, settings, methods, results, run)
    _refined_section(t, settings, methods, results)
    if "auto" in methods:
        _faster_than_auto_section(t, settings, methods, results, run)
        _uncertainty_section(t, settings, methods, results)
    if spec.memory_checks:
        _memory_checks_section(t, settings, methods, results, run)
    t.plot = ("speedup", spec.baseline, plot)
    return t


def _step_text(r: dict) -> str:
    if r["ok"] and "seed_steps_s" in r:
        return _seeds_text(r["seed_steps_s"])
    if r["ok"]:
        return f"{r['step_s']:.4g}"
    if r["oom"]:
        return "OOM (" + ", ".join(r["oom"]) + ")"
    why = (r["error"] or "no placement").split(": ", 1)[-1]         # the placer's message, less its name
    return "none: " + (why if len(why) <= 70 else why[:69] + "…")


def _seeds_text(steps: list[float]) -> str:
    """Steps over seeds as ``mean ± sd (min)``."""
    mean = sum(steps) / len(steps)
    sd = (sum((x - mean) ** 2 for x in steps) / (len(steps) - 1)) ** 0.5 if len(steps) > 1 else 0.0
    if sd <= 1e-12 * abs(mean):                  # the same step on every seed, but for rounding in the mean
        sd = 0.0
    return f"{mean:.4g} ± {sd:.2g} ({min(steps):.4g})"


def _seeds_section(t: Table, settings, methods, run: Run, store: Store) -> None:
    """Each learned placer (or variant of one, refined or not) over the run's seeds against three baselines:
    its learning-off self at equal samples and at equal wall time, and ``auto`` at equal wall time (each
    seed's run for that seed's learned search's wall time): :func:`baseline_sections`."""
    entries = []
    for s in settings:
        for m in methods:
            off = run.off_label(m)
            if off is None or off not in methods:
                continue
            baselines = [[store[j] for j in run.place_all(s, off)],          # a folder of an earlier run may
                         *([store[j] for j in jobs if j in store]           # lack the equal-wall jobs
                           for jobs in run.equal_wall_jobs(s, m).values())]
            entries.append((s.key, m, [store[j] for j in run.place_all(s, m)], baselines))
    baseline_sections(t, entries, run)


def baseline_sections(t: Table, entries, run: Run, what: str = "Learned placers", how: str = "") -> None:
    """Two sections (nominal and robust step: the worst scenario's weight, docs/algorithms.md, Uncertainty)
    of learned rows against their baselines. ``entries``: ``(setting, method, learned, [off at equal
    samples, off at equal wall, auto at equal wall])``, each a list of results (``step_s``,
    ``robust_step_s``, ``ok``, ``search_s``) over the seeds, a baseline's empty where it was not run, None
    where it has none. Steps as
    mean ± sd (min); each baseline's step over the learned one's (above 1: learning is faster) as the
    geometric mean over the seeds with its range; the mean seconds the learned search and the two equal-wall
    runs took (a run may pass its limit by what it does after its last check); then per method over every
    setting."""
    for kind, field in (("nominal", "step_s"), ("robust", "robust_step_s")):
        rows, pooled = [], {}
        for key, m, learned, baselines in entries:
            cells, ratios = [], []
            for rs in baselines:
                cells.append("–" if rs is None else _seed_steps_text(rs, field))
                r = _paired_ratios(learned, rs or [], field)
                ratios.append(r)
                if r:
                    pooled.setdefault(m, [[] for _ in baselines])[len(ratios) - 1].extend(r)
            walls = [f"{sum(r['search_s'] + (r.get('refine_s') or 0.0) for r in rs) / len(rs):.1f}" if rs
                     else "–" for rs in (learned, *baselines[1:])]         # a refined row's refine included
            rows.append([key, m, _seed_steps_text(learned, field), *cells, *map(_ratio_text, ratios),
                         " / ".join(walls)])
        for m, per_baseline in pooled.items():
            rows.append(["geometric mean", m, "–", "–", "–", "–",
                         *(f"{geomean(r):.3f}" if r else "–" for r in per_baseline), "–"])
        if rows:
            seeds = ", ".join(map(str, run.learned_seeds))
            t.add_section(f"{what} over seeds {seeds}, {kind} step (s: mean ± sd (min)), against the same "
                          "search with learning off at equal samples and at equal wall time, and auto at equal "
                          f"wall time (baseline / learned above 1: learning is faster){how}",
                          ["setting", "method", "learned", "off, equal samples", "off, equal wall",
                           "auto, equal wall", "off (samples) / learned", "off (wall) / learned",
                           "auto (wall) / learned", "wall (s): learned / off / auto"], rows)


def _seed_steps_text(results: list[dict], field: str) -> str:
    """A cell of steps over seeds: mean ± sd (min), or why not (a seed failed; jobs this folder lacks)."""
    if not results:
        return "not run"
    steps = [r.get(field) for r in results]
    if any(x is None for x in steps):
        return "failed on a seed" if any(not r["ok"] for r in results) else "–"
    return _seeds_text(steps)


def _paired_ratios(learned: list[dict], other: list[dict], field: str) -> list[float]:
    """Per seed, ``other``'s step over ``learned``'s (empty unless every pair ran)."""
    pairs = [(a.get(field), b.get(field)) for a, b in zip(learned, other)]
    if len(other) != len(learned) or any(x is None or y is None for x, y in pairs):
        return []
    return [y / x for x, y in pairs]


def _ratio_text(ratios: list[float]) -> str:
    return f"{geomean(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})" if ratios else "–"


def _best(res: dict) -> tuple[str, float] | None:
    ran = [(m, r["step_s"]) for m, r in res.items() if r["ok"]]
    return min(ran, key=lambda x: x[1]) if ran else None


def _bounds_section(t: Table, settings, results: dict, store: Store) -> None:
    """The bounds are of the step itself: the best found is the best placement of it (a strategy's replicas and
    micro-batches run another step, which the bounds do not bound)."""
    rows = []
    for s in settings:
        b = store[Job.of("bounds", setting=s)]
        bound = max(b["critical_path_s"], b["load_s"])
        best = _best({m: r for m, r in results[s].items() if r.get("strategy") is None})
        rows.append([s.key, f"{b['ops']:,}", f"{b['critical_path_s']:.4g}", f"{b['load_s']:.4g}",
                     "–" if best is None else f"{best[1]:.4g} ({best[0]})",
                     "–" if best is None or not bound else f"{best[1] / bound:.2f}x"])
    t.add_section("Lower bounds on the step (s) and the best placement of it found (no strategy)",
                  ["setting", "ops", "critical path", "load", "best found", "best / bound"], rows)


def _learned_section(t: Table, settings, methods, results: dict, run: Run) -> None:
    """The learned searches: samples (updates), how each stopped, the samples and seconds after which it
    first held its best, its prior; a variant's samples to reach its placer's step."""
    rows = []
    for s in settings:
        for m in methods:
            placer, _, _ = run.resolve(m)
            search = results[s][m].get("search")
            if placer not in LEARNED or search is None or "unrefined_step_s" in results[s][m]:
                continue                                # a refined method's search is its placer's row
            reach = "–"
            if run.variant(m) is not None and placer in results[s] and results[s][placer]["ok"]:
                reach = _samples_to_reach(search, results[s][placer]["step_s"])
            prior = search.get("prior")
            prior_text = "–" if not prior else f"{prior} ({fmt_seconds(search.get('prior_step_s'))})"
            extra = ", ".join(f"{k} {search[k]}" for k in ("groups", "nodes", "family", "initial", "screened")
                              if k in search)
            rows.append([s.key, m, f"{search['samples']} ({search['updates']})", search["stop_reason"],
                         str(search.get("samples_to_best", "–")), _secs(search.get("best_at_s")), prior_text,
                         extra or "–", reach])
    if rows:
        which = f" (seed {run.learned_seeds[0]} of {len(run.learned_seeds)})" if len(run.learned_seeds) > 1 else ""
        t.add_section("Learned searches" + which, ["setting", "method", "samples (updates)", "stopped by",
                                           "samples to its best", "its best after (s)", "prior (its step, s)",
                                           "search", "samples to reach its placer's step"], rows)


def _versus_section(t: Table, spec: TableSpec, settings, methods, results: dict, run: Run) -> None:
    """Pairs of methods head to head (the table's and ``--versus``'s where both are in the table): per
    setting, a's speedup over b (ours / the paper's) and, for a learned a, the samples it took to reach
    b's step; per pair, the geometric means and on how many settings a is faster."""
    pairs = [p for p in dict.fromkeys((*spec.versus, *run.versus)) if p[0] in methods and p[1] in methods]
    rows = []
    for a, b in pairs:
        ours, paper, faster, ran = [], [], 0, 0
        for s in settings:
            ra, rb = results[s][a], results[s][b]
            sp = rb["step_s"] / ra["step_s"] if ra["ok"] and rb["ok"] else None
            pa, pb = _paper_cell(spec, s, a)[1], _paper_cell(spec, s, b)[1]
            psp = pb / pa if pa and pb else None
            if sp is not None:
                ours.append(sp)
                ran += 1
                faster += sp > 1 + 1e-9
            if psp is not None:
                paper.append(psp)
            reach = "–"
            if "search" in ra and "unrefined_step_s" not in ra and rb["ok"]:      # a refined step is no sample's
                reach = _samples_to_reach(ra["search"], rb["step_s"])
            rows.append([s.key, f"{a} vs {b}", fmt_speedup(sp), fmt_speedup(psp), reach])
        rows.append(["geometric mean", f"{a} vs {b}", fmt_speedup(geomean(ours)), fmt_speedup(geomean(paper)),
                     f"faster on {faster} of {ran}"])
    if rows:
        t.add_section("Head to head: a's speedup over b (ours, the paper's), and a's samples to reach b's step",
                      ["setting", "a vs b", "ours", "paper", "a's samples to b's step"], rows)


def _samples_to_reach(search: dict, step: float) -> str:
    """The samples after which a learned search's best was ``step`` or faster (``not in N`` if never)."""
    n = next((k for k, best in search["improvements"] if best is not None and best <= step * (1 + 1e-9)), None)
    return str(n) if n is not None else f"not in {search['samples']}"


def _secs(x) -> str:
    return "–" if x is None else f"{x:.1f}"


def _refined_section(t: Table, settings, methods, results: dict) -> None:
    rows = [[s.key, m, fmt_seconds(r.get("unrefined_step_s")), fmt_seconds(r["step_s"]), _secs(r.get("refine_s"))]
            for s in settings for m in methods if "unrefined_step_s" in (r := results[s][m])]
    if rows:
        t.add_section("Refined by the local search (as `autoplace place --refine`; step in seconds)",
                      ["setting", "method", "before", "after", "refine (s)"], rows)


def _faster_than_auto_section(t: Table, settings, methods, results: dict, run: Run) -> None:
    """The placements faster than ``auto``'s at the search placers' budget. The learned placers are left
    out: their budget is another, and they meet ``auto`` at equal wall time in the seeds' sections."""
    others = [m for m in methods if m != "auto" and run.resolve(m)[0] not in LEARNED]
    rows = []
    for s in settings:
        auto = results[s]["auto"]
        for m in others:
            r = results[s][m]
            if r["ok"] and (not auto["ok"] or r["step_s"] < auto["step_s"] * (1 - 1e-9)):
                rows.append([s.key, m, fmt_seconds(r["step_s"]), _step_text(auto)])
    t.add_section("Placements faster than auto's", ["setting", "method", "step (s)", "auto (s)"],
                  rows or [["none", "–", "–", "–"]])


def _uncertainty_section(t: Table, settings, methods, results: dict) -> None:
    """Per setting: ``auto``'s speedup over one GPU, nominal and in the worst scenario; the placement whose
    worst case is best; the placers whose gain over one GPU rests on a constant inside its range."""
    rows = []
    for s in settings:
        res = results[s]
        auto = res["auto"]
        if "worst_case_speedup" not in auto:
            continue                                    # one GPU does not hold the graph (or auto failed)
        robust = max((m for m in methods if res[m]["ok"] and "worst_case_speedup" in res[m]),
                     key=lambda m: res[m]["worst_case_speedup"])
        rows.append([s.key, fmt_speedup(auto["one_gpu_s"] / auto["step_s"]),
                     fmt_speedup(auto["worst_case_speedup"]),
                     f"{robust} ({fmt_speedup(res[robust]['worst_case_speedup'])})",
                     ", ".join(m for m in methods if res[m].get("gain_inside_range")) or "–"])
    if rows:
        t.add_section("Under the cost model's uncertainty (docs/algorithms.md, Uncertainty)",
                      ["setting", "auto vs one GPU", "auto's worst case vs one GPU", "best worst case",
                       "gain inside the range"], rows)


def _memory_checks_section(t: Table, settings, methods, results: dict, run: Run) -> None:
    """A memory-aware placer must fit or say it cannot; ``auto`` must fit wherever ``dp-split`` does and be
    at least as fast."""

    rows = []
    for s in settings:
        res = results[s]
        for m in methods:
            r = res[m]
            if get_placer(run.resolve(m)[0]).memory_aware and r["step_s"] is None and r["oom"]:
                rows.append([s.key, f"{m} runs out of memory ({', '.join(r['oom'])})"])
        dp, auto = res.get("dp-split"), res.get("auto")
        if dp and dp["ok"] and auto and (not auto["ok"] or auto["step_s"] > dp["step_s"] * (1 + 1e-9)):
            rows.append([s.key, "auto is not at least as fast as dp-split"])
    t.add_section("Memory checks", ["setting", "problem"],
                  rows or [["every setting", "every memory-aware placer fits or says it cannot; auto fits "
                                             "wherever dp-split does, at least as fast"]])


# ---------------------------------------------------------------------- the list schedulers
def schedulers_jobs(spec: TableSpec, settings, run: Run) -> list[Job]:
    return [run.place(s, m) for s in settings for m in ("single-gpu", *SCHEDULERS)]


def build_schedulers(spec: TableSpec, settings, run: Run, store: Store) -> Table:
    """Each list scheduler's step (speedup over one GPU) and its two estimates of it against the simulated
    step: its schedule model replayed in the runtime's order and the schedule as built, in its own order;
    which are slower than one GPU and which estimates are more than 15 % off."""
    rows, slower, off, off_built, placed, plot = [], [], [], [], 0, {}
    for s in settings:
        base = store[run.place(s, "single-gpu")]
        cells = []
        for m in SCHEDULERS:
            r = store[run.place(s, m)]
            if r["step_s"] is None:
                cells.append(_step_text(r))
                plot.setdefault(s.key, {})[m] = (None, None)
                continue
            placed += 1
            sp = base["step_s"] / r["step_s"] if base["ok"] else None
            err, built = _error_pct(r.get("estimate_s"), r["step_s"]), _error_pct(r.get("decision_estimate_s"),
                                                                                  r["step_s"])
            cells.append(f"{r['step_s']:.4g} ({fmt_speedup(sp)}) / {_pct(err)} / {_pct(built)}")
            plot.setdefault(s.key, {})[m] = (sp, None)
            if sp is not None and sp < 1 - 1e-9:
                slower.append(f"{m} on {s.key} ({sp:.2f}x)")
            if err is None or abs(err) > 15:
                off.append(f"{m} on {s.key} ({_pct(err)})")
            if built is None or abs(built) > 15:
                off_built.append(f"{m} on {s.key} ({_pct(built)})")
        rows.append([s.key, _step_text(base), *cells])
    t = new_table(spec, run)
    t.add_section("Step in seconds (speedup over single-gpu) / replayed estimate's error / as-built estimate's "
                  "error", ["setting", "single-gpu", *SCHEDULERS], rows)
    t.add_section("Findings", ["finding", "count", "where"], [
        ["slower than single-gpu", f"{len(slower)} of {len(settings) * len(SCHEDULERS)}", "; ".join(slower) or "–"],
        ["replayed estimate more than 15 % off", f"{len(off)} of {placed}", "; ".join(off) or "–"],
        ["schedule as built more than 15 % off", f"{len(off_built)} of {placed}", "; ".join(off_built) or "–"]])
    t.plot = ("speedup", "single-gpu", plot)
    return t


def _error_pct(estimate, step) -> float | None:
    """``estimate`` against ``step`` in per cent; None where there is no estimate."""
    return (estimate / step - 1) * 100 if estimate and step else None


def _pct(x) -> str:
    return "–" if x is None else f"{x:+.0f} %"


def build_strategies_table(spec: TableSpec, settings, run: Run, store: Store) -> Table:
    """:func:`build_placer_table`, then per setting: ``auto``'s pick (the strategy and its replicas, or a
    placement of the step), the best pure placement (no replicas: ``auto``'s own placement of the step, the
    expert, one GPU, the pipeline), whether ``auto`` is at least as fast as data parallelism (where it is not,
    the two regrets that made the choice), whether the best hybrid (replicas of a multi-device placement)
    beats both data parallelism and the best pure placement by 10 % or more, and whether ``auto``'s pick is
    such a hybrid."""
    t = build_placer_table(spec, settings, run, store)
    rows, wins, picked = [], 0, 0
    for s in settings:
        auto = run.result(store, s, "auto")
        dp = run.result(store, s, "data-parallel")
        hy = run.result(store, s, "hybrid")
        weighed = {x.get("method"): x for x in auto.get("strategies") or []}
        placed = weighed.get("placement")
        pures = [x for x in (placed.get("step_time_s") if placed else None,
                             *(run.result(store, s, m)["step_s"] for m in ("expert", "single-gpu", "pipelined")))
                 if x is not None]
        pure = min(pures) if pures else None
        chosen = auto.get("from") or "–"
        pick = auto.get("strategy")
        if pick is not None and pick["replicas"] > 1:
            chosen += f" ({pick['replicas']} replicas" + (f", each by {pick['per_replica']}" if pick.get(
                "per_replica") else "") + ")"

        def wins_by_10(r) -> bool | None:
            if not (r["ok"] and dp["ok"] and pure) or not 1 < (r.get("strategy") or {}).get("replicas", 0) < s.n_gpus:
                return None
            return r["step_s"] <= 0.9 * dp["step_s"] and r["step_s"] <= 0.9 * pure

        beats = wins_by_10(hy)
        wins += bool(beats)
        mine = wins_by_10(auto) if auto.get("from") == "hybrid" else False
        picked += bool(mine)
        if not dp["ok"] or not auto["ok"]:
            versus = "–"
        elif auto["step_s"] <= dp["step_s"] * (1 + 1e-9):
            versus = "yes"
        else:
            regrets = [weighed.get(k, {}).get("regret") for k in (auto.get("from"), "data-parallel")]
            if auto.get("strategy") is None:
                regrets[0] = placed.get("regret") if placed else None
            versus = "no" + (f" (regret {regrets[0]:.3f} against {regrets[1]:.3f})" if None not in regrets else "")
        rows.append([s.key, chosen, _fmt(auto["step_s"]), _fmt(pure), _fmt(dp["step_s"]), _fmt(hy["step_s"]), versus,
                     "–" if beats is None else ("yes" if beats else "no"), "yes" if mine else "no"])
    t.add_section("auto's pick; the best pure placement (auto's placement of the step, the expert, one GPU, the "
                  "pipeline); whether auto is at least as fast as data parallelism (where not, the regrets it chose "
                  "by); whether the best hybrid (fewer replicas than GPUs, each placed on several) beats both data "
                  f"parallelism and that placement by 10 % or more ({wins} setting(s)); whether auto's pick is such "
                  f"a hybrid ({picked} setting(s))",
                  ["setting", "auto's pick", "auto (s)", "pure placement (s)", "data-parallel (s)", "hybrid (s)",
                   "auto <= data-parallel", "hybrid wins by 10 %", "auto picks a winning hybrid"], rows)
    return t


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.4g}"
