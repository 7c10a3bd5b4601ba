"""Helpers of benchmarks/gpu_check.sh, the one-shot check of a CPU + GPU machine (see that script).

    python3 benchmarks/gpu_check.py wheels --dir .whl --target /tmp/site   # carried wheels, where needed
    python3 benchmarks/gpu_check.py env                              # what this machine has
    python3 benchmarks/gpu_check.py base --cpus 4 -o base.json       # localhost: cpu:0..3 and cuda:0
    python3 benchmarks/gpu_check.py split GRAPH -c CLUSTER -o P.json # LSTM layers on the GPU, the rest on cpu:0
    python3 benchmarks/gpu_check.py compile -c CLUSTER --json OUT    # autoplace.compile against eager PyTorch
    python3 benchmarks/gpu_check.py user-models -c CLUSTER --json OUT  # three user models: compile vs eager on CUDA
    python3 benchmarks/gpu_check.py summary OUTDIR                   # one table of what the steps wrote
    python3 benchmarks/gpu_check.py repeats OUTDIR                   # benchmarks/gpu_repeat.sh's runs, per method
    python3 benchmarks/gpu_check.py resimulate OUTDIR                # those runs against this checkout's simulator

Every subcommand prints what it does and lets a traceback through (the shell script logs it whole).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback

from _common import save_json


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def cmd_env(args) -> int:
    import platform

    import numpy
    import torch

    print(f"python {sys.version.split()[0]} ({sys.executable}), numpy {numpy.__version__}, torch {torch.__version__} "
          f"(built for CUDA {torch.version.cuda}), cuda available: {torch.cuda.is_available()}, "
          f"os.cpu_count {os.cpu_count()}, affinity {len(os.sched_getaffinity(0))}, "
          f"{platform.processor() or platform.machine()}")
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        p = torch.cuda.get_device_properties(i)
        print(f"cuda:{i}: {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs, "
              f"capability {p.major}.{p.minor}; tf32 matmul allowed: {torch.backends.cuda.matmul.allow_tf32}")
    import autoplace

    print(f"autoplace {autoplace.__version__} from {autoplace.__file__}")
    from autoplace.sim import BACKEND

    print(f"simulator loop: {'C (built)' if BACKEND == 'c' else 'numba (the C loop is not built)'}")
    bad = 0
    for mod in ("pymetis", "ortools.sat.python.cp_model", "ortools.linear_solver.pywraplp", "pandas",
                "google.protobuf"):
        try:
            m = __import__(mod, fromlist=["_"])
            top = sys.modules[mod.split(".")[0]]
            print(f"import {mod}: ok ({getattr(top, '__version__', '?')}, {getattr(m, '__file__', '?')})")
        except Exception as e:  # noqa: BLE001
            bad += 1
            print(f"import {mod}: FAILED {type(e).__name__}: {e}")
    return 1 if bad else 0


# ---------------------------------------------------------------------- carried wheels
#: what each carried wheel's distribution must satisfy for the installed one to be kept: (least, below)
_FITS = {"protobuf": ((6, 33, 1), (6, 34)), "pandas": ((2, 0), None), "typing_extensions": ((4, 12), None),
         "immutabledict": ((3, 0), None), "python_dateutil": ((2, 9), None), "six": ((1, 5), None)}


def _vt(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def cmd_wheels(args) -> int:
    """Install the carried wheels into ``--target`` (no index, no dependencies), but those whose package is
    installed already at a version that fits (the wheel's own version, or for a dependency the range
    ortools / pymetis need): a device's own protobuf or pandas is kept where it fits."""
    import glob
    import importlib.metadata as md
    import subprocess

    wheels = sorted(glob.glob(os.path.join(args.dir, "*.whl")))
    if not wheels:
        print(f"no wheels in {args.dir}")
        return 1
    pick = []
    for w in wheels:
        dist, version = os.path.basename(w).split("-")[:2]
        try:
            have = md.version(dist)
        except md.PackageNotFoundError:
            have = None
        lo, hi = _FITS.get(dist, (_vt(version), None))
        fits = have is not None and _vt(have) >= lo and (hi is None or _vt(have) < hi) and \
            (dist in _FITS or _vt(have)[:len(_vt(version))] == _vt(version))
        print(f"{dist}: carried {version}, installed {have or 'none'} -> {'keep installed' if fits else 'install'}"
              f" ({os.path.getsize(w) / 2**20:.1f} MiB)")
        if not fits:
            pick.append(w)
    if not pick:
        return 0
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
           "--upgrade", "--target", args.target, *pick]
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd)


