"""GDP's tables: Table 2 (GDP-batch, one policy over several graphs, against GDP-one on each) and Figure 2
(graphs the policy never saw: zero-shot and fine-tuned), each with its baselines over seeds."""

from __future__ import annotations

import autoplace.bench.published as published
from autoplace.bench.builders import baseline_sections, new_table
from autoplace.bench.jobs import Job, Setting
from autoplace.bench.plan import Run, TableSpec
from autoplace.bench.render import Table, fmt_seconds, fmt_speedup
from autoplace.bench.store import Store
from autoplace.stats import geomean

__all__ = ["gdp_batch_jobs", "build_gdp_batch", "holdout_jobs", "build_holdout"]


def _zero_shot_settings(spec: TableSpec, run: Run) -> tuple[Setting, ...]:
    """The larger graphs the batch policy places zero-shot: none when ``--graph`` replaces the models."""
    return () if run.graphs else spec.zero_shot_quick if run.quick else spec.zero_shot


def _batch_job(spec: TableSpec, settings, run: Run, seed: int | None = None, config: tuple | None = None,
               same_wall_as: str | None = None) -> Job:
    """GDP-batch's job: the learned policy (``config`` None: the run's GDP settings; it then places the
    larger graphs zero-shot), or its learning-off self (``config``), for the wall time of ``same_wall_as``;
    paired runs record each setting's robust step."""
    learned = config is None
    return Job.of("gdp-batch", settings=tuple(settings), budget=run.budgets.learned,
                  seed=run.seed if seed is None else seed, config=run.config("gdp") if learned else config,
                  zero_shot=_zero_shot_settings(spec, run) if learned else (), robust=True if run.seeds else None,
                  same_wall_as=same_wall_as)


def _batch_baselines(spec: TableSpec, settings, run: Run, seed: int) -> dict[str, list[Job]]:
    """Beside seed ``seed``'s GDP-batch (a paired run): its learning-off self at equal samples (``off``) and
    for its training's wall time (``off-wall``), and ``auto`` on each setting for an equal share of it."""
    off = run.off("gdp")
    if off is None:
        return {}
    learned = _batch_job(spec, settings, run, seed).key
    n = len(settings)
    return {"off": [_batch_job(spec, settings, run, seed, off.config)],
            "off-wall": [_batch_job(spec, settings, run, seed, off.config, same_wall_as=learned)],
            "auto": [Job.of("place", setting=s, method="auto", seed=seed, same_wall_as=learned,
                            wall_parts=n if n > 1 else None) for s in settings]}


def gdp_batch_jobs(spec: TableSpec, settings, run: Run) -> list[Job]:
    return [*(_batch_job(spec, settings, run, seed) for seed in run.learned_seeds),
            *[j for s in settings for m in ("gdp", "expert", "auto") for j in run.place_all(s, m)],
            *[run.place(s, m) for s in _zero_shot_settings(spec, run) for m in ("expert", "auto")],
            *(j for seed in run.learned_seeds for jobs in _batch_baselines(spec, settings, run, seed).values()
              for j in jobs)]


def _as_place(step: float | None, robust: float | None, search_s: float) -> dict:
    """A step, its robust step and the seconds its search took, as a ``place`` result's fields."""
    return {"step_s": step, "robust_step_s": robust, "ok": step is not None, "search_s": search_s}


def _batch_result(r: dict, s: Setting, n: int) -> dict:
    """Setting ``s``'s share of a GDP-batch result over ``n`` settings, as a ``place`` result."""
    return _as_place(_by_setting(r["steps_s"], s), _by_setting(r.get("robust_steps_s", {}), s), r["search_s"] / n)


