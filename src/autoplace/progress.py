"""Progress of long work: a search reports how it is going, whoever called it decides how to show it.

The lowest layer of the package (no autoplace imports): placers, the search runner and the runtime call
:func:`report_progress`; the CLI wraps its work in :func:`progress_to` and draws a progress bar.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

__all__ = ["progress_to", "report_progress"]

_PROGRESS: contextvars.ContextVar[Callable[[str, float | None], None] | None] = \
    contextvars.ContextVar("autoplace_progress", default=None)


@contextlib.contextmanager
def progress_to(callback: Callable[[str, float | None], None]) -> Iterator[None]:
    """Within the block, long searches call ``callback(message, fraction)`` as they go (``fraction`` of
    their budget spent, or None); the CLI draws a progress bar with it."""
    token = _PROGRESS.set(callback)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def report_progress(message: str, fraction: float | None = None) -> None:
    """Tell the caller's :func:`progress_to` callback, if any, how a search is going."""
    callback = _PROGRESS.get()
    if callback is not None:
        callback(message, fraction)
