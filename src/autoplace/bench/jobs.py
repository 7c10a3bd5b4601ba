"""The benchmark suite's jobs: a setting (a graph on a cluster), a job (one unit of work keyed by everything
its result depends on) and the job kinds.

A *job* is one unit of work whose result is a small JSON object:

* ``place`` (:func:`place_job`): one placer on one setting, simulated; a learned placer may run under a
  config of its own (a bench ``--set`` or ``--variant``) and any placer's placement may be refined by the
  local search (a ``+refine`` method);
* ``bounds`` (:func:`bounds_job`): a setting's lower bounds on the step (critical path and load);
* ``gdp-batch`` (:func:`gdp_batch_job`): one GDP policy trained over a batch of settings, and the same
  policy placing larger graphs zero-shot;
* ``gdp-holdout`` (:func:`gdp_holdout_job`): a policy pre-trained without one setting placing it
  zero-shot, then fine-tuned, beside an untrained policy and a search from scratch with the same updates;
* ``predictor`` (:func:`predictor_job`): HTF-MPR's fitness predictors compared on one search's mappings;
* ``enumerate`` (:func:`enumerate_job`): every mapping of a small graph's groups, simulated, and where
  HTF-MPR's answer ranks among them.

A job's key holds everything its result depends on (settings, method, config, budget, seed), so results
of runs with other budgets never mix, and jobs shared by two tables run once. Fields of a result that are
seconds measured on this machine are named in :data:`MEASURED` (``bench --against`` leaves them out).
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autoplace.bounds import lower_bounds
from autoplace.cluster import Cluster
from autoplace.cost import check_runnable
from autoplace.errors import AutoplaceError, InfeasibleError, UnavailableError
from autoplace.placers import get_placer, place
from autoplace.placers.auto import robust_simulator
from autoplace.placers.learned.gdp import GDPConfig, gdp_search, gdp_train, load_policy, new_policy, zero_shot
from autoplace.placers.learned.htf_mpr import HTFMPRConfig, fitness, htf_mpr_nodes, htf_mpr_search
from autoplace.placers.learned.predictor import compare_models
from autoplace.placers.local_search import refine
from autoplace.progress import report_progress
from autoplace.resolve import resolve_cluster, resolve_graph
from autoplace.robust import step_ranges, strategy_range
from autoplace.schedule import NO_SCHEDULE
from autoplace.search import SearchBudget
from autoplace.sim import Simulator, simulate

__all__ = ["Setting", "Job", "MEASURED", "measured", "tight_cluster", "place_job", "bounds_job", "gdp_batch_job",
           "gdp_holdout_job", "predictor_job", "enumerate_job", "JOBS", "run_job", "LEARNED", "SAME_WALL",
           "robust_step", "batch_steps", "WALL_OF", "WALL_PARTS"]

#: the learned placers (their budget is seconds of nominal work; they take a config)
LEARNED = ("rl", "hdp", "gdp", "htf-mpr")

#: result fields (at any depth) that are seconds measured on this machine, besides every ``*wall_s``
MEASURED = ("search_s", "best_at_s", "prior_s", "refine_s", "policy_s", "enumeration_s")


#: result fields (at any depth) that hold a search run for a time measured on this machine: what it finds
#: depends on the machine's speed, as a :data:`SAME_WALL` job's result does
TIMED = ("frozen_wall",)


def measured(key: str) -> bool:
    """Is a result field ``key`` a time measured on this machine, or what a search found in such a time (not
    a property of the placement)?"""
    return key in MEASURED or key in TIMED or key.endswith("wall_s")


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

    graph = resolve_graph(s.model, dict(s.params) or None)
    cluster = resolve_cluster(s.cluster)
    if s.gpu_memory is not None:
        cluster = tight_cluster(graph, cluster, s.gpu_memory)
    return graph, cluster


def tight_cluster(graph, cluster, fraction: float):
    """``cluster`` with each GPU's memory cut to ``fraction`` of ``graph``'s peak on one GPU (the
    single-GPU placement, simulated), so that with ``fraction`` < 1 the graph fits no single GPU."""

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
        """A job of ``kind``; arguments that are ``None`` or empty are left out (a job run with a default
        has the key it had before the argument existed)."""
        return cls(kind, tuple(sorted((k, v) for k, v in args.items() if v is not None and v != ())))

    @property
    def key(self) -> str:
        return json.dumps({"kind": self.kind, **{k: _jsonable(v) for k, v in self.args}}, sort_keys=True)

    @property
    def label(self) -> str:
        a = dict(self.args)
        what = (a.get("method") or self.kind) + ("+refine" if "refine_budget" in a else "")
        if a.get("config"):
            what += " [" + ", ".join(f"{k}={v}" for k, v in a["config"]) + "]"
        where = a.get("setting") or a.get("held_out") or f"{len(a.get('settings', ()))} settings"
        return f"{what} · {where.key if isinstance(where, Setting) else where}"


def _jsonable(v):
    if isinstance(v, Setting):
        return v.identity
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    return v


def place_job(setting: Setting, method: str, budget: float | None = None, seed: int = 0, config: tuple = (),
              refine_budget: float | None = None, time_s: float | None = None) -> dict:
    """Place ``setting`` with ``method`` (a learned placer under ``config``, its settings as pairs) and
    simulate the placement: its step (``None`` where it fails), whether it ran, the devices out of memory,
    the placer's error, its search time and the job's wall time, the peaks, the devices used, its step
    under the cost model's uncertainty (:func:`_uncertainty`); a list
    scheduler's own estimates of its step; a learned search's samples, updates, how it stopped and when it
    first held its best (:func:`_search_summary`). With ``refine_budget``, the placement is then refined by
    the local search (as ``autoplace place --refine``) and the refined one is simulated. With ``time_s``
    (an equal-wall-time job: :data:`SAME_WALL`), a learned search runs ``time_s`` seconds of wall clock and
    another placer runs under that time limit with as much nominal work (its searches simulate slower than
    nominal, so the limit, not the work, ends them)."""

    graph, cluster = setting.problem()
    info = get_placer(method)
    t0 = time.perf_counter()
    learned = None
    try:
        if info.learned:
            check_runnable(graph, cluster)              # place()'s message for an op no device can run
            r = info.search(graph, cluster, budget=budget if time_s is None else SearchBudget(seconds=time_s),
                            seed=seed, **({"config": dict(config)} if config else {}))
            p, learned = r.placement, _search_summary(r)
            search_s = time.perf_counter() - t0
        else:
            if config:
                raise AutoplaceError(f"placer {method!r} takes no settings (only the learned placers do)")
            p = place(graph, cluster, method, seed=seed, budget=budget if time_s is None else time_s,
                      time_limit=time_s)
            search_s = float(p.meta["search_time_s"])
    except (InfeasibleError, UnavailableError) as e:
        return {"step_s": None, "ok": False, "oom": [], "error": str(e), "search_s": time.perf_counter() - t0,
                "wall_s": time.perf_counter() - t0}
    _check_finished(p.meta.get("stop_reason"))
    out: dict[str, Any] = {}
    if refine_budget is not None:

        unrefined = simulate(graph, cluster, p)
        t1 = time.perf_counter()
        p = refine(graph, cluster, p, seed=seed, budget=refine_budget, simulator=robust_simulator(graph, cluster))
        out.update(unrefined_step_s=float(unrefined.step_time) if unrefined.ok else None,
                   refine_s=time.perf_counter() - t1)
    r = simulate(graph, cluster, p)
    out = {"step_s": float(r.step_time) if r.ok else None, "ok": bool(r.ok), "oom": list(r.oom_devices),
           "error": None, "search_s": search_s, "wall_s": time.perf_counter() - t0,
           "peak_gib": [round(float(x) / 2**30, 3) for x in r.peak_memory],
           "devices_used": len(set(p.assignment.values())), **out}
    if r.ok:
        out.update(_uncertainty(setting, p))
    strategy = p.meta.get("strategy")
    if strategy is not None:
        out["strategy"] = {"kind": strategy["kind"], "replicas": strategy["replicas"],
                           "per_replica": p.meta.get("per_replica")}
    if p.meta.get("strategies") is not None:          # auto: its pick and what it weighed
        out["from"] = p.meta.get("from")
        out["strategies"] = _jsonable(p.meta["strategies"])
    for field, key in (("estimate_s", "estimated_step_time_s"), ("decision_estimate_s", "decision_order_estimate_s")):
        if p.meta.get(key) is not None:
            out[field] = float(p.meta[key])
    if learned is not None:
        out["search"] = learned
    if time_s is not None:
        out["equal_wall_s"] = float(time_s)
    return out


@functools.lru_cache(maxsize=4)
def _robust(setting: Setting):

    graph, cluster = setting.problem()
    return robust_simulator(graph, cluster)


def _uncertainty(setting: Setting, placement) -> dict:
    """A running placement under the cost model's uncertainty (docs/algorithms.md, Uncertainty): its
    least and largest step over the scenarios, its robust step, and where one GPU holds the graph, its
    worst-case speedup over one GPU (the least, over the scenarios, of one GPU's step over its) and whether
    its gain over one GPU rests on a constant inside its range."""


    robust = _robust(setting)
    graph, cluster = setting.problem()
    if placement.meta.get("strategy") is not None:        # the replicated step, against the same baseline

        sr = strategy_range(robust, placement)
        return {"step_range_s": [sr.low, sr.high], "robust_step_s": sr.robust,
                **({"one_gpu_s": sr.one_gpu} if sr.one_gpu is not None else {})}
    devs = placement.to_array(graph, cluster)
    prio = placement.priorities(graph)
    sr = step_ranges(robust, devs[None, :], None if prio is None else prio[None, :])[0]
    out = {"step_range_s": [sr.low, sr.high], "robust_step_s": sr.robust}
    if robust.baseline is not None:
        steps = robust.steps(np.stack([robust.baseline, devs]), None if prio is None else np.stack(
            [np.full(len(devs), NO_SCHEDULE), prio]))
        out["one_gpu_s"] = sr.one_gpu
        out["worst_case_speedup"] = float((steps[:, 0] / steps[:, 1]).min())
        out["gain_inside_range"] = bool(sr.gain_inside_range)
    return out


def _search_summary(r) -> dict:
    """A learned search in a few numbers: samples, updates, how it stopped; the samples (and the wall
    seconds) after which it first held its final best (0 and the prior's seconds where the best is its
    prior's placement); the steps at which its best improved (``improvements``: ``[samples, step]``);
    its prior, groups or nodes and HTF-MPR's winning family, screened children and initial mappings."""
    meta = r.placement.meta
    final = meta.get("best_step_s")
    out: dict[str, Any] = {"samples": int(r.samples), "updates": int(r.updates), "stop_reason": r.stop_reason}
    improvements, best = [], math.inf
    for point in r.curve.points:
        if point.best_step_s < best:
            best = point.best_step_s
            improvements.append([int(point.samples), _finite(best)])
    out["improvements"] = improvements
    prior_step = meta.get("prior_step_s")
    if final is not None and prior_step is not None and final >= prior_step * (1 - 1e-9):
        out["samples_to_best"], out["best_at_s"] = 0, float(meta.get("prior_s") or 0.0)
    elif final is not None:
        at = next((p for p in r.curve.points if p.best_step_s <= final * (1 + 1e-9)), None)
        out["samples_to_best"] = int(at.samples) if at else int(r.samples)
        out["best_at_s"] = float(at.wall_s) if at else float(r.wall_s)
    for k in ("groups", "nodes", "prior", "prior_step_s", "prior_s", "family"):
        if meta.get(k) is not None:
            out[k] = meta[k] if not isinstance(meta[k], float) else _finite(meta[k])
    for k in ("initial", "screened"):
        if k in r.extra:
            out[k] = int(r.extra[k])
    return out


def bounds_job(setting: Setting) -> dict:
    """``setting``'s lower bounds on the step: its critical path and its load (:mod:`autoplace.bounds`)."""

    graph, cluster = setting.problem()
    b = lower_bounds(graph, cluster, Simulator(graph, cluster).op_times)
    return {"critical_path_s": float(b.critical_path), "load_s": float(b.load), "ops": graph.n_ops}


def gdp_batch_job(settings: tuple[Setting, ...], budget: float, seed: int, config: tuple = (),
                  zero_shot: tuple[Setting, ...] = (), robust: bool = False, time_s: float | None = None) -> dict:
    """GDP-batch (Zhou et al. §4.3): one policy trained over every setting with ``budget`` seconds of
    nominal work for each (the same work GDP-one spends on each alone), or for ``time_s`` seconds of wall
    clock (an equal-wall-time job: :data:`SAME_WALL`); each setting's best step (with ``robust``, its robust
    step too: :func:`_uncertainty`) and the training's seconds (``wall_s``, and as ``search_s`` what an
    equal-wall job takes); then the trained policy places each of ``zero_shot`` (larger graphs) zero-shot."""


    probs = [s.problem() for s in settings]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "batch.safetensors") if zero_shot else None
        r = gdp_train([g for g, _ in probs], [c for _, c in probs], seed=seed, output=path,
                      budget=budget * len(settings) if time_s is None else SearchBudget(seconds=time_s),
                      **({"config": dict(config)} if config else {}))
        _check_finished(r.stop_reason)
        trained = time.perf_counter() - t0
        steps, robust_steps = batch_steps(settings, r, robust=robust)
        out = {"steps_s": {s.identity: x for s, x in zip(settings, steps)}, "updates": r.updates,
               "samples": r.samples, "wall_s": trained, "search_s": trained}
        if robust:
            out["robust_steps_s"] = {s.identity: x for s, x in zip(settings, robust_steps)}
        if zero_shot:
            net, cfg = load_policy(path)
            out["zero_shot"] = {s.identity: _zero_shot(net, s, cfg, seed) for s in zero_shot}
    if time_s is not None:
        out["equal_wall_s"] = float(time_s)
    return out


def _zero_shot(net, setting: Setting, cfg, seed: int, robust: bool = False) -> dict:
    """``net`` placing ``setting`` zero-shot: its best step (with ``robust``, its robust step too), the greedy
    (most likely) placement's, the prior's, and the seconds the policy and the prior took."""

    graph, cluster = setting.problem()
    t0 = time.perf_counter()
    p = zero_shot(net, graph, cluster, cfg, seed=seed)
    out = {"step_s": _finite(p.meta["best_step_s"]), "greedy_step_s": _finite(p.meta["greedy_step_s"]),
           "prior_step_s": _finite(p.meta.get("prior_step_s")), "prior": p.meta.get("prior"),
           "policy_s": float(p.meta["policy_time_s"]), "prior_s": float(p.meta.get("prior_s") or 0.0),
           "wall_s": time.perf_counter() - t0}
    if robust:
        out["robust_step_s"] = robust_step(setting, p)
    return out


def batch_steps(settings, result, *, robust: bool = True) -> tuple[list, list | None]:
    """A GDP training over ``settings``' best steps (None where none ran) and, with ``robust``, their robust
    steps (:func:`robust_step`; the result's placements are those of the settings that ran, in order)."""
    steps = [_finite(x) for x in result.extra["best_steps_s"]]
    if not robust:
        return steps, None
    placed = iter(result.placements)
    return steps, [None if x is None else robust_step(s, next(placed)) for s, x in zip(settings, steps)]


def robust_step(setting: Setting, placement) -> float | None:
    """``placement``'s robust step on ``setting`` (:func:`_uncertainty`; None where it does not run)."""

    graph, cluster = setting.problem()
    return _uncertainty(setting, placement)["robust_step_s"] if simulate(graph, cluster, placement).ok else None


def gdp_holdout_job(held_out: Setting, others: tuple[Setting, ...], budget: float, fine_tune_updates: int,
                    seed: int, config: tuple = (), baselines: bool = False) -> dict:
    """GDP's generalisation (Figure 2): a policy pre-trained on ``others`` (``budget`` seconds of nominal
    work each) places ``held_out`` zero-shot, then is fine-tuned on it for ``fine_tune_updates`` PPO
    updates; beside them, two controls: an untrained policy's zero-shot placement (what the prior and the
    sampling give without training) and GDP from scratch for the same updates. Steps and wall times. With
    ``baselines``, the robust steps too, and the fine-tune's learning-off self (the pre-trained policy
    sampling without updates: ``learn=false``) for the same samples (``frozen``) and for the fine-tune's
    wall time (``frozen_wall``)."""

    import torch


    knobs = {"config": dict(config)} if config else {}
    probs = [s.problem() for s in others]
    graph, cluster = held_out.problem()

    def searched(r, t0: float) -> dict:
        _check_finished(r.stop_reason)
        out = {"step_s": _finite(r.placement.meta["best_step_s"]), "samples": r.samples, "updates": r.updates,
               "wall_s": time.perf_counter() - t0}
        if baselines:
            out["robust_step_s"] = robust_step(held_out, r.placement)
        return out

    extra = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pretrained.safetensors")
        t0 = time.perf_counter()
        _check_finished(gdp_train([g for g, _ in probs], [c for _, c in probs], budget=budget * len(others),
                                  seed=seed, output=path, **knobs).stop_reason)
        pretrain_s = time.perf_counter() - t0
        net, cfg = load_policy(path)
        zs = _zero_shot(net, held_out, cfg, seed, robust=baselines)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            fresh_cfg = GDPConfig.from_dict(dict(config))
            untrained = _zero_shot(new_policy(fresh_cfg), held_out, fresh_cfg, seed, robust=baselines)
        samples = SearchBudget(samples=fine_tune_updates * cfg.samples_per_update)
        t0 = time.perf_counter()
        tuned = searched(gdp_search(graph, cluster, policy=path, budget=samples, seed=seed), t0)
        if baselines:
            off = {"learn": False}
            t0 = time.perf_counter()
            extra["frozen"] = searched(gdp_search(graph, cluster, policy=path, config=off, budget=samples, seed=seed),
                                       t0)
            t0 = time.perf_counter()
            extra["frozen_wall"] = searched(gdp_search(graph, cluster, policy=path, config=off, seed=seed,
                                                       budget=SearchBudget(seconds=tuned["wall_s"])), t0)
    t0 = time.perf_counter()
    scratch = searched(gdp_search(graph, cluster, budget=samples, seed=seed, **knobs), t0)
    return {"zero_shot_s": zs["step_s"], "fine_tune_s": tuned["step_s"],
            "pretrain_wall_s": pretrain_s, "zero_shot_wall_s": zs["wall_s"], "fine_tune_wall_s": tuned["wall_s"],
            "fine_tune_updates": tuned["updates"], "zero_shot": zs, "untrained_zero_shot": untrained,
            "scratch_s": scratch["step_s"], "scratch_wall_s": scratch["wall_s"], "scratch_updates": scratch["updates"],
            **({"fine_tune": tuned, "scratch": scratch, **extra} if baselines else {})}


def predictor_job(setting: Setting, budget: float, seed: int, folds: int = 5, runs: int = 5,
                  config: tuple = ()) -> dict:
    """HTF-MPR's Figure 8: every fitness predictor's Kendall tau distance (``folds``-fold cross-validation,
    mean and standard deviation over ``runs`` runs) on the mappings one HTF-MPR search (``budget`` seconds
    of nominal work) evaluated."""

    graph, cluster = setting.problem()
    t0 = time.perf_counter()
    r = htf_mpr_search(graph, cluster, budget=budget, seed=seed, **({"config": dict(config)} if config else {}))
    _check_finished(r.stop_reason)
    search_s = time.perf_counter() - t0
    X, steps = r.extra["mappings"], r.extra["steps"]
    table = compare_models(X, fitness(steps), n_devices=cluster.n_devices, k=min(folds, len(X)), runs=runs,
                           seed=seed)
    return {"mappings": int(len(X)), "models": {k: {"mean": _finite(v[0]), "std": _finite(v[1]), "failed_runs": v[2]}
                                                for k, v in table.items()},
            "search_s": search_s, "wall_s": time.perf_counter() - t0}


#: the most mappings :func:`enumerate_job` simulates by default (3^17, mnist-softmax's on three devices)
MAX_MAPPINGS = 3 ** 17


def enumerate_job(setting: Setting, budget: float, seed: int, config: tuple = (), max_mappings: int = MAX_MAPPINGS,
                  chunk: int = 200_000) -> dict:
    """Every mapping of ``setting``'s HTF-MPR nodes (its co-location groups) to its devices, simulated in
    batches: the share faster than the default mapping (every op on the first GPU, TensorFlow's default),
    how many fail, the best step; and where the mapping of one HTF-MPR search (``budget`` seconds of
    nominal work) ranks among them. A graph with more than ``max_mappings`` mappings has its nodes
    coarsened (HTF-MPR's ``groups`` setting) until they fit, for the enumeration and the search alike."""


    graph, cluster = setting.problem()
    settings = dict(config)
    nodes = htf_mpr_nodes(graph, cluster, HTFMPRConfig.from_dict(settings), seed)
    d = cluster.n_devices
    k = int(math.log(max_mappings) / math.log(d)) if d > 1 else nodes.n_groups
    while d ** nodes.n_groups > max_mappings and k >= 1:
        settings["groups"] = k
        nodes = htf_mpr_nodes(graph, cluster, HTFMPRConfig.from_dict(settings), seed)
        k -= 1
    n, total = nodes.n_groups, d ** nodes.n_groups
    if total > max_mappings:
        raise AutoplaceError(f"{setting.key}: {d}^{n} mappings, more than the {max_mappings:,} an enumeration "
                             "simulates, even coarsened")
    t0 = time.perf_counter()
    r = htf_mpr_search(graph, cluster, budget=budget, seed=seed, **({"config": settings} if settings else {}))
    _check_finished(r.stop_reason)
    htf, search_s = float(r.placement.meta["best_step_s"]), time.perf_counter() - t0
    sim = Simulator(graph, cluster)
    gpu0 = next(i for i, dev in enumerate(cluster.devices) if dev.kind == "gpu")
    first = sim.run_batch(np.full((1, graph.n_ops), gpu0))
    default = float(first.step_time[0]) if not first.oom[0] else math.inf
    powers = d ** np.arange(n, dtype=np.int64)
    better_default = better_htf = equal_htf = failed = 0
    best = math.inf
    t1 = time.perf_counter()
    for start in range(0, total, chunk):
        idx = np.arange(start, min(start + chunk, total), dtype=np.int64)
        b = sim.run_batch(nodes.expand_many((idx[:, None] // powers[None, :]) % d))
        ok = ~b.oom & np.isfinite(b.step_time)
        step = np.where(ok, b.step_time, np.inf)
        failed += int((~ok).sum())
        better_default += int((step < default * (1 - 1e-12)).sum())
        better_htf += int((step < htf * (1 - 1e-12)).sum())
        equal_htf += int((np.abs(step - htf) <= htf * 1e-12).sum())
        best = min(best, float(step.min()))
        report_progress(f"{start + len(idx):,} of {total:,} mappings", (start + len(idx)) / total)
    return {"nodes": n, "coarsened": "groups" in settings and "groups" not in dict(config), "devices": d,
            "mappings": total, "default_step_s": _finite(default),
            "better_than_default": better_default, "failed": failed, "best_step_s": _finite(best),
            "htf_mpr_step_s": htf, "htf_mpr_rank": better_htf + 1, "htf_mpr_ties": equal_htf,
            "htf_mpr_evaluations": int(r.samples), "search_s": search_s,
            "enumeration_s": time.perf_counter() - t1, "wall_s": time.perf_counter() - t0}


JOBS: dict[str, Callable[..., dict]] = {"place": place_job, "bounds": bounds_job, "gdp-batch": gdp_batch_job,
                                        "gdp-holdout": gdp_holdout_job, "predictor": predictor_job,
                                        "enumerate": enumerate_job}


#: a ``place`` job's argument naming another job (by key) whose measured ``search_s`` it runs for: the
#: job is bound to wall-clock time, so its result depends on the machine (``bench --against`` leaves it out)
SAME_WALL = "same_wall_as"


#: a :data:`SAME_WALL` job's optional arguments: which of the other job's measured seconds it runs for
#: (default ``search_s``) and into how many equal parts they are cut (default 1: a batch's wall time shared by
#: its settings)
WALL_OF, WALL_PARTS = "wall_of", "wall_parts"


def run_job(job: Job, results: dict[str, dict] | None = None) -> dict:
    """``job``'s result; a :data:`SAME_WALL` job reads the other job's ``search_s`` (or its :data:`WALL_OF`
    field, over :data:`WALL_PARTS`) from ``results`` (job key -> result: that job runs first), and its
    refine's ``refine_s`` too unless it is refined alike."""
    args = dict(job.args)
    if SAME_WALL in args:
        other = args.pop(SAME_WALL)
        field, parts = args.pop(WALL_OF, "search_s"), args.pop(WALL_PARTS, 1)
        if results is None or other not in results:
            raise AutoplaceError(f"{job.label}: runs for the wall time of a job not run yet")
        refine_s = 0.0 if "refine_budget" in args else float(results[other].get("refine_s") or 0.0)
        args["time_s"] = max((float(results[other][field]) + refine_s) / parts, 1e-3)
    return JOBS[job.kind](**args)


def _check_finished(stop_reason: str | None) -> None:
    """A learned search stopped by Ctrl-C returns its best so far: a bench job stops instead of keeping a
    result short of its budget."""
    if stop_reason == "interrupted":
        raise KeyboardInterrupt


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None
