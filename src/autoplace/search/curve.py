"""The training curve of a learned search: one row per policy update, as CSV and as a PNG."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from autoplace.errors import FormatError
from autoplace.formats.files import atomic_write_text
from autoplace.formats.images import pyplot, save_png
from autoplace.validation import is_finite

__all__ = ["CurvePoint", "Curve"]


@dataclass(frozen=True)
class CurvePoint:
    """The search after one update: samples drawn so far, wall-clock seconds since the start, the best step
    time found so far, the mean step time of this update's samples that ran (``inf`` if none did), the share
    of them that failed, and their mean reward."""

    samples: int
    wall_s: float
    best_step_s: float
    mean_step_s: float
    failed: float
    mean_reward: float

    @classmethod
    def checked(cls, row) -> CurvePoint:
        """A point from six values read back from a file; ``ValueError`` unless samples and seconds are
        >= 0, step times > 0 (``inf``: none yet / none ran), the failed share in [0, 1] and the reward finite."""
        ok = isinstance(row, (list, tuple)) and len(row) == 6 and all(
            not isinstance(v, bool) and isinstance(v, (int, float)) and (is_finite(v) or isinstance(v, float))
            for v in row)
        if ok:
            s, w, best, mean, failed, reward = row
            ok = (float(s).is_integer() and 0 <= s < 2**62 and math.isfinite(w) and w >= 0
                  and best > 0 and mean > 0 and 0 <= failed <= 1 and math.isfinite(reward))
        if not ok:
            raise ValueError("not a curve point (samples, wall_s, best_step_s, mean_step_s, failed, mean_reward)")
        return cls(int(row[0]), *(float(v) for v in row[1:]))


class Curve:
    """Rows of :class:`CurvePoint`, in order."""

    def __init__(self, points: list[CurvePoint] | None = None):
        self.points: list[CurvePoint] = list(points or [])

    def append(self, point: CurvePoint) -> None:
        self.points.append(point)

    def __len__(self) -> int:
        return len(self.points)

    def to_rows(self) -> list[tuple]:
        return [astuple(p) for p in self.points]

    @classmethod
    def from_rows(cls, rows: list[tuple]) -> Curve:
        return cls([CurvePoint(*r) for r in rows])

    def write_csv(self, path: str | Path) -> None:
        """Write the curve (header + one line per update), atomically."""

        out = io.StringIO()
        w = csv.writer(out)
        w.writerow([fl.name for fl in fields(CurvePoint)])
        for p in self.points:
            w.writerow([_fmt(v) for v in astuple(p)])
        atomic_write_text(path, out.getvalue())

    @classmethod
    def read_csv(cls, path: str | Path) -> Curve:
        """A curve written by :meth:`write_csv`; one clear error for a file that is not one."""

        names = [fl.name for fl in fields(CurvePoint)]
        try:
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
            if not rows or rows[0] != names:
                raise ValueError("header")
        except (OSError, ValueError, UnicodeDecodeError, csv.Error) as e:
            raise FormatError(f"{path}: not a training curve written by --curve ({type(e).__name__})") from None
        points = []
        for i, r in enumerate(rows[1:], 2):
            try:
                points.append(CurvePoint.checked([float(v) for v in r]))
            except (ValueError, TypeError, OverflowError):
                raise FormatError(f"{path}: line {i} is not a curve point (samples, wall_s, best_step_s, "
                                  f"mean_step_s, failed, mean_reward; no NaN)") from None
        return cls(points)

    def plot(self, path: str | Path, title: str = "") -> None:
        """Best and sampled (mean of each update) step time against samples and against wall time, as PNG
        (written atomically)."""

        save_png(self.figure(), path, title)

    def figure(self):
        """The figure of :meth:`plot` (matplotlib), to save as PNG or SVG."""
        plt = pyplot()

        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        samples = [p.samples for p in self.points]
        wall = [p.wall_s for p in self.points]
        best = [p.best_step_s * 1e3 for p in self.points]
        mean = [p.mean_step_s * 1e3 if math.isfinite(p.mean_step_s) else float("nan") for p in self.points]
        for ax, x, label in ((axes[0], samples, "samples"), (axes[1], wall, "wall-clock seconds")):
            ax.plot(x, mean, ".", ms=3, alpha=0.5, label="sampled (mean of an update)")
            ax.plot(x, best, "-", lw=2, label="best so far")
            ax.set_xlabel(label)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("step time (ms)")
        axes[0].legend()
        return fig


def _fmt(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)