def build_gdp_batch(spec: TableSpec, settings, run: Run, store: Store) -> Table:
    batches = [store[_batch_job(spec, settings, run, seed)] for seed in run.learned_seeds]
    rows, gains, pgains, plot = [], [], [], {}
    for s in settings:
        one = run.result(store, s, "gdp")["step_s"]
        expert, auto = store[run.place(s, "expert")]["step_s"], store[run.place(s, "auto")]["step_s"]
        bs = _mean(_by_setting(b["steps_s"], s) for b in batches)
        gain = 1 - bs / one if bs and one else None
        if gain is not None:
            gains.append(1 - gain)
        paper = published.GDP_TABLE2.get((s.model, s.n_gpus))
        if paper is not None:
            pgains.append(1 - paper)
        plot[s.key] = {"gdp-batch vs gdp-one": (gain, paper)}
        rows.append([s.key, fmt_seconds(one), fmt_seconds(bs), fmt_seconds(expert), fmt_seconds(auto),
                     "–" if gain is None else f"{gain:+.1%}", "–" if paper is None else f"{paper:+.1%}",
                     fmt_speedup(expert / bs if expert and bs else None)])
    g, pg = geomean(gains), geomean(pgains)
    rows.append(["geometric mean", "–", "–", "–", "–", "–" if g is None else f"{1 - g:+.1%}",
                 "–" if pg is None else f"{1 - pg:+.1%}", "–"])
    t = new_table(spec, run, True, paired=False)
    updates = sum(b["updates"] for b in batches) / len(batches)
    wall = sum(b.get("search_s", b["wall_s"]) for b in batches) / len(batches)       # the training's seconds
    t.add_section(f"GDP-batch against GDP-one (one policy trained {updates:.0f} updates over "
                  f"{len(settings)} graphs in {wall:.0f} s)",
                  ["setting", "gdp-one (s)", "gdp-batch (s)", "expert (s)", "auto (s)", "batch run-time gain",
                   "paper's gain", "batch vs expert"], rows)
    zs_rows = []
    for s in _zero_shot_settings(spec, run):
        zs = [_by_setting(b.get("zero_shot", {}), s) for b in batches]
        if None in zs:
            continue
        z = {k: _mean(x[k] for x in zs) for k in ("step_s", "greedy_step_s", "policy_s", "prior_s")}
        expert, auto = store[run.place(s, "expert")]["step_s"], store[run.place(s, "auto")]["step_s"]
        zs_rows.append([s.key, fmt_seconds(z["step_s"]), fmt_seconds(z["greedy_step_s"]), f"{z['policy_s']:.2f}",
                        f"{z['prior_s']:.1f}", fmt_seconds(expert), fmt_seconds(auto),
                        "–" if not (auto and z["step_s"]) else f"{z['step_s'] / auto - 1:+.0%}"])
    if zs_rows:
        t.add_section("The batch policy placing larger graphs zero-shot (step in seconds"
                      + (", the mean over the seeds' policies)" if len(batches) > 1 else ")"),
                      ["graph", "zero-shot", "greedy", "policy (s)", "prior (s)", "expert", "auto", "vs auto"],
                      zs_rows)
    baselines = {seed: _batch_baselines(spec, settings, run, seed) for seed in run.learned_seeds}
    if all(baselines.values()):
        n = len(settings)
        entries = []
        for i, s in enumerate(settings):
            per_kind = [[_batch_result(store[jobs[kind][0]], s, n) for jobs in baselines.values()
                         if jobs[kind][0] in store] for kind in ("off", "off-wall")]
            per_kind.append([store[jobs["auto"][i]] for jobs in baselines.values() if jobs["auto"][i] in store])
            entries.append((s.key, "gdp-batch", [_batch_result(b, s, n) for b in batches], per_kind))
        baseline_sections(t, entries, run, "GDP-batch", "; a setting's wall time is the batch's over its settings "
                           "(the same work on each), `auto` runs for that share")
    t.plot = ("gain", "gdp-one", plot)
    return t


def _mean(xs) -> float | None:
    """The mean of ``xs``; None if any is None."""
    xs = list(xs)
    return None if any(x is None for x in xs) else sum(xs) / len(xs)


def _by_setting(d: dict, s: Setting):
    """A GDP-batch result's entry for ``s``: keyed by the setting's identity (a graph file by its content;
    results written before that are keyed by the setting's name); None where it has none."""
    return d[s.identity] if s.identity in d else d.get(s.key)


def _holdout_job(held: Setting, settings, run: Run, seed: int | None = None) -> tuple[Job, tuple]:
    """The leave-one-out job for ``held`` (paired runs: with the fine-tune's learning-off selves and the
    robust steps), and the settings its policy is pre-trained on."""
    others = tuple(s for s in settings if s != held) or (held,)
    return Job.of("gdp-holdout", held_out=held, others=others, budget=run.budgets.learned,
                  fine_tune_updates=run.budgets.fine_tune_updates, seed=run.seed if seed is None else seed,
                  config=run.config("gdp"), baselines=True if run.seeds else None), others


def _holdout_auto(held: Setting, settings, run: Run, seed: int) -> dict[str, Job]:
    """``auto`` on ``held`` for the zero-shot placement's and for the fine-tune's wall time (paired runs)."""
    if not run.seeds:
        return {}
    key = _holdout_job(held, settings, run, seed)[0].key
    return {what: Job.of("place", setting=held, method="auto", seed=seed, same_wall_as=key, wall_of=field)
            for what, field in (("zero-shot", "zero_shot_wall_s"), ("fine-tune", "fine_tune_wall_s"))}


def holdout_jobs(spec: TableSpec, settings, run: Run) -> list[Job]:
    jobs = []
    for held in settings:
        jobs += [_holdout_job(held, settings, run, seed)[0] for seed in run.learned_seeds]
        jobs += [j for m in ("gdp", "hdp", "expert", "auto") for j in run.place_all(held, m)]
    return jobs + [j for held in settings for seed in run.learned_seeds
                   for j in _holdout_auto(held, settings, run, seed).values()]


