"""A task built so that learning should pay: thirty independent matrix products of unequal sizes on two
GPUs (``k80x2``). The step is the heavier GPU's load, nearly linear in the mapping; a random mapping of
thirty unequal weights is rarely within a percent of the even split.

    .venv/bin/python benchmarks/learnable_task.py

Prints, over seeds 0–2 at equal evaluations: HTF-MPR with its GBR predictor against random screening
(``model=random``), and the RL placer against the same search with learning off (``learn=false``), in
its default configuration and per group with the paper's decoder, K and baseline (``decide=group``,
``attention=additive``, ``samples_per_update=8``, ``baseline_start=failing``): each seed's best step, and
the mean ± sd and min. Then the RL placer on a task whose best placement is a rule per op (forty equal
products, one GPU ten times faster), with its baseline from the first rewards (the default) and from the
failing signal.
"""

from __future__ import annotations

import statistics

import numpy as np
from _common import print_table

from autoplace.cluster import get_cluster
from autoplace.graph import Graph, Op
from autoplace.placers.htf_mpr import HTFMPRConfig, htf_mpr_search
from autoplace.placers.rl import RLConfig, rl_search
from autoplace.search import SearchBudget

SEEDS = (0, 1, 2)


def independent_matmuls(n: int = 30, seed: int = 0) -> Graph:
    """``n`` products of 1–10 GFLOP each reading one input, summed at the end."""
    sizes = np.random.default_rng(seed).uniform(1, 10, n) * 1e9
    body = [Op(name=f"op{i}", type="matmul", inputs=("x",), flops=float(f), output_bytes=(1024,))
            for i, f in enumerate(sizes)]
    return Graph([Op(name="x", type="input", output_bytes=(1024,)), *body,
                  Op(name="sum", type="add", inputs=tuple(o.name for o in body), flops=1e3, output_bytes=(4,))],
                 name="independent-matmuls")


def rule_task(n: int = 40):
    """``n`` equal products on two GPUs, one ten times faster: the best placement is a rule per op (about
    nine in ten on the fast GPU); the graph and cluster of ``tests/test_rl.py``'s learning test."""
    from autoplace.cluster import Cluster, Device, LinkSpec

    ops = [Op("x", "input", output_bytes=(8,))] + [Op(f"op{i}", "mm", ("x",), output_bytes=(8,), flops=1e9)
                                                   for i in range(n)]
    g = Graph([*ops, Op("sum", "add", tuple(f"op{i}" for i in range(n)), output_bytes=(8,), flops=1e3)],
              name="rule")
    c = Cluster("c", [Device("gpu:0", "gpu", 10**9, 1e12, 1e11), Device("gpu:1", "gpu", 10**9, 1e11, 1e11)],
                default_link=LinkSpec(1e10, 1e-6))
    return g, c


def row(label: str, steps: list[float]) -> list[str]:
    ms = [s * 1e3 for s in steps]
    return [label, *(f"{m:.3f}" for m in ms), f"{statistics.mean(ms):.3f} ± {statistics.stdev(ms):.3f}",
            f"{min(ms):.3f}"]


def main() -> None:
    g, c = independent_matmuls(), get_cluster("k80x2")
    cols = ["search (best step, ms)", *(f"seed {s}" for s in SEEDS), "mean ± sd", "min"]
    rows = []
    for n in (120, 240):
        for model in ("gbr", "random"):
            steps = [htf_mpr_search(g, c, budget=SearchBudget(samples=n), seed=s,
                                    config=HTFMPRConfig(model=model)).placement.meta["best_step_s"] for s in SEEDS]
            rows.append(row(f"htf-mpr, {model} screening, {n} evaluations", steps))
    paper = {"decide": "group", "attention": "additive", "samples_per_update": 8, "baseline_start": "failing"}
    for label, cfg in (("rl (learning)", {}), ("rl, learning off", {"learn": False}),
                       ("rl per group, the paper's decoder and baseline", paper),
                       ("rl per group, the paper's decoder and baseline, learning off", {**paper, "learn": False})):
        steps = [rl_search(g, c, budget=SearchBudget(samples=400), seed=s,
                           config=RLConfig(**cfg)).placement.meta["best_step_s"] for s in SEEDS]
        rows.append(row(f"{label}, 400 samples", steps))
    print_table(cols, rows)
    g, c = rule_task()
    rows = []
    for label, cfg in (("rl (learning)", {}), ("rl, learning off", {"learn": False}),
                       ("rl, baseline from the failing signal", {"baseline_start": "failing"})):
        steps = [rl_search(g, c, budget=SearchBudget(samples=400), seed=s,
                           config=RLConfig(**cfg)).placement.meta["best_step_s"] for s in SEEDS]
        rows.append(row(f"{label}, 400 samples", steps))
    print("\nForty equal products on two GPUs, one ten times faster (optimum 37 ms):\n")
    print_table(cols, rows)


if __name__ == "__main__":
    main()
