"""Checkpoints of a learned search, written atomically, so that a run continues after Ctrl-C, ``kill -9`` or
a crash with at most one checkpoint interval lost.

A checkpoint is one file, ``DIR/checkpoint.pt`` (a :func:`torch.save` of a plain dict: policy and
optimizer state, random-number generator states, baselines, best placement, curve, counters), written as
every output is (:func:`autoplace.formats._json.atomic_write_bytes`: a temporary file renamed over the
old one): a reader sees the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from autoplace.errors import AutoplaceError

__all__ = ["CHECKPOINT_FILE", "save_checkpoint", "load_checkpoint", "Checkpointer"]

CHECKPOINT_FILE = "checkpoint.pt"


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``directory/checkpoint.pt`` atomically; returns the path."""
    import io

    import torch

    from autoplace.formats._json import atomic_write_bytes

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(d / CHECKPOINT_FILE, buf.getvalue())
    return d / CHECKPOINT_FILE


def load_checkpoint(directory: str | Path) -> dict[str, Any]:
    """The state saved in ``directory``; :class:`AutoplaceError` naming the path if there is none or it is
    unreadable."""
    import torch

    path = Path(directory) / CHECKPOINT_FILE
    if not path.is_file():
        raise AutoplaceError(f"no checkpoint to resume from: {path} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a truncated or foreign file
        raise AutoplaceError(f"cannot read checkpoint {path}: {e}") from None


class Checkpointer:
    """Saves ``state_fn()`` to ``directory`` when ``every_s`` seconds have passed since the last save (or
    on :meth:`save`); does nothing without a directory."""

    def __init__(self, directory: str | Path | None, every_s: float = 30.0):
        self.directory = None if directory is None else Path(directory)
        self.every_s = float(every_s)
        self.last = time.monotonic()
        self.saves = 0

    def maybe_save(self, state_fn) -> bool:
        if self.directory is None or time.monotonic() - self.last < self.every_s:
            return False
        self.save(state_fn)
        return True

    def save(self, state_fn) -> None:
        if self.directory is None:
            return
        save_checkpoint(self.directory, state_fn())
        self.last = time.monotonic()
        self.saves += 1
