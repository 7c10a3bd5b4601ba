"""The learned searches' shared runner: one options bundle, one entry, one result, for every learned placer."""

from __future__ import annotations

import pytest

from autoplace.cluster import get_cluster
from autoplace.errors import AutoplaceError
from autoplace.placers import available_placers, get_placer
from autoplace.search import SearchBudget, SearchOptions, SearchResult
from autoplace.zoo import build_graph

pytest.importorskip("torch")

LEARNED = [m for m in available_placers() if get_placer(m).learned]


def test_options_take_overrides_and_name_an_unknown_option():
    base = SearchOptions(workers=3, checkpoint_every_s=5.0)
    o = SearchOptions.of(base, curve_csv="c.csv")
    assert (o.workers, o.checkpoint_every_s, o.curve_csv) == (3, 5.0, "c.csv") and o.distributed
    assert not SearchOptions().distributed and SearchOptions(ray_address="auto").distributed
    with pytest.raises(TypeError, match="unknown search option 'checkpoint_every'"):
        SearchOptions.of(None, checkpoint_every=1.0)
    for bad in (dict(workers=0), dict(workers=1.5), dict(workers=True), dict(checkpoint_every_s=float("nan"))):
        with pytest.raises(AutoplaceError):
            SearchOptions(**bad)


@pytest.mark.parametrize("method", LEARNED)
def test_every_learned_search_returns_one_result_type_and_writes_its_curve(method, tmp_path):
    g, c = build_graph("toy-mlp", layers=3, hidden=64, inputs=32, classes=10, batch=8), get_cluster("k80x2")
    search = get_placer(method).search
    r = search(g, c, budget=SearchBudget(samples=8), seed=0, options=SearchOptions(curve_csv=tmp_path / "c.csv"))
    assert isinstance(r, SearchResult) and r.samples >= 8 and r.placement.method == method
    assert (tmp_path / "c.csv").read_text().startswith("samples,")
    if method != "rl":
        with pytest.raises(AutoplaceError, match="--controllers applies to the rl method only"):
            search(g, c, budget=SearchBudget(samples=8), seed=0, controllers=2)


def test_a_policy_device_this_torch_lacks_is_one_clear_error():
    import torch

    from autoplace.errors import AutoplaceError, UnavailableError
    from autoplace.search.engine import policy_device

    assert policy_device("cpu").type == "cpu" and policy_device("auto").type in ("cpu", "cuda")
    with pytest.raises(AutoplaceError, match="'tpu0': not a torch device"):
        policy_device("tpu0")
    if not torch.cuda.is_available():
        with pytest.raises(UnavailableError, match="no CUDA device"):
            policy_device("cuda")


@pytest.mark.parametrize("method", LEARNED)
def test_a_search_bounded_by_seconds_samples_at_least_once(method):
    """However short its seconds (0 here), a search runs one update and has a placement to return."""
    g, c = build_graph("toy-mlp"), get_cluster("k80x2")
    r = get_placer(method).search(g, c, budget=SearchBudget(seconds=0), seed=0)
    assert r.samples > 0 and r.stop_reason == "seconds" and r.placement is not None
