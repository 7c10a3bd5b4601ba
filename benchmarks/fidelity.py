"""Simulator fidelity: simulated vs measured step time of many placements on this machine's devices.

    .venv/bin/python benchmarks/fidelity.py [--steps 10] [--rounds 4] [--plot docs/results/fidelity.png] \\
        [--json out.json]
    .venv/bin/python benchmarks/fidelity.py --from-json docs/results/fidelity.json     # re-summarise a saved run
    .venv/bin/python benchmarks/fidelity.py --models rnnlm-2,gnmt-2 --micro-batches 4   # with pipelines too

Recipe: measure the machine (``cluster detect``), profile each model's ops on one worker
(``profile``), then for every placement — single-device, every heuristic placer, random group
placements, topological-order cuts, stripes by depth and local-search results: from the best found to
more than twice as slow — simulate it with the measured cluster and profiled costs, and run it for real
(``--steps`` steps, the first dropped; ``--rounds`` interleaved repeats, median). Per model: the
slowest placement over the best, mean absolute percentage error of the simulated step time against the
median of the rounds, Kendall's tau of simulated against median, the measurement's own split-half tau
(median of the first half of the rounds against the second half), and pairwise order accuracy (the
share of pairs whose medians differ by at least 15 % that the simulator orders the same way).

The machine's speed drifts between the profile and the measurements (this VM: ~10 % over minutes), so
the profile's overall scale is re-anchored to the single-device placements (the geometric mean of their
measured over simulated steps), measured in every round with the others; the unanchored figures are
reported beside. The anchor placements set the scale, so they are left out of every anchored figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from _common import print_table as markdown
from _common import save_json

from autoplace.formats.images import pyplot

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
    import dataclasses

    from autoplace.placers import place
    from autoplace.placers.pipeline import even_split

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
    from autoplace.grouping import group_ops
    from autoplace.placement import Placement
    from autoplace.placers import place
    from autoplace.placers.local_search import refine

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
    from autoplace.sim import Simulator

    sim = Simulator(graph, cluster)
    for name, start in (("stripes 1", (depth % 2).astype(np.int64)),
                        ("random", (rng.random(groups.n_groups) < 0.5).astype(np.int64))):
        gdev = slowest_search(sim, groups, start, np.random.default_rng(len(out)))
        out.append(Placement.from_array(graph, cluster, groups.expand(gdev), f"slowest from {name}"))
    for s in range(n_search):
        start = out[2 + s % len(HEURISTICS)]
        out.append(refine(graph, cluster, start, seed=s, budget=5, method=f"{start.method}+ls"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4,
                    help="measure every placement this many times, interleaved, and take the median "
                         "(this VM's speed drifts by ~10 %% over minutes; 4 or more also gives the "
                         "measurement's own split-half tau)")
    ap.add_argument("--profile-rounds", type=int, default=10,
                    help="alone/loaded profiling runs alternate this many times (op costs: medians over all)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--micro-batches", type=int, default=1,
                    help="capture each model's step with this many micro-batches, and measure pipelines too: "
                         "the pipeline placer's, and the even split under GPipe and 1F1B, each also without "
                         "its schedule")
    ap.add_argument("--save", metavar="DIR", default=None,
                    help="write the measured cluster, each profiled graph and its placements here "
                         "(re-simulate them later without measuring again)")
    ap.add_argument("--plot", default="docs/results/fidelity.png")
    ap.add_argument("--json", default=None, help="write every (simulated, measured) pair here")
    ap.add_argument("--from-json", metavar="JSON", default=None,
                    help="measure nothing: re-summarise the pairs a run saved with --json (and re-plot)")
    args = ap.parse_args(argv)
    if args.from_json:
        return resummarise(args.from_json, args.plot)

    from autoplace.runtime import WorkerPool
    from autoplace.runtime.detect import detect_cluster
    from autoplace.runtime.profile import profile_graph
    from autoplace.sim import Simulator
    from autoplace.zoo import build_graph

    t0 = time.perf_counter()
    cluster = detect_cluster(repeats=20)
    print(f"cluster detect: {time.perf_counter() - t0:.1f} s; " + "; ".join(
        f"{d.name}: {d.peak_flops / 1e9:.0f} GFLOP/s, sends {1 / d.send_cost_s_per_byte / 1e9:.2f} GB/s"
        for d in cluster.devices) + f"; link latency {cluster.latency[0, 1] * 1e6:.1f} µs")
    rng = np.random.default_rng(0)
    rows, summary = [], {}
    if args.save:
        from pathlib import Path

        from autoplace.formats import save_cluster, save_graph, save_placement

        save_dir = Path(args.save)
        save_dir.mkdir(parents=True, exist_ok=True)
        save_cluster(cluster, save_dir / "cluster.json")
    with WorkerPool(cluster) as pool:
        for model in args.models.split(","):
            params = MODELS[model] if args.micro_batches == 1 else {**MODELS[model],
                                                                     "micro_batches": args.micro_batches}
            graph = build_graph(model, **params)
            t0 = time.perf_counter()
            profiled = profile_graph(graph, cluster, steps=5, rounds=args.profile_rounds, pool=pool)
            print(f"{model}: {graph.n_ops} ops, profiled in {time.perf_counter() - t0:.1f} s "
                  f"(single-device step {profiled.meta['profiled']['cpu']['step_s'] * 1e3:.1f} ms)")
            sim = Simulator(profiled, cluster)
            placements = placements_for(profiled, cluster, rng)
            if args.micro_batches > 1:
                placements += pipelines_for(profiled, cluster)
            if args.save:
                save_graph(profiled, save_dir / f"{model}.graph.json")
                for j, p in enumerate(placements):
                    save_placement(p, save_dir / f"{model}.p{j:02d}.json")
            runs = np.full((args.rounds, len(placements)), np.nan)
            transfers = np.zeros(len(placements), dtype=int)
            for rnd in range(args.rounds):
                for j, p in enumerate(placements):
                    r = pool.run(profiled, p, steps=args.steps)
                    if r.ok:
                        runs[rnd, j], transfers[j] = r.step_time, r.n_transfers
                    else:
                        print(f"  {p.method}: failing ({r.error})")
            # re-anchor: the profile is one moment of a drifting machine; its scale is set by the
            # single-device placements, measured in every round like the rest (the geometric mean of
            # their measured over simulated medians: two placements halve one's noise)
            singles = [j for j, p in enumerate(placements) if p.method.startswith("single ")]
            anchor = anchor_of([np.median(runs[:, j]) for j in singles],
                               [sim.run(placements[j]).step_time for j in singles])
            raw = sim
            sim = Simulator(_scaled(profiled, anchor), cluster)
            print(f"  anchor: profiled costs x {anchor:.3f} (single devices measured "
                  f"{', '.join(f'{np.median(runs[:, j]) * 1e3:.1f}' for j in singles)} ms over the rounds)")
            raws = {}
            for j, p in enumerate(placements):
                if np.isnan(runs[:, j]).any():
                    continue
                raws[j] = raw.run(p).step_time
                s, m = sim.run(p).step_time, float(np.median(runs[:, j]))
                rows.append({"model": model, "method": p.method, "simulated_s": s, "measured_s": m,
                             "rounds_s": runs[:, j].tolist(), "transfers": int(transfers[j]),
                             "anchor": j in singles})
                print(f"  {p.method:24s} simulated {s * 1e3:8.2f} ms  measured {m * 1e3:8.2f} ms  "
                      f"error {100 * (s - m) / m:+6.1f} %  "
                      f"(rounds ±{50 * (runs[:, j].max() / runs[:, j].min() - 1):.0f} %, "
                      f"{transfers[j]} transfers)")
            scored = [j for j in raws if j not in singles]
            raw_s = np.array([raws[j] for j in scored])
            raw_m = np.array([np.median(runs[:, j]) for j in scored])
            summary[model] = {"ops": graph.n_ops, "anchor": anchor,
                              **summarise([r for r in rows if r["model"] == model]),
                              "mape_unanchored": float(np.mean(np.abs(raw_s - raw_m) / raw_m)),
                              "kendall_tau_unanchored": kendall_tau(raw_s, raw_m)}
            sm = summary[model]
            print(f"{model}: {sm['placements']} placements, MAPE {100 * sm['mape']:.1f} %, Kendall tau "
                  f"{sm['kendall_tau']:.3f}, median max/min-1 over rounds {100 * sm['round_spread']:.1f} %")
            if args.json:  # after every model: a long run interrupted still leaves its figures
                save_json(args.json, {"summary": summary, "rows": rows})

    print_table(summary)
    if args.plot:
        _plot(rows, summary, args.plot)
        print(f"scatter plot written to {args.plot}")
    return 0


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


def print_table(summary: dict) -> None:
    print()
    markdown(["model", "ops", "placements (scored)", "slowest / best", "MAPE", "Kendall tau",
              "pairwise order (pairs ≥ 15 % apart)", "unanchored MAPE / tau", "anchor", "round spread",
              "tau round vs round", "tau half vs half"],
             [[model, s["ops"], f"{s['placements']} ({s['scored']})", f"{s['range']:.2f}x", f"{100 * s['mape']:.1f} %",
               f"{s['kendall_tau']:.3f}", f"{100 * s['pairwise_order_accuracy']:.1f} % ({s['clear_pairs']})",
               f"{100 * s['mape_unanchored']:.1f} % / {s['kendall_tau_unanchored']:.3f}", f"{s['anchor']:.3f}",
               f"{100 * s['round_spread']:.1f} %", f"{s['round_vs_round_tau']:.3f}", f"{s['split_half_tau']:.3f}"]
              for model, s in summary.items()])


def resummarise(path: str, plot: str | None) -> int:
    """Recompute the anchored figures of a saved run from its pairs. The unanchored ones need the raw
    simulations, which the file does not hold: they are taken from the run's own summary."""
    with open(path) as f:
        saved = json.load(f)
    summary = {}
    for model, old in saved["summary"].items():
        rows = [r for r in saved["rows"] if r["model"] == model]
        summary[model] = {**old, **summarise(rows)}
    print_table(summary)
    if plot:
        _plot(saved["rows"], summary, plot)
        print(f"scatter plot written to {plot}")
    return 0


