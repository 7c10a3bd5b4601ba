"""Checks shared by every boundary, written once (like scikit-learn's ``check_random_state``).

* :func:`check_random_state` / :func:`seed_int` — what every placer does with its ``seed`` argument;
* :func:`check_budget` — a search budget in seconds: ``None`` or a finite number ``>= 0``;
* :func:`check_number` — a field of a graph or cluster within its range (the limits below keep every sum
  the simulator forms finite and inside 64-bit integers);
* :func:`check_name` — a name or label: a non-empty string of valid Unicode (no lone surrogates, which
  JSON can carry but no terminal or file can print);
* :func:`as_scalar` — an argument where one number is meant: a NumPy or torch scalar (a 0-d array or
  tensor too) becomes the Python number it holds, an array of any other shape is refused;
* :func:`check_flag` — a switch: ``True``, ``False`` (or ``None`` where that means the default).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from autoplace.errors import AutoplaceError

__all__ = ["is_finite", "check_random_state", "seed_int", "check_budget", "check_number", "check_name", "as_scalar",
           "check_flag", "shown_value", "with_article", "MAX_BYTES", "MAX_TOTAL_BYTES", "MAX_FLOPS", "MAX_SECONDS",
           "MIN_RATE", "MAX_RATE", "MAX_CONCURRENCY", "MAX_BUDGET_S"]

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


def with_article(noun: str) -> str:
    """``noun`` after "a" or "an" (by its first letter)."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def shown_value(value, width: int = 40) -> str:
    """``value`` as an error message shows an argument: its repr cut to ``width``, an array or a tensor by
    its type and shape."""
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, np.generic):
        return f"{with_article(type(value).__name__)} of shape {tuple(shape)}"
    text = repr(value)
    return text if len(text) <= width else text[:width] + "..."


def as_scalar(value, what: str, error: type[Exception] = AutoplaceError):
    """``value`` as a Python number where it is a NumPy or torch scalar (``np.int64(2)``, a 0-d array or
    tensor); an array or tensor of any other shape is ``error`` naming ``what``; anything else as it is."""
    if isinstance(value, np.generic):
        return value.item()
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype") and hasattr(value, "item"):
        if tuple(shape) != ():
            raise error(f"{what} must be one number, got {shown_value(value)}")
        try:
            return value.item()
        except (RuntimeError, ValueError, TypeError):          # a tensor on the meta device holds no value
            raise error(f"{what} must be a number, got {shown_value(value)} that holds none") from None
    return value


def check_flag(value, what: str, error: type[Exception] = AutoplaceError, *, none: bool = True) -> bool | None:
    """``value`` if it is ``True``, ``False`` (a NumPy boolean too) or, where ``none``, ``None``; else ``error``."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, bool) or (none and value is None):
        return value
    raise error(f"{what} must be True or False{' or None' if none else ''}, got {shown_value(value)}")


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
    value = as_scalar(seed, "seed")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or not 0 <= int(value) < 2**32:
        raise AutoplaceError(f"seed must be an integer in [0, {2**32 - 1}], got {shown_value(seed)}")
    return int(value)


def check_budget(budget: float | None, what: str = "budget") -> float | None:
    """``None`` (the placer's default) or a number of seconds in ``[0, MAX_BUDGET_S]``."""
    if budget is None:
        return None
    value = as_scalar(budget, what)
    if not is_finite(value) or value < 0 or value > MAX_BUDGET_S:
        raise AutoplaceError(f"{what} must be a number of seconds in [0, {MAX_BUDGET_S:g}], got {shown_value(budget)}")
    return float(value)


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
