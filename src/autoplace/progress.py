"""Progress of long work: a search reports how it is going, whoever called it decides how to show it.

The lowest layer of the package (no autoplace imports): placers, the search runner and the runtime call
:func:`report_progress`; the CLI and ``compile`` wrap their work in :func:`progress_to` and draw a progress
bar on a terminal, or write :class:`PlainLines` where standard error is a log or a pipe (a bar draws
nothing there).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

__all__ = ["progress_to", "report_progress", "PlainLines"]

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


class PlainLines:
    """Progress as plain lines (``[autoplace +12.3 s] placing 807 ops with auto: 40 %``) on ``stream``
    (default: standard error): for logs and pipes. :meth:`stage` writes at once; as a
    :func:`progress_to` callback it writes a search's reports at most every ``every`` seconds (and the
    first of each stage), so a log gets a line per stage and a heartbeat, not thousands."""

    def __init__(self, stream: TextIO | None = None, *, every: float = 10.0):
        self.stream, self.every = stream, float(every)
        self._start = time.monotonic()
        self._stage = ""
        self._last = -float("inf")

    def _write(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(f"[autoplace +{time.monotonic() - self._start:.1f} s] {text}\n")
        stream.flush()

    def stage(self, text: str, *, write: bool = True) -> None:
        """A new stage of the work: written at once (``write=False``: only as the prefix of its reports, so
        work that reports nothing — a fast placer, a one-line error — writes nothing)."""
        self._stage = text
        self._last = -float("inf")                  # the stage's first report is written too
        if write:
            self._write(text)

    def __call__(self, message: str, fraction: float | None = None) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        done = "" if fraction is None else f" ({100 * min(max(fraction, 0.0), 1.0):.0f} %)"
        self._write(f"{self._stage}: {message}{done}" if self._stage else f"{message}{done}")
