"""Names and paths to objects: a graph file or built-in model, a cluster file or preset.

What the command line, :func:`autoplace.compile` and the benchmark suite share when a user names a
graph or a cluster.
"""

from __future__ import annotations

import os
from typing import Any

from autoplace.capture.onnx_import import import_onnx
from autoplace.cluster import CLUSTER_PRESETS, Cluster, get_cluster
from autoplace.errors import FormatError
from autoplace.formats import load_cluster, load_graph
from autoplace.graph import Graph
from autoplace.zoo import build_graph

__all__ = ["resolve_graph", "resolve_cluster", "looks_like_file"]


def looks_like_file(arg: str) -> bool:
    """Whether ``arg`` names a file rather than a built-in: it exists, ends ``.json``/``.gz``, or has a ``/``."""
    return os.path.exists(arg) or arg.endswith((".json", ".gz")) or os.sep in arg


def resolve_graph(arg: str, params: dict[str, Any] | None = None) -> Graph:
    """A graph file path or a built-in model name (with optional parameters)."""

    if looks_like_file(arg) or arg.endswith(".onnx"):
        if params:
            raise FormatError("--param applies to built-in models, not to graph files")
        if arg.endswith(".onnx"):

            return import_onnx(arg)
        return load_graph(arg)
    return build_graph(arg, **(params or {}))


def resolve_cluster(arg: str) -> Cluster:
    """A cluster file path or a preset name."""

    if arg not in CLUSTER_PRESETS and looks_like_file(arg):
        return load_cluster(arg)
    return get_cluster(arg)