def cmd_base(args) -> int:
    """The localhost preset cut to ``--cpus`` CPU workers and the first GPU (a cluster detect of 16 CPU
    workers and a GPU would measure 272 links)."""
    from autoplace.cluster import get_cluster
    from autoplace.formats import save_cluster

    full = get_cluster("localhost")
    cpus = [d.name for d in full.devices if d.kind == "cpu"][:args.cpus]
    gpus = [d.name for d in full.devices if d.kind == "gpu"][:1]
    keep = set(cpus) | set(gpus)
    cl = full.without([d.name for d in full.devices if d.name not in keep], name="localhost")
    save_cluster(cl, args.output)
    print(f"localhost has {full.n_devices} devices; kept {', '.join(cl.device_names)} -> {args.output}")
    if not gpus:
        print("NOTE: no CUDA device: the GPU steps run on CPU workers only (nothing about the GPU is checked)")
    return 0


def _graph_cluster(graph_path: str, cluster_path: str):
    from autoplace.formats import load_cluster, load_graph

    return load_graph(graph_path), load_cluster(cluster_path)


def cmd_split(args) -> int:
    """A placement over cpu:0 and the GPU (cpu:1 without one): every co-location group whose ops are mostly
    in the LSTM layers (scope ``layers.*``) on the GPU, the embedding, softmax and loss on cpu:0 — tensors
    cross both ways in the forward and backward passes."""
    import numpy as np

    from autoplace.formats import save_placement
    from autoplace.grouping import group_ops
    from autoplace.placement import Placement
    from autoplace.sim import simulate

    graph, cluster = _graph_cluster(args.graph, args.cluster)
    gpus = cluster.devices_of_kind("gpu")
    cpus = cluster.devices_of_kind("cpu")
    other = gpus[0] if gpus else cpus[1]
    groups = group_ops(graph, rules=("colocation",))
    in_layers = np.array([(op.scope or "").startswith(args.scope) for op in graph.ops], dtype=float)
    gid = groups.expand(np.arange(groups.n_groups))
    share = np.bincount(gid, weights=in_layers, minlength=groups.n_groups) / np.maximum(
        np.bincount(gid, minlength=groups.n_groups), 1)
    devs = np.where(share[gid] > 0.5, other, cpus[0])
    p = Placement.from_array(graph, cluster, devs, "split-cpu-gpu")
    r = simulate(graph, cluster, p)
    save_placement(p, args.output, r)
    print(f"split placement: {p.counts()}; simulated step {r.step_time * 1e3:.2f} ms, "
          f"{r.n_transfers} transfers -> {args.output}")
    return 0


# ---------------------------------------------------------------------- autoplace.compile vs eager
def _mlp():
    from torch import nn

    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def _eager(model, data, device: str) -> tuple[list[float], dict, float]:
    import torch

    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    t0 = time.perf_counter()
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    dt = (time.perf_counter() - t0) / len(data)
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}, dt


def _hand_placement(model, x, y, cluster, on_other: set[str] | None, other: str):
    """A placement of the step autoplace.compile captures: ops of the modules in ``on_other`` (and their
    co-location groups) on ``other`` (every op: ``None``), everything else on cpu:0."""
    import numpy as np
    import torch

    from autoplace.capture import capture_training_step
    from autoplace.granularity import with_granularity
    from autoplace.grouping import group_ops
    from autoplace.placement import Placement

    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    graph = with_granularity(capture_training_step(model, x, torch.nn.functional.cross_entropy, opt, targets=y), "op")
    groups = group_ops(graph, rules=("colocation",))
    mine = np.array([on_other is None or (op.scope or "").split(".")[0] in on_other for op in graph.ops], dtype=float)
    gid = groups.expand(np.arange(groups.n_groups))
    share = np.bincount(gid, weights=mine, minlength=groups.n_groups) / np.maximum(
        np.bincount(gid, minlength=groups.n_groups), 1)
    devs = np.where(share[gid] > 0.5, cluster.index(other), cluster.index("cpu:0"))
    return Placement.from_array(graph, cluster, devs,
                                f"hand: modules {sorted(on_other) if on_other else 'all'} on {other}")


