"""The fidelity benchmark's metrics on hand-computed cases (autoplace.bench.fidelity)."""

from __future__ import annotations

import numpy as np
import pytest

import autoplace.bench.fidelity as fidelity


def test_pairwise_order_accuracy_scores_only_pairs_clearly_apart():
    meas = np.array([1.0, 1.1, 2.0, 3.0])      # pairs >= 15 % apart: (0,2) (0,3) (1,2) (1,3) (2,3); (0,1) is noise
    sims = np.array([1.2, 1.0, 2.5, 2.4])      # orders (0,1) wrongly (unscored) and (2,3) wrongly
    acc, pairs = fidelity.pairwise_order_accuracy(sims, meas)
    assert pairs == 5 and acc == pytest.approx(4 / 5)
    assert fidelity.pairwise_order_accuracy(meas, meas) == (1.0, 5)
    assert np.isnan(fidelity.pairwise_order_accuracy(sims[:2], meas[:2])[0])


def test_summary_leaves_the_anchor_out():
    rows = [{"simulated_s": 1.0, "measured_s": 1.0, "rounds_s": [1.0, 1.0], "anchor": True},
            {"simulated_s": 2.0, "measured_s": 1.0, "rounds_s": [1.0, 1.0], "anchor": False},
            {"simulated_s": 3.0, "measured_s": 4.0, "rounds_s": [4.0, 4.0], "anchor": False}]
    s = fidelity.summarise(rows)
    assert s["scored"] == 2 and s["mape"] == pytest.approx((1.0 + 0.25) / 2)
    assert s["pairwise_order_accuracy"] == 1.0 and s["clear_pairs"] == 1


def test_the_measurements_own_taus_cover_the_scored_placements():
    # three scored placements whose first two rounds rank them 1-2-3 and last two 3-2-1: half against half
    # tau -1; rounds agree within a half (tau 1) and disagree across halves (-1): mean over the 6 round
    # pairs (2 - 4) / 6. The anchor (far slower in every round) would add 3 agreeing pairs to each.
    rows = [{"simulated_s": 10.0, "measured_s": 10.0, "rounds_s": [10.0] * 4, "anchor": True},
            {"simulated_s": 1.0, "measured_s": 2.0, "rounds_s": [1.0, 1.0, 3.0, 3.0], "anchor": False},
            {"simulated_s": 2.0, "measured_s": 2.0, "rounds_s": [2.0, 2.0, 2.0, 2.0], "anchor": False},
            {"simulated_s": 3.0, "measured_s": 2.0, "rounds_s": [3.0, 3.0, 1.0, 1.0], "anchor": False}]
    s = fidelity.summarise(rows)
    assert s["split_half_tau"] == pytest.approx(-1.0)
    assert s["round_vs_round_tau"] == pytest.approx(-1 / 3)
    assert s["round_spread"] == pytest.approx(1.0)     # median over all four of max/min - 1: 0, 2, 0, 2
    assert s["range"] == pytest.approx(5.0)
