"""The RL placer distributed on Ray (Mirhoseini et al. 2017 §3.4): controllers, workers and a parameter
server on one local Ray session shared by the module's tests."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from conftest import wait_for  # noqa: E402

from autoplace.cluster import get_cluster  # noqa: E402
from autoplace.placers.learned.rl import RLConfig, rl_distributed, rl_search  # noqa: E402
from autoplace.search import SearchBudget  # noqa: E402
from autoplace.search.distributed import ray_session  # noqa: E402
from autoplace.sim import simulate  # noqa: E402
from autoplace.zoo import build_graph  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray session and worker processes per test


@pytest.fixture(scope="module")
def session():
    with ray_session(num_cpus=2) as r:
        yield r


@pytest.fixture(scope="module")
def case():
    return build_graph("layered-dag", ops=60, width=4), get_cluster("k80x4")


def test_a_tiny_distributed_search_places_validly(session, case, tmp_path):
    g, c = case
    r = rl_distributed(g, c, budget=SearchBudget(samples=96), workers=4, controllers=2,
                       config=RLConfig(samples_per_update=4), seed=0, curve_csv=tmp_path / "curve.csv")
    m = r.placement.meta
    assert m["controllers"] == 2 and m["workers"] == 4 and 96 <= r.samples < 96 + 2 * 4
    assert simulate(g, c, r.placement).step_time == pytest.approx(m["best_step_s"])
    best = [p.best_step_s for p in r.curve.points]
    assert best == sorted(best, reverse=True) and len(r.curve) == m["updates"]
    assert (tmp_path / "curve.csv").exists() and session.is_initialized()     # the shared session stays up


def test_a_killed_worker_is_replaced_and_the_search_finishes(session, case):
    g, c = case
    killed = []

    def kill_one(ray, controllers):                 # once the search is 5 updates in
        worker = ray.get(controllers[0].workers.remote())[0]
        wait_for(lambda: ray.get(controllers[0].updates_done.remote()) >= 5, what="5 updates (a controller died?)")
        ray.kill(worker)
        killed.append(worker)

    r = rl_distributed(g, c, budget=SearchBudget(samples=1200), workers=2, config=RLConfig(samples_per_update=4),
                       seed=1, on_start=kill_one)
    assert killed and r.placement.meta["workers_replaced"] >= 1 and r.samples >= 1200
    assert simulate(g, c, r.placement).ok


def test_a_distributed_search_checkpoints_and_resumes(session, case, tmp_path):
    """Ctrl-C (here: raised as the controllers run) checkpoints the server and every controller; a resumed
    search continues the same counters, curve and best placement to its budget."""
    from autoplace.errors import AutoplaceError
    from autoplace.search.checkpoint import load_checkpoint

    g, c = case
    cfg = RLConfig(samples_per_update=4, converged_updates=0)

    def interrupt(ray, controllers):
        wait_for(lambda: min(ray.get([k.updates_done.remote() for k in controllers])) >= 3,
                 what="3 updates of every controller (one died?)")
        raise KeyboardInterrupt

    first = rl_distributed(g, c, budget=SearchBudget(samples=100_000), workers=2, controllers=2, config=cfg, seed=0,
                           checkpoint=tmp_path, on_start=interrupt)
    assert first.stop_reason == "interrupted" and first.samples >= 24
    saved = load_checkpoint(tmp_path)
    assert saved["server"]["samples"] == first.samples and len(saved["controllers"]) == 2
    assert min(s["best_step"] for s in saved["controllers"]) == first.placement.meta["best_step_s"]

    second = rl_distributed(g, c, budget=SearchBudget(samples=first.samples + 64), workers=2, controllers=2,
                            config=cfg, seed=0, resume=tmp_path)
    assert second.samples >= first.samples + 64 and second.stop_reason == "samples"
    assert len(second.curve) - len(first.curve) <= (64 + 2 * 4) // 4      # the counters went on, not from 0
    assert [p.samples for p in second.curve.points[:len(first.curve)]] == [p.samples for p in first.curve.points]
    assert second.placement.meta["best_step_s"] <= first.placement.meta["best_step_s"]
    assert load_checkpoint(tmp_path)["server"]["samples"] == second.samples
    with pytest.raises(AutoplaceError, match="different: n_controllers"):
        rl_distributed(g, c, budget=SearchBudget(samples=8), workers=2, controllers=1, config=cfg, seed=0,
                       resume=tmp_path)
    with pytest.raises(AutoplaceError, match="distributed search"):      # not one a single process resumes
        rl_search(g, c, budget=SearchBudget(samples=8), config=cfg, seed=0, resume=tmp_path)
    # a budget of seconds counts the search time before the checkpoint too: nothing is left of 1 s
    third = rl_distributed(g, c, budget=SearchBudget(seconds=1e-3), workers=2, controllers=2, config=cfg, seed=0,
                           resume=tmp_path)
    assert third.samples == second.samples and third.wall_s >= second.wall_s > 0


def test_gdp_and_hdp_score_their_samples_on_ray_workers(session, case):
    from autoplace.placers.learned.gdp import GDPConfig, gdp_search
    from autoplace.placers.learned.hdp import HDPConfig, hdp_search

    g, c = case
    r = gdp_search(g, c, budget=SearchBudget(samples=32), workers=2, seed=0,
                   config=GDPConfig(hidden=16, type_dim=8, ff=32, heads=2, segment=8, memory=8))
    local = gdp_search(g, c, budget=SearchBudget(samples=32), seed=0,
                       config=GDPConfig(hidden=16, type_dim=8, ff=32, heads=2, segment=8, memory=8))
    assert r.samples == 32 and r.evaluations > 0 and simulate(g, c, r.placement).ok
    assert r.placement.assignment == local.placement.assignment      # the workers score as the local env does
    h = hdp_search(g, c, budget=SearchBudget(samples=16), workers=2, seed=0, config=HDPConfig(groups=4, hidden=16))
    assert h.samples == 16 and simulate(g, c, h.placement).ok and session.is_initialized()