def cmd_compile(args) -> int:
    import torch

    import autoplace
    from autoplace.formats import load_cluster

    cluster = load_cluster(args.cluster)
    gpus = [d.name for d in cluster.devices if d.kind == "gpu"]
    other = gpus[0] if gpus else "cpu:1"
    cluster = cluster.without([d for d in cluster.device_names if d not in ("cpu:0", other)], name="compile-check")
    print(f"cluster for compile: {cluster.device_names} (cuda available: {_cuda()})")
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)) for _ in range(args.steps)]
    torch.manual_seed(0)
    start = _mlp()
    x0, y0 = data[0]
    refs = {}
    for dev in ["cpu"] + (["cuda"] if _cuda() else []):
        losses, state, _ = _eager(copy.deepcopy(start), data, dev)
        refs[dev] = (losses, state, _eager(copy.deepcopy(start), data, dev)[2])   # the time: a warm run's
    variants = [(f"{rt}: {label}", mods, rt) for rt in args.runtimes.split(",")
                for label, mods in (("split: 0,2 on " + other, {"0", "2"}), ("split: 4 (head) on " + other, {"4"}),
                                    ("all on " + other, None))]
    out = {"cluster": cluster.device_names, "steps": args.steps,
           "eager": {d: {"losses": r[0], "step_s": r[2]} for d, r in refs.items()}, "variants": []}
    failed = 0
    for label, mods, runtime in variants:
        row: dict = {"variant": label, "runtime": runtime}
        out["variants"].append(row)
        try:
            model = copy.deepcopy(start)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            p = _hand_placement(copy.deepcopy(start), x0, y0, cluster, mods, other)
            row["placement"] = p.counts()
            t0 = time.perf_counter()
            with autoplace.compile(model, x0, torch.nn.functional.cross_entropy, opt, targets=y0,
                                   cluster=cluster, placement=p, timeout=60, runtime=runtime) as step:
                row["setup_s"] = time.perf_counter() - t0
                row["param_devices"] = step.devices
                losses, times = [], []
                for x, y in data:
                    t1 = time.perf_counter()
                    losses.append(float(step(x, y)))
                    times.append(time.perf_counter() - t1)
                state = step.state_dict()
                opt_state = step.optimizer_state()
            row["losses"] = losses
            row["step_s"] = times
            for dev, (ref_losses, ref_state, _) in refs.items():
                row[f"max_abs_loss_diff_vs_eager_{dev}"] = max(abs(a - b) for a, b in zip(losses, ref_losses))
                row[f"max_abs_weight_diff_vs_eager_{dev}"] = max(float((state[k] - ref_state[k]).abs().max())
                                                                 for k in ref_state)
            row["momentum_buffers"] = sorted(opt_state)
            ok = all(row[f"max_abs_weight_diff_vs_eager_{d}"] < 1e-4 and row[f"max_abs_loss_diff_vs_eager_{d}"] < 1e-4
                     for d in refs)
            row["ok"] = ok
            failed += not ok
            print(f"{label}: placement {row['placement']}; losses {[round(v, 6) for v in losses]}; "
                  + "; ".join(f"vs eager {d}: loss diff {row[f'max_abs_loss_diff_vs_eager_{d}']:.2e}, weight diff "
                              f"{row[f'max_abs_weight_diff_vs_eager_{d}']:.2e}" for d in refs)
                  + f"; placed step {1e3 * sum(times[1:]) / max(1, len(times) - 1):.2f} ms"
                  + ("" if ok else "  <-- MISMATCH"))
        except Exception as e:  # noqa: BLE001 - the next variant still runs
            failed += 1
            row["ok"] = False
            row["error"] = f"{type(e).__name__}: {e}"
            row["traceback"] = traceback.format_exc()
            print(f"{label}: FAILED")
            traceback.print_exc()
    for d, r in refs.items():
        print(f"eager {d}: losses {[round(v, 6) for v in r[0]]}, {r[2] * 1e3:.2f} ms per step")
    if args.json:
        save_json(args.json, out)
    return 1 if failed else 0


