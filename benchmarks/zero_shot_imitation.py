"""Zero-shot by imitation: can the GDP network alone (no prior) place a graph it never saw, after learning
to imitate ``auto``'s placements of others?

    .venv/bin/python benchmarks/zero_shot_imitation.py [--decide unit|node] [--epochs 300] [--samples 64]

Leave-one-out over GDP's six Figure 2 settings (Transformer-XL-2/4, WaveNet-2x18/4x36, Inception-v3,
AmoebaNet on ``p100x2``/``p100x4``): a fresh policy (default ``GDPConfig`` sizes, ``prior=None``) is
trained by cross-entropy, full batch, Adam at 10⁻³, for ``--epochs`` passes, to give each node the device
``auto`` (budget 5) gives most of its ops on each of the other five graphs. Identical devices are
interchangeable, so the labels are made canonical: each class of identical devices numbered by first use
in the nodes' topological order. Then the held-out graph is placed by the network alone: its most likely
device per node, and ``--samples`` placements drawn from it, the fastest that runs kept. Beside it: an
untrained policy's same samples, the expert, ``auto`` and ``auto``'s placement mapped onto the nodes.
Steps are simulated; seed 0.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from _common import print_table

from autoplace.cluster import get_cluster
from autoplace.placers import place
from autoplace.placers.gdp import GDPConfig, GDPSearch, new_policy
from autoplace.sim import simulate
from autoplace.zoo import build_graph

SETTINGS = [("transformer-xl-2", "p100x2"), ("transformer-xl-4", "p100x4"), ("wavenet-2x18", "p100x2"),
            ("wavenet-4x36", "p100x4"), ("inception-v3", "p100x2"), ("amoebanet", "p100x4")]


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
    auto = place(graph, cluster, "auto", seed=0, budget=5)
    dev = auto.to_array(graph, cluster)
    counts = np.zeros((p.grouping.n_groups, cluster.n_devices))
    np.add.at(counts, (p.grouping.group, dev), 1)
    target = counts.argmax(1)                                     # group id order
    return {"p": p, "target": canonical(target[p.features.order], cluster),
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


def zero_shot(net, q: dict, samples: int, seed: int = 0) -> tuple[float, float, float]:
    """The network's greedy placement's step, the best of it and ``samples`` draws, and the seconds taken."""
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
    return float(steps[0]), float(steps.min()), time.perf_counter() - t0


def main(argv=None) -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decide", choices=("unit", "node"), default="unit")
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--samples", type=int, default=64)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    config = GDPConfig(decide=args.decide, prior=None, unit_moves=0.0)
    problems = {m: problem(m, c, config) for m, c in SETTINGS}
    rows, ratios = [], []
    for held, cluster in SETTINGS:
        net, loss = imitate([q for m, q in problems.items() if m != held], config, args.epochs)
        q = problems[held]
        greedy, best, secs = zero_shot(net, q, args.samples)
        _, untrained, _ = zero_shot(new_policy(config), q, args.samples)
        ratios.append(best / q["auto"])
        rows.append([f"{held} on {cluster}", q["p"].features.n_nodes, f"{loss:.3f}", f"{greedy * 1e3:.2f}",
                     f"{best * 1e3:.2f}", f"{secs:.2f}", f"{untrained * 1e3:.2f}", f"{q['expert'] * 1e3:.2f}",
                     f"{q['auto'] * 1e3:.2f}", f"{q['auto_on_nodes'] * 1e3:.2f}"])
    print_table(["held out", "nodes", "training loss", "greedy (ms)", f"best of 1 + {args.samples} (ms)",
                 "policy + scoring (s)", "untrained, same samples (ms)", "expert (ms)", "auto (ms)",
                 "auto on the nodes (ms)"], rows)
    print(f"\nzero-shot / auto, geometric mean: {math.exp(np.mean(np.log(ratios))):.3f}; decide={args.decide}, "
          f"{args.epochs} epochs")


if __name__ == "__main__":
    main()
