"""Three models of our own under the simulator that runs like the runtime, before and after.

    .venv/bin/python benchmarks/runtime_models.py [--before SRC] [--budget 10] [--out DIR] [--json]
    .venv/bin/python benchmarks/runtime_models.py --from-json docs/results/runtime/models.json   # its table again

A ResNet-style CNN with BatchNorm (SGD with momentum), a GPT-style decoder with a tied head (Adam at
PyTorch's default, foreach on GPUs) and a U-Net (Adam), none of them in the zoo or the examples
(``autoplace.bench.user_models`` at its default sizes), are captured here and written to ``DIR`` (graph
files). On ``p100x2`` and ``k80x4`` each gets ``single-gpu`` and ``auto`` (budget ``--budget``),
simulated: the step, ``auto``'s range over the cost model's uncertainty and its worst-case speedup over one
GPU (docs/algorithms.md, Uncertainty), the share of the step that is launches and per-op overhead, and the
ops on each device.

``--before SRC`` also runs the same graph files through the autoplace source tree ``SRC`` (a checkout
of an earlier commit, its C simulator built: ``git worktree add /tmp/before c1831c7 && cd /tmp/before &&
python setup.py build_ext --inplace``) with ``autoplace place``, in a subprocess: the figures of the
simulator as it was. Its "overhead share" is the per-op overhead it charged in series with each op.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import print_table

from autoplace.bench import user_models

CLUSTERS = ("p100x2", "k80x4")


def _optimizer(name: str, model):
    """SGD with momentum for the CNN, Adam (PyTorch's defaults but the rate) for the others."""
    import torch

    if name == "resnet":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return torch.optim.Adam(model.parameters(), lr=3e-4 if name == "gpt" else 1e-3)


def capture_all(out: Path) -> list[Path]:
    from autoplace.capture import capture_training_step
    from autoplace.formats import save_graph

    paths = []
    for key, build in user_models.MODELS.items():
        name, model, x, loss, y = build()
        g = capture_training_step(model, x, loss, _optimizer(key, model), targets=y, name=name)
        path = out / f"{name}.json.gz"
        save_graph(g, path)
        paths.append(path)
        print(f"{name}: {g.n_ops} ops ({sum(op.phase == 'update' for op in g.ops)} update ops, "
              f"{len(g.launch_groups)} launch groups) -> {path}", file=sys.stderr)
    return paths


def after(path: Path, cluster_name: str, budget: float) -> dict:
    from autoplace.cluster import get_cluster
    from autoplace.formats import load_graph
    from autoplace.placers import place
    from autoplace.placers.auto import uncertainty
    from autoplace.sim import simulate

    g, c = load_graph(path), get_cluster(cluster_name)
    one = place(g, c, "single-gpu")
    auto = place(g, c, "auto", seed=0, budget=budget)
    rows = {}
    for label, p in (("single-gpu", one), ("auto", auto)):
        r = simulate(g, c, p)
        rows[label] = {"step_s": r.step_time, "overhead_share": float(r.host_time.sum() / r.step_time),
                       "ops_per_device": {d: int(n) for d, n in zip(c.device_names,
                                                                     np.bincount(p.to_array(g, c),
                                                                                 minlength=c.n_devices))}}
    rng_one, rng_auto = uncertainty(g, c, [one, auto], one)
    rows["auto"].update(rng_auto.to_dict())
    steps_auto = np.array(auto.meta["robust"]["step_s"])
    from autoplace.robust import RobustSimulator

    steps_one = RobustSimulator(g, c).steps(one.to_array(g, c)[None, :])[:, 0]
    rows["auto"]["worst_case_speedup"] = float((steps_one / steps_auto).min())
    rows["single-gpu"].update(rng_one.to_dict())
    return rows


def before(src: Path, path: Path, cluster_name: str, budget: float) -> dict:
    """The same placements and figures from the autoplace tree ``src``, through its command line."""
    env = {**os.environ, "PYTHONPATH": str(src / "src")}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("single-gpu", "auto"):
            out = Path(tmp) / f"{method}.json"
            cmd = [sys.executable, "-m", "autoplace.cli", "place", str(path), "--cluster", cluster_name,
                   "--method", method, "--seed", "0", "--budget", str(budget), "-o", str(out), "--json"]
            res = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
            assignment = json.loads(out.read_text())["assignment"]
            counts: dict[str, int] = {}
            for d in assignment.values():
                counts[d] = counts.get(d, 0) + 1
            code = ("import json, sys; import numpy as np; from autoplace.formats import load_graph; "
                    "from autoplace.cluster import get_cluster; from autoplace.cost import op_time_matrix; "
                    "from autoplace.formats import load_placement; "
                    f"g = load_graph({str(path)!r}); c = get_cluster({cluster_name!r}); "
                    f"d = load_placement({str(out)!r}).to_array(g, c); t = op_time_matrix(g, c); "
                    "print(float(np.minimum(t[np.arange(len(d)), d], c.op_overhead[d]).sum()))")
            overhead = float(subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                                            text=True).stdout)
            rows[method] = {"step_s": res["step_time_s"], "overhead_share": overhead / res["step_time_s"],
                            "ops_per_device": counts}
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, help="an earlier autoplace source tree to run the same graphs through")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=None, help="folder for the captured graphs (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--from-json", type=Path, help="print the table of a saved --json run")
    args = ap.parse_args(argv)
    if args.from_json:
        table(json.loads(args.from_json.read_text()))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        results = []
        for path in capture_all(out):
            for cluster_name in CLUSTERS:
                row = {"model": path.name.split(".")[0], "cluster": cluster_name,
                       "after": after(path, cluster_name, args.budget)}
                if args.before:
                    row["before"] = before(args.before, path, cluster_name, args.budget)
                results.append(row)
                print(f"{row['model']} on {cluster_name} done", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    table(results)
    return 0


def table(results: list[dict]) -> None:
    ms = lambda s: f"{s * 1e3:.2f}"  # noqa: E731
    rows = []
    for row in results:
        a, b = row["after"], row.get("before")
        one = (f"{ms(b['single-gpu']['step_s'])} -> {ms(a['single-gpu']['step_s'])}" if b
               else ms(a["single-gpu"]["step_s"]))
        auto = f"{ms(b['auto']['step_s'])} -> {ms(a['auto']['step_s'])}" if b else ms(a["auto"]["step_s"])
        lo, hi = a["auto"]["step_range_s"]
        share = ((f"{b['single-gpu']['overhead_share']:.0%} -> " if b else "")
                 + f"{a['single-gpu']['overhead_share']:.0%}")
        fmt = lambda c: ", ".join(f"{d} {n}" for d, n in c.items() if n)  # noqa: E731
        devs = (f"{fmt(b['auto']['ops_per_device'])} -> " if b else "") + fmt(a["auto"]["ops_per_device"])
        rows.append([row["model"], row["cluster"], one, auto, f"{ms(lo)}-{ms(hi)}",
                     f"{a['auto']['worst_case_speedup']:.2f}", share, devs])
    print_table(["model", "cluster", "single-GPU step, ms (before -> after)", "auto step, ms (before -> after)",
                 "auto range, ms", "worst-case speedup", "overhead share, single GPU (before -> after)",
                 "auto: ops per device (before -> after)"], rows, "llrrrrrl")


if __name__ == "__main__":
    sys.exit(main())
