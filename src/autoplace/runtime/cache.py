"""On-disk cache of the placements :func:`autoplace.compile` searched, so that compiling the same model again
(in this process or another) skips the search.

Key: the captured graph's content (learning rates left out: they are inputs), the cluster's content, the
method, its seed and budget. A cached file is used only when the key stored inside it matches exactly and
its placement fits the graph and cluster; anything else (another key, a damaged file) is searched again
and overwritten, never trusted. Files are plain JSON (``autoplace.placement/v1`` plus ``cache_key``):
nothing in them is executed (the pattern of :mod:`autoplace.cache`). Location: ``placements/`` under
:func:`autoplace.cache.cache_dir`, or the folder ``compile(cache=...)`` names.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoplace.cache import cache_dir, cached, digest, entry_path, load_entry, store_entry
from autoplace.cluster import Cluster
from autoplace.formats import graph_to_dict, placement_from_dict, placement_to_dict
from autoplace.formats.state import cluster_hash
from autoplace.graph import Graph, OpRole
from autoplace.placement import Placement
from autoplace.replicas import strategy_graph
from autoplace.runtime.verdict import Verdict

__all__ = ["cache_key", "cached_placement", "default_folder", "cached_verdict", "store_verdict"]

#: bump when what a key means changes
CACHE_VERSION = 1


def default_folder() -> Path:
    return cache_dir() / "placements"


def cache_key(graph: Graph, cluster: Cluster, method: str, seed: int, budget: float | None) -> dict[str, Any]:
    """What a cached placement must have been searched for."""
    g = graph_to_dict(graph)
    g["ops"] = [{k: v for k, v in op.items() if not (op["type"] == OpRole.HYPERPARAMETER and k == "value")}
                for op in g["ops"]]
    return {"version": CACHE_VERSION, "graph": digest(g), "cluster": cluster_hash(cluster),
            "method": method, "seed": int(seed), "budget": budget}


def cached_placement(graph: Graph, cluster: Cluster, method: str, seed: int, budget: float | None,
                     search: Callable[[], Placement], folder: str | os.PathLike | None = None
                     ) -> tuple[Placement, bool]:
    """The placement cached for this key in ``folder`` (default :func:`default_folder`), or ``search()``'s,
    stored there; and whether it came from the cache. A folder that cannot be written only costs speed."""
    key = cache_key(graph, cluster, method, seed, budget)
    path = _path(graph, key, folder)

    def decode(obj: dict) -> Placement:
        placement = placement_from_dict({k: v for k, v in obj.items() if k != "verdict"}, str(path))
        placement.to_array(strategy_graph(graph, placement), cluster)   # a strategy: its replicated step
        return placement

    return cached(path, key, search, encode=placement_to_dict, decode=decode)


def _path(graph: Graph, key: dict, folder) -> Path:
    return entry_path(folder, "placements", graph.name[:40], key)


def cached_verdict(graph: Graph, cluster: Cluster, method: str, seed: int, budget: float | None,
                   folder: str | os.PathLike | None = None, *, machine: str):
    """The measured :class:`~autoplace.runtime.verdict.Verdict` kept with the cached placement of this key,
    where it was measured on ``machine``; else None."""

    key = cache_key(graph, cluster, method, seed, budget)
    obj = load_entry(_path(graph, key, folder), key)
    v = Verdict.from_dict(obj.get("verdict")) if obj is not None else None
    return v if v is not None and v.machine == machine else None


def store_verdict(verdict, graph: Graph, cluster: Cluster, method: str, seed: int, budget: float | None,
                  folder: str | os.PathLike | None = None) -> None:
    """Keep ``verdict`` with the cached placement of this key (where there is one; a folder that cannot be
    written only costs a measurement next time)."""
    key = cache_key(graph, cluster, method, seed, budget)
    path = _path(graph, key, folder)
    obj = load_entry(path, key)
    if obj is not None:
        store_entry(path, {**obj, "verdict": verdict.to_dict()}, key)
