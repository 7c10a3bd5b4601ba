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

from autoplace.bench.fidelity import (
    MODELS,
    anchor_of,
    kendall_tau,
    pipelines_for,
    placements_for,
    scaled,
    summarise,
)
from autoplace.formats.images import pyplot


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
            sim = Simulator(scaled(profiled, anchor), cluster)
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
