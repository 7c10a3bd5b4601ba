"""Scoring sampled placements for a learned search: an env, a cache keyed by the placement, a failing signal.

A learned placer proposes one device per *group* (:class:`~autoplace.grouping.Grouping`); the
:class:`Evaluator` expands the groups to ops, scores a batch through the env's batched entry point
(:meth:`~autoplace.env.BaseEnv.evaluate_batch`: the simulator's ``run_batch``, or real runs), and keeps
every score it has seen: a converging policy samples the same placements again and again, and each is
simulated (or measured) once.

Measurements are noisy, and a measured run can fail sporadically (a worker's hiccup rather than the
placement). So where the scorer is not deterministic (anything but the simulator), a failing run is run
again (:attr:`CachedScorer.retries` times) before the placement counts as failing; each placement's cache
entry is the mean of the runs that ran, with its counts of runs and failures (:attr:`CachedScorer.runs`);
and before a search keeps its best, :meth:`CachedScorer.confirm` measures the few best placements again and
the best mean wins (:func:`confirm_best`) — a lucky first measurement is not locked in.

A placement *fails* when it runs out of some device's memory, or when a measured run crashes or times out
(an infinite step). Mirhoseini et al. (2017, §3.1) give a failing placement the *failing signal* in place
of its reward; :func:`default_failing_step` is this project's choice of it where the paper sets it by hand
per graph. (Co-location cannot be broken: groups contain the co-location groups, and a device that cannot
run a group is masked out of the policy's choices.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import op_time_matrix
from autoplace.env import BaseEnv, make_env
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph
from autoplace.grouping import Grouping
from autoplace.placement import Placement
from autoplace.units import fmt_bytes

__all__ = ["Scores", "CachedScorer", "Evaluator", "score_batch", "default_failing_step", "check_params_fit",
           "confirm_best"]


def check_params_fit(graph: Graph, cluster: Cluster, grouping: Grouping, method: str) -> None:
    """:class:`~autoplace.errors.InfeasibleError` before a search starts when no placement of ``grouping``'s
    groups can hold the parameters: more parameter bytes than the cluster's memory, or a group's more than
    any one device's (a search would otherwise spend its whole budget on failing samples)."""

    params = np.bincount(grouping.group, weights=graph.param_bytes.astype(float), minlength=grouping.n_groups)
    total, memory = float(params.sum()), cluster.memory_bytes
    if total > float(memory.sum()):
        raise InfeasibleError(f"{method}: the parameters of {graph.name!r} ({fmt_bytes(total)}) exceed the memory "
                              f"of cluster {cluster.name!r} ({fmt_bytes(float(memory.sum()))})")
    g = int(np.argmax(params))
    if params[g] > float(memory.max()):
        raise InfeasibleError(f"{method}: group {grouping.names[g]!r} holds {fmt_bytes(float(params[g]))} of "
                              f"parameters, more than any device of cluster {cluster.name!r} can")


def default_failing_step(graph: Graph, cluster: Cluster, factor: float = 10.0) -> float:
    """The step time a failing placement is scored as: ``factor`` times the slowest device's serial time
    for the whole graph (each op on its slowest device that runs it), so that every placement that runs
    scores better than one that fails."""
    times = op_time_matrix(graph, cluster)
    slowest = np.where(np.isfinite(times), times, -np.inf).max(axis=1)
    return float(factor * max(slowest.sum(), 1e-9))


@dataclass
class Scores:
    """``[B]`` arrays for a batch of placements: step time (``inf`` where it failed), whether it ran, and
    whether the score came from the cache."""

    step_time: np.ndarray
    ok: np.ndarray
    cached: np.ndarray


