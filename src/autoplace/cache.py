"""The on-disk caches' one home: where they live, how an entry is named and keyed, and the pattern each
follows (:func:`cached`).

An entry is a JSON file holding the value and the key it was computed for (``cache_key``). It is used only
when that key matches exactly; anything else — another key, a damaged or foreign file — is computed again
and overwritten, never trusted, and nothing in an entry is executed. Entries are written atomically; a
folder that cannot be written only costs speed. Location: ``$AUTOPLACE_CACHE_DIR``, else
``$XDG_CACHE_HOME/autoplace``, else ``~/.cache/autoplace`` (:func:`cache_dir`).

What is cached: captured graphs (:func:`cached_graph`: the zoo's models, compile's captures, profiled
graphs), compile's placements and their verdicts (:mod:`autoplace.runtime.cache`), measured machines
(:func:`autoplace.runtime.detect.detected_cluster`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from autoplace.errors import AutoplaceError
from autoplace.formats import graph_from_dict, graph_to_dict, read_json, write_json
from autoplace.formats.state import digest
from autoplace.graph import Graph

__all__ = ["cache_dir", "file_stem", "digest", "entry_path", "load_entry", "store_entry", "cached", "cached_graph",
           "CAPTURE_VERSION"]

#: Bump when what a captured graph holds changes, so old cache entries are rebuilt.
CAPTURE_VERSION = 11

T = TypeVar("T")


def cache_dir() -> Path:
    """The cache folder: ``$AUTOPLACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/autoplace``, else
    ``~/.cache/autoplace``."""
    root = os.environ.get("AUTOPLACE_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "autoplace"


def file_stem(name: str) -> str:
    """``name`` as a safe file-name stem: letters, digits, ``-``, ``_`` and ``.``, the rest as ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def entry_path(folder: str | os.PathLike | None, sub: str, name: str, key: Any, *, digits: int = 20,
               suffix: str = ".json") -> Path:
    """Where the entry of ``key`` lives: ``folder`` (default :func:`cache_dir`, then ``sub``), a file named
    by ``name`` (made safe) and the key's digest."""
    root = Path(folder) if folder is not None else cache_dir() / sub if sub else cache_dir()
    stem = f"{file_stem(name)}-" if name else ""
    return root / f"{stem}{digest(key)[:digits]}{suffix}"


def load_entry(path: Path, key: Any) -> dict | None:
    """The entry at ``path`` (its fields, ``cache_key`` left out) where it was stored for ``key``; None where
    there is none, it is damaged, or it was stored for another key."""
    try:
        obj = read_json(path) if path.is_file() else None
    except (OSError, AutoplaceError):
        return None
    if not isinstance(obj, dict) or obj.get("cache_key") != key:
        return None
    return {k: v for k, v in obj.items() if k != "cache_key"}


def store_entry(path: Path, obj: dict, key: Any) -> bool:
    """Write ``obj`` with ``key`` to ``path`` atomically; False where the folder cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {**obj, "cache_key": key}, indent=None)
    except (OSError, AutoplaceError):
        return False
    return True


def cached(path: Path, key: Any, compute: Callable[[], T], *, encode: Callable[[T], dict],
           decode: Callable[[dict], T]) -> tuple[T, bool]:
    """The value stored at ``path`` for ``key`` (``decode`` of its entry), or ``compute()``'s, stored there
    (``encode``); and whether it came from the cache. An entry ``decode`` refuses (an
    :class:`~autoplace.errors.AutoplaceError`) is computed again."""
    obj = load_entry(path, key)
    if obj is not None:
        try:
            return decode(obj), True
        except AutoplaceError:
            pass                                    # damaged or foreign: computed again
    value = compute()
    store_entry(path, encode(value), key)
    return value, False


def _graph_key(name: str, params: dict[str, Any]) -> dict[str, Any]:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - captures need torch anyway
        torch_version = None
    return {"model": name, "params": params, "capture_version": CAPTURE_VERSION, "torch": torch_version}


def cached_graph(name: str, params: dict[str, Any], build: Callable[[], Graph],
                 folder: str | os.PathLike | None = None) -> Graph:
    """The graph for ``(name, params)`` from the cache (``folder``, default :func:`cache_dir`), or ``build()``
    it and store it. Its key also holds :data:`CAPTURE_VERSION` and torch's version."""
    key = _graph_key(name, params)
    path = entry_path(folder, "", name[:60], key, digits=16, suffix=".json.gz")
    graph, _ = cached(path, key, build, encode=graph_to_dict, decode=lambda obj: graph_from_dict(obj, str(path)))
    return graph
