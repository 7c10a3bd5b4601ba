"""Checks shared by every boundary, written once (like scikit-learn's ``check_random_state``).

* :func:`check_random_state` / :func:`seed_int` — what every placer does with its ``seed`` argument;
* :func:`check_budget` — a search budget in seconds: ``None`` or a finite number ``>= 0``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from autoplace.errors import AutoplaceError

__all__ = ["check_random_state", "seed_int", "check_budget"]


def check_random_state(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A generator for ``seed``: ``None`` means 0 (placers are deterministic by default), an int seeds a
    new generator, a Generator is used as it is."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed_int(seed))


def seed_int(seed: int | np.random.Generator | None) -> int:
    """An integer seed for solvers and tools that take one (OR-Tools, METIS, Scotch's relabelling):
    ``None`` is 0, an int is itself, a Generator draws one."""
    if seed is None:
        return 0
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**31 - 1))
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral) or int(seed) < 0:
        raise AutoplaceError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def check_budget(budget: float | None, what: str = "budget") -> float | None:
    """``None`` (the placer's default) or a finite number of seconds ``>= 0``."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or not math.isfinite(budget) or budget < 0:
        raise AutoplaceError(f"{what} must be a finite number of seconds >= 0, got {budget!r}")
    return float(budget)
