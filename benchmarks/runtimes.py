"""The two runtimes side by side on this machine's CPU workers: the shared-memory executor and
torch.distributed (gloo), measured in one run, each against the simulator with its own detected cluster.

    .venv/bin/python benchmarks/runtimes.py [--steps 6] [--rounds 3] [--json docs/results/runtime/runtimes.json]
    .venv/bin/python benchmarks/runtimes.py --from-json docs/results/runtime/runtimes.json   # the table again

Recipe (as ``benchmarks/fidelity.py``, whose models, placements and scores it reuses): ``cluster detect``
once per runtime (its transfers measured on that runtime); each model profiled once (the op costs are the
same loop's on both); for every placement — single-device, every heuristic, random group placements,
topological cuts, stripes and local-search results — simulated under each runtime's cluster and run for
real on both runtimes, alternating, ``--rounds`` times (median). Per model and runtime: the best and the
median measured step, the median of distributed over shared-memory step per placement (the ratio), and
fidelity: pairwise order on pairs at least 10 % apart, MAPE and Kendall's tau, each runtime's profile
re-anchored to its own single-device placements (which are then left out of the scores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from _common import print_table, save_json

from autoplace.bench.fidelity import MODELS, anchor_of, kendall_tau, pairwise_order_accuracy, placements_for, scaled

RUNTIMES = ("shm", "distributed")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile-rounds", type=int, default=5)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--json", default=None, help="write every placement's figures here")
    ap.add_argument("--from-json", metavar="JSON", default=None, help="measure nothing: the saved run's table")
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            table(json.load(f)["summary"])
        return 0

    from autoplace.formats import cluster_to_dict
    from autoplace.runtime import make_pool
    from autoplace.runtime.detect import detect_cluster
    from autoplace.runtime.profile import profile_graph
    from autoplace.sim import Simulator
    from autoplace.zoo import build_graph

    clusters = {}
    for rt in RUNTIMES:
        t0 = time.perf_counter()
        clusters[rt] = detect_cluster(repeats=20, runtime=rt)
        c = clusters[rt]
        print(f"cluster detect --runtime {rt}: {time.perf_counter() - t0:.1f} s; " + "; ".join(
            f"{d.name}: {d.peak_flops / 1e9:.0f} GFLOP/s, {d.send_overhead_s * 1e6:.1f} us + "
            f"{d.send_cost_s_per_byte * 1e9:.2f} ns/B per send, {d.recv_overhead_s * 1e6:.1f} us per receive"
            for d in c.devices) + f"; link {c.latency[0, 1] * 1e6:.1f} us, {c.bandwidth[0, 1] / 1e9:.1f} GB/s",
              flush=True)
    rng = np.random.default_rng(0)
    rows, summary = [], {}
    pools = {rt: make_pool(clusters[rt], runtime=rt) for rt in RUNTIMES}
    try:
        for model in args.models.split(","):
            graph = build_graph(model, **MODELS[model])
            t0 = time.perf_counter()
            profiled = profile_graph(graph, clusters["shm"], steps=5, rounds=args.profile_rounds, pool=pools["shm"])
            print(f"{model}: {graph.n_ops} ops, profiled in {time.perf_counter() - t0:.1f} s", flush=True)
            placements = placements_for(profiled, clusters["shm"], rng)
            runs = {rt: np.full((args.rounds, len(placements)), np.nan) for rt in RUNTIMES}
            for rnd in range(args.rounds):
                for j, p in enumerate(placements):
                    for rt in (RUNTIMES if (rnd + j) % 2 == 0 else RUNTIMES[::-1]):  # alternate who goes first
                        r = pools[rt].run(profiled, p, steps=args.steps)
                        if r.ok:
                            runs[rt][rnd, j] = r.step_time
                        else:
                            print(f"  {p.method} on {rt}: failing ({r.error})", flush=True)
            singles = [j for j, p in enumerate(placements) if p.method.startswith("single ")]
            ok = [j for j in range(len(placements)) if not any(np.isnan(runs[rt][:, j]).any() for rt in RUNTIMES)]
            summary[model] = {"ops": graph.n_ops, "placements": len(ok)}
            for rt in RUNTIMES:
                sim = Simulator(profiled, clusters[rt])
                med = np.median(runs[rt], axis=0)
                anchor = anchor_of([med[j] for j in singles], [sim.run(placements[j]).step_time for j in singles])
                sim = Simulator(scaled(profiled, anchor), clusters[rt])
                scored = [j for j in ok if j not in singles]
                s = np.array([sim.run(placements[j]).step_time for j in scored])
                m = med[scored]
                acc10, n10 = pairwise_order_accuracy(s, m, 0.10)
                summary[model][rt] = {"best_s": float(med[ok].min()), "median_s": float(np.median(med[ok])),
                                      "anchor": anchor, "pairwise_10": acc10, "pairs_10": n10,
                                      "mape": float(np.mean(np.abs(s - m) / m)), "kendall_tau": kendall_tau(s, m),
                                      "round_spread": float(np.median(runs[rt][:, ok].max(0) / runs[rt][:, ok].min(0)
                                                                      - 1))}
                for j, sj in zip(scored, s):
                    rows.append({"model": model, "runtime": rt, "method": placements[j].method,
                                 "simulated_s": float(sj), "measured_s": float(med[j]),
                                 "rounds_s": runs[rt][:, j].tolist()})
            ratio = np.median(runs["distributed"], axis=0)[ok] / np.median(runs["shm"], axis=0)[ok]
            summary[model]["ratio_median"] = float(np.median(ratio))
            summary[model]["ratio_range"] = [float(ratio.min()), float(ratio.max())]
            print(json.dumps({model: summary[model]}, indent=1), flush=True)
            if args.json:
                save_json(args.json, {"summary": summary, "rows": rows,
                                      "clusters": {rt: cluster_to_dict(clusters[rt]) for rt in RUNTIMES}})
    finally:
        for p in pools.values():
            p.close()
    table(summary)
    return 0


def table(summary: dict) -> None:
    out = []
    for model, s in summary.items():
        for rt in RUNTIMES:
            r = s[rt]
            out.append([model, rt, f"{r['best_s'] * 1e3:.1f} ms", f"{r['median_s'] * 1e3:.1f} ms",
                        f"{s['ratio_median']:.2f}× ({s['ratio_range'][0]:.2f}–{s['ratio_range'][1]:.2f})"
                        if rt == "distributed" else "1",
                        f"{100 * r['pairwise_10']:.1f} % ({r['pairs_10']})", f"{100 * r['mape']:.1f} %",
                        f"{r['kendall_tau']:.3f}", f"{100 * r['round_spread']:.1f} %"])
    print_table(["model", "runtime", "best step", "median step", "step / shm (median, range)",
                 "pairwise order, pairs ≥ 10 % apart", "MAPE", "Kendall tau", "round spread"], out)


if __name__ == "__main__":
    sys.exit(main())
