"""Zero-shot by imitation: can the GDP network alone (no prior) place a graph it never saw, after learning
to imitate ``auto``'s placements of others?

    .venv/bin/python benchmarks/zero_shot_imitation.py [--decide unit|node] [--epochs 300] [--samples 64]

Leave-one-out over GDP's six Figure 2 settings (Transformer-XL-2/4, WaveNet-2x18/4x36, Inception-v3,
AmoebaNet on ``p100x2``/``p100x4``): a fresh policy (default ``GDPConfig`` sizes, ``prior=None``) is
trained by cross-entropy, full batch, Adam at 10⁻³, for ``--epochs`` passes, to give each node the device
``auto`` (budget 5) gives most of its ops on each of the other five graphs. Identical devices are
interchangeable, so the labels are made canonical: each class of identical devices numbered by first use
in the nodes' topological order (the teacher is ``auto`` without the strategies over the batch dimension,
whose placements are of another graph). Then the held-out graph is placed by the network alone: its most likely
device per node, and ``--samples`` placements drawn from it, the fastest that runs kept. Beside it, over
``--seeds`` (the network's initialisation, its training order and its draws; the teacher ``auto`` is seed
0's): its learning-off self — an untrained policy of the same seed drawing the same number of samples
(a zero-shot placement draws a fixed number, so there is no equal-wall-time run of it) — and ``auto`` under
a time limit of the zero-shot placement's own seconds; each by nominal and robust step (the worst of the
cost model's scenarios, :func:`autoplace.bench.jobs.robust_step`). For reference: the expert, the teacher
and the teacher's placement mapped onto the nodes. Steps are simulated.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
from _common import geo, note, print_table, save_json

from autoplace.bench.jobs import Setting, place_job, robust_step
from autoplace.bench.published import GDP_FIGURE2
from autoplace.cluster import get_cluster
from autoplace.placement import Placement
from autoplace.placers import place
from autoplace.placers.learned.gdp import GDPConfig, GDPSearch, new_policy
from autoplace.sim import simulate
from autoplace.zoo import build_graph

SETTINGS = [(m, f"p100x{g}") for m, g in GDP_FIGURE2]


def canonical(devices: np.ndarray, cluster) -> np.ndarray:
    """``devices`` (a device per node, nodes in order) with each class of identical devices renumbered by
    first use."""
    key = [(d.type, d.peak_flops, d.memory_bytes) for d in cluster.devices]
    members: dict = {}
    for i, k in enumerate(key):
        members.setdefault(k, []).append(i)
    used = {k: 0 for k in members}
    mapping = {}
    for v in devices.tolist():
        if v not in mapping:
            k = key[v]
            mapping[v], used[k] = members[k][used[k]], used[k] + 1
    return np.array([mapping[v] for v in devices.tolist()], dtype=np.int64)


def problem(model: str, cluster_name: str, config: GDPConfig) -> dict:
    graph, cluster = build_graph(model), get_cluster(cluster_name)
    search = GDPSearch([graph], [cluster], config, seed=0)
    p = search.problems[0]
    auto = place(graph, cluster, "auto", seed=0, budget=5, strategies=False)   # the teacher: placements of the step
    dev = auto.to_array(graph, cluster)
    counts = np.zeros((p.grouping.n_groups, cluster.n_devices))
    np.add.at(counts, (p.grouping.group, dev), 1)
    target = counts.argmax(1)                                     # group id order
    return {"p": p, "graph": graph, "cluster": cluster, "setting": Setting(model, cluster_name),
            "target": canonical(target[p.features.order], cluster),
            "auto": simulate(graph, cluster, auto).step_time,
            "auto_on_nodes": float(p.evaluate(target[None, :]).step_time[0]),
            "expert": simulate(graph, cluster, place(graph, cluster, "expert")).step_time}


def imitate(problems: list[dict], config: GDPConfig, epochs: int, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    net = new_policy(config)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(epochs):
        loss = sum(torch.nn.functional.cross_entropy(net(q["p"].features, q["p"].mask), torch.as_tensor(q["target"]))
                   for q in problems) / len(problems)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net, float(loss.detach())


def zero_shot(net, q: dict, samples: int, seed: int = 0) -> dict:
    """The network's greedy placement's step, the best of it and ``samples`` draws (its step, robust step
    and node placement), and the seconds taken (the policy and the scoring)."""
    import torch

    p = q["p"]
    t0 = time.perf_counter()
    with torch.no_grad():
        logits = net(p.features, p.mask)
        draws = torch.multinomial(torch.softmax(logits, 1), samples, replacement=True,
                                  generator=torch.Generator().manual_seed(seed)).T
    nodes = torch.cat([logits.argmax(1)[None], draws]).numpy()
    groups = np.empty_like(nodes)
    groups[:, p.features.order] = nodes
    scores = p.evaluate(groups)
    steps = np.where(scores.ok, scores.step_time, np.inf)
    secs = time.perf_counter() - t0
    best = int(np.argmin(steps))
    placement = Placement.from_array(q["graph"], q["cluster"], p.grouping.expand(groups[best]), "zero-shot")
    return {"greedy": float(steps[0]), "best": float(steps[best]), "seconds": secs,
            "robust": robust_step(q["setting"], placement) if math.isfinite(steps[best]) else None}


def _cell(xs: list) -> str:
    if any(x is None or not math.isfinite(x) for x in xs):
        return "failed on a seed"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs) * 1e3:.2f} ± {sd * 1e3:.2f}"


def _ratio(pairs: list[tuple]) -> tuple[str, list[float]]:
    r = [b / a for a, b in pairs if a and b and math.isfinite(a) and math.isfinite(b)]
    if len(r) != len(pairs):
        return "–", []
    return f"{geo(r):.3f} ({min(r):.3f}–{max(r):.3f})", r


def main(argv=None) -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decide", choices=("unit", "node"), default="unit")
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    seeds = [int(x) for x in args.seeds.split(",")]
    config = GDPConfig(decide=args.decide, prior=None, unit_moves=0.0)
    problems = {m: problem(m, c, config) for m, c in SETTINGS}
    runs: dict = {}
    for seed in seeds:
        for held, cluster in SETTINGS:
            net, loss = imitate([q for m, q in problems.items() if m != held], config, args.epochs, seed)
            q = problems[held]
            mine = zero_shot(net, q, args.samples, seed)
            torch.manual_seed(seed)
            off = zero_shot(new_policy(config), q, args.samples, seed)       # learning off: the same samples
            auto = place_job(q["setting"], "auto", seed=seed, time_s=mine["seconds"])
            runs[(held, seed)] = {"loss": loss, "zero_shot": mine, "untrained": off,
                                  "auto_wall": {"best": auto["step_s"], "robust": auto.get("robust_step_s"),
                                                "seconds": auto["wall_s"]}}
            note(f"{held}, seed {seed}: zero-shot {mine['best'] * 1e3:.2f} ms (loss {loss:.3f}), untrained "
                 f"{off['best'] * 1e3:.2f}, auto in {mine['seconds']:.2f} s {auto['step_s'] * 1e3:.2f}")
    for kind in ("best", "robust"):
        rows, ratios = [], {"untrained": [], "auto_wall": []}
        for held, cluster in SETTINGS:
            q, rs = problems[held], [runs[(held, s)] for s in seeds]
            cells = []
            for base in ("untrained", "auto_wall"):
                text, r = _ratio([(x["zero_shot"][kind], x[base][kind]) for x in rs])
                ratios[base] += r
                cells += [_cell([x[base][kind] for x in rs]), text]
            rows.append([f"{held} on {cluster}", q["p"].features.n_nodes,
                         f"{statistics.mean(x['loss'] for x in rs):.3f}", _cell([x["zero_shot"][kind] for x in rs]),
                         *cells, f"{statistics.mean(x['zero_shot']['seconds'] for x in rs):.3f}",
                         f"{q['expert'] * 1e3:.2f}", f"{q['auto'] * 1e3:.2f}", f"{q['auto_on_nodes'] * 1e3:.2f}"])
        means = {k: f"{geo(v):.3f}" if v else "–" for k, v in ratios.items()}
        rows.append(["geometric mean", "", "", "", "", means["untrained"], "", means["auto_wall"], "", "", "", ""])
        step = "nominal" if kind == "best" else "robust"
        print(f"\n{step} step, ms: mean ± sd over seeds {args.seeds}; baseline / zero-shot as the geometric mean "
              f"(range) over the seeds, above 1: the zero-shot placement is faster (decide={args.decide}, "
              f"{args.epochs} epochs, 1 + {args.samples} samples)\n")
        print_table(["held out", "nodes", "training loss", "zero-shot", "untrained, same samples",
                     "untrained / zero-shot", "auto, equal wall", "auto / zero-shot", "zero-shot (s)",
                     "expert (nominal)", "teacher (nominal)", "teacher on the nodes (nominal)"], rows)
    if args.json:
        save_json(args.json, {"decide": args.decide, "epochs": args.epochs, "samples": args.samples, "seeds": seeds,
                              "runs": [{"held_out": h, "seed": s, **r} for (h, s), r in runs.items()]})


if __name__ == "__main__":
    main()
