"""Incremental re-simulation (:class:`autoplace.sim.Incremental`) gives exactly what a run from the start gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_sim_properties import SETTINGS, cases

from autoplace.cluster import get_cluster
from autoplace.placement import Placement
from autoplace.sim import BACKEND, Simulator
from autoplace.zoo import build_graph

pytestmark = pytest.mark.skipif(BACKEND != "c", reason="the C extension is not built here")

FIELDS = ("step_time", "busy_time", "peak_memory", "link_time", "link_bytes", "n_transfers", "segment_time",
          "host_time")


def assert_same(a, b) -> None:
    for f in FIELDS:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


def random_moves(rng: np.random.Generator, base: np.ndarray, ok: np.ndarray, k: int) -> np.ndarray:
    """``k`` placements near ``base``: 1-3 ops each moved to a random device that can run them, or two ops'
    devices swapped where each can run on the other's (rows equal to ``base`` are kept: nothing to move)."""
    n, rows = len(base), []
    for _ in range(k):
        row = base.copy()
        if rng.random() < 0.25 and n > 1:
            i, j = rng.choice(n, 2, replace=False)
            if ok[i, row[j]] and ok[j, row[i]]:
                row[i], row[j] = row[j], row[i]
        else:
            for i in rng.choice(n, min(n, int(rng.integers(1, 4))), replace=False):
                row[i] = rng.choice(np.flatnonzero(ok[i]))
        rows.append(row)
    return np.stack(rows)


@SETTINGS
@given(cases(concurrency=True), st.integers(2, 8), st.integers(0, 2**32 - 1))
def test_incremental_equals_a_run_from_the_start(case, snapshots, seed):
    """70 random moves per case (150 cases: 10,500 moves) on random graphs and clusters (copy engines,
    shared segments, launch queues, concurrent slots, launch groups, views), in two batches run in
    different orders, so that rows restore snapshots before and after those the last row used."""
    graph, cluster, base = case
    sim = Simulator(graph, cluster)
    assert sim.incremental_exact
    ok = np.isfinite(sim.op_times)
    rng = np.random.default_rng(seed)
    inc = sim.incremental(base, snapshots=snapshots)
    assert_same(inc.result, sim.run_batch(base[None, :]))
    rows = random_moves(rng, base, ok, 70)
    assert_same(inc.run_batch(rows[:35]), sim.run_batch(rows[:35]))
    assert_same(inc.run_batch(rows[35:][::-1]), sim.run_batch(rows[35:][::-1]))


@pytest.mark.parametrize("cluster_name", ["k80x4", "h100x8"])
def test_incremental_on_a_layered_dag(cluster_name):
    """A 3,000-op layered DAG under blocked and random placements: single-op moves at every depth, group
    moves of a whole layer, and swaps, each row equal to a run from the start."""
    graph = build_graph("layered-dag", ops=3000, width=64)
    cluster = get_cluster(cluster_name)
    sim = Simulator(graph, cluster)
    D, n = cluster.n_devices, graph.n_ops
    ok = np.isfinite(sim.op_times)
    layer = np.array([op.meta["layer"] for op in graph.ops])
    rng = np.random.default_rng(D)
    for base in (np.minimum(layer * D // (layer.max() + 1), D - 1), rng.integers(0, D, n)):
        inc = sim.incremental(base)
        rows = list(random_moves(rng, base, ok, 40))
        for L in rng.choice(layer.max() + 1, 10, replace=False):     # a layer moved whole
            row = base.copy()
            row[layer == L] = rng.integers(0, D)
            rows.append(row)
        rows = np.stack(rows)
        assert_same(inc.run_batch(rows), sim.run_batch(rows))
        inc.close()


def test_incremental_takes_the_same_rows_as_run_batch():
    """Placements, a single row, the recorded placement itself; a scheduled placement is refused."""
    graph = build_graph("layered-dag", ops=300, width=16)
    cluster = get_cluster("k80x4")
    sim = Simulator(graph, cluster)
    base = np.arange(graph.n_ops) % cluster.n_devices
    with sim.incremental(Placement.from_array(graph, cluster, base, "rr")) as inc:
        assert_same(inc.run_batch(base), sim.run_batch(base[None, :]))
        moved = base.copy()
        moved[-1] = (moved[-1] + 1) % cluster.n_devices
        assert_same(inc.run_batch(moved), sim.run_batch(moved[None, :]))
        other = np.random.default_rng(1).integers(0, cluster.n_devices, graph.n_ops)   # recorded anew
        inc.reset(other)
        assert_same(inc.result, sim.run_batch(other[None, :]))
        rows = random_moves(np.random.default_rng(2), other, np.isfinite(sim.op_times), 20)
        assert_same(inc.run_batch(rows), sim.run_batch(rows))
    from autoplace.errors import PlacementError
    with pytest.raises(PlacementError, match="outside"):
        sim.incremental(base).run_batch(np.full((1, graph.n_ops), 99))


def test_incremental_refuses_what_it_cannot_run():
    """Fewer than two snapshots, a scheduled placement (recorded or reset to); a failed start leaves nothing
    to free."""
    import gc
    import warnings

    from autoplace.errors import PlacementError

    graph = build_graph("layered-dag", ops=100, width=8)
    cluster = get_cluster("k80x4")
    sim = Simulator(graph, cluster)
    base = np.arange(graph.n_ops) % cluster.n_devices
    with pytest.raises(ValueError, match="snapshots must be an integer in \\[2, 1048576\\], got 1"):
        sim.incremental(base, snapshots=1)
    scheduled = Placement.from_array(graph, cluster, base, "rr", priorities=np.arange(graph.n_ops))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(PlacementError, match="without a schedule"):
            sim.incremental(scheduled)
        gc.collect()
    inc = sim.incremental(base, snapshots=4)
    with pytest.raises(PlacementError, match="without a schedule"):
        inc.reset(scheduled)
    inc.close()
    inc.reset(base)                                      # after close: recorded again, as it was made
    assert inc._snapshots == 4 and inc._handle is not None
    assert_same(inc.run_batch(base), sim.run_batch(base[None, :]))
