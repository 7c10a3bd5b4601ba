"""Scoring sampled placements for a learned search: an env, a cache keyed by the placement, a failing signal.

A learned placer proposes one device per *group* (:class:`~autoplace.grouping.Grouping`); the
:class:`Evaluator` expands the groups to ops, scores a batch through the env's batched entry point
(:meth:`~autoplace.env.BaseEnv.evaluate_batch`: the simulator's ``run_batch``, or real runs), and keeps
every score it has seen: a converging policy samples the same placements again and again, and each is
simulated (or measured) once.

A placement *fails* when it runs out of some device's memory, or when a measured run crashes or times out
(an infinite step). Mirhoseini et al. (2017, §3.1) give a failing placement the *failing signal* in place
of its reward; :func:`default_failing_step` is this project's choice of it where the paper sets it by hand
per graph. (Co-location cannot be broken: groups contain the co-location groups, and a device that cannot
run a group is masked out of the policy's choices.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import op_time_matrix
from autoplace.env import BaseEnv
from autoplace.graph import Graph
from autoplace.grouping import Grouping

__all__ = ["Scores", "CachedScorer", "Evaluator", "score_batch", "default_failing_step", "check_params_fit"]


def check_params_fit(graph: Graph, cluster: Cluster, grouping: Grouping, method: str) -> None:
    """:class:`~autoplace.errors.InfeasibleError` before a search starts when no placement of ``grouping``'s
    groups can hold the parameters: more parameter bytes than the cluster's memory, or a group's more than
    any one device's (a search would otherwise spend its whole budget on failing samples)."""
    from autoplace.errors import InfeasibleError
    from autoplace.units import fmt_bytes

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

    def __init__(self, grouping: Grouping):
        self.grouping = grouping
        self.cache: dict[bytes, tuple[float, bool]] = {}
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
            step, ok = self.score_ops(self.grouping.expand_many(gd[list(todo.values())]))
            for k, s, r in zip(todo, step.tolist(), ok.tolist()):
                self.cache[k] = (float(s) if r else float("inf"), bool(r))
        self.misses += len(todo)
        self.hits += len(keys) - len(todo)
        return Scores(np.array([self.cache[k][0] for k in keys]), np.array([self.cache[k][1] for k in keys]), cached)


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
