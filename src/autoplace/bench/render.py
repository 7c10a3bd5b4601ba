"""A bench table: sections of rows, written as Markdown, JSON and a PNG chart."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autoplace.formats.images import pyplot, save_png

__all__ = ["Table", "Section", "markdown_table", "fmt_seconds", "fmt_speedup"]


def fmt_seconds(x: float | None) -> str:
    """A step in seconds, four significant digits; ``–`` where there is none (failed, or not reported)."""
    return "–" if x is None else f"{x:.4g}"


def fmt_speedup(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.2f}x"


def markdown_table(columns: list[str], rows: list[list], align: str = "") -> str:
    """A Markdown table: ``align`` gives each column's alignment (``l`` or ``r``; by default the first
    column left and the others right); ``|`` inside a cell is escaped."""
    align = align or "l" + "r" * (len(columns) - 1)

    def cell(v) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


@dataclass
class Section:
    title: str
    columns: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        return f"### {self.title}\n\n" + markdown_table(self.columns, self.rows)


@dataclass
class Table:
    """One table of the suite. ``plot`` is ``(kind, baseline, {setting: {series: (ours, paper-or-std)}})``
    (also in the JSON, as numbers, under ``chart``):
    ``speedup`` (bars of our speedup over ``baseline``, the paper's as markers), ``gain`` (bars of a
    relative gain, the paper's as markers) or ``tau`` (bars of Kendall tau distance with their std)."""

    name: str
    title: str
    about: str
    budgets: Any = None
    seed: int = 0
    note: str = ""            #: the run's learned-placer settings and variants, if any
    sections: list[Section] = field(default_factory=list)
    plot: tuple | None = None

    def add_section(self, title: str, columns: list[str], rows: list[list[str]]) -> None:
        self.sections.append(Section(title, columns, rows))

    def header(self) -> str:
        b = self.budgets
        return (f"Simulated, seed {self.seed}; budgets: search placers {b.search:g} s, learned placers "
                f"{b.learned:g} s of nominal work. `–`: none (a failing placement, or a figure the paper "
                "does not report)." + (f" {self.note}" if self.note else ""))

    def markdown(self) -> str:
        parts = [f"## {self.title}", "", self.about, "", self.header()]
        for s in self.sections:
            parts += ["", s.markdown()]
        return "\n".join(parts) + "\n"

    def to_dict(self) -> dict:
        kind, baseline, data = self.plot or ("", "", {})
        return {"name": self.name, "title": self.title, "about": self.about, "note": self.note, "seed": self.seed,
                "budgets": asdict(self.budgets), "sections": [asdict(s) for s in self.sections],
                "chart": {"kind": kind, "baseline": baseline,
                          "data": {s: {k: [_json_num(x) for x in v] for k, v in series.items()}
                                   for s, series in data.items()}}}

    def png(self, path: str | Path) -> None:
        """The table's chart: one panel per setting (at most 12), one bar per series."""
        plt = pyplot()


        kind, baseline, data = self.plot
        settings = list(data)[:12]
        cols = min(3, len(settings))
        rows = math.ceil(len(settings) / cols)
        series = list(dict.fromkeys(k for s in settings for k in data[s]))
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 0.3 * len(series) * rows + 1.6 * rows),
                                 squeeze=False)
        for ax, s in zip(axes.flat, settings):
            y = np.arange(len(series))
            ours = np.array([_num(data[s].get(k, (None, None))[0]) for k in series])
            other = np.array([_num(data[s].get(k, (None, None))[1]) for k in series])
            ok = np.isfinite(ours)
            if kind == "tau":
                ax.barh(y[ok], ours[ok], xerr=np.nan_to_num(other[ok]), color="tab:blue", capsize=2)
                ax.set_xlabel("Kendall tau distance (lower is better)")
            else:
                ax.barh(y[ok], ours[ok], color="tab:blue", label="ours")
                have = np.isfinite(other)
                if have.any():
                    ax.plot(other[have], y[have], "kD", ms=5, label="paper")
                ax.axvline(0 if kind == "gain" else 1, color="grey", lw=1)
                ax.set_xlabel("run-time gain" if kind == "gain" else f"speedup over {baseline}")
                if have.any():
                    ax.legend(fontsize=7, loc="lower right")
            for i in np.flatnonzero(~ok):
                ax.text(0, i, " failed / none", va="center", color="tab:red", fontsize=7)
            ax.set_yticks(y, series, fontsize=8)
            ax.invert_yaxis()
            ax.set_title(s, fontsize=9)
            ax.grid(axis="x", alpha=0.3)
        for ax in list(axes.flat)[len(settings):]:
            ax.axis("off")
        save_png(fig, path, self.title)


def _json_num(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _num(x) -> float:
    return float(x) if x is not None and math.isfinite(x) else float("nan")
