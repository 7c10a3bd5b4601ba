"""Three rules for ``auto``'s choice, replayed on the same candidates: what each gives up nominally and in the
worst case.

For each setting (a zoo model on a cluster preset) ``auto`` runs once; its meta lists everything it weighed
(``weighed``: the fast placers that fit, the refine and CP-SAT, the cleaned result, the pipeline, the
strategies) with each one's step per scenario (``weighed_steps_s``). Each rule then picks among exactly
those:

* ``worst case`` — the least worst case against one GPU (each scenario rescaled so that ``single-gpu`` takes
  its nominal step in all of them; the plain worst case where one GPU is not among them);
* ``regret`` — the least regret (each scenario's step over the best one there, the worst taken): ``auto``'s
  rule, replayed here without its near-tie to fewer cuts;
* ``nominal within 3 %`` — the fastest nominal step among those whose worst case is within 3 % of the least.

Per rule: the pick, its nominal step over the best nominal (``nominal loss``) and its worst case over the
least (``worst loss``). A rule *trades speed for nothing* on a setting where it passes over a candidate at
least 3 % faster nominally whose worst case is within 3 % of the least. The candidates are the ones ``auto``
reached under regret (its refine minimises it), so this compares choices, not searches; the JSON keeps
every candidate's steps per scenario.

    .venv/bin/python benchmarks/pick_rules.py rnnlm-2@k80x2 rnnlm-2@k80x4 nmt-2@k80x2 nmt-2@k80x4 \\
        inception-v3@k80x2 inception-v3@k80x4 --budget 1 --json docs/results/pick_rules/table2.json

A setting ``MODEL*M@CLUSTER`` captures the step with ``M`` micro-batches (``auto`` then weighs its pipeline).
"""

from __future__ import annotations

import sys

import numpy as np
from _common import TableOut, save_json, settings_args

from autoplace.cluster import get_cluster
from autoplace.placers import place
from autoplace.zoo import build_graph

TOLERANCE = 0.03


def worst_cases(names: list[str], steps: np.ndarray) -> np.ndarray:
    """``[B]``: each candidate's worst case against one GPU (``steps``: ``[B, S]``; plain where one GPU is not
    among ``names``)."""
    one = names.index("single-gpu") if "single-gpu" in names else None
    scale = steps[one, 0] / steps[one] if one is not None and (steps[one] > 0).all() else np.ones(steps.shape[1])
    return (steps * scale).max(axis=1)


def rules(names: list[str], steps: np.ndarray) -> dict[str, int]:
    """Index of each rule's pick among ``names`` (their steps per scenario: ``[B, S]``)."""
    worst = worst_cases(names, steps)
    regret = (steps / steps.min(axis=0)).max(axis=1)
    near = np.flatnonzero(worst <= worst.min() * (1 + TOLERANCE))
    return {"worst case": int(np.argmin(worst)), "regret": int(np.argmin(regret)),
            "nominal within 3 %": int(near[np.argmin(steps[near, 0])])}


def run(setting: str, budget: float, seed: int) -> dict:
    model, _, cluster_name = setting.partition("@")
    model, _, micro = model.partition("*")      # MODEL*M: the step captured with M micro-batches
    graph = build_graph(model, micro_batches=int(micro)) if micro else build_graph(model)
    cluster = get_cluster(cluster_name)
    p = place(graph, cluster, "auto", seed=seed, budget=budget)
    names, steps = list(p.meta["weighed"]), np.array(p.meta["weighed_steps_s"])
    worst = worst_cases(names, steps)
    out = {"setting": setting, "auto_from": p.meta["from"], "scenarios": p.meta.get("robust", {}).get("scenarios"),
           "candidates": {"names": names, "steps_s": steps.tolist()}, "rules": {}}
    # candidates within the tolerance of the least worst case: passing over one 3 % faster gains nothing
    robust = worst <= worst.min() * (1 + TOLERANCE)
    for rule, k in rules(names, steps).items():
        faster = robust & (steps[:, 0] * (1 + TOLERANCE) < steps[k, 0])
        out["rules"][rule] = {"pick": names[k], "nominal_s": float(steps[k, 0]), "worst_s": float(worst[k]),
                              "nominal_loss": float(steps[k, 0] / steps[:, 0].min() - 1),
                              "worst_loss": float(worst[k] / worst.min() - 1), "for_nothing": bool(faster.any())}
    return out


def main(argv: list[str] | None = None) -> int:
    args = settings_args(__doc__, argv, 1.0)
    out = []
    table = TableOut(["setting", "rule", "pick", "nominal (ms)", "nominal loss", "worst (ms)", "worst loss",
                      "speed for nothing"], "lllrrrrl")
    for setting in args.settings:
        res = run(setting, args.budget, args.seed)
        out.append(res)
        for rule, r in res["rules"].items():
            table.row(setting, rule, r["pick"], f"{r['nominal_s'] * 1e3:.1f}", f"{100 * r['nominal_loss']:.1f} %",
                      f"{r['worst_s'] * 1e3:.1f}", f"{100 * r['worst_loss']:.1f} %", "yes" if r["for_nothing"] else "")
    for rule in ("worst case", "regret", "nominal within 3 %"):
        rs = [res["rules"][rule] for res in out]
        table.row("**all**", rule, "", "", f"max {100 * max(r['nominal_loss'] for r in rs):.1f} %", "",
                  f"max {100 * max(r['worst_loss'] for r in rs):.1f} %",
                  f"{sum(r['for_nothing'] for r in rs)} of {len(rs)}")
    if args.json:
        save_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
