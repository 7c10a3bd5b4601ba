"""The zoo table: for each paper model, ops, edges, parameter bytes, FLOPs per step, capture time, the
time to load it again from the cache, the papers' op counts beside ours, and the simulated single-GPU
step on k80x4.

    .venv/bin/python benchmarks/zoo.py [--models a,b,...] [--json]

Each model is captured with an empty cache (a temporary AUTOPLACE_CACHE_DIR), so the time is a real
capture. Figures go to docs/benchmarks.md with this command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from _common import print_table

from autoplace.bench.published import HTF_TABLE1_OPS, MIRHOSEINI_TABLE1

#: Op counts the papers report for their TensorFlow graphs (autoplace.bench.published; GDP's in its text).
PAPER_OPS = {
    **{m: (f"{ops:,}", "Mirhoseini Table 1") for m, (ops, _groups) in MIRHOSEINI_TABLE1.items()},
    "gnmt-8": ("> 50,000", "GDP"),
    **{m: (f"{ops:,}", "HTF-MPR Table I") for m, ops in HTF_TABLE1_OPS.items()},
}
MODELS = ["rnnlm-2", "rnnlm-2-large", "rnnlm-4", "rnnlm-8", "nmt-2", "nmt-2-large", "gnmt-2", "gnmt-4", "gnmt-8",
          "transformer-xl-2", "transformer-xl-4", "transformer-xl-8", "inception-v3", "amoebanet",
          "wavenet-2x18", "wavenet-4x36", "alexnet", "vgg16", "mnist-softmax"]


def _gflop(x: float) -> str:
    return f"{x:,.0f}" if x >= 1 else f"{x:.3g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help="comma-separated subset")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ["AUTOPLACE_CACHE_DIR"] = tempfile.mkdtemp(prefix="autoplace-zoo-bench-")

    import torch  # noqa: F401  (imported once up front so capture times exclude it)

    from autoplace.cluster import get_cluster
    from autoplace.placers import place
    from autoplace.sim import simulate
    from autoplace.zoo import build_graph, get_model

    cluster = get_cluster("k80x4")
    rows = []
    for name in (args.models.split(",") if args.models else MODELS):
        t0 = time.perf_counter()
        g = build_graph(name)
        capture_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        build_graph(name)  # the same model again: read from the cache
        cached_s = time.perf_counter() - t0
        r = simulate(g, cluster, place(g, cluster, "single-gpu"))
        paper, source = PAPER_OPS.get(name, ("-", ""))
        rows.append({"model": name, "ops": g.n_ops, "edges": g.n_edges, "param_bytes": g.total_param_bytes,
                     "gflop": g.total_flops / 1e9, "capture_s": capture_s, "cached_load_s": cached_s,
                     "paper_ops": paper,
                     "paper_source": source, "single_gpu_step_s": r.step_time,
                     "single_gpu_peak_gib": float(r.peak_memory.max()) / 2**30, "single_gpu_oom": not r.ok,
                     "defaults": get_model(name).defaults})
        print(f"{name}: {g.n_ops} ops in {capture_s:.1f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    table = []
    for r in rows:
        peak = f"{r['single_gpu_peak_gib']:.1f} GiB" + (" **OOM**" if r["single_gpu_oom"] else "")
        paper = f"{r['paper_ops']} ({r['paper_source']})" if r["paper_source"] else "-"
        table.append([r["model"], f"{r['ops']:,}", f"{r['edges']:,}", f"{r['param_bytes'] / 2**30:.2f} GiB",
                      _gflop(r["gflop"]), f"{r['capture_s']:.1f} s", f"{r['cached_load_s']:.2f} s", paper,
                      f"{r['single_gpu_step_s']:.3f} s", peak])
    print_table(["model", "ops", "edges", "parameters + optimizer state", "GFLOP / step", "capture", "cached load",
                 "paper's ops", "single-GPU step (k80x4)", "single-GPU peak"], table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