class CachedScorer:
    """Scores group placements, caching each distinct placement's score: subclasses say how to score the
    op placements the cache does not hold (:meth:`score_ops`).

    ``hits``/``misses`` count cache look-ups; ``evaluations`` the placements actually simulated or run.
    """

    #: the env that scores (``"simulated"``, ``"measured"`` …): a checkpoint belongs to one
    env_name: str = "base"
    #: a failing run of a non-deterministic scorer is run again this many times before the placement fails
    retries: int = 1
    #: :meth:`confirm`: the best placements measured again, and how many times each
    confirm_top: int = 4
    confirm_repeats: int = 2

    def __init__(self, grouping: Grouping):
        self.grouping = grouping
        self.cache: dict[bytes, tuple[float, bool]] = {}
        #: per placement (non-deterministic scorers): runs that ran, runs that failed
        self.runs: dict[bytes, tuple[int, int]] = {}
        self.hits = self.misses = 0

    @property
    def deterministic(self) -> bool:
        """Whether scoring a placement again gives the same step, bit for bit (the simulator does; a
        measurement does not)."""
        return self.env_name == "simulated"

    @property
    def evaluations(self) -> int:
        return self.misses

    def score_ops(self, op_devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``[B, n_ops]`` device indices -> step times (``inf`` where it failed) and whether each ran."""
        raise NotImplementedError

    def __call__(self, group_devices: np.ndarray) -> Scores:
        """Score ``[B, n_groups]`` device indices; placements not in the cache are scored in one call."""
        gd = np.ascontiguousarray(np.atleast_2d(group_devices), dtype=np.int64)
        keys = [row.tobytes() for row in gd]
        cached = np.array([k in self.cache for k in keys], dtype=bool)
        todo: dict[bytes, int] = {}
        for b, k in enumerate(keys):
            if not cached[b]:
                todo.setdefault(k, b)
        if todo:
            self._measure(list(todo), gd[list(todo.values())])
        self.misses += len(todo)
        self.hits += len(keys) - len(todo)
        return Scores(np.array([self.cache[k][0] for k in keys]), np.array([self.cache[k][1] for k in keys]), cached)


    def _measure(self, keys: list[bytes], groups: np.ndarray) -> None:
        """Score ``groups`` (their cache ``keys``) and record each; a non-deterministic scorer runs the
        failures again, up to :attr:`retries` times."""
        step, ok = self.score_ops(self.grouping.expand_many(groups))
        for k, s, r in zip(keys, step.tolist(), ok.tolist()):
            self._record(k, float(s), bool(r))
        for _ in range(self.retries if not self.deterministic else 0):
            again = [i for i, k in enumerate(keys) if not self.cache[k][1]]
            if not again:
                break
            step, ok = self.score_ops(self.grouping.expand_many(groups[again]))
            for i, s, r in zip(again, step.tolist(), ok.tolist()):
                self._record(keys[i], float(s), bool(r))

    def _record(self, key: bytes, step: float, ran: bool) -> None:
        """One run of a placement: the cache holds the mean of its runs that ran (``inf`` while none has)."""
        if self.deterministic:
            self.cache[key] = (step if ran else float("inf"), ran)
            return
        n, failed = self.runs.get(key, (0, 0))
        if ran:
            mean = self.cache[key][0] if n else 0.0
            self.cache[key] = ((mean * n + step) / (n + 1), True)
            self.runs[key] = (n + 1, failed)
        else:
            self.runs[key] = (n, failed + 1)
            if not n:
                self.cache[key] = (float("inf"), False)

    def restore(self, cache: dict[bytes, tuple[float, bool]], runs: dict[bytes, tuple[int, int]]) -> None:
        """Take a checkpoint's scores and run counts (the counts matter to a non-deterministic scorer only)."""
        self.cache.update(cache)
        if not self.deterministic:
            self.runs.update(runs)

    def best(self) -> tuple[np.ndarray, float] | None:
        """The placement of the least cached step that ran, and that step; ``None`` if none ran."""
        ran = [(s, k) for k, (s, r) in self.cache.items() if r]
        if not ran:
            return None
        s, k = min(ran)
        return np.frombuffer(k, dtype=np.int64).copy(), s

    def confirm(self) -> None:
        """Measure the :attr:`confirm_top` best placements :attr:`confirm_repeats` more times each (a
        deterministic scorer: nothing to do), so that the best is a mean, not one lucky run."""
        if self.deterministic:
            return
        top = sorted((s, k) for k, (s, r) in self.cache.items() if r)[:self.confirm_top]
        keys = [k for _, k in top for _ in range(self.confirm_repeats)]
        if keys:
            groups = np.frombuffer(b"".join(keys), dtype=np.int64).reshape(len(keys), -1)
            step, ok = self.score_ops(self.grouping.expand_many(groups))
            for k, s, r in zip(keys, step.tolist(), ok.tolist()):
                self._record(k, float(s), bool(r))


def confirm_best(holder, scorer: CachedScorer) -> None:
    """Where ``scorer`` is not deterministic, measure its best placements again (:meth:`~CachedScorer.confirm`)
    and set ``holder.best_groups`` / ``holder.best_step`` to the best mean."""
    if scorer.deterministic:
        return
    scorer.confirm()
    best = scorer.best()
    if best is not None:
        holder.best_groups, holder.best_step = best



class SampledSearch:
    """What the learned searches that keep their best sampled placement share: the env they score with
    (closed by :meth:`close` only where the search made it), the best placement that ran, confirmed again
    where the env is noisy. A search sets ``method`` (its placer's name) and ``units`` (the grouping its samples
    place) and keeps ``graph``, ``cluster``, ``evaluate``, ``samples`` and ``best_groups``."""

    method = ""

    def use_env(self, env, graph: Graph, cluster: Cluster, scorer: CachedScorer | None = None) -> None:
        """Score on ``env``: an env passed in is the caller's to close, one named (``"simulated"``) is made
        here and closed by :meth:`close`; none where a ``scorer`` is given."""
        self._own_env = scorer is None and not isinstance(env, BaseEnv)
        self.env = None if scorer is not None else env if isinstance(env, BaseEnv) else make_env(env, graph, cluster)

    def confirm(self) -> None:
        """Where the env is noisy, the best placements measured again and the best mean kept."""
        confirm_best(self, self.evaluate)

    def best_placement(self, **meta) -> Placement:
        """The best placement that ran (``meta`` in its meta); "infeasible" if none did."""
        if self.best_groups is None:
            raise InfeasibleError(f"{self.method}: none of the {self.samples} sampled placements of "
                                  f"{self.graph.name!r} ran on cluster {self.cluster.name!r} (all failed)")
        return Placement.from_array(self.graph, self.cluster, self.units.expand(self.best_groups), self.method,
                                    **meta)

    def close(self) -> None:
        if self._own_env and self.env is not None:
            self.env.close()

    def count_update(self, samples: int, t0: float, t1: float, t2: float) -> None:
        """One update done: its ``samples``, and its time (from ``t0``: sampling until ``t1``, scoring until
        ``t2``, training until now) in ``timings`` and ``wall_s``."""
        self.samples += samples
        self.updates += 1
        t3 = time.monotonic()
        for part, dt in (("policy_forward", t1 - t0), ("evaluate", t2 - t1), ("policy_update", t3 - t2)):
            self.timings[part] = self.timings.get(part, 0.0) + dt
        self.wall_s += t3 - t0


class Evaluator(CachedScorer):
    """Scores group placements of ``graph`` on ``env``'s cluster through the env's batched entry point."""

    def __init__(self, env: BaseEnv, grouping: Grouping):
        super().__init__(grouping)
        self.env = env
        self.env_name = env.name

    def score_ops(self, op_devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return score_batch(self.env, op_devices)


def score_batch(env: BaseEnv, op_devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[B, n_ops]`` device indices scored by ``env`` in one batch: step times (``inf`` where the placement
    failed: out of memory, or a measured run that crashed or timed out) and whether each ran."""
    batch = env.evaluate_batch(op_devices)
    ok = np.isfinite(batch.step_time) & ~batch.oom
    return np.where(ok, batch.step_time, np.inf), ok
