"""``autoplace simulate``: one training step of a placement, simulated."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from autoplace.cli.args import (
    add_graph_args,
)
from autoplace.cli.common import (
    bold,
    check_output,
    console,
    exit_code,
    note_estimates,
    note_other_cluster,
    parse_params,
    placement_or_map,
    print_json,
)
from autoplace.cluster import Cluster
from autoplace.formats import write_json
from autoplace.graph import Graph
from autoplace.placers.auto import robust_simulator, uncertainty
from autoplace.plots import step_png
from autoplace.replicas import strategy_graph
from autoplace.resolve import resolve_cluster, resolve_graph
from autoplace.robust import strategy_range
from autoplace.sim import simulate
from autoplace.sim.trace import chrome_trace
from autoplace.units import fmt_bytes, fmt_time


def sim_table(graph: Graph, cluster: Cluster, result: Any, title: str):


    table = Table(title=title)
    host = getattr(result, "host_time", None)
    launched = host is not None and len(host) and cluster.launcher.max(initial=-1) >= 0
    cols = ("device", "busy", "utilisation", *(("launching",) if launched else ()), "peak memory", "capacity", "OOM")
    for col in cols:
        table.add_column(col, justify="right" if col != "device" else "left")
    for d, name in enumerate(result.device_names):
        busy = result.busy_time[d]
        util = busy / result.step_time if result.step_time > 0 else 0.0
        # a GPU's host thread: the time it spent launching the device's ops and submitting its copies
        launch = ((fmt_time(host[d]) if cluster.launcher[d] >= 0 else "-"),) if launched else ()
        table.add_row(name, fmt_time(busy), f"{100 * util:.0f}%", *launch, fmt_bytes(result.peak_memory[d]),
                      fmt_bytes(result.memory_capacity[d]),
                      bold(("OOM", "bold red")) if result.peak_memory[d] > result.memory_capacity[d] else "")
    return table


def cmd_simulate(args: argparse.Namespace) -> int:

    check_output(args.trace)
    check_output(args.plot, "plot")
    graph = resolve_graph(args.graph, parse_params(args.param))
    cluster = resolve_cluster(args.cluster)
    placement = placement_or_map(args.placement, graph, cluster)
    user_graph, graph = graph, strategy_graph(graph, placement)   # a strategy's placement: the step it runs
    result = simulate(graph, cluster, placement, trace=bool(args.trace or args.plot))
    if args.plot:

        step_png(graph, cluster, result, args.plot,
                 title=f"{graph.name} on {cluster.name} ({placement.method}): where the step's time goes")
    note_other_cluster(placement, cluster)
    note_estimates(cluster)
    if args.trace:
        write_json(args.trace, chrome_trace(graph, cluster, result), indent=None)
    rng = None
    if result.ok:

        rng = (uncertainty(graph, cluster, [placement])[0] if graph is user_graph
               else strategy_range(robust_simulator(user_graph, cluster), placement))
    if args.json:
        print_json({"graph": graph.name, "cluster": cluster.name, "method": placement.method,
                     **result.to_dict(), "uncertainty": rng.to_dict() if rng else None})
        return exit_code(result)
    con = console()
    status = ("FAILING (OOM on " + ", ".join(result.oom_devices) + ")", "bold red") if not result.ok else "ok"
    con.print(bold((graph.name, "bold"), " on ", (cluster.name, "bold"), f" ({placement.method}): step time ",
                    (fmt_time(result.step_time), "bold"), ", ", status))
    if rng is not None:
        con.print(f"range over the cost model's uncertainty: {fmt_time(rng.low)} - {fmt_time(rng.high)}"
                  + (f"; one GPU: {fmt_time(rng.one_gpu)}" if rng.one_gpu is not None else "")
                  + ("; its gain over one GPU is inside that range" if rng.gain_inside_range else ""))
    con.print(sim_table(graph, cluster, result, title=""))
    con.print(f"{result.n_transfers} transfers, {fmt_bytes(result.transfer_bytes)}, link busy "
              f"{fmt_time(result.transfer_time)}")
    if args.trace:
        console(args.trace == "-").print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
    return exit_code(result)


def add_simulate_parser(sub) -> None:
    """The ``simulate`` verb's arguments."""
    p = sub.add_parser("simulate", help="simulate one training step of a placement")
    add_graph_args(p)
    p.add_argument("--placement", "-p", required=True, metavar="P", help="placement file")
    p.add_argument("--trace", metavar="OUT", help="write the timeline as a Chrome trace (Perfetto)")
    p.add_argument("--plot", metavar="FILE.png", help="draw compute time per device by phase, memory-copy time per "
                                                       "device pair and peak memory against capacity")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_simulate)
