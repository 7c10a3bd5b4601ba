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
failing signal. Last, each learned search against its three baselines, seed by seed, by nominal and robust
step (the worst scenario's weight: docs/algorithms.md, Uncertainty): its learning-off self at equal
evaluations (the rows above), the same for the learned search's wall time, and ``auto`` under that time
limit; each baseline's step over the learned one's (above 1: learning is faster) as the geometric mean over
the seeds with its range.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from _common import geo, print_table

from autoplace.cluster import get_cluster
from autoplace.graph import Graph, Op
from autoplace.placers.learned.htf_mpr import htf_mpr_search
from autoplace.placers.learned.rl import rl_search
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


class Runs:
    """Searches on one graph and cluster, each seed's best step, robust step and wall seconds kept by label."""

    def __init__(self, graph: Graph, cluster):
        from autoplace.placers.auto import robust_simulator

        self.graph, self.cluster, self.robust = graph, cluster, robust_simulator(graph, cluster)
        self.runs: dict[str, list[dict]] = {}

    def _kept(self, label: str, placement, wall: float) -> dict:
        from autoplace.robust import step_ranges

        devs = placement.to_array(self.graph, self.cluster)
        out = {"step": float(placement.meta.get("best_step_s") or self._simulated(placement)),
               "robust": float(step_ranges(self.robust, devs[None, :])[0].robust), "wall": wall}
        self.runs.setdefault(label, []).append(out)
        return out

    def _simulated(self, placement) -> float:
        from autoplace.sim import simulate

        return float(simulate(self.graph, self.cluster, placement).step_time)

    def search(self, label: str, fn, seed: int, budget: SearchBudget, config) -> dict:
        t0 = time.perf_counter()
        r = fn(self.graph, self.cluster, budget=budget, seed=seed, config=config)
        return self._kept(label, r.placement, time.perf_counter() - t0)

    def auto(self, label: str, seed: int, seconds: float) -> dict:
        from autoplace.placers import place

        t0 = time.perf_counter()
        p = place(self.graph, self.cluster, "auto", seed=seed, budget=seconds, time_limit=seconds)
        return self._kept(label, p, time.perf_counter() - t0)

    def steps(self, label: str) -> list[float]:
        return [r["step"] for r in self.runs[label]]


def with_baselines(runs: Runs, label: str, fn, budget: SearchBudget, config: dict, off: dict, comparisons: list):
    """``label``'s search over the seeds beside its learning-off self (``off``: the settings that turn
    learning off) at equal evaluations and for its wall time, and ``auto`` for that time."""
    for s in SEEDS:
        learned = runs.search(label, fn, s, budget, config)
        runs.search(label + " off", fn, s, budget, {**config, **off})
        runs.search(label + " off, equal wall", fn, s, SearchBudget(seconds=learned["wall"]), {**config, **off})
        runs.auto(label + " auto, equal wall", s, learned["wall"])
    comparisons.append((runs, label))


def ratio_text(learned: list[dict], other: list[dict], field: str) -> str:
    r = [b[field] / a[field] for a, b in zip(learned, other)]
    return f"{geo(r):.3f} ({min(r):.3f}–{max(r):.3f})"


def cell(rs: list[dict], field: str) -> str:
    ms = [r[field] * 1e3 for r in rs]
    return f"{statistics.mean(ms):.3f} ± {statistics.stdev(ms):.3f}"


def print_comparisons(comparisons: list) -> None:
    for kind, field in (("nominal", "step"), ("robust", "robust")):
        print(f"\nEach learned search against its baselines, seeds {', '.join(map(str, SEEDS))}, {kind} step (ms: "
              "mean ± sd; baseline / learned, geometric mean over the seeds (range), above 1: learning is "
              "faster):\n")
        rows = []
        for runs, label in comparisons:
            learned = runs.runs[label]
            others = [runs.runs[f"{label} {b}"] for b in ("off", "off, equal wall", "auto, equal wall")]
            rows.append([label, cell(learned, field), *(f"{cell(o, field)}; {ratio_text(learned, o, field)}"
                                                        for o in others),
                         " / ".join(f"{statistics.mean(r['wall'] for r in rs):.1f}" for rs in (learned, *others[1:]))])
        print_table(["search", "learned", "off, equal evaluations; / learned", "off, equal wall; / learned",
                     "auto, equal wall; / learned", "wall (s): learned / off / auto"], rows)


def main() -> None:
    g, c = independent_matmuls(), get_cluster("k80x2")
    runs, comparisons = Runs(g, c), []
    cols = ["search (best step, ms)", *(f"seed {s}" for s in SEEDS), "mean ± sd", "min"]
    rows = []
    for n in (120, 240):
        label = f"htf-mpr, gbr screening, {n} evaluations"
        with_baselines(runs, label, htf_mpr_search, SearchBudget(samples=n), {"model": "gbr"}, {"model": "random"},
                       comparisons)
        rows.append(row(label, runs.steps(label)))
        rows.append(row(f"htf-mpr, random screening, {n} evaluations", runs.steps(label + " off")))
    paper = {"decide": "group", "attention": "additive", "samples_per_update": 8, "baseline_start": "failing"}
    for label, cfg in (("rl (learning)", {}), ("rl per group, the paper's decoder and baseline", paper)):
        with_baselines(runs, f"{label}, 400 samples", rl_search, SearchBudget(samples=400), cfg, {"learn": False},
                       comparisons)
        rows.append(row(f"{label}, 400 samples", runs.steps(f"{label}, 400 samples")))
        off = "rl, learning off" if not cfg else f"{label}, learning off"
        rows.append(row(f"{off}, 400 samples", runs.steps(f"{label}, 400 samples off")))
    print_table(cols, rows)
    g, c = rule_task()
    runs, rows = Runs(g, c), []
    for label, cfg in (("rl (learning)", {}), ("rl, baseline from the failing signal", {"baseline_start": "failing"})):
        with_baselines(runs, f"{label}, 400 samples (rule task)", rl_search, SearchBudget(samples=400), cfg,
                       {"learn": False}, comparisons)
        rows.append(row(f"{label}, 400 samples", runs.steps(f"{label}, 400 samples (rule task)")))
        if not cfg:
            rows.append(row("rl, learning off, 400 samples", runs.steps(f"{label}, 400 samples (rule task) off")))
    print("\nForty equal products on two GPUs, one ten times faster (optimum 37 ms):\n")
    print_table(cols, rows)
    print_comparisons(comparisons)


if __name__ == "__main__":
    main()
