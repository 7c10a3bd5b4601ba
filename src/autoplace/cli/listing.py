"""The verbs that list what autoplace holds: ``settings``, ``clusters``, ``zoo``."""

from __future__ import annotations

import argparse

from rich.table import Table

from autoplace.cli.common import (
    check_json_output,
    check_output,
    console,
    parse_params,
    print_json,
    spinner,
    written,
)
from autoplace.cluster import CLUSTER_PRESETS, get_cluster
from autoplace.errors import AutoplaceError, FormatError
from autoplace.formats import cluster_to_dict, save_cluster, save_graph
from autoplace.placers import available_placers, get_placer
from autoplace.resolve import resolve_cluster
from autoplace.units import fmt_bytes, fmt_flops, fmt_rate
from autoplace.zoo import build_graph, get_model, zoo_names


def settings_markdown(rows: dict) -> str:
    """The ``--set`` keys of each learned placer as Markdown tables (docs/algorithms.md holds this)."""
    out = []
    for n, rs in rows.items():
        out += [f"`{n}`:", "", "| key | default | range |", "|---|---|---|"]
        out += [f"| `{k}` | `{'none' if d is None else d}` | {r} |" for k, d, r, _ in rs]
        out.append("")
    return "\n".join(out)


def cmd_settings(args: argparse.Namespace) -> int:
    """Each learned placer's ``--set`` keys: default, allowed range and what it does."""

    learned = [n for n in available_placers() if get_placer(n).config is not None]
    names = learned if args.method is None else [args.method]
    for n in names:
        if n not in learned:
            raise AutoplaceError(f"{n!r} has no settings (the learned placers' are: {', '.join(learned)})")
    rows = {n: get_placer(n).config.describe() for n in names}
    if args.markdown:
        print(settings_markdown(rows), end="")
        return 0
    if args.json:
        print_json({n: [{"key": k, "default": d, "range": r, "doc": doc} for k, d, r, doc in rs]
                     for n, rs in rows.items()})
        return 0

    con = console()
    for n, rs in rows.items():
        table = Table(title=f"{n} --set KEY=VALUE ({get_placer(n).config.__name__})", title_justify="left")
        for col in ("key", "default", "range", "what it does"):
            table.add_column(col, overflow="fold")
        for k, d, r, doc in rs:
            table.add_row(k, "none" if d is None else str(d), r, doc)
        con.print(table)
    return 0


def cmd_clusters(args: argparse.Namespace) -> int:

    if args.output is not None:
        check_output(args.output)
        if not args.name:
            raise FormatError("clusters --output needs a cluster name (or file) to write")
    if args.name:
        cluster = resolve_cluster(args.name)
        if args.output is not None:
            save_cluster(cluster, args.output)
            return 0
        if args.json:
            print_json(cluster_to_dict(cluster))
            return 0
        clusters = [cluster]
    else:
        clusters = [get_cluster(name) for name in CLUSTER_PRESETS]
    if args.json:
        print_json([cluster_to_dict(c) for c in clusters])
        return 0

    table = Table(title="cluster presets" if not args.name else None,
                  caption="FP32 and bandwidth: achievable (peak); copy engines: send/receive, - = no limit")
    for col in ("cluster", "device", "type", "model", "memory", "FP32", "mem bandwidth", "copy engines"):
        table.add_column(col)
    for c in clusters:
        for i, d in enumerate(c.devices):
            engines = "/".join(str(e) if e else "-" for e in d.engines)
            table.add_row(c.name if i == 0 else "", d.name, d.type, str(d.meta.get("model", "")),
                          fmt_bytes(d.memory_bytes),
                          f"{fmt_flops(c.achievable_flops[i])}/s ({fmt_flops(d.peak_flops)}/s)",
                          f"{fmt_rate(c.achievable_bandwidth[i])} ({fmt_rate(d.memory_bandwidth)})", engines,
                          end_section=i == len(c.devices) - 1 and not c.segments)
        if c.segments:
            table.add_row("", "segments: " + ", ".join(f"{seg.name} {fmt_rate(seg.bandwidth)}" for seg in c.segments),
                          end_section=True)
    console().print(table)
    return 0


def cmd_zoo(args: argparse.Namespace) -> int:

    if args.zoo_cmd == "export":
        check_output(args.output)
        check_json_output(args)
        get_model(args.name)
        with spinner(f"building {args.name}", args.output == "-" or args.json):
            graph = build_graph(args.name, **parse_params(args.param))
        save_graph(graph, args.output)
        if written(args, graph):
            return 0
        console(args.output == "-").print(f"{args.name}: {graph.n_ops} ops, {graph.n_edges} edges -> {args.output}")
        return 0
    if args.json:
        print_json([{"name": n, "description": get_model(n).description, "paper": get_model(n).paper,
                      "defaults": get_model(n).defaults} for n in zoo_names()])
        return 0

    table = Table(title="built-in graphs")
    for col in ("name", "description", "parameters"):
        table.add_column(col)
    for n in zoo_names():
        info = get_model(n)
        table.add_row(n, info.description, ", ".join(f"{k}={v}" for k, v in info.defaults.items()))
    console().print(table)
    return 0


def add_settings_parser(sub) -> None:
    """The ``settings`` verb's arguments."""
    p = sub.add_parser("settings", help="the learned placers' --set keys: default, allowed range, meaning")
    p.add_argument("method", nargs="?", help="one learned placer (default: all)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="as the Markdown tables of docs/algorithms.md")
    p.set_defaults(func=cmd_settings)


def add_clusters_parser(sub) -> None:
    """The ``clusters`` verb's arguments."""
    p = sub.add_parser("clusters", help="list cluster presets, or show/export one")
    p.add_argument("name", nargs="?", help="a preset or cluster file to show")
    p.add_argument("--output", "-o", help="write the cluster as autoplace.cluster/v1 JSON")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_clusters)


def add_zoo_parser(sub) -> None:
    """The ``zoo`` verb's arguments."""
    p = sub.add_parser("zoo", help="built-in graphs")
    zsub = p.add_subparsers(dest="zoo_cmd", required=True, metavar="ZOO_COMMAND")
    zl = zsub.add_parser("list", help="list built-in graphs")
    zl.add_argument("--json", action="store_true")
    ze = zsub.add_parser("export", help="write a built-in graph as autoplace.graph/v1 JSON")
    ze.add_argument("name")
    ze.add_argument("--output", "-o", required=True)
    ze.add_argument("--param", "-P", action="append", metavar="KEY=VALUE")
    ze.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_zoo)
