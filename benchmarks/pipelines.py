"""Models bigger than one GPU: ``auto`` with pipelining against the pipelines people write by hand.

For each model and cluster, simulated (each placement scored by the simulator as its runtime runs it):

* ``single-gpu`` — the step whole on one GPU (it does not fit: the reason for all this);
* ``auto, M=1`` — ``auto`` on the step captured whole (no micro-batches, so nothing to pipeline);
* ``auto, M chosen`` — ``auto`` on the step captured with M = 1 and each M of :data:`COUNTS` micro-batches;
  the fastest that fits (``auto`` weighs its ``pipeline`` candidate, GPipe or 1F1B, against its others;
  the JSON keeps every M's row), as ``compile(micro_batches="auto")`` chooses;
* ``even GPipe, M=4`` — :func:`autoplace.placers.pipeline.even_split`: one contiguous stage per GPU of
  about equal parameter bytes, a GPipe schedule over 4 micro-batches;
* ``Accelerate sequential`` — ``accelerate.utils.infer_auto_device_map`` of the model (filling GPU 0, then
  GPU 1, ... with whole blocks: ``no_split_module_classes`` is the model's block class), with
  ``max_memory`` per GPU of the model's parameter bytes over the GPU count, times the least of 1.05,
  1.05 x 1.1, ... at which every module lands on a GPU (Accelerate keeps room for the largest layer on
  each) — spread over every GPU, as one would for training (Accelerate's default, the GPUs' full memory,
  puts the whole model on GPU 0, which does not fit) — scored as it runs: one process, every GPU's
  kernels launched by one Python thread (a single launcher in the simulator), the whole batch layer
  after layer.

Each row gives the step, whether it fits and the peak memory per GPU. ``auto``'s budget is ``--budget``
(default 10) per call.

    .venv/bin/python benchmarks/pipelines.py --json docs/results/pipelines/pipelines.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from autoplace.cluster import Cluster, get_cluster
from autoplace.placers import place
from autoplace.placers.pipeline import even_split
from autoplace.runtime.export import from_device_map
from autoplace.sim import Simulator
from autoplace.zoo import build_graph, get_model

SETTINGS = {"gpt-24": ("p100x4", "k80x4"), "rnnlm-2-large": ("k80x2", "k80x4"), "nmt-2-large": ("k80x2", "k80x4")}
COUNTS = {"gpt-24": (2, 4, 8), "rnnlm-2-large": (2, 4), "nmt-2-large": (2, 4)}
BLOCKS = {"gpt-24": ["GPTBlock"], "rnnlm-2-large": ["LSTMCell"], "nmt-2-large": ["LSTMCell"]}


def one_thread(cluster: Cluster) -> Cluster:
    """``cluster`` with every GPU launched from one host thread (a single-process PyTorch program)."""
    devices = [dataclasses.replace(d, launcher="python") if d.kind == "gpu" else d for d in cluster.devices]
    return Cluster(cluster.name, devices, cluster.links, cluster.default_link, cluster.meta, cluster.segments)


def accelerate_map(name: str, cluster: Cluster) -> dict:
    """Accelerate's sequential device map of model ``name`` (built on the meta device)."""
    import torch
    from accelerate.utils import infer_auto_device_map

    from autoplace.zoo import papers

    params = dict(get_model(name).defaults)
    params.pop("micro_batches", None)
    make = {"gpt-24": papers._gpt, "rnnlm-2-large": papers._rnnlm, "nmt-2-large": papers._seq2seq}[name]
    with torch.device("meta"):
        model = make(**params)[0]
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    gpus = cluster.devices_of_kind("gpu")
    share = 1.05
    while True:     # Accelerate keeps room for the largest layer on each GPU: grow the share until all fit
        budget = int(total * share / len(gpus))
        dmap = infer_auto_device_map(model, max_memory={k: budget for k in range(len(gpus))},
                                     no_split_module_classes=BLOCKS[name])
        if all(isinstance(v, int) for v in dmap.values()):
            return dmap
        share *= 1.1


def row(label: str, graph, cluster: Cluster, placement, sim_cluster: Cluster | None = None, **extra) -> dict:
    sim = Simulator(graph, sim_cluster or cluster)
    r = sim.run(placement)
    gpus = cluster.devices_of_kind("gpu")
    return {"placement": label, "step_s": r.step_time, "fits": bool(r.ok),
            "peak_gib": [round(float(r.peak_memory[d]) / 2**30, 2) for d in gpus],
            "capacity_gib": round(float(cluster.memory_bytes[gpus[0]]) / 2**30, 2),
            "schedule": placement.meta.get("pipeline_schedule") or (placement.meta.get("pipeline") or {}).get(
                "pipeline_schedule"), **extra}


def setting(name: str, cluster_name: str, budget: float) -> list[dict]:
    cluster = get_cluster(cluster_name)
    rows = []
    whole = build_graph(name)
    try:
        rows.append(row("single-gpu", whole, cluster, place(whole, cluster, "single-gpu")))
    except Exception as e:  # noqa: BLE001 - recorded
        rows.append({"placement": "single-gpu", "error": str(e)[:200]})
    t = time.perf_counter()
    rows.append(row("auto, M=1", whole, cluster, place(whole, cluster, "auto", seed=0, budget=budget),
                    micro_batches=1, search_s=round(time.perf_counter() - t, 1)))
    best = rows[-1] if rows[-1]["fits"] else None
    tried = []
    for m in COUNTS[name]:
        g = build_graph(name, micro_batches=m)
        t = time.perf_counter()
        p = place(g, cluster, "auto", seed=0, budget=budget)
        r = row(f"auto, M={m}", g, cluster, p, micro_batches=m, search_s=round(time.perf_counter() - t, 1),
                came_from=p.meta["from"])
        print(f"  {name} on {cluster_name}: auto M={m}: {r['step_s']:.3f} s ({p.meta['from']})", file=sys.stderr)
        tried.append(r)
        if r["fits"] and (best is None or r["step_s"] < best["step_s"]):
            best = r
        if m == 4:
            rows.append(row("even GPipe, M=4", g, cluster, even_split(g, cluster, "gpipe"), micro_batches=4))
    rows.append({**best, "placement": f"auto, M chosen ({best['micro_batches']})"} if best else
                {"placement": "auto, M chosen", "error": "no M fits"})
    rows += [{**r, "placement": f"(auto, M={r['micro_batches']})", "detail": True} for r in tried]
    single = one_thread(cluster)
    p = from_device_map(whole, cluster, accelerate_map(name, cluster), method="accelerate-sequential")
    rows.append(row("Accelerate sequential", whole, cluster, p, sim_cluster=single))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(SETTINGS))
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out = {"budget": args.budget, "settings": []}
    for name in args.models.split(","):
        for cluster_name in SETTINGS[name]:
            rows = setting(name, cluster_name, args.budget)
            out["settings"].append({"model": name, "cluster": cluster_name, "rows": rows})
            print(f"\n### {name} on {cluster_name}\n")
            print("| placement | step (s) | fits | peak GiB per GPU |")
            print("|---|---:|---|---|")
            for r in rows:
                if r.get("detail"):
                    continue
                if "error" in r:
                    print(f"| {r['placement']} | — | no | {r['error'][:80]} |")
                else:
                    sched = f", {r['schedule']}" if r.get("schedule") else ""
                    print(f"| {r['placement']}{sched} | {r['step_s']:.3f} | {'yes' if r['fits'] else 'no'} | "
                          f"{' / '.join(f'{x:.1f}' for x in r['peak_gib'])} (of {r['capacity_gib']:.0f}) |")
            sys.stdout.flush()
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
