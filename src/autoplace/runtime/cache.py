"""On-disk cache of the placements :func:`autoplace.compile` searched, so that compiling the same model again
(in this process or another) skips the search.

Key: the captured graph's content (learning rates left out: they are inputs), the cluster's content, the
method, its seed and budget. A cached file is used only when the key stored inside it matches exactly and
its placement fits the graph and cluster; anything else (another key, a damaged file) is searched again
and overwritten, never trusted. Files are plain JSON (``autoplace.placement/v1`` plus ``cache_key``):
nothing in them is executed. Location: ``placements/`` under :func:`autoplace.zoo._cache.cache_dir`
(``$AUTOPLACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/autoplace``, else ``~/.cache/autoplace``), or the folder
``compile(cache=...)`` names.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoplace.cluster import Cluster
from autoplace.errors import AutoplaceError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.replicas import strategy_graph

__all__ = ["cache_key", "cached_placement", "default_folder", "cached_verdict", "store_verdict"]

#: bump when what a key means changes
CACHE_VERSION = 1


def default_folder() -> Path:
    from autoplace.zoo._cache import cache_dir

    return cache_dir() / "placements"


def cache_key(graph: Graph, cluster: Cluster, method: str, seed: int, budget: float | None) -> dict[str, Any]:
    """What a cached placement must have been searched for."""
    from autoplace.formats import graph_to_dict
    from autoplace.formats.state import _digest, cluster_hash

    g = graph_to_dict(graph)
    g["ops"] = [{k: v for k, v in op.items() if not (op["type"] == "hyperparameter" and k == "value")}
                for op in g["ops"]]
    return {"version": CACHE_VERSION, "graph": _digest(g), "cluster": cluster_hash(cluster),
            "method": method, "seed": int(seed), "budget": budget}


def cached_placement(graph: Graph, cluster: Cluster, method: str, seed: int, budget: float | None,
                     search: Callable[[], Placement], folder: str | os.PathLike | None = None
                     ) -> tuple[Placement, bool]:
    """The placement cached for this key in ``folder`` (default :func:`default_folder`), or ``search()``'s,
    stored there; and whether it came from the cache. A folder that cannot be written only costs speed."""
    from autoplace.formats import placement_from_dict, placement_to_dict, write_json

    key = cache_key(graph, cluster, method, seed, budget)
    path = _path(graph, key, folder)
    if path.is_file():
        try:
            obj = _entry(path, key)
            if obj is not None:
                placement = placement_from_dict({k: v for k, v in obj.items() if k not in _EXTRA}, str(path))
                placement.to_array(strategy_graph(graph, placement), cluster)   # a strategy: its replicated step
                return placement, True
        except AutoplaceError:
            pass                                    # damaged or foreign: search again
    placement = search()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {**placement_to_dict(placement), "cache_key": key}, indent=None)
    except (OSError, AutoplaceError):
        pass
    return placement, False


_EXTRA = ("cache_key", "verdict")     # what a cache entry holds beside the placement's own fields


def _path(graph: Graph, key: dict, folder) -> Path:
    from autoplace.formats.state import _digest
    from autoplace.zoo._cache import file_stem

    root = Path(folder) if folder is not None else default_folder()
    return root / f"{file_stem(graph.name[:40])}-{_digest(key)[:20]}.json"


def _entry(path: Path, key: dict) -> dict | None:
    from autoplace.formats import read_json

    obj = read_json(path)
    return obj if isinstance(obj, dict) and obj.get("cache_key") == key else None


def cached_verdict(graph: Graph, cluster: Cluster, method: str, seed: int, budget: float | None,
                   folder: str | os.PathLike | None = None, *, machine: str):
    """The measured :class:`~autoplace.runtime.verdict.Verdict` kept with the cached placement of this key,
    where it was measured on ``machine``; else None."""
    from autoplace.runtime.verdict import Verdict

    key = cache_key(graph, cluster, method, seed, budget)
    try:
        obj = _entry(_path(graph, key, folder), key)
    except (OSError, AutoplaceError):
        return None
    v = Verdict.from_dict(obj.get("verdict")) if obj is not None else None
    return v if v is not None and v.machine == machine else None


def store_verdict(verdict, graph: Graph, cluster: Cluster, method: str, seed: int, budget: float | None,
                  folder: str | os.PathLike | None = None) -> None:
    """Keep ``verdict`` with the cached placement of this key (where there is one; a folder that cannot be
    written only costs a measurement next time)."""
    from autoplace.formats import write_json

    key = cache_key(graph, cluster, method, seed, budget)
    path = _path(graph, key, folder)
    try:
        obj = _entry(path, key)
        if obj is not None:
            write_json(path, {**obj, "verdict": verdict.to_dict()}, indent=None)
    except (OSError, AutoplaceError):
        pass
