"""Simulator fidelity's library: the placements measured against their simulation (every heuristic placer,
random group placements, order cuts, depth stripes, local-search results from the best to over twice as
slow), the anchor that rescales a profile, and the agreement metrics (Kendall's tau, pairwise order accuracy,
the summary per model). ``benchmarks/fidelity.py`` and ``benchmarks/runtimes.py`` run them on this machine."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import replace

import numpy as np

from autoplace.graph import Graph
from autoplace.grouping import group_ops
from autoplace.placement import Placement
from autoplace.placers import place
from autoplace.placers.local_search import refine
from autoplace.placers.pipeline import even_split
from autoplace.sim import Simulator

__all__ = ["MODELS", "HEURISTICS", "kendall_tau", "pairwise_order_accuracy", "depth_levels", "anchor_of",
           "slowest_search", "pipelines_for", "placements_for", "summarise", "scaled"]


#: models at sizes that run in well under a second per step on one CPU core; the recurrent ones at batch 8,
#: where an op's work is small beside a transfer's cost, so that the placements span more than 2x
MODELS = {
    "rnnlm-2": dict(vocab=2000, hidden=256, layers=2, steps=10, batch=8),
    "gnmt-2": dict(vocab=2000, hidden=256, layers=2, src_len=8, tgt_len=8, batch=8),
    "inception-v3": dict(batch=2, image=75, classes=100),
}


HEURISTICS = ("tf-greedy", "heft", "m-topo", "m-etf", "m-sct", "scotch", "mincut", "metis", "expert")


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b of two samples (ties counted per Knight/Kendall)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    iu = np.triu_indices(len(a), 1)
    s = (da * db)[iu].sum()
    n_a, n_b = (da[iu] != 0).sum(), (db[iu] != 0).sum()
    return float(s / np.sqrt(n_a * n_b)) if n_a and n_b else float("nan")


def pairwise_order_accuracy(sims: np.ndarray, meas: np.ndarray, margin: float = 0.15) -> tuple[float, int]:
    """Of the placement pairs whose measured steps differ by at least ``margin`` (the slower at least
    ``1 + margin`` times the faster), the share the simulator orders the same way, and how many such pairs
    there are. Pairs closer than the margin lie within this machine's noise and are not scored."""
    sims, meas = np.asarray(sims, float), np.asarray(meas, float)
    iu = np.triu_indices(len(meas), 1)
    a, b = iu
    lo, hi = np.minimum(meas[a], meas[b]), np.maximum(meas[a], meas[b])
    clear = hi >= (1 + margin) * lo
    if not clear.any():
        return float("nan"), 0
    agree = np.sign(sims[a] - sims[b]) == np.sign(meas[a] - meas[b])
    return float(agree[clear].mean()), int(clear.sum())


def depth_levels(graph) -> np.ndarray:
    """Each op's depth: the most ops on a path from a source to it (sources are 0)."""
    level = np.zeros(graph.n_ops, dtype=np.int64)
    for i in graph.topological_order:
        preds = graph.predecessors(int(i))
        if len(preds):
            level[i] = level[preds].max() + 1
    return level


def anchor_of(measured, simulated) -> float:
    """The profile's scale: the geometric mean of the anchor placements' measured over simulated steps."""
    return float(np.exp(np.mean(np.log(np.asarray(measured, float) / np.asarray(simulated, float)))))


def slowest_search(sim, groups, gdev: np.ndarray, rng, evaluations: int = 2000, batch: int = 64) -> np.ndarray:
    """Greedy ascent on the simulated step over two devices: repeatedly try flipping a random batch of
    co-location groups one at a time and keep the flip that lengthens the step most (by > 0.1 %), for
    ``evaluations`` simulated placements — the slowest placements the model knows, to measure too."""
    best = sim.run(groups.expand(gdev)).step_time
    used = 0
    while used < evaluations:
        cand = rng.choice(groups.n_groups, size=min(batch, groups.n_groups), replace=False)
        rows = np.repeat(gdev[None, :], len(cand), axis=0)
        rows[np.arange(len(cand)), cand] = 1 - rows[np.arange(len(cand)), cand]
        steps = sim.run_batch(np.stack([groups.expand(r) for r in rows])).step_time
        used += len(cand)
        j = int(np.argmax(steps))
        if steps[j] > best * 1.001:
            gdev, best = rows[j], float(steps[j])
    return gdev


def pipelines_for(graph, cluster) -> list:
    """On a micro-batched step: the ``pipeline`` placer's placement, the even split under GPipe and under
    1F1B, and each of their splits without its schedule (each device's ops in ready order); each once."""

    out, seen = [], set()
    for p in (place(graph, cluster, "pipeline"), even_split(graph, cluster, "gpipe"),
              even_split(graph, cluster, "1f1b")):
        kind = p.meta["pipeline_schedule"]
        for q in (dataclasses.replace(p, method=f"{p.method} {kind}"),
                  dataclasses.replace(p, method=f"{p.method} split, ready order", schedule=None)):
            key = (tuple(q.assignment.values()), tuple((q.schedule or {}).values()))
            if key not in seen:       # the pipeline placer may find the even split itself
                seen.add(key)
                out.append(q)
    return out


