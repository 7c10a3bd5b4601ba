"""The verbs that run on this machine's devices: ``measure``, ``profile``, ``ranks``, ``cluster detect``."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

import numpy as np
from rich.console import Console

from autoplace.cli.args import (
    add_graph_args,
    add_runtime_arg,
    nonnegative_int,
    positive_int,
    positive_seconds,
    seed_arg,
)
from autoplace.cli.common import (
    bold,
    check_json_output,
    check_output,
    console,
    exit_code,
    note_estimates,
    note_other_cluster,
    parse_params,
    placement_or_map,
    print_json,
    written,
)
from autoplace.cli.simulate import sim_table
from autoplace.comparison import failure_reason
from autoplace.formats import cluster_to_dict, save_cluster, save_graph
from autoplace.replicas import strategy_graph
from autoplace.resolve import resolve_cluster, resolve_graph
from autoplace.runtime import measure
from autoplace.runtime.detect import detect_cluster, speed_warnings
from autoplace.runtime.dist.control import hosts_of, rank_order
from autoplace.runtime.dist.rendezvous import ranks_secret
from autoplace.runtime.dist.serve import torchrun_command
from autoplace.runtime.pool import DEFAULT_TIMEOUT_S
from autoplace.runtime.profile import profile_graph
from autoplace.sim import simulate
from autoplace.units import fmt_bytes, fmt_flops, fmt_rate, fmt_time


def cmd_ranks(args: argparse.Namespace) -> int:
    """Start this host's ranks of a cluster that spans hosts (torchrun), or print the command."""


    cluster = resolve_cluster(args.cluster)
    secret_file = None if args.secret_file is None else os.path.abspath(args.secret_file)
    cmd = torchrun_command(cluster, os.path.abspath(args.cluster), args.host, timeout=args.timeout,
                           max_restarts=args.max_restarts, idle=args.idle, secret_file=secret_file)
    _secret, path, created = ranks_secret(secret_file)
    if created:
        print(f"created the ranks' secret {path} (mode 600): copy it to every host of {cluster.name!r} and to "
              "the driver's machine (the same path, or name it with $AUTOPLACE_RANKS_SECRET_FILE)", file=sys.stderr)
    if args.json:
        hosts = hosts_of(cluster)
        order = rank_order(cluster)
        print_json({"host": args.host, "hosts": hosts, "node_rank": hosts.index(args.host),
                     "ranks": {r: cluster.devices[k].name for r, k in enumerate(order)},
                     "command": cmd})
        return 0
    if args.print:
        print(shlex.join(cmd))
        return 0
    print(f"starting the ranks of host {args.host!r}: {shlex.join(cmd)}", file=sys.stderr)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 130


def cmd_measure(args: argparse.Namespace) -> int:

    graph = resolve_graph(args.graph, parse_params(args.param))
    cluster = resolve_cluster(args.cluster)
    placement = placement_or_map(args.placement, graph, cluster)
    graph = strategy_graph(graph, placement)        # a strategy's placement: the replicated step it runs
    placement.to_array(graph, cluster)  # validate before starting workers (the pool decodes the graph first)
    note_other_cluster(placement, cluster)
    predicted = simulate(graph, cluster, placement)
    result = measure(graph, cluster, placement, steps=args.steps, timeout=args.timeout, seed=args.data_seed,
                     runtime=args.runtime)
    note_estimates(cluster)
    if args.json:
        print_json({"graph": graph.name, "cluster": cluster.name, "method": placement.method,
                     "simulated_step_time_s": predicted.step_time, **result.to_dict()})
        return exit_code(result)
    con = console()
    if not result.ok:
        con.print(bold((graph.name, "bold"), " on ", (cluster.name, "bold"), f" ({placement.method}): ",
                        ("FAILING", "bold red"), f": {failure_reason(result)}"))
        return exit_code(result)
    steps = np.asarray(result.step_times[1:] if len(result.step_times) > 1 else result.step_times)
    con.print(bold((graph.name, "bold"), " on ", (cluster.name, "bold"), f" ({placement.method}): measured step "
                    "time ", (fmt_time(result.step_time), "bold"),
                    (f" (mean of {len(steps)} steps after the first: min {fmt_time(steps.min())}, median "
                     f"{fmt_time(float(np.median(steps)))}, max {fmt_time(steps.max())}" if len(result.step_times) > 1
                     else " (one step)") + f"; simulated {fmt_time(predicted.step_time)})"))
    con.print(sim_table(graph, cluster, result, title=""))
    con.print(f"{result.n_transfers} transfers per step, {fmt_bytes(result.transfer_bytes)}")
    con.print(_fidelity_note(graph, cluster, result.step_time, predicted.step_time), soft_wrap=True)
    return 0


