"""The ``autoplace`` command line.

Every verb that takes GRAPH accepts a graph file (``.json`` or ``.json.gz``) or a built-in model name
(``autoplace zoo list``); CLUSTER is a cluster file or a preset (``autoplace clusters``). Bad input
prints one line ``autoplace: error: ...`` and exits 2 (3: no feasible placement); outputs are written
only after everything succeeded, atomically.
"""

from __future__ import annotations

import sys

from autoplace.cli.parser import build_parser
from autoplace.errors import AutoplaceError, FormatError

__all__ = ["main", "build_parser"]


#: options that name a file or folder: an empty one is refused before anything runs
PATH_OPTIONS = ("output", "checkpoint", "resume", "curve", "png", "trace", "plot", "device_map", "policy", "against",
                "placement", "cluster", "ray_address")


def _check_paths(args) -> None:

    for dest in PATH_OPTIONS:
        value = getattr(args, dest, None)
        if isinstance(value, str) and not value.strip():
            raise FormatError(f"--{dest.replace('_', '-')}: the path is empty" if dest != "ray_address"
                              else "--ray-address is empty (host:port or auto)")
    for dest in ("checkpoint", "resume"):
        if getattr(args, dest, None) == "-":
            raise FormatError(f"--{dest} -: a checkpoint goes into a folder, not to standard output")


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a name no terminal can show is escaped, not a crash
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_paths(args)
        return args.func(args)
    except AutoplaceError as e:
        print(f"autoplace: error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"autoplace: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autoplace: interrupted", file=sys.stderr)
        return 130
