"""Figures written to files: a matplotlib figure as a PNG, atomically (a reader never sees half of it)."""

from __future__ import annotations

import io
from pathlib import Path

from autoplace.formats.files import atomic_write_bytes

__all__ = ["pyplot", "save_png"]


def pyplot():
    """matplotlib's ``pyplot``, drawing to files (the Agg backend: no display needed), imported on first use:
    matplotlib is an optional dependency (``pip install autoplace[plot]``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: str | Path, title: str = "") -> None:
    """``fig`` (titled ``title``) as a PNG at ``path``, written atomically; the figure is closed."""
    plt = pyplot()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(Path(path), buf.getvalue())