def cmd_user_models(args) -> int:
    """autoplace.bench.eager_models's three models (a Llama-style LM, a ViT, a CNN) on CUDA: eager PyTorch, the
    default ``compile`` on the cluster (measured before it commits) and ``compile(method="single-gpu")``,
    interleaved rounds of timed steps each (``autoplace.runtime.verdict.race``), with what compile chose."""
    import torch

    import autoplace
    from autoplace.bench.eager_models import MODELS, make
    from autoplace.runtime.verdict import race

    out = []
    dev = "cuda:0" if _cuda() else "cpu"
    for name in args.models.split(",") if args.models else MODELS:
        row: dict = {"model": name, "device": dev}
        try:
            model, x, loss_fn, opt, y, _ = make(name, _scale_for(dev))
            m, o = copy.deepcopy((model, opt))
            m.to(dev)
            o.load_state_dict(o.state_dict())
            xd, yd = x.to(dev), y.to(dev)

            def eager(m=m, o=o, xd=xd, yd=yd, loss_fn=loss_fn):
                o.zero_grad(set_to_none=True)
                loss = loss_fn(m(xd), yd)
                loss.backward()
                o.step()
                return loss.detach().cpu()

            t = time.perf_counter()
            default = autoplace.compile(model, x, loss_fn, opt, targets=y, cluster=args.cluster, progress=False)
            row["compile_s"] = time.perf_counter() - t
            single = "single-gpu" if dev.startswith("cuda") else "single-cpu"
            one = autoplace.compile(model, x, loss_fn, opt, targets=y, cluster=args.cluster, method=single,
                                    progress=False)
            times = race({"eager": eager, "compile": lambda: default(x, y), single: lambda: one(x, y)},
                         rounds=args.rounds, steps=args.steps)
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            row.update(ms={k: [v * 1e3 for v in vs] for k, vs in times.items()}, report=default.report(),
                       runtime=default.runtime, single_gpu_runtime=one.runtime)
            print(default.report())
            default.close()
            one.close()
        except Exception:  # noqa: BLE001 - logged whole, the next model goes on
            row["error"] = traceback.format_exc()
            print(row["error"], file=sys.stderr)
        out.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "report"}))
    if args.json:
        save_json(args.json, out)
    return 0


def _scale_for(device: str) -> str:
    """The scale of the user models: the benchmark's on a GPU, the test-sized elsewhere (a fallback run)."""
    return "bench" if device.startswith("cuda") else "small"


def cmd_runtimes(args) -> int:
    """One placement on both runtimes, alternating for ``--rounds`` rounds (median), each against the
    simulator with the cluster detected on that runtime."""
    import numpy as np

    from autoplace.formats import cluster_to_dict, load_cluster, load_graph, load_placement
    from autoplace.runtime import make_pool
    from autoplace.sim import simulate

    graph, placement = load_graph(args.graph), load_placement(args.placement)
    clusters = {"shm": load_cluster(args.shm) if os.path.exists(args.shm) else None,
                "distributed": load_cluster(args.distributed) if os.path.exists(args.distributed) else None}
    out: dict = {"placement": placement.method, "steps": args.steps, "rounds": args.rounds, "runtimes": {}}
    pools = {rt: make_pool(c, runtime=rt, timeout=60) for rt, c in clusters.items() if c is not None}
    try:
        runs: dict = {rt: [] for rt in pools}
        for rnd in range(args.rounds):
            for rt in (list(pools) if rnd % 2 == 0 else list(pools)[::-1]):
                r = pools[rt].run(graph, placement, steps=args.steps)
                runs[rt].append(r.step_time if r.ok else None)
                if not r.ok:
                    print(f"{rt}: failing: {r.error}")
        for rt, times in runs.items():
            sim = simulate(graph, clusters[rt], placement)
            ok = [t for t in times if t is not None]
            med = float(np.median(ok)) if ok else None
            out["runtimes"][rt] = {"measured_s": med, "rounds_s": times, "simulated_s": sim.step_time,
                                   "measured_over_simulated": med / sim.step_time if med else None,
                                   "cluster": cluster_to_dict(clusters[rt])}
            print(f"{rt:12s} simulated {sim.step_time * 1e3:8.2f} ms  measured "
                  f"{(med or float('nan')) * 1e3:8.2f} ms  ratio {(med or float('nan')) / sim.step_time:.2f}  "
                  f"rounds {[round(t * 1e3, 2) if t else None for t in times]}")
    finally:
        for p in pools.values():
            p.close()
    if args.json:
        save_json(args.json, out)
    return 0


