"""How long a learned search runs: a number of samples (reproducible for a seed) or wall-clock seconds."""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from autoplace.errors import AutoplaceError

__all__ = ["SearchBudget", "time_limit", "time_left", "TIME_LIMIT"]

#: the stop reason of a search cut short by :func:`time_limit`
TIME_LIMIT = "time limit"

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("autoplace_deadline", default=None)


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Within the block, every search stops by ``seconds`` of wall clock from now (None: no limit) with the
    best it has, whatever its budget of work; a limit already running and sooner stays. Placers read what is
    left with :func:`time_left` (``autoplace place --time-limit``)."""
    if seconds is None:
        yield
        return
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise AutoplaceError(f"time limit must be a positive number of seconds, got {seconds!r}")
    now = time.monotonic()
    outer = _DEADLINE.get()
    token = _DEADLINE.set(min(now + float(seconds), outer) if outer is not None else now + float(seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds left before the :func:`time_limit` in force (0 when past it), or None when there is none."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


@dataclass(frozen=True)
class SearchBudget:
    """Stop after ``samples`` placements sampled, or after ``seconds`` of wall clock, whichever comes first
    (at least one must be given; a search bounded by seconds runs at least one update, so that it has a
    placement to return). A search bounded by samples alone is reproducible for a seed; one bounded by
    seconds depends on how fast the machine runs."""

    samples: int | None = None
    seconds: float | None = None

    def __post_init__(self):
        if self.samples is None and self.seconds is None:
            raise AutoplaceError("a search budget needs samples or seconds")
        if self.samples is not None and (isinstance(self.samples, bool) or int(self.samples) != self.samples
                                         or self.samples < 1):
            raise AutoplaceError(f"samples must be a positive integer, got {self.samples!r}")
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise AutoplaceError(f"seconds must be a finite number >= 0, got {self.seconds!r}")

    def start(self) -> BudgetClock:
        return BudgetClock(self, time.monotonic())


@dataclass
class BudgetClock:
    """A running budget: :meth:`done` says whether ``samples`` drawn so far (or the time) exhaust it."""

    budget: SearchBudget
    t0: float
    offset_s: float = 0.0  #: seconds spent before a resume

    @property
    def elapsed(self) -> float:
        return self.offset_s + time.monotonic() - self.t0

    def done(self, samples: int) -> str | None:
        """``None`` while there is budget left, else why it ended (``"samples"`` or ``"seconds"``)."""
        if self.budget.samples is not None and samples >= self.budget.samples:
            return "samples"
        if self.budget.seconds is not None and self.elapsed >= self.budget.seconds and samples > 0:
            return "seconds"                             # (a search bounded by seconds samples at least once)
        if time_left() == 0.0 and samples > 0:     # past a caller's time limit, with something to return
            return TIME_LIMIT
        return None

    def fraction(self, samples: int) -> float:
        parts = []
        if self.budget.samples is not None:
            parts.append(samples / self.budget.samples)
        if self.budget.seconds is not None:
            parts.append(self.elapsed / self.budget.seconds if self.budget.seconds > 0 else 1.0)
        return min(1.0, max(parts))
