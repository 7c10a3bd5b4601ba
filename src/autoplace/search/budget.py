"""How long a learned search runs: a number of samples (reproducible for a seed) or wall-clock seconds."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from autoplace.errors import AutoplaceError

__all__ = ["SearchBudget"]


@dataclass(frozen=True)
class SearchBudget:
    """Stop after ``samples`` placements sampled, or after ``seconds`` of wall clock, whichever comes first
    (at least one must be given). A search bounded by samples alone is reproducible for a seed; one bounded
    by seconds depends on how fast the machine runs."""

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
        if self.budget.seconds is not None and self.elapsed >= self.budget.seconds:
            return "seconds"
        return None

    def fraction(self, samples: int) -> float:
        parts = []
        if self.budget.samples is not None:
            parts.append(samples / self.budget.samples)
        if self.budget.seconds is not None:
            parts.append(self.elapsed / self.budget.seconds if self.budget.seconds > 0 else 1.0)
        return min(1.0, max(parts))
