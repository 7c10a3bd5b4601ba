"""Searches scored by a noisy env (a measured one) do not lock in noise: a sporadic failure is run again, a
placement's score is the mean of its runs, the best placements are measured again before one is kept,
and the counts survive a checkpoint. (The simulator is deterministic: none of this changes its searches.)"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("torch")

from autoplace.cluster import get_cluster  # noqa: E402
from autoplace.env import BaseEnv  # noqa: E402
from autoplace.formats.state import read_state  # noqa: E402
from autoplace.placers.learned.rl import RLConfig, rl_search  # noqa: E402
from autoplace.search import SearchBudget  # noqa: E402
from autoplace.search.checkpoint import CHECKPOINT_FILE  # noqa: E402
from autoplace.search.evaluation import Evaluator, confirm_best  # noqa: E402
from autoplace.sim import Simulator  # noqa: E402
from autoplace.zoo import build_graph  # noqa: E402


class NoisyEnv(BaseEnv):
    """The simulator's step, scaled per run by ``scale(placement key, run number)``; a scale of ``inf``
    is a failed run. Counts the runs of each placement."""

    name = "noisy"

    def __init__(self, graph, cluster, scale):
        super().__init__(graph, cluster)
        self.sim, self.scale, self.calls = Simulator(graph, cluster), scale, Counter()

    def evaluate_batch(self, devs):
        b = self.sim.run_batch(devs)
        step = b.step_time.copy()
        for i, row in enumerate(np.asarray(devs, dtype=np.int64)):
            key = row.tobytes()
            self.calls[key] += 1
            step[i] = step[i] * self.scale(key, self.calls[key])
        return replace(b, step_time=step)


def _evaluator(scale):
    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    from autoplace.grouping import group_ops

    grouping = group_ops(g, ("colocation",))
    env = NoisyEnv(g, c, scale)                                 # keys: op placements, as the env sees them
    return Evaluator(env, grouping), grouping, env


def test_a_sporadic_failure_is_run_again_and_counted():
    ev, grouping, env = _evaluator(lambda key, run: np.inf if run == 1 else 1.0)   # every first run fails
    groups = np.zeros((2, grouping.n_groups), dtype=np.int64)
    groups[1, 0] = 1
    scores = ev(groups)
    assert scores.ok.all()                                      # the retry ran
    assert all(ev.runs[row.tobytes()] == (1, 1) for row in groups)
    ev.retries = 0
    other = np.ones((1, grouping.n_groups), dtype=np.int64)
    assert not ev(other).ok[0] and ev.runs[other[0].tobytes()] == (0, 1)


def test_a_lucky_first_run_is_not_kept():
    """One placement measures at half its step the first time, twice it after: the best before confirming
    is that lucky one; after, the best is a placement whose mean is truly least."""
    lucky = {}

    def scale(key, run):
        if key == lucky.get("key"):
            return 0.5 if run == 1 else 2.0
        return 1.0

    ev, grouping, env = _evaluator(scale)
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 2, size=(12, grouping.n_groups))
    truth = env.sim.run_batch(grouping.expand_many(groups)).step_time
    i = int(np.argsort(truth)[1])                              # the second best, made lucky
    lucky["key"] = grouping.expand(groups[i]).astype(np.int64).tobytes()
    ev(groups)

    class Holder:
        best_groups = best_step = None

    h = Holder()
    h.best_groups, h.best_step = ev.best()
    assert (h.best_groups == groups[i]).all() and h.best_step == pytest.approx(0.5 * truth[i])
    confirm_best(h, ev)
    assert not (h.best_groups == groups[i]).all()
    assert h.best_step == pytest.approx(truth.min())          # the truly best, measured exactly
    assert ev.runs[groups[i].astype(np.int64).tobytes()] == (1 + ev.confirm_repeats, 0)


def test_the_simulator_is_deterministic_so_nothing_is_run_again():
    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    from autoplace.env import SimulatedEnv
    from autoplace.grouping import group_ops

    grouping = group_ops(g, ("colocation",))
    ev = Evaluator(SimulatedEnv(g, c), grouping)
    groups = np.zeros((3, grouping.n_groups), dtype=np.int64)
    ev(groups)
    before = dict(ev.cache)
    ev.confirm()
    assert ev.deterministic and ev.runs == {} and ev.cache == before and ev.misses == 1


def test_a_noisy_search_keeps_a_confirmed_mean_and_its_counts_survive_a_checkpoint(tmp_path):
    g, c = build_graph("layered-dag", ops=40, width=4), get_cluster("k80x2")
    rng = np.random.default_rng(1)
    env = NoisyEnv(g, c, lambda key, run: float(rng.uniform(0.8, 1.2)) if rng.random() > 0.1 else np.inf)
    cfg = RLConfig(samples_per_update=4)
    r = rl_search(g, c, budget=SearchBudget(samples=16), config=cfg, seed=0, env=env, checkpoint=tmp_path)
    state = read_state(tmp_path / CHECKPOINT_FILE)
    runs, ok, step = state["cache"]["runs"], state["cache"]["ok"], state["cache"]["step"]
    assert state["env"] == "noisy" and (runs > 1).any() and ((runs > 0) == ok).all()
    assert r.placement.meta["best_step_s"] == pytest.approx(step[ok].min())   # the best mean, confirmed
    again = rl_search(g, c, budget=SearchBudget(samples=24), config=cfg, seed=0, env=env, resume=tmp_path)
    assert again.samples == 24