# ---------------------------------------------------------------------- summary
def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # noqa: BLE001
        return {"_error": f"{type(e).__name__}: {e}"}


def cmd_summary(args) -> int:
    d = args.outdir
    sim = _load(os.path.join(d, "compare_simulated.json"))
    mea = _load(os.path.join(d, "compare_measured.json"))
    rows: dict[str, dict] = {}
    for key, res in (("sim", sim), ("meas", mea)):
        for r in res.get("rows", []):
            e = rows.setdefault(r["method"], {})
            e[key] = r.get("step_time_s") if r.get("ok") else None
            e[key + "_err"] = r.get("error")
            e[key + "_busy"] = {x["name"]: round(x["busy_s"] * 1e3, 2) for x in r.get("devices", []) if x.get("busy_s")}
    print(f"{'method':<14}{'simulated ms':>14}{'measured ms':>14}{'meas/sim':>10}  "
          "busy ms per device (simulated | measured)")
    for m, e in rows.items():
        s, t = e.get("sim"), e.get("meas")
        ratio = f"{t / s:10.2f}" if s and t else f"{'-':>10}"
        fs = f"{s * 1e3:14.2f}" if s else f"{'-':>14}"
        ft = f"{t * 1e3:14.2f}" if t else f"{'-':>14}"
        print(f"{m:<14}{fs}{ft}{ratio}  {e.get('sim_busy')} | {e.get('meas_busy')}")
        for k in ("sim_err", "meas_err"):
            if e.get(k):
                print(f"    {k}: {e[k]}")
    for name in ("compare_simulated.json", "compare_measured.json"):
        if "_error" in _load(os.path.join(d, name)):
            print(f"{name}: {_load(os.path.join(d, name))['_error']}")
    rts = _load(os.path.join(d, "runtimes.json"))
    for rt, r in rts.get("runtimes", {}).items():
        print(f"split placement on {rt}: simulated {r.get('simulated_s')}, measured {r.get('measured_s')} "
              f"(rounds {r.get('rounds_s')})")
    c = _load(os.path.join(d, "compile_check.json"))
    for v in c.get("variants", []):
        print(f"compile {v.get('variant')}: ok={v.get('ok')} "
              + ", ".join(f"{k}={v[k]:.2e}" for k in v if k.startswith("max_abs"))
              + (f" error={v.get('error')}" if v.get("error") else ""))
    return 0


def cmd_repeats(args) -> int:
    """Per method: the simulated step and every measured run's step (benchmarks/gpu_repeat.sh), their
    median and range."""
    import glob
    import statistics

    sim = {r["method"]: r.get("step_time_s") for r in _load(os.path.join(args.outdir, "compare_simulated.json"))
           .get("rows", [])}
    runs: dict[str, list] = {}
    for path in sorted(glob.glob(os.path.join(args.outdir, "compare_measured_*.json"))):
        for r in _load(path).get("rows", []):
            runs.setdefault(r["method"], []).append(r.get("step_time_s"))
    print(f"{'method':<12}{'simulated ms':>14}{'measured ms, median':>21}{'min':>8}{'max':>8}{'median/sim':>12}  runs")
    for m, steps in runs.items():
        ok = [x for x in steps if x]
        med = statistics.median(ok) if ok else None
        s = sim.get(m)
        print(f"{m:<12}{s * 1e3 if s else float('nan'):14.2f}{med * 1e3 if med else float('nan'):21.2f}"
              f"{min(ok) * 1e3 if ok else float('nan'):8.2f}{max(ok) * 1e3 if ok else float('nan'):8.2f}"
              f"{med / s if med and s else float('nan'):12.2f}  {len(ok)}/{len(steps)}")
    return 0