def _fidelity_note(graph, cluster, measured: float, simulated: float) -> str:
    """How far the measured step is from the simulated one, and what may explain it."""
    ratio = measured / simulated if simulated > 0 else float("inf")
    line = f"measured / simulated: {ratio:.2f}x"
    if abs(ratio - 1.0) <= 0.15:
        return line + " (within 15 %)"
    why = []
    if cluster.estimated:
        why.append("the cluster's speeds are estimates ('autoplace cluster detect' measures them)")
    if not any(op.cost for op in graph.ops):
        why.append("the op costs are the roofline's ('autoplace profile' measures them)")
    why.append("the host's other load and its memory bandwidth, shared by the workers, are not modelled")
    return line + "; it may be because " + "; ".join(why)


def cmd_profile(args: argparse.Namespace) -> int:


    check_output(args.output)
    check_json_output(args)
    graph = resolve_graph(args.graph, parse_params(args.param))
    cluster = resolve_cluster(args.cluster)
    devices = [d.strip() for d in args.devices.split(",")] if args.devices else None
    for d in devices or []:
        cluster.index(d)
    err = Console(stderr=True, highlight=False)
    with err.status("profiling") as status:
        profiled = profile_graph(graph, cluster, steps=args.steps, rounds=args.rounds, devices=devices,
                                 runtime=args.runtime,
                                 progress=lambda what: status.update(f"profiling {graph.name} on {what}"))
    save_graph(profiled, args.output)

    if written(args, profiled, profiled=profiled.meta["profiled"]):
        return 0
    for dtype, info in profiled.meta["profiled"].items():
        console(args.output == "-").print(f"{graph.name}: {graph.n_ops} ops timed on {info['device']} ({dtype}): "
                         f"{fmt_time(info['step_s'])} per step -> {args.output}")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:


    check_output(args.output)

    base = resolve_cluster(args.base) if args.base else None
    err = Console(stderr=True, highlight=False)
    with err.status("measuring") as status:
        cluster = detect_cluster(base, repeats=args.repeats, runtime=args.runtime,
                                 progress=lambda what: status.update(f"measuring {what}"))
    for line in speed_warnings(cluster):
        console(True).print(line)
    if args.output:
        save_cluster(cluster, args.output)
    if args.json:
        print_json(cluster_to_dict(cluster))
        return 0
    con = console(args.output == "-")
    for d in cluster.devices:
        send, recv = d.engines
        con.print(f"{d.name}: {fmt_flops(d.peak_flops)}/s matmul, {fmt_rate(d.memory_bandwidth)} copy, "
                  f"{fmt_time(d.op_overhead_s)} per op, "
                  f"sends at {fmt_rate(1 / d.send_cost_s_per_byte) if d.send_cost_s_per_byte else '-'}, "
                  f"{fmt_time(d.send_overhead_s)} per tensor sent, {fmt_time(d.recv_overhead_s)} per tensor received, "
                  f"{send or 'unlimited'} send / {recv or 'unlimited'} receive at once")
    for ln in cluster.links:
        con.print(f"{ln.src} -> {ln.dst}: latency {fmt_time(ln.latency_s)}")
    if args.output:
        con.print(f"written to {args.output}")
    return 0


