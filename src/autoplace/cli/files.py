"""The verbs that write files for other tools or read theirs: ``export``, ``report``, ``capture``, ``import``."""

from __future__ import annotations

import argparse

from autoplace.capture import capture_from_factory
from autoplace.capture.onnx_import import import_onnx
from autoplace.cli.args import (
    add_placement_output_args,
    method_list,
    positive_int,
    seconds,
    seed_arg,
)
from autoplace.cli.common import (
    check_json_output,
    check_output,
    console,
    note_other_cluster,
    parse_params,
    spinner,
    with_progress,
    written,
)
from autoplace.comparison import compare
from autoplace.formats import load_placement, save_graph, write_json
from autoplace.formats.files import atomic_write_text
from autoplace.graph import PHASES
from autoplace.htmlreport import placement_report, report_pngs
from autoplace.replicas import strategy_graph
from autoplace.resolve import resolve_cluster, resolve_graph
from autoplace.runtime.export import device_map, export_python, input_device
from autoplace.search.curve import Curve
from autoplace.sim import simulate
from autoplace.units import fmt_bytes, fmt_flops


def cmd_export(args: argparse.Namespace) -> int:

    check_output(args.output)
    check_output(args.device_map)
    check_json_output(args)
    placement = load_placement(args.placement)
    graph = resolve_graph(args.graph, parse_params(args.param))
    cluster = resolve_cluster(args.cluster or placement.cluster)
    note_other_cluster(placement, cluster)
    graph = strategy_graph(graph, placement)        # a strategy's placement: the replicated step it runs
    source = export_python(graph, placement, cluster)
    dmap = device_map(graph, placement, cluster) if args.device_map else None
    batch_on = input_device(graph, placement, cluster) if dmap is not None else None

    atomic_write_text(args.output, source)
    if dmap is not None:
        write_json(args.device_map, dmap)
    if written(args, None, lines=len(source.splitlines()), device_map=args.device_map, device_map_entries=dmap,
                input_device=batch_on):
        return 0
    console(args.output == "-").print(f"placed program ({len(source.splitlines())} lines) -> {args.output}"
                     + (f"; device_map ({len(dmap)} entries) -> {args.device_map}; put each batch on {batch_on} "
                        "(the loss is computed there)" if dmap is not None else ""))
    return 0


def cmd_report(args: argparse.Namespace) -> int:

    check_output(args.output)
    if args.png:
        for chart in ("step", "graph", "curve", "compare"):        # every chart the page may write
            check_output(f"{args.png}.{chart}.png", "--png chart")
    check_json_output(args)
    graph = resolve_graph(args.graph, parse_params(args.param))
    placement = load_placement(args.placement)
    cluster = resolve_cluster(args.cluster or placement.cluster)
    note_other_cluster(placement, cluster)
    graph = strategy_graph(graph, placement)        # a strategy's placement: the replicated step it runs
    curve = None
    if args.curve:

        curve = Curve.read_csv(args.curve)
    comparison = None
    if args.compare:

        comparison = with_progress("compare", args.json, lambda: compare(
            graph, cluster, args.compare, seed=args.seed, budget=args.budget))

    result = simulate(graph, cluster, placement, trace=True)
    page = placement_report(graph, cluster, placement, curve=curve, comparison=comparison, result=result)
    pngs = []
    if args.png:

        pngs = report_pngs(graph, cluster, placement, args.png, curve=curve, comparison=comparison, result=result)
    atomic_write_text(args.output, page)
    if written(args, graph, bytes=len(page.encode()), pngs=pngs):
        return 0
    for path in pngs:
        console(args.output == "-").print(f"chart -> {path}")
    console(args.output == "-").print(f"report of {placement.method} on {cluster.name} ({len(page) // 1024} KiB) -> "
                                       f"{args.output} (open it in a browser)")
    return 0


CAPTURE_HELP = """Capture one training step of a PyTorch model (forward, backward, the optimizer's update) as a graph.

FACTORY is MODULE:FUNCTION (a module importable from the current directory) or FILE.py:FUNCTION. The
function takes no arguments and returns (model, example_inputs, loss_fn, optimizer[, targets]), or a
dict with those keys (inputs for example_inputs):
  model           an nn.Module instance, or a torch.export ExportedProgram (its example inputs by default)
  example_inputs  one batch: a tensor, a tuple of positional arguments, a dict of keyword arguments
                  (model(**inputs), as Hugging Face models take them), or (args, kwargs)
  loss_fn         loss_fn(outputs, *targets) -> a scalar tensor
  optimizer       a torch.optim optimizer instance over the model's parameters
  targets         a tensor or a tuple of them, passed to loss_fn after the outputs
Nothing is computed: the step is traced on fake tensors.

  # mymodels.py
  def make_step():
      model = MyNet()
      return model, torch.randn(32, 3, 224, 224), nn.functional.cross_entropy, \\
          torch.optim.SGD(model.parameters(), lr=0.1), torch.randint(0, 1000, (32,))

  autoplace capture mymodels:make_step -o mine.json.gz
"""


