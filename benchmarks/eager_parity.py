"""compile against eager PyTorch on this machine, for three user models (autoplace.bench.eager_models).

    .venv/bin/python benchmarks/eager_parity.py [--models llama,vit,cnn] [--rounds 15] [--steps 5]
        [--json docs/results/eager/parity.json]
    .venv/bin/python benchmarks/eager_parity.py --micro vit [--json docs/results/eager/micro.json]
    .venv/bin/python benchmarks/eager_parity.py --replicas [--json docs/results/eager/replicas.json]

Per model, in one process and interleaved round by round (each round: a warm call, then ``--steps``
timed calls of each contender; the table gives the median round and the rounds' range, in ms per step):

- ``eager``: the model's own forward, backward and optimizer step (what the user runs without autoplace);
- ``compile``: ``autoplace.compile`` with its defaults (``auto`` on ``localhost``, measured before it
  commits: the runtime it chose and why are printed);
- ``one device``: ``compile(method="single-cpu")``: the placement on one device, run in this process;
- ``split``: ``auto``'s placement forced onto the workers (``verify=False``): what the default would run
  without its measurement, per ``step()`` call, beside ``autoplace measure``'s step for the same placement
  (the workers' own step, without feeding the batch and reading the loss).

``--overhead`` compares, at one intra-op thread (what a worker has), eager PyTorch's step with
``autoplace measure``'s step of the whole step on one worker (``single-cpu``), run as compiled segments
(the default) and op by op (``AUTOPLACE_INTERPRET=1``), and the same runtime run in this process (no
other process, no pinning): what a worker's execution costs beyond the ops themselves (medians of 5
alternating rounds of 10 timed steps each).

``--replicas`` races eager PyTorch against ``compile(method="data-parallel")`` on ``localhost``: a replica per
CPU worker on the ``torch.distributed`` runtime (gloo), each on its share of the batch, gradients all-reduced
in DDP's buckets, per ``step()`` call; beside the simulated steps of those replicas and of one device on the
same (estimated) cluster.

``--micro MODEL`` times ``compile(micro_batches="auto")`` against ``compile(micro_batches=1)`` (no cache,
no calibration, both with ``auto``), the progress lines written to a log (kept in the JSON), and prints
what each count simulated.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from _common import print_table

import autoplace
from autoplace.bench.eager_models import MODELS, make
from autoplace.runtime.verdict import race
from autoplace.sim import simulate


def _eager(name: str):
    model, x, loss_fn, opt, y, _ = make(name)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def parity(name: str, rounds: int, steps: int) -> dict:
    model, x, loss_fn, opt, y, _ = make(name)
    t = time.perf_counter()
    m, o = copy.deepcopy((model, opt))
    default = autoplace.compile(m, x, loss_fn, o, targets=y, cache=False, progress=False)
    compile_s = time.perf_counter() - t
    one = autoplace.compile(model, x, loss_fn, opt, targets=y, method="single-cpu", cache=False, progress=False)
    verdict = default.verdict.to_dict() if default.verdict else None
    forced = None
    if default.verdict is not None or default.runtime != "eager":
        # the searched placement, run on the workers whatever it measures
        forced = autoplace.compile(model, x, loss_fn, opt, targets=y, cache=False, progress=False, verify=False)
    contenders = {"eager": _eager(name), "compile": lambda: default(x, y), "one device": lambda: one(x, y)}
    if forced is not None and forced.runtime != "eager":
        contenders["split"] = lambda: forced(x, y)
    times = race(contenders, rounds=rounds, steps=steps)
    row = {"model": name, "ops": default.graph.n_ops, "compile_s": compile_s, "runtime": default.runtime,
           "report": default.report(), "verdict": verdict,
           "ms": {k: [v * 1e3 for v in vs] for k, vs in times.items()}}
    if "split" in contenders:
        from autoplace.runtime import measure

        r = measure(forced.run_graph, forced.cluster, forced.placement, steps=steps + 1)
        row["split_measure_ms"] = r.step_time * 1e3
        row["split_devices"] = dict(sorted(forced.placement.counts().items()))
        forced.close()
    default.close()
    one.close()
    return row


def replicas(name: str, rounds: int, steps: int) -> dict:
    from autoplace.cluster import get_cluster
    from autoplace.placers import place

    model, x, loss_fn, opt, y, _ = make(name)
    here = get_cluster("localhost")
    cpus = here.devices_of_kind("cpu")
    cluster = here.without([d.name for i, d in enumerate(here.devices) if i not in cpus])   # a replica per CPU
    t = time.perf_counter()
    dp = autoplace.compile(model, x, loss_fn, opt, targets=y, cluster=cluster, method="data-parallel", cache=False,
                           progress=False)
    compile_s = time.perf_counter() - t
    times = race({"eager": _eager(name), "data-parallel": lambda: dp(x, y)}, rounds=rounds, steps=steps)
    one = place(dp.graph, cluster, "single-cpu")
    row = {"model": name, "ops": dp.graph.n_ops, "replicas": dp.replicas, "runtime": dp.runtime,
           "replicated_ops": dp.run_graph.n_ops, "compile_s": compile_s,
           "buckets": dp.placement.meta["strategy"]["buckets"],
           "simulated_ms": {"data-parallel": simulate(dp.run_graph, dp.cluster, dp.placement).step_time * 1e3,
                            "one device": simulate(dp.graph, cluster, one).step_time * 1e3},
           "ms": {k: [v * 1e3 for v in vs] for k, vs in times.items()}}
    dp.close()
    return row


def micro(name: str) -> dict:
    model, x, loss_fn, opt, y, _ = make(name)
    out = {"model": name}
    for m in (1, "auto", "chosen"):
        if m == "chosen":                       # a fixed-count compile at the count "auto" chose
            m = out["chosen"]
            if m == 1:
                break
        log = io.StringIO()
        err, sys.stderr = sys.stderr, log
        try:
            t = time.perf_counter()
            mm, oo = copy.deepcopy((model, opt))
            step = autoplace.compile(mm, x, loss_fn, oo, targets=y, cache=False, micro_batches=m, verify=False,
                                     calibrate=False)
            out[f"compile_s[{m}]"] = time.perf_counter() - t
        finally:
            sys.stderr = err
        out[f"log[{m}]"] = log.getvalue().splitlines()
        out[f"ops[{m}]"] = step.graph.n_ops
        out[f"simulated_s[{m}]"] = simulate(step.graph, step.cluster, step.placement).step_time
        out[f"method[{m}]"] = step.placement.method
        if m == "auto":
            out["chosen"] = step.micro_batches
            out["counts"] = step.micro_batch_choice
            out["setup_seconds"] = step.setup_seconds
        step.close()
    out["ratio"] = out["compile_s[auto]"] / out["compile_s[1]"]
    out["ratio_chosen"] = out["compile_s[auto]"] / out[f"compile_s[{out['chosen']}]"]
    return out


def overhead(name: str, rounds: int = 5) -> dict:
    import os

    from autoplace.capture import capture_training_step
    from autoplace.cluster import get_cluster
    from autoplace.placers import place
    from autoplace.runtime import measure
    from autoplace.runtime.program import Program
    from autoplace.runtime.shm.worker import standalone

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, x, loss_fn, opt, y, _ = make(name)
        graph = capture_training_step(model, x, loss_fn, opt, targets=y)
        step = _eager(name)
        cluster = get_cluster("localhost")
        placement = place(graph, cluster, "single-cpu")
        ms: dict[str, list[float]] = {"eager": [], "compiled": [], "op by op": [], "compiled, here": [],
                                      "op by op, here": []}
        program = Program(graph)
        here = {"compiled, here": standalone(program), "op by op, here": standalone(program, compiled=False)}
        k = 0
        for _ in range(rounds):                     # alternating, a warm step first each time
            step()
            t = time.perf_counter()
            for _ in range(10):
                step()
            ms["eager"].append((time.perf_counter() - t) / 10 * 1e3)
            for how, rt in here.items():            # the same runtime in this process: no other process
                rt.step(k)
                t = time.perf_counter()
                for _ in range(10):
                    rt.step(k + 1)
                    k += 1
                ms[how].append((time.perf_counter() - t) / 10 * 1e3)
                k += 1
            for how in ("compiled", "op by op"):    # the workers read AUTOPLACE_INTERPRET when they start
                os.environ["AUTOPLACE_INTERPRET"] = "1" if how == "op by op" else "0"
                try:
                    ms[how].append(measure(graph, cluster, placement, steps=11).step_time * 1e3)
                finally:
                    os.environ.pop("AUTOPLACE_INTERPRET")
    finally:
        torch.set_num_threads(threads)
    return {"model": name, "ops": graph.n_ops, "ms": ms}


def _fmt(ms: list[float]) -> str:
    return f"{statistics.median(ms):.1f} ({min(ms):.1f}-{max(ms):.1f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--micro", metavar="MODEL", help="time micro_batches='auto' on MODEL instead")
    ap.add_argument("--overhead", action="store_true", help="the workers' per-op cost against eager, one thread")
    ap.add_argument("--replicas", action="store_true", help="eager against data-parallel replicas on the CPUs")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    if args.overhead:
        results = [overhead(n) for n in args.models.split(",")]
        rows = []
        for r in results:
            ms = r["ms"]
            eager = statistics.median(ms["eager"])
            rows.append([r["model"], str(r["ops"]), _fmt(ms["eager"])]
                        + [x for how in ("compiled", "op by op", "compiled, here", "op by op, here")
                           for x in (_fmt(ms[how]), f"{statistics.median(ms[how]) / eager:.2f}")])
        print_table(["model", "ops", "eager, 1 thread (ms)", "worker, compiled (ms)", "/ eager",
                     "worker, op by op (ms)", "/ eager", "here, compiled (ms)", "/ eager", "here, op by op (ms)",
                     "/ eager"], rows)
    elif args.replicas:
        results = [replicas(n, args.rounds, args.steps) for n in args.models.split(",")]
        rows = []
        for r in results:
            ms, sim = r["ms"], r["simulated_ms"]
            eager = statistics.median(ms["eager"])
            rows.append([r["model"], f"{r['ops']} / {r['replicated_ops']}", str(r["buckets"]), _fmt(ms["eager"]),
                         _fmt(ms["data-parallel"]), f"{statistics.median(ms['data-parallel']) / eager:.2f}",
                         f"{sim['one device']:.1f}", f"{sim['data-parallel']:.1f}",
                         f"{sim['data-parallel'] / sim['one device']:.2f}"])
        print_table(["model", "ops (step / replicated)", "buckets", "eager ms", "data-parallel ms", "/eager",
                     "simulated one device ms", "simulated data-parallel ms", "/one device"], rows)
    elif args.micro:
        res = micro(args.micro)
        for line in res["log[auto]"]:
            print("  log:", line)
        fixed = res.get(f"compile_s[{res['chosen']}]", res["compile_s[1]"])
        print(f"{args.micro}: compile micro_batches=1 {res['compile_s[1]']:.1f} s ({res['ops[1]']} ops), "
              f"micro_batches='auto' {res['compile_s[auto]']:.1f} s ({res['ratio']:.2f}x), chose M={res['chosen']}; "
              f"micro_batches={res['chosen']} {fixed:.1f} s "
              f"(auto: {res['ratio_chosen']:.2f}x); simulated steps: "
              + ", ".join(f"M={k[12:-1]} {v * 1e3:.1f} ms ({res['method[' + k[12:]]})"
                          for k, v in res.items() if k.startswith("simulated_s[")))
        results = res
    else:
        results = []
        for name in args.models.split(","):
            row = parity(name, args.rounds, args.steps)
            results.append(row)
            print(row["report"])
        rows = []
        for r in results:
            ms = r["ms"]
            eager = statistics.median(ms["eager"])
            rows.append([r["model"], str(r["ops"]), r["runtime"], _fmt(ms["eager"]), _fmt(ms["compile"]),
                         f"{statistics.median(ms['compile']) / eager:.2f}", _fmt(ms["one device"]),
                         f"{statistics.median(ms['one device']) / eager:.2f}",
                         _fmt(ms["split"]) if "split" in ms else "-",
                         f"{r['split_measure_ms']:.1f}" if "split_measure_ms" in r else "-"])
        print_table(["model", "ops", "compile runs", "eager ms", "compile ms", "/eager", "one device ms", "/eager",
                     "split step() ms", "split measure ms"], rows)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
