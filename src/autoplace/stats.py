"""Small statistics every layer uses (no dependencies above the standard library)."""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["geomean"]


def geomean(xs: Iterable[float | None], *, empty: float | None = None) -> float | None:
    """Geometric mean of the positive finite numbers in ``xs``; the others (``None``, zero, negative,
    infinite, NaN: a failed or missing measurement) are left out. ``empty`` when none is left."""
    logs = [math.log(x) for x in xs if x is not None and math.isfinite(x) and x > 0]
    return math.exp(sum(logs) / len(logs)) if logs else empty