def cmd_resimulate(args) -> int:
    """The saved run re-simulated by this checkout (no GPU needed): per method, the measured median over
    the runs, the step simulated now with its range over the cost model's uncertainty, and their ratio;
    then whether the simulator's first choice measured at least as fast as one GPU in the median. Needs
    what benchmarks/gpu_repeat.sh saves: the profiled graph, the cluster, each method's placement."""
    import glob
    import statistics

    from autoplace.formats import load_cluster, load_graph, load_placement
    from autoplace.placers.auto import uncertainty

    graph = load_graph(os.path.join(args.outdir, "lm.profiled.json.gz"))
    cluster = load_cluster(os.path.join(args.outdir, "cluster.json"))
    runs: dict[str, list] = {}
    for path in sorted(glob.glob(os.path.join(args.outdir, "compare_measured_*.json"))):
        for r in _load(path).get("rows", []):
            if r.get("step_time_s"):
                runs.setdefault(r["method"], []).append(r["step_time_s"])
    placements = {os.path.basename(p)[:-5]: load_placement(p)
                  for p in sorted(glob.glob(os.path.join(args.outdir, "placements", "*.json")))}
    one = placements.get("single-gpu")
    names = list(placements)
    ranges = uncertainty(graph, cluster, [placements[m] for m in names], one)
    print(f"{'method':<12}{'measured ms (median)':>22}{'simulated ms':>14}{'range ms':>18}{'measured/sim':>14}")
    medians = {m: statistics.median(v) for m, v in runs.items() if v}
    for m, rng in zip(names, ranges):
        med = medians.get(m)
        print(f"{m:<12}{med * 1e3 if med else float('nan'):22.2f}{rng.nominal * 1e3:14.2f}"
              f"{f'{rng.low * 1e3:.1f}-{rng.high * 1e3:.1f}':>18}{med / rng.nominal if med else float('nan'):14.2f}")
    first = min(zip(names, ranges), key=lambda x: x[1].nominal)[0]
    if first in medians and "single-gpu" in medians:
        verdict = "at least as fast as" if medians[first] <= medians["single-gpu"] else "slower than"
        print(f"the simulator's first choice, {first}, measured {verdict} one GPU in the median "
              f"({medians[first] * 1e3:.2f} vs {medians['single-gpu'] * 1e3:.2f} ms)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env")
    p = sub.add_parser("wheels")
    p.add_argument("--dir", default=".whl")
    p.add_argument("--target", default="/tmp/site")
    p = sub.add_parser("base")
    p.add_argument("--cpus", type=int, default=4)
    p.add_argument("-o", "--output", required=True)
    p = sub.add_parser("split")
    p.add_argument("graph")
    p.add_argument("-c", "--cluster", required=True)
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--scope", default="layers", help="ops whose module path starts with this go to the GPU")
    p = sub.add_parser("compile")
    p.add_argument("-c", "--cluster", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--runtimes", default="shm,distributed")
    p.add_argument("--json")
    p = sub.add_parser("user-models")
    p.add_argument("-c", "--cluster", required=True)
    p.add_argument("--models", default="")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--json")
    p = sub.add_parser("runtimes")
    p.add_argument("graph")
    p.add_argument("-p", "--placement", required=True)
    p.add_argument("--shm", required=True, help="cluster detected on the shared-memory runtime")
    p.add_argument("--distributed", required=True, help="cluster detected on the distributed runtime")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json")
    p = sub.add_parser("repeats")
    p.add_argument("outdir")
    p = sub.add_parser("summary")
    p.add_argument("outdir")
    p = sub.add_parser("resimulate")
    p.add_argument("outdir")
    args = ap.parse_args(argv)
    return {"env": cmd_env, "wheels": cmd_wheels, "base": cmd_base, "split": cmd_split, "compile": cmd_compile,
            "runtimes": cmd_runtimes, "user-models": cmd_user_models,
            "summary": cmd_summary, "repeats": cmd_repeats, "resimulate": cmd_resimulate}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