def _holdout_entries(settings, run: Run, store: Store) -> list:
    """The zero-shot and fine-tuned placements over the seeds against their baselines: the untrained policy's
    zero-shot placement (the same samples) and the pre-trained policy sampling without updates for the
    fine-tune's samples and for its wall time; ``auto`` for each one's wall time."""
    def place_like(r: dict) -> dict:
        return _as_place(r["step_s"], r.get("robust_step_s"), r["wall_s"])

    entries = []
    for held in settings:
        hs = [store[_holdout_job(held, settings, run, seed)[0]] for seed in run.learned_seeds]
        autos = [_holdout_auto(held, settings, run, seed) for seed in run.learned_seeds]
        done = {what: [store[a[what]] for a in autos if a[what] in store] for what in ("zero-shot", "fine-tune")}
        entries.append((held.key, "zero-shot", [place_like(h["zero_shot"]) for h in hs],
                        [[place_like(h["untrained_zero_shot"]) for h in hs], None, done["zero-shot"]]))
        entries.append((held.key, "fine-tune", [place_like(h["fine_tune"]) for h in hs],
                        [[place_like(h[k]) for h in hs] for k in ("frozen", "frozen_wall")] + [done["fine-tune"]]))
    return entries


def build_holdout(spec: TableSpec, settings, run: Run, store: Store) -> Table:
    rows, controls, plot = [], [], {}
    beats = {"zero-shot": 0, "fine-tune": 0}
    for held in settings:
        others = _holdout_job(held, settings, run)[1]
        hs = [store[_holdout_job(held, settings, run, seed)[0]] for seed in run.learned_seeds]
        h0 = hs[0]                                   # the controls' seed
        h = {**h0, **{k: _mean(x[k] for x in hs) for k in ("zero_shot_s", "fine_tune_s", "pretrain_wall_s",
                                                              "zero_shot_wall_s", "fine_tune_wall_s")}}
        ref = {m: run.result(store, held, m)["step_s"] for m in ("gdp", "hdp", "expert", "auto")}
        e = ref["expert"]
        for name, v in (("zero-shot", h["zero_shot_s"]), ("fine-tune", h["fine_tune_s"])):
            if v is not None and e is not None and v <= e and (ref["hdp"] is None or v <= ref["hdp"]):
                beats[name] += 1
        plot[held.key] = {m: (e / v if e and v else None, None) for m, v in
                          (("zero-shot", h["zero_shot_s"]), ("fine-tune", h["fine_tune_s"]), ("gdp-one", ref["gdp"]),
                           ("hdp", ref["hdp"]))}
        label = held.key + ("" if others != (held,) else " (trained on itself: one graph given)")
        rows.append([label, fmt_seconds(h["zero_shot_s"]), fmt_seconds(h["fine_tune_s"]), fmt_seconds(ref["gdp"]),
                     fmt_seconds(ref["hdp"]), fmt_seconds(e), fmt_seconds(ref["auto"]), f"{h['pretrain_wall_s']:.1f}",
                     f"{h['zero_shot_wall_s']:.2f}", f"{h['fine_tune_wall_s']:.1f} ({h['fine_tune_updates']} updates)"])
        if h0.get("untrained_zero_shot"):
            z, u = h0["zero_shot"], h0["untrained_zero_shot"]
            controls.append([label, fmt_seconds(z.get("prior_step_s")), fmt_seconds(u["step_s"]),
                             fmt_seconds(z["step_s"]), f"{z['policy_s']:.2f}", fmt_seconds(h0["fine_tune_s"]),
                             f"{fmt_seconds(h0['scratch_s'])} ({h0['scratch_updates']} updates)",
                             "–" if not (ref["auto"] and z["step_s"]) else f"{z['step_s'] / ref['auto'] - 1:+.0%}"])
    n = len(settings)
    claims = [["fine-tune", published.GDP_FIGURE2_CLAIMS["fine-tune"],
               f"at least as fast as expert and HDP on {beats['fine-tune']}/{n}"],
              ["zero-shot", published.GDP_FIGURE2_CLAIMS["zero-shot"],
               f"at least as fast as expert and HDP on {beats['zero-shot']}/{n}"]]
    t = new_table(spec, run, True, paired=False)
    t.add_section("Held-out graphs (step in seconds)",
                  ["held out", "zero-shot", "fine-tune", "gdp-one", "hdp", "expert", "auto", "pre-train (s)",
                   "zero-shot (s)", "fine-tune (s)"], rows)
    t.add_section("The paper's claims (Figure 2 has no printed numbers)", ["placement", "paper", "ours"], claims)
    if controls:
        t.add_section(f"Against the controls (seed {run.learned_seeds[0]}): the prior alone, an untrained policy's "
                      "zero-shot placement (same samples), GDP from scratch for the fine-tune's updates (step in "
                      "seconds)",
                      ["held out", "prior", "untrained zero-shot", "zero-shot", "policy (s)", "fine-tune",
                       "scratch, same updates", "zero-shot vs auto"], controls)
    if run.seeds and all(h.get("fine_tune") for h in (store[_holdout_job(held, settings, run, seed)[0]]
                                                         for held in settings for seed in run.learned_seeds)):
        baseline_sections(t, _holdout_entries(settings, run, store), run, "Zero-shot and fine-tuned placements",
                           "; a zero-shot placement's samples are fixed (its learning-off self, the untrained "
                           "policy, takes the same), so it has no equal-wall run of its own")
    t.plot = ("speedup", "expert", plot)
    return t
