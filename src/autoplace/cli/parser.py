"""The argument parser: the program's options, then every verb's own parser, each beside its command."""

from __future__ import annotations

from autoplace import __version__
from autoplace.cli.args import Parser
from autoplace.cli.bench import add_bench_parser
from autoplace.cli.compare import add_compare_parser
from autoplace.cli.files import add_capture_parser, add_export_parser, add_import_parser, add_report_parser
from autoplace.cli.listing import add_clusters_parser, add_settings_parser, add_zoo_parser
from autoplace.cli.measure import add_cluster_parser, add_measure_parser, add_profile_parser, add_ranks_parser
from autoplace.cli.place import add_place_parser, add_train_parser
from autoplace.cli.simulate import add_simulate_parser

#: the verbs' parsers, in the order ``autoplace --help`` lists them
VERBS = (add_simulate_parser, add_place_parser, add_train_parser, add_compare_parser, add_measure_parser,
         add_profile_parser, add_ranks_parser, add_cluster_parser, add_export_parser, add_report_parser,
         add_bench_parser, add_capture_parser, add_import_parser, add_settings_parser, add_clusters_parser,
         add_zoo_parser)


def build_parser() -> Parser:
    parser = Parser(prog="autoplace", description="Device placement for ML dataflow graphs.")
    parser.add_argument("--version", action="version", version=f"autoplace {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for add in VERBS:
        add(sub)
    return parser
