"""Strategies over the batch dimension against the placements: what ``auto`` weighs in its step 7.

For each setting (a zoo model on a cluster preset), simulated:

* ``single-gpu`` — the step whole on one GPU;
* ``placement`` — ``auto``'s placement of the step itself (its steps 1–6: the fast placers, the refine);
* ``data-parallel``, ``towers``, ``hybrid``, ``pipelined`` — the strategies (docs/algorithms.md, Replicas and
  strategies), each with its step, its robust step (the worst case over the cost model's scenarios, each
  rescaled by the same one-GPU baseline), its regret (the worst, over the scenarios, of its step over the best
  candidate's there: what ``auto`` chooses by) and, for ``hybrid``, its replicas and the placer of one replica;
* ``auto`` — what it returns: the least regret that fits.

``--budget`` (default 10) is ``auto``'s. Every figure comes from one ``auto`` call per setting (its meta
records each strategy's row).

    .venv/bin/python benchmarks/strategies.py inception-v3@k80x4 rnnlm-2@k80x4 gnmt-2@k80x4 \\
        --json docs/results/strategies/k80x4.json
"""

from __future__ import annotations

import sys
import time

from _common import TableOut, save_json, settings_args

from autoplace.cluster import get_cluster
from autoplace.placers import place
from autoplace.sim import simulate
from autoplace.zoo import build_graph


def run(setting: str, budget: float, seed: int) -> dict:
    model, _, cluster_name = setting.partition("@")
    graph, cluster = build_graph(model), get_cluster(cluster_name)
    one = simulate(graph, cluster, place(graph, cluster, "single-gpu"))
    t = time.perf_counter()
    p = place(graph, cluster, "auto", seed=seed, budget=budget)
    wall = time.perf_counter() - t
    r = simulate(graph, cluster, p)
    strategy = p.meta.get("strategy") or {}
    return {"setting": setting, "single_gpu_s": one.step_time if one.ok else None, "auto_s": r.step_time,
            "from": p.meta["from"], "replicas": strategy.get("replicas", 1), "per_replica": p.meta.get("per_replica"),
            "rows": p.meta.get("strategies", []), "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    args = settings_args(__doc__, argv, 10.0)
    out = []
    table = TableOut(["setting", "row", "step (ms)", "robust (ms)", "regret", "fits", "replicas", "note"], "llrrrrrl")
    for setting in args.settings:
        res = run(setting, args.budget, args.seed)
        out.append(res)
        ms = lambda x: "–" if x is None else f"{x * 1e3:.1f}"  # noqa: E731
        table.row(setting, "single-gpu", ms(res["single_gpu_s"]), "", "", "", "1", "")
        for row in res["rows"]:
            note = row.get("error", "")[:60] if "error" in row else (f"from {row['from']}" if row.get("from") else "")
            table.row(setting, row["method"], ms(row.get("step_time_s")), ms(row.get("robust_step_s")),
                      "" if row.get("regret") is None else f"{row['regret']:.3f}",
                      "" if "fits" not in row else ("yes" if row["fits"] else "no"), str(row.get("replicas", "")),
                      note)
        pick = res["from"] + (f", {res['replicas']} replicas" if res["replicas"] > 1 else "") + (
            f" of {res['per_replica']}" if res["per_replica"] else "")
        table.row(setting, "**auto**", ms(res["auto_s"]), "", "", "yes", str(res["replicas"]),
                  f"{pick}; {res['wall_s']:.0f} s")
    if args.json:
        save_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
