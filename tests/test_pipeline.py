"""The ``pipeline`` placer: contiguous stages of a micro-batched step with a GPipe or 1F1B schedule."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from autoplace.capture import capture_training_step  # noqa: E402
from autoplace.cluster import get_cluster  # noqa: E402
from autoplace.placers import place  # noqa: E402
from autoplace.schedule import SCHEDULES, deadlock  # noqa: E402
from autoplace.sim import Simulator  # noqa: E402


def deep_mlp(layers=8, width=2048, batch=512, micro_batches=4):
    """A deep MLP on the meta device (nothing allocated), captured with Adam over ``micro_batches``."""
    with torch.device("meta"):
        model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())])
        x, y = torch.zeros(batch, width), torch.zeros(batch, width)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return capture_training_step(model, x, nn.functional.mse_loss, opt, targets=y, micro_batches=micro_batches,
                                 name="deep-mlp")


@pytest.mark.slow
def test_a_pipelined_split_runs_its_stages_at_once_and_beats_running_them_in_turn():
    """On k80x4, 8 equal layers over 4 micro-batches: the pipeline placer's stages (one per GPU, in order)
    carry a schedule that cannot deadlock and keep every GPU busy, so its step is well below both the best
    stage-after-stage split (``dp-split``) and the same split with each device's ops in ready order."""
    g, c = deep_mlp(), get_cluster("k80x4")
    p = place(g, c, "pipeline")
    assert p.method == "pipeline" and p.schedule is not None
    assert p.meta["pipeline_schedule"] in SCHEDULES and p.meta["micro_batches"] == 4
    assert [s["device"] for s in p.meta["stages"]] == ["gpu:0", "gpu:1", "gpu:2", "gpu:3"]
    dev, prio = p.to_array(g, c), p.priorities(g)
    assert deadlock(g, dev, prio) is None
    sim = Simulator(g, c)
    piped = sim.run(p)
    assert piped.ok
    assert min(s["step_s"] for s in p.meta["candidates"] if s["fits"]) == pytest.approx(piped.step_time)
    split = sim.run(place(g, c, "dp-split"))
    assert piped.step_time < 0.8 * split.step_time
    assert piped.step_time < sim.run(dev).step_time


@pytest.mark.slow
def test_auto_is_at_least_as_fast_as_the_pipeline():
    """``auto`` weighs the pipeline against its other candidates by regret: its regret is at most the
    pipeline's (against everything it weighed), and where it takes it, the schedule comes with it."""
    from autoplace.placers.auto import NEAR_TIE
    from autoplace.robust import RobustSimulator

    g, c = deep_mlp(), get_cluster("k80x4")
    a, p = place(g, c, "auto", budget=0.5), place(g, c, "pipeline")
    assert "pipeline" in a.meta["weighed"]
    steps = RobustSimulator(g, c).steps(p.to_array(g, c)[None, :], p.priorities(g)[None, :])[:, 0]
    pipeline_regret = (steps / np.array(a.meta["robust"]["reference_s"])).max()
    assert a.meta["robust"]["regret"] <= pipeline_regret * (1 + NEAR_TIE)
    assert (a.meta["from"] == "pipeline") == (a.schedule is not None)


@pytest.mark.slow
def test_placed_pipeline_training_equals_eager_gradient_accumulation():
    """The pipeline placer's placement of a micro-batched step on this machine's two CPU workers, run by the
    runtime under its schedule: the losses and weights of eager gradient accumulation."""
    from test_micro_batches import accumulation_case

    import autoplace

    m = 4
    model, opt, data, expected, ref = accumulation_case(m, seed=5)
    cluster = get_cluster("localhost")
    graph = capture_training_step(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1],
                                  micro_batches=m)
    p = place(graph, cluster, "pipeline")
    assert p.schedule is not None
    dev = p.to_array(graph, cluster)
    if len(set(dev.tolist())) < 2:     # the estimate may keep so small a model whole: split it by hand
        pytest.skip("the pipeline kept the model on one worker")
    with autoplace.compile(model, data[0][0], nn.functional.cross_entropy, opt, targets=data[0][1], placement=p,
                           micro_batches=m, cluster=cluster, progress=False) as step:
        losses = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
    assert losses == pytest.approx(expected, abs=1e-5)
    assert max(float((state[k] - v).abs().max()) for k, v in ref.state_dict().items()) < 1e-5
    assert np.isfinite(losses).all()


@pytest.mark.slow
def test_the_even_split_gives_each_gpu_a_like_share_of_the_parameters():
    """``even_split``: one contiguous stage per GPU of about equal parameter bytes (8 equal layers on 4 GPUs:
    2 each), run under the schedule asked for."""
    from autoplace.placers.pipeline import even_split

    g, c = deep_mlp(), get_cluster("k80x4")
    for kind in SCHEDULES:
        p = even_split(g, c, kind)
        assert p.meta["pipeline_schedule"] == kind and deadlock(g, p.to_array(g, c), p.priorities(g)) is None
        dev = p.to_array(g, c)
        params = np.bincount(dev, weights=g.param_bytes, minlength=c.n_devices)[c.devices_of_kind("gpu")]
        assert params.max() <= 1.1 * params.min()


@pytest.mark.slow
def test_a_schedule_is_kept_by_what_scores_a_placement_and_refused_by_what_would_break_it():
    """Uncertainty ranges simulate the schedule (the nominal step is the simulator's); local search, which
    moves ops off their stages, refuses a scheduled placement with a one-line error."""
    from autoplace.errors import PlacementError
    from autoplace.placers.auto import uncertainty
    from autoplace.placers.local_search import refine
    from autoplace.placers.pipeline import even_split

    g, c = deep_mlp(layers=4, width=256, batch=64), get_cluster("k80x4")
    p = even_split(g, c, "gpipe")
    (sr,) = uncertainty(g, c, [p])
    assert sr.nominal == pytest.approx(Simulator(g, c).run(p).step_time)
    assert sr.low <= sr.nominal <= sr.high
    with pytest.raises(PlacementError, match="a scheduled placement cannot be refined"):
        refine(g, c, p, budget=0.1)
