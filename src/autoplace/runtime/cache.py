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

__all__ = ["cache_key", "cached_placement", "default_folder"]

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
    from autoplace.formats import placement_from_dict, placement_to_dict, read_json, write_json
    from autoplace.formats.state import _digest
    from autoplace.zoo._cache import file_stem

    key = cache_key(graph, cluster, method, seed, budget)
    root = Path(folder) if folder is not None else default_folder()
    path = root / f"{file_stem(graph.name[:40])}-{_digest(key)[:20]}.json"
    if path.is_file():
        try:
            obj = read_json(path)
            if isinstance(obj, dict) and obj.get("cache_key") == key:
                placement = placement_from_dict({k: v for k, v in obj.items() if k != "cache_key"}, str(path))
                placement.to_array(graph, cluster)
                return placement, True
        except AutoplaceError:
            pass                                    # damaged or foreign: search again
    placement = search()
    try:
        root.mkdir(parents=True, exist_ok=True)
        write_json(path, {**placement_to_dict(placement), "cache_key": key}, indent=None)
    except (OSError, AutoplaceError):
        pass
    return placement, False
