"""Human-readable quantities: times, sizes, rates, FLOPs and ratios, never in exponent notation.

A low layer (no autoplace imports): error messages anywhere and the CLI's tables format numbers alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["fmt_time", "fmt_bytes", "fmt_rate", "fmt_flops", "fmt_ratio"]


def _num(v: float) -> str:
    """Three significant digits, never in exponent notation (999.7 -> ``1000``, 1234 -> ``1234``)."""
    s = f"{v:.3g}"
    return f"{v:.0f}" if "e+" in s else s


def _scaled(x: float, units: Sequence[tuple[str, float]], last: str, last_scale: float) -> str:
    """``x`` in the first unit it is at least one of (largest first), else in ``last``."""
    for unit, scale in units:
        if abs(x) >= scale:
            return f"{_num(x / scale)} {unit}"
    return f"{_num(x / last_scale)} {last}"


def fmt_time(seconds: float) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return _scaled(seconds, (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)), "ns", 1e-9)


def fmt_bytes(n: float) -> str:
    n = float(n)
    if abs(n) < 2**10:
        return f"{int(n)} B"
    return _scaled(n, (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)), "KiB", 2**10)


def fmt_rate(bytes_per_s: float) -> str:
    """Bandwidth in decimal units, as vendors quote it (GB/s)."""
    return _scaled(bytes_per_s, (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)), "B/s", 1.0)


def fmt_flops(f: float) -> str:
    return _scaled(f, (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)), "FLOP", 1.0)


def fmt_ratio(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}x"
