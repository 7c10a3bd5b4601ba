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

from dataclasses import dataclass, field

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import op_time_matrix
from autoplace.env import BaseEnv
from autoplace.graph import Graph
from autoplace.grouping import Grouping

__all__ = ["Scores", "Evaluator", "default_failing_step"]


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


@dataclass
class Evaluator:
    """Scores group placements of ``graph`` on ``env``'s cluster, caching each distinct placement's score.

    ``hits``/``misses`` count cache look-ups; ``evaluations`` the placements actually simulated or run.
    """

    env: BaseEnv
    grouping: Grouping
    cache: dict[bytes, tuple[float, bool]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    @property
    def evaluations(self) -> int:
        return self.misses

    def __call__(self, group_devices: np.ndarray) -> Scores:
        """Score ``[B, n_groups]`` device indices; placements not in the cache go to the env in one batch."""
        gd = np.ascontiguousarray(np.atleast_2d(group_devices), dtype=np.int64)
        keys = [row.tobytes() for row in gd]
        step = np.empty(len(gd))
        ok = np.zeros(len(gd), dtype=bool)
        cached = np.zeros(len(gd), dtype=bool)
        todo: dict[bytes, list[int]] = {}
        for b, k in enumerate(keys):
            if k in self.cache:
                step[b], ok[b] = self.cache[k]
                cached[b] = True
            else:
                todo.setdefault(k, []).append(b)
        self.hits += int(cached.sum())
        if todo:
            first = [rows[0] for rows in todo.values()]
            batch = self.env.evaluate_batch(self.grouping.expand_many(gd[first]))
            runs = np.isfinite(batch.step_time) & ~batch.oom
            for (k, rows), s, r in zip(todo.items(), batch.step_time.tolist(), runs.tolist()):
                value = (float(s) if r else float("inf"), bool(r))
                self.cache[k] = value
                step[rows], ok[rows] = value
            self.misses += len(todo)
            self.hits += sum(len(rows) - 1 for rows in todo.values())
        return Scores(step, ok, cached)