def add_measure_parser(sub) -> None:
    """The ``measure`` verb's arguments."""
    p = sub.add_parser("measure", help="run a placement on this machine's devices and measure its step")
    add_graph_args(p)
    p.add_argument("--placement", "-p", required=True, metavar="P", help="placement file")
    p.add_argument("--steps", type=positive_int, default=10, help="steps to run (the first is dropped; default 10)")
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S,
                   help="seconds before a run counts as failing")
    p.add_argument("--data-seed", type=seed_arg, default=0,
                   help="seed of the synthetic parameters and inputs (--seed is always a placer's seed)")
    add_runtime_arg(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_measure)


def add_profile_parser(sub) -> None:
    """The ``profile`` verb's arguments."""
    p = sub.add_parser("profile", help="measure every op on each device type and write the costs into the graph")
    add_graph_args(p)
    p.add_argument("--devices", help="comma-separated devices to profile on (default: one of each type)")
    p.add_argument("--steps", type=positive_int, default=5, help="steps per run (the first is dropped)")
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="alone/loaded runs alternate this many times; op costs are medians over all (default 3)")
    p.add_argument("--output", "-o", required=True, metavar="GRAPH", help="graph file to write")
    add_runtime_arg(p)
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_profile)


def add_ranks_parser(sub) -> None:
    """The ``ranks`` verb's arguments."""
    p = sub.add_parser("ranks", help="start this host's ranks of a cluster that spans hosts (with torchrun)",
                       description="Start the distributed runtime's ranks of one host of CLUSTER (a cluster file "
                                   "whose devices name their \"host\" and which names a \"rendezvous\" "
                                   "ADDRESS:PORT on the first host). Run it on every host; then measure, "
                                   "compare --env measured and autoplace.compile on any of them join the ranks. "
                                   "The ranks serve only a driver holding their secret: the first run creates it "
                                   "(~/.config/autoplace/ranks.secret, or --secret-file / "
                                   "$AUTOPLACE_RANKS_SECRET_FILE); copy that file to every host and to the "
                                   "driver's machine.")
    p.add_argument("cluster", metavar="CLUSTER", help="cluster file (the same file on every host)")
    p.add_argument("--secret-file", default=None,
                   help="the ranks' secret, created if missing (default: $AUTOPLACE_RANKS_SECRET_FILE, else "
                        "~/.config/autoplace/ranks.secret)")
    p.add_argument("--host", required=True, help="which of the cluster's hosts this is")
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S,
                   help="seconds a rank waits on a message before the step fails")
    p.add_argument("--max-restarts", type=nonnegative_int, default=0,
                   help="times torchrun starts fresh ranks after a failing step ends them (default 0)")
    p.add_argument("--idle", type=positive_seconds, default=None,
                   help="stop after this many seconds without a driver (default: run until stopped)")
    p.add_argument("--print", action="store_true", help="print the torchrun command instead of running it")
    p.add_argument("--json", action="store_true",
                   help="print the host's place and the torchrun command as JSON instead of running it")
    p.set_defaults(func=cmd_ranks)


def add_cluster_parser(sub) -> None:
    """The ``cluster`` verb's arguments."""
    p = sub.add_parser("cluster", help="measure this machine: devices and links")
    csub = p.add_subparsers(dest="cluster_cmd", required=True, metavar="CLUSTER_COMMAND")
    cd = csub.add_parser("detect", help="measure device speeds and transfer latency/bandwidth between devices")
    cd.add_argument("--base", help="cluster whose devices to measure (default: localhost)")
    cd.add_argument("--repeats", type=positive_int, default=20, help="timed repeats per transfer size")
    cd.add_argument("--output", "-o", help="write the measured cluster as autoplace.cluster/v1 JSON")
    add_runtime_arg(cd, "whose transfers to measure: ")
    cd.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cluster)
