"""GDP's Table 2 and Figure 2 (Zhou et al.) re-simulated: one policy trained on a batch of graphs against
one policy per graph, and placing graphs the policy never saw — zero-shot and after a short fine-tune.

    .venv/bin/python benchmarks/gdp_table2.py run --json docs/results/gdp/table2.json
    .venv/bin/python benchmarks/gdp_table2.py run --json docs/results/gdp/table2.json --mode paper --parts loo
    .venv/bin/python benchmarks/gdp_table2.py report --json docs/results/gdp/table2.json \
        --table1 docs/results/gdp/table1-gdp.json,docs/results/gdp/table1-classic.json

``run`` does three parts, each row appended to the JSON file as soon as it is measured (an interrupted run
continues where it stopped; the policies it trains go to ``--out`` so that a resumed part reuses them):

* ``batch``: one policy trained on the whole batch (``--graphs``, GDP-batch) with ``--batch-budget``
  seconds of nominal work, the same total as GDP-one's per-graph budget summed; each graph's best step.
* ``loo``: leave-one-out over the batch — for each graph, a policy pre-trained on the others
  (``--pretrain-budget``), then on the held-out graph: its zero-shot placement (policy time beside), the
  zero-shot placement of an untrained policy (the control: the prior alone, with the same samples), a
  fine-tune of ``--fine-tune-updates`` PPO updates, and GDP-one from scratch for the same updates.
* ``large``: the batch policy's zero-shot placement of larger graphs (``--large``), policy time beside.

``--mode paper`` runs the same with the paper's policy (``prior=None, unit_moves=0``: the network alone,
no search near a prior), where a zero-shot placement is the network's own; rows carry their mode.
``report`` prints the tables; with ``--table1`` (the rows of ``gdp_table1.py``) GDP-one's steps, the
expert's and ``auto``'s are put beside.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

BATCH = ("transformer-xl-2@p100x2", "transformer-xl-4@p100x4", "wavenet-2x18@p100x2", "wavenet-4x36@p100x4",
         "inception-v3@p100x2", "amoebanet@p100x4")
LARGE = ("rnnlm-4@p100x4", "gnmt-8@p100x8")
MODES = {"default": {}, "paper": {"prior": None, "unit_moves": 0}}


def _load(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)["rows"]


def _save(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump({"table": "gdp-table2", "rows": rows}, f, indent=1)
    os.replace(path + ".tmp", path)


def _problem(setting: str):
    from autoplace.cluster import get_cluster
    from autoplace.zoo import build_graph

    model, cname = setting.split("@")
    return build_graph(model), get_cluster(cname)


def _zero_shot(policy, setting: str, cfg, seed: int) -> dict:
    from autoplace.placers.gdp import zero_shot

    g, c = _problem(setting)
    t0 = time.perf_counter()
    p = zero_shot(policy, g, c, cfg, seed=seed)
    return {"step_s": p.meta["best_step_s"], "greedy_step_s": p.meta["greedy_step_s"],
            "prior_step_s": p.meta.get("prior_step_s"),
            "policy_s": p.meta["policy_time_s"], "prior_s": p.meta["prior_s"], "prior": p.meta["prior"],
            "wall_s": time.perf_counter() - t0}


def cmd_run(args) -> int:
    import torch

    from autoplace.placers.gdp import GDPConfig, gdp_search, gdp_train, load_policy, new_policy
    from autoplace.search import SearchBudget

    rows = _load(args.json)
    have = {(r["part"], r["setting"]) for r in rows if r.get("mode", "default") == args.mode}
    batch = args.graphs.split(",")
    out = os.path.join(args.out, args.mode)
    os.makedirs(out, exist_ok=True)
    knobs = MODES[args.mode]
    cfg = GDPConfig(**knobs)

    def add(row):
        row = {"mode": args.mode, **row}
        rows.append(row)
        _save(args.json, rows)
        print(json.dumps(row), file=sys.stderr, flush=True)

    batch_policy = os.path.join(out, "batch.pt")
    need_batch = not all(("batch", s) in have for s in batch) or not os.path.exists(batch_policy)
    if ("batch" in args.parts or "large" in args.parts) and need_batch:      # "large" places with the batch policy
        probs = [_problem(s) for s in batch]
        t0 = time.perf_counter()
        r = gdp_train([g for g, _ in probs], [c for _, c in probs], budget=args.batch_budget, seed=args.seed,
                      output=batch_policy, config=knobs)
        wall = time.perf_counter() - t0
        rows[:] = [x for x in rows if not (x["part"] == "batch" and x.get("mode", "default") == args.mode)]
        for s, step in zip(batch, r.extra["best_steps_s"]):
            add({"part": "batch", "setting": s, "step_s": step, "wall_s": wall, "samples": r.samples,
                 "updates": r.updates, "budget": args.batch_budget})
    if "loo" in args.parts:
        for held in batch:
            if ("loo", held) in have:
                continue
            others = [s for s in batch if s != held]
            probs = [_problem(s) for s in others]
            path = os.path.join(out, f"without-{held.replace('@', '-')}.pt")
            t0 = time.perf_counter()
            if not os.path.exists(path):
                gdp_train([g for g, _ in probs], [c for _, c in probs], budget=args.pretrain_budget, seed=args.seed,
                          output=path, config=knobs)
            pretrain_s = time.perf_counter() - t0
            net, pcfg = load_policy(path)
            zs = _zero_shot(net, held, pcfg, args.seed)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(args.seed + 1)
                fresh = _zero_shot(new_policy(cfg), held, cfg, args.seed)
            g, c = _problem(held)
            samples = SearchBudget(samples=args.fine_tune_updates * cfg.samples_per_update)
            t0 = time.perf_counter()
            tuned = gdp_search(g, c, policy=path, budget=samples, seed=args.seed)
            tuned_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            scratch = gdp_search(g, c, budget=samples, seed=args.seed, config=knobs)
            scratch_s = time.perf_counter() - t0
            add({"part": "loo", "setting": held, "pretrain_s": pretrain_s, "pretrain_budget": args.pretrain_budget,
                 "zero_shot": zs, "untrained_zero_shot": fresh,
                 "prior_step_s": zs.get("prior_step_s"),
                 "fine_tune": {"step_s": tuned.placement.meta["best_step_s"], "wall_s": tuned_s,
                               "updates": tuned.updates},
                 "scratch": {"step_s": scratch.placement.meta["best_step_s"], "wall_s": scratch_s,
                             "updates": scratch.updates}})
    if "large" in args.parts:
        net, pcfg = load_policy(batch_policy)
        for s in args.large.split(","):
            if ("large", s) not in have:
                add({"part": "large", "setting": s, **_zero_shot(net, s, pcfg, args.seed)})
    return 0



def _geo(xs) -> float:
    from autoplace.stats import geomean

    return geomean(xs, empty=float("nan"))


def cmd_report(args) -> int:
    rows = _load(args.json)
    t1 = {}
    for path in (args.table1 or "").split(","):
        for r in _load(path) if path else []:
            t1[(f"{r['model']}@{r['cluster']}", r["method"])] = r

    def t1step(s, m):
        r = t1.get((s, m))
        return r["step_s"] if r and r.get("ok") else None

    def f(x):
        return "-" if x is None else f"{x:.3f}"

    def sp(a, b):
        return "-" if a is None or b is None else f"{a / b:.2f}x"

    for mode in MODES:
        batch = [r for r in rows if r["part"] == "batch" and r.get("mode", "default") == mode]
        if not batch:
            continue
        print(f"### GDP-batch against GDP-one, mode {mode!r} (budget: batch {batch[0]['budget']:g} s of nominal "
              f"work in all, {batch[0]['updates']} updates, {batch[0]['wall_s']:.0f} s wall; GDP-one: default mode)\n")
        print("| setting | expert | gdp-one | gdp-batch | batch vs one | batch vs expert | auto |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        g1, ge = [], []
        for r in batch:
            s, one, e = r["setting"], t1step(r["setting"], "gdp"), t1step(r["setting"], "expert")
            g1.append(one / r["step_s"] if one else None)
            ge.append(e / r["step_s"] if e else None)
            print(f"| {s} | {f(e)} | {f(one)} | {f(r['step_s'])} | {sp(one, r['step_s'])} | {sp(e, r['step_s'])} | "
                  f"{f(t1step(s, 'auto'))} |")
        print(f"| **geomean** | | | | {_geo(g1):.2f}x | {_geo(ge):.2f}x | |\n")
    for mode in MODES:
        loo = [r for r in rows if r["part"] == "loo" and r.get("mode", "default") == mode]
        if not loo:
            continue
        print(f"### Held-out graphs, mode {mode!r} (leave-one-out; pre-training {loo[0]['pretrain_budget']:g} s "
              f"of nominal work on the other graphs)\n")
        print("| held out | prior | untrained zero-shot | zero-shot | policy s | fine-tune | fine-tune s | "
              "scratch, same updates | gdp-one | expert | auto | zero-shot vs auto |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in loo:
            s, z, u, ft, sc = r["setting"], r["zero_shot"], r["untrained_zero_shot"], r["fine_tune"], r["scratch"]
            a = t1step(s, "auto")
            gap = "-" if a is None else f"{z['step_s'] / a - 1:+.0%}"
            print(f"| {s} | {f(r.get('prior_step_s'))} | {f(u['step_s'])} | {f(z['step_s'])} | {z['policy_s']:.2f} | "
                  f"{f(ft['step_s'])} ({ft['updates']} updates) | {ft['wall_s']:.0f} | {f(sc['step_s'])} | "
                  f"{f(t1step(s, 'gdp'))} | {f(t1step(s, 'expert'))} | {f(a)} | {gap} |")
        print()
    large = [r for r in rows if r["part"] == "large"]
    if large:
        print("### Zero-shot on larger graphs with the batch policy\n")
        print("| graph | zero-shot | greedy | policy s | prior s | expert | auto | vs auto |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in large:
            s, a = r["setting"], t1step(r["setting"], "auto")
            gap = "-" if a is None else f"{r['step_s'] / a - 1:+.0%}"
            print(f"| {s} | {f(r['step_s'])} | {f(r['greedy_step_s'])} | {r['policy_s']:.2f} | {r['prior_s']:.1f} | "
                  f"{f(t1step(s, 'expert'))} | {f(a)} | {gap} |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--json", required=True)
    r.add_argument("--graphs", default=",".join(BATCH))
    r.add_argument("--large", default=",".join(LARGE))
    r.add_argument("--parts", default="batch,loo,large")
    r.add_argument("--mode", choices=tuple(MODES), default="default")
    r.add_argument("--batch-budget", type=float, default=720.0)
    r.add_argument("--pretrain-budget", type=float, default=150.0)
    r.add_argument("--fine-tune-updates", type=int, default=40)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", default=".gdp-policies", help="where the trained policies go (not committed)")
    p = sub.add_parser("report")
    p.add_argument("--json", required=True)
    p.add_argument("--table1", default=None, help="gdp_table1.py rows (comma-separated files)")
    args = ap.parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
