"""On-disk cache of captured zoo graphs.

Key = model name + parameters + capture version + torch version. A cached file is used only when the
key stored inside it matches exactly; anything else (another key, a corrupt file) is rebuilt, never
trusted. Location: ``$AUTOPLACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/autoplace``, else
``~/.cache/autoplace``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoplace.errors import AutoplaceError
from autoplace.graph import Graph

__all__ = ["CAPTURE_VERSION", "cache_dir", "cached_graph"]

#: Bump when the capture's output changes, so old cache entries are rebuilt.
CAPTURE_VERSION = 11


def cache_dir() -> Path:
    root = os.environ.get("AUTOPLACE_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "autoplace"


def file_stem(name: str) -> str:
    """``name`` as a safe file-name stem: letters, digits, ``-``, ``_`` and ``.``, the rest as ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _key(name: str, params: dict[str, Any]) -> dict[str, Any]:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - zoo capture needs torch anyway
        torch_version = None
    return {"model": name, "params": params, "capture_version": CAPTURE_VERSION, "torch": torch_version}


def cached_graph(name: str, params: dict[str, Any], build: Callable[[], Graph],
                 folder: str | os.PathLike | None = None) -> Graph:
    """The graph for ``(name, params)`` from the cache (``folder``, default :func:`cache_dir`), or
    ``build()`` it and store it."""
    from autoplace.formats import graph_from_dict, graph_to_dict, read_json, write_json

    key = _key(name, params)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = (Path(folder) if folder is not None else cache_dir()) / f"{file_stem(name[:60])}-{digest}.json.gz"
    if path.exists():
        try:
            obj = read_json(path)
            if isinstance(obj, dict) and obj.get("cache_key") == key:
                obj = {k: v for k, v in obj.items() if k != "cache_key"}
                return graph_from_dict(obj, str(path))
        except AutoplaceError:
            pass  # corrupt or foreign: rebuild
    graph = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {**graph_to_dict(graph), "cache_key": key}, indent=None)
    except OSError:
        pass  # a read-only cache only costs speed
    return graph