def placements_for(graph, cluster, rng, n_random: int = 10, n_cuts: int = 6, n_search: int = 4,
                   stripes=(1, 2, 4)):
    """The placements measured: every single device, every heuristic placer that applies, random
    co-location-group placements (share of groups on the second device from 1/11 to 10/11), cuts of the
    topological order, stripes (groups dealt to the two devices by depth, ``k`` levels a stripe: most
    dependencies cross devices), the slowest the simulator finds (:func:`slowest_search` from stripes of
    one level and from a random deal) and local-search results: from the best found to the slowest."""

    out = [Placement.from_array(graph, cluster, np.full(graph.n_ops, d), f"single {cluster.devices[d].name}")
           for d in range(cluster.n_devices)]
    for m in HEURISTICS:
        try:
            out.append(place(graph, cluster, m, seed=0, budget=10))
        except Exception as e:  # noqa: BLE001 - a placer without a result is reported, not fatal
            print(f"  {m}: no placement ({e})", file=sys.stderr)
    groups = group_ops(graph, rules=("colocation",))
    for k in range(n_random):
        q = (k + 1) / (n_random + 1)  # share of groups on the second device
        gdev = (rng.random(groups.n_groups) < q).astype(np.int64)
        out.append(Placement.from_array(graph, cluster, groups.expand(gdev), f"random q={q:.2f}"))
    order = np.empty(groups.n_groups, dtype=np.int64)
    first = np.full(groups.n_groups, graph.n_ops)
    rank = np.empty(graph.n_ops, dtype=np.int64)
    rank[graph.topological_order] = np.arange(graph.n_ops)
    np.minimum.at(first, groups.group, rank)
    order[np.argsort(first, kind="stable")] = np.arange(groups.n_groups)
    for k in range(n_cuts):
        f = (k + 1) / (n_cuts + 1)
        gdev = (order >= f * groups.n_groups).astype(np.int64)
        out.append(Placement.from_array(graph, cluster, groups.expand(gdev), f"cut {f:.2f}"))
    depth = np.full(groups.n_groups, np.iinfo(np.int64).max)
    np.minimum.at(depth, groups.group, depth_levels(graph))
    for k in stripes:
        out.append(Placement.from_array(graph, cluster, groups.expand((depth // k) % 2), f"stripes {k}"))

    sim = Simulator(graph, cluster)
    for name, start in (("stripes 1", (depth % 2).astype(np.int64)),
                        ("random", (rng.random(groups.n_groups) < 0.5).astype(np.int64))):
        gdev = slowest_search(sim, groups, start, np.random.default_rng(len(out)))
        out.append(Placement.from_array(graph, cluster, groups.expand(gdev), f"slowest from {name}"))
    for s in range(n_search):
        start = out[2 + s % len(HEURISTICS)]
        out.append(refine(graph, cluster, start, seed=s, budget=5, method=f"{start.method}+ls"))
    return out


def summarise(rows: list[dict]) -> dict:
    """One model's figures from its (simulated, measured) pairs. The anchor placements (``"anchor": true``;
    in files saved before that field existed, the model's first row) are left out of MAPE and tau: they
    set the scale. The measurement's own repeatability is computed over the same scored placements, so
    that it compares with the simulator's tau: how well one round ranks like another (mean over pairs of
    rounds), and the median of the first half of the rounds against the second half (with at least 4
    rounds); the round spread is over every placement."""
    anchored = [r.get("anchor", k == 0) for k, r in enumerate(rows)]
    scored = [r for r, a in zip(rows, anchored) if not a]
    sims = np.array([r["simulated_s"] for r in scored])
    meas = np.array([r["measured_s"] for r in scored])
    R = np.array([r["rounds_s"] for r in rows])  # placements x rounds
    Rs = np.array([r["rounds_s"] for r in scored])
    n_rounds = R.shape[1]
    pairs = [(a, b) for a in range(n_rounds) for b in range(a + 1, n_rounds)]
    h = n_rounds // 2
    order, clear_pairs = pairwise_order_accuracy(sims, meas)
    all_meas = np.array([r["measured_s"] for r in rows])
    return {"placements": len(rows), "scored": len(scored), "range": float(all_meas.max() / all_meas.min()),
            "mape": float(np.mean(np.abs(sims - meas) / meas)), "kendall_tau": kendall_tau(sims, meas),
            "pairwise_order_accuracy": order, "clear_pairs": clear_pairs,
            "round_spread": float(np.median(R.max(axis=1) / R.min(axis=1) - 1)),
            "round_vs_round_tau": float(np.mean([kendall_tau(Rs[:, a], Rs[:, b]) for a, b in pairs]))
            if pairs else float("nan"),
            "split_half_tau": kendall_tau(np.median(Rs[:, :h], axis=1), np.median(Rs[:, h:], axis=1))
            if n_rounds >= 4 else float("nan")}


def scaled(graph, factor: float):
    """``graph`` with every measured cost multiplied by ``factor``."""
    return Graph([replace(op, cost={k: v * factor for k, v in op.cost.items()}) for op in graph.ops],
                 name=graph.name, meta=graph.meta)
