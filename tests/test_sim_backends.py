"""The C event loop and the numba reference kernel agree exactly (same events, same arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from test_sim_properties import SETTINGS, cases

from autoplace.sim import BACKEND, Simulator, _kernel

pytestmark = pytest.mark.skipif(BACKEND != "c", reason="the C extension is not built here")


def numba_run(sim: Simulator, dev: np.ndarray):
    g, c = sim.graph, sim.cluster
    n, D, P, S = g.n_ops, c.n_devices, g.n_edges, len(c.segments)
    start, finish = np.empty(n), np.empty(n)
    busy, peak = np.zeros(D), np.zeros(D, np.int64)
    lt, lb, st = np.zeros((D, D)), np.zeros((D, D), np.int64), np.zeros(S)
    xf = [np.empty(P, np.int64) for _ in range(3)] + [np.empty(P), np.empty(P), np.empty(P)]
    step, nx = _kernel.simulate_one(dev, sim.op_times, *sim._graph_args, *sim._cluster_args, start, finish,
                                    busy, peak, lt, lb, st, *xf)
    return step, start, finish, busy, peak, lt, lb, st, nx, [a[:nx] for a in xf]


@SETTINGS
@given(cases(concurrency=True))
def test_c_matches_numba(case):
    graph, cluster, dev = case
    sim = Simulator(graph, cluster)
    r = sim.run(dev, trace=True)
    step, start, finish, busy, peak, lt, lb, st, nx, xf = numba_run(sim, dev)
    assert r.step_time == step
    assert np.array_equal(r.timeline.start, start) and np.array_equal(r.timeline.finish, finish)
    assert np.array_equal(r.busy_time, busy) and np.array_equal(r.peak_memory, peak)
    assert np.array_equal(r.link_time, lt) and np.array_equal(r.link_bytes, lb) and r.n_transfers == nx
    assert np.array_equal(r.segment_time, st)
    tl = r.timeline
    for mine, ref in zip((tl.transfer_tensor, tl.transfer_src, tl.transfer_dst, tl.transfer_start,
                          tl.transfer_end, tl.transfer_arrival), xf):
        assert np.array_equal(mine, ref)
