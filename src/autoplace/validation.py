"""Checks shared by every boundary, written once (like scikit-learn's ``check_random_state``).

* :func:`check_random_state` / :func:`seed_int` — what every placer does with its ``seed`` argument;
* :func:`check_budget` — a search budget in seconds: ``None`` or a finite number ``>= 0``;
* :func:`check_number` — a field of a graph or cluster within its range (the limits below keep every sum
  the simulator forms finite and inside 64-bit integers);
* :func:`check_name` — a name or label: a non-empty string of valid Unicode (no lone surrogates, which
  JSON can carry but no terminal or file can print).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from autoplace.errors import AutoplaceError

__all__ = ["is_finite", "check_random_state", "seed_int", "check_budget", "check_number", "check_name",
           "MAX_BYTES", "MAX_TOTAL_BYTES", "MAX_FLOPS", "MAX_SECONDS", "MIN_RATE", "MAX_RATE", "MAX_CONCURRENCY",
           "MAX_BUDGET_S"]

MAX_BYTES = 2**50          #: one size (a tensor, a parameter, a device's memory): 1 PiB
MAX_TOTAL_BYTES = 2**62    #: all of a graph's parameter and output bytes together
MAX_FLOPS = 1e24           #: one op's floating-point operations
MAX_SECONDS = 1e6          #: one measured cost, overhead or latency (11.6 days)
MIN_RATE, MAX_RATE = 1.0, 1e18  #: FLOP/s and bytes/s of a device or link
MAX_CONCURRENCY = 1024     #: ops a device runs at once
MAX_BUDGET_S = 1e7         #: a search budget or timeout (116 days: past it, a number is a typo, not a plan)


def is_finite(v) -> bool:
    """Whether ``v`` is a finite real number: an integer too large for a float (``10**400``) is not one."""
    try:
        return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and math.isfinite(v)
    except OverflowError:
        return False


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
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < 2**32:
        raise AutoplaceError(f"seed must be an integer in [0, {2**32 - 1}], got {seed!r}")
    return int(seed)


def check_budget(budget: float | None, what: str = "budget") -> float | None:
    """``None`` (the placer's default) or a number of seconds in ``[0, MAX_BUDGET_S]``."""
    if budget is None:
        return None
    if not is_finite(budget) or budget < 0 or budget > MAX_BUDGET_S:
        raise AutoplaceError(f"{what} must be a number of seconds in [0, {MAX_BUDGET_S:g}], got {budget!r}")
    return float(budget)


def check_number(value, what: str, error: type[Exception], *, lo: float = 0.0, hi: float, integer: bool = False,
                 lo_open: bool = False):
    """``value`` if it is a real number (an integer where ``integer``) in ``[lo, hi]`` (``(lo, hi]`` with
    ``lo_open``); else ``error`` naming ``what``, the range and the value."""
    ok = (is_finite(value)
          and (value > lo if lo_open else value >= lo) and value <= hi
          and (not integer or isinstance(value, numbers.Integral)))
    if not ok:
        kind = "an integer" if integer else "a number"
        lo_s, hi_s = (f"{lo:,}", f"{hi:,}") if integer else (f"{lo:g}", f"{hi:g}")
        raise error(f"{what} must be {kind} in {'(' if lo_open else '['}{lo_s}, {hi_s}], got {value!r}")
    return value


def check_name(value, what: str, error: type[Exception], *, empty: bool = False) -> str:
    """``value`` if it is a string of valid Unicode (non-empty unless ``empty``); else ``error``."""
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {value!r}")
    if not value and not empty:
        raise error(f"{what} is empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{what} is not valid Unicode (a lone surrogate): {ascii(value)}") from None
    return value