def cmd_capture(args: argparse.Namespace) -> int:

    check_output(args.output)
    check_json_output(args)
    with spinner(f"capturing {args.factory}", args.output == "-" or args.json):
        graph = capture_from_factory(args.factory, inference=args.inference, name=args.name,
                                     micro_batches=args.micro_batches)
    save_graph(graph, args.output)
    if written(args, graph, phases={p: sum(op.phase == p for op in graph.ops)
                                     for p in PHASES}):
        return 0
    phases = {p: sum(op.phase == p for op in graph.ops) for p in PHASES}
    console(args.output == "-").print(f"{graph.name}: {graph.n_ops} ops "
                     f"({', '.join(f'{n} {p}' for p, n in phases.items() if n)}), "
                     f"{graph.n_edges} edges, {fmt_bytes(graph.total_param_bytes)} resident, "
                     f"{fmt_flops(graph.total_flops)} per step -> {args.output}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:

    check_output(args.output)
    check_json_output(args)
    graph = import_onnx(args.model, name=args.name)
    save_graph(graph, args.output)
    if written(args, graph):
        return 0
    console(args.output == "-").print(f"{graph.name}: {graph.n_ops} ops, {graph.n_edges} edges, "
                     f"{fmt_bytes(graph.total_param_bytes)} of parameters, {fmt_flops(graph.total_flops)} "
                     f"per forward pass -> {args.output}")
    return 0


def add_export_parser(sub) -> None:
    """The ``export`` verb's arguments."""
    p = sub.add_parser("export", help="write a placement as runnable Python (and an Accelerate device_map)")
    add_placement_output_args(p, "the captured graph the placement places (file or built-in name)", "placed.py",
                               "Python file to write")
    p.add_argument("--device-map", metavar="MAP.json", help="also write an Accelerate device_map")
    p.set_defaults(func=cmd_export)


def add_report_parser(sub) -> None:
    """The ``report`` verb's arguments."""
    p = sub.add_parser("report", help="one placement on one HTML page: summary, charts, an interactive timeline")
    add_placement_output_args(p, "graph file or built-in model name", "report.html", "HTML file to write")
    p.add_argument("--curve", metavar="PREFIX.csv", help="a search's training curve (as place --curve writes it)")
    p.add_argument("--compare", type=method_list, metavar="M1,M2",
                   help="also compare these placers on the graph and cluster: their chart and table on the page")
    p.add_argument("--seed", type=seed_arg, default=0, help="the compared placers' seed (default 0)")
    p.add_argument("--budget", type=seconds, default=None, help="the compared placers' search budget (see compare)")
    p.add_argument("--png", metavar="PREFIX", help="also write the page's charts as PREFIX.step.png, PREFIX.graph.png, "
                                                   "PREFIX.curve.png, PREFIX.compare.png")
    p.set_defaults(func=cmd_report)


def add_capture_parser(sub) -> None:
    """The ``capture`` verb's arguments."""
    p = sub.add_parser("capture", help="capture a PyTorch training step (or forward pass) as a graph",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=CAPTURE_HELP)
    p.add_argument("factory", metavar="MODULE:FUNCTION",
                   help="a function (in a module importable from here, or FILE.py:FUNCTION) returning "
                        "(model, example_inputs, loss_fn, optimizer[, targets])")
    p.add_argument("--output", "-o", required=True, metavar="GRAPH", help="graph file to write (.json or .json.gz)")
    p.add_argument("--inference", action="store_true", help="capture the forward pass only")
    p.add_argument("--micro-batches", type=positive_int, default=1, metavar="M",
                   help="gradient accumulation: M forward/backward passes over equal slices of the batch, "
                        "one update (default 1)")
    p.add_argument("--name", help="graph name (default: the function's name)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_capture)


def add_import_parser(sub) -> None:
    """The ``import`` verb's arguments."""
    p = sub.add_parser("import", help="import an ONNX model (shape-inferred, forward pass) as a graph")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("--output", "-o", required=True, metavar="GRAPH", help="graph file to write (.json or .json.gz)")
    p.add_argument("--name", help="graph name (default: the ONNX graph's name)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_import)
