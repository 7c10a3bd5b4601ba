"""Simulator speed: simulated ops per second on a >= 30,000-op layered DAG over 4 devices.

    .venv/bin/python benchmarks/simulator.py [--ops 30000] [--repeat 30] [--batch 64] [--json]

Placements measured: ``blocks`` (each device a contiguous quarter of the layers, what partitioners
produce), ``layer-rr`` (layers dealt round-robin: a transfer on most edges) and ``random`` (every op on
a random device: the worst case). Single = one ``Simulator.run`` call (validation included); batched =
``Simulator.run_batch`` of ``--batch`` placements. One thread (numba runs the kernel serially).
Figures go to docs/benchmarks.md with this command line.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time

import numpy as np
from _common import print_table

from autoplace.cluster import get_cluster
from autoplace.sim import Simulator
from autoplace.zoo import build_graph


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=30000)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    rss0 = rss_mib()
    t0 = time.perf_counter()
    graph = build_graph("layered-dag", ops=args.ops, width=args.width)
    build_s = time.perf_counter() - t0
    cluster = get_cluster("k80x4").without(["cpu:0"], name="k80x4-gpus")  # 4 GPUs, PCIe links
    t0 = time.perf_counter()
    sim = Simulator(graph, cluster)
    setup_s = time.perf_counter() - t0
    n, D = graph.n_ops, cluster.n_devices
    rng = np.random.default_rng(0)
    layer = np.array([op.meta["layer"] for op in graph.ops])
    placements = {
        "blocks": np.minimum(layer * D // (layer.max() + 1), D - 1),
        "layer-rr": layer % D,
        "random": rng.integers(0, D, size=n),
    }
    t0 = time.perf_counter()
    sim.run(placements["blocks"])
    sim.run_batch(np.stack([placements["blocks"]] * 2))
    compile_s = time.perf_counter() - t0  # numba JIT or cache load
    rss_ready = rss_mib()

    rows = []
    for name, dev in placements.items():
        dev = dev.astype(np.int64)
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            r = sim.run(dev)
            times.append(time.perf_counter() - t)
        batch = np.stack([np.roll(dev, k) for k in range(args.batch)])  # same mix, different placements
        t = time.perf_counter()
        sim.run_batch(batch)
        batch_s = (time.perf_counter() - t) / args.batch
        best, med = min(times), statistics.median(times)
        rows.append({"placement": name, "transfers": r.n_transfers, "step_time_s": r.step_time,
                     "single_best_ms": best * 1e3, "single_median_ms": med * 1e3,
                     "single_ops_per_s": n / med, "batch_ms_per_placement": batch_s * 1e3,
                     "batch_ops_per_s": n / batch_s})
    result = {"ops": n, "edges": graph.n_edges, "devices": D, "python": platform.python_version(),
              "graph_build_s": build_s, "simulator_setup_s": setup_s, "jit_or_cache_load_s": compile_s,
              "rss_mib_before": rss0, "rss_mib_after_graph_and_jit": rss_ready, "rss_mib_peak": rss_mib(),
              "rows": rows}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"layered DAG: {n} ops, {graph.n_edges} edges, {D} devices ({cluster.name}); graph built in "
          f"{build_s:.2f} s, simulator set up in {setup_s * 1e3:.0f} ms, JIT/cache load {compile_s:.2f} s")
    print(f"memory: RSS {rss0:.0f} MiB at start, {rss_ready:.0f} MiB with graph + JIT, peak {rss_mib():.0f} MiB")
    print()
    print_table(["placement", "transfers", "single: median (best)", "single ops/s", "batched ms/placement",
                 "batched ops/s"],
                [[r["placement"], r["transfers"], f"{r['single_median_ms']:.2f} ms ({r['single_best_ms']:.2f})",
                  f"{r['single_ops_per_s'] / 1e6:.2f} M", f"{r['batch_ms_per_placement']:.2f} ms",
                  f"{r['batch_ops_per_s'] / 1e6:.2f} M"] for r in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
