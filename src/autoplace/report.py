"""Human-readable numbers and tables for the CLI (rich tables on a terminal, Markdown on request)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["fmt_time", "fmt_bytes", "fmt_rate", "fmt_flops", "fmt_ratio", "markdown_table"]


def fmt_time(seconds: float) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def fmt_bytes(n: float) -> str:
    n = float(n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.3g} {unit}" if abs(v) < 1000 else f"{v:.0f} {unit}"  # 1010 MiB, not 1.01e+03
    return f"{int(n)} B"


def fmt_rate(bytes_per_s: float) -> str:
    """Bandwidth in decimal units, as vendors quote it (GB/s)."""
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)):
        if abs(bytes_per_s) >= scale:
            return f"{bytes_per_s / scale:.3g} {unit}"
    return f"{bytes_per_s:.3g} B/s"


def fmt_flops(f: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(f) >= scale:
            return f"{f / scale:.3g} {unit}"
    return f"{f:.3g} FLOP"


def fmt_ratio(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}x"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