def _scaled(graph, factor: float):
    """``graph`` with every measured cost multiplied by ``factor``."""
    from dataclasses import replace

    from autoplace.graph import Graph

    return Graph([replace(op, cost={k: v * factor for k, v in op.cost.items()}) for op in graph.ops],
                 name=graph.name, meta=graph.meta)


def _plot(rows, summary, path: str) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.4, 6.0), dpi=110)
    for model, s in summary.items():
        pts = np.array([(r["measured_s"], r["simulated_s"]) for r in rows if r["model"] == model]) * 1e3
        ax.scatter(pts[:, 0], pts[:, 1], s=18, alpha=0.8,
                   label=f"{model}: MAPE {100 * s['mape']:.1f} %, τ {s['kendall_tau']:.2f}")
    lo = min(min(r["measured_s"], r["simulated_s"]) for r in rows) * 1e3 * 0.9
    hi = max(max(r["measured_s"], r["simulated_s"]) for r in rows) * 1e3 * 1.1
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="simulated = measured")
    ax.fill_between([lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], color="grey", alpha=0.15,
                    label="±15 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured step time (ms), two CPU worker processes")
    ax.set_ylabel("simulated step time (ms), measured cluster + profiled ops")
    ax.set_title("autoplace simulator fidelity (benchmarks/fidelity.py)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    sys.exit(main())
