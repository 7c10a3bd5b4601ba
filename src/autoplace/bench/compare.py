"""Two results folders side by side: did a change alter any job's result?

``autoplace bench -o AFTER --against BEFORE`` reads both folders' ``jobs.jsonl`` (read only: neither is
written) and compares every job they both hold, leaving out the fields that measure this machine rather
than the placement (:data:`autoplace.bench.jobs.MEASURED`: search and wall-clock seconds), and the jobs that
run for another job's wall time (their results depend on the machine). A job's result
is its simulated step times, memory peaks, errors, sample counts: every other field the earlier folder
holds, compared exactly (a field only the later one holds is something a newer version records, not a
change).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from autoplace.bench.jobs import SAME_WALL, measured
from autoplace.bench.store import Store
from autoplace.errors import FormatError

__all__ = ["FolderComparison", "compare_folders", "change_text"]


def _read(folder: str | Path) -> dict[str, dict]:
    """``folder/jobs.jsonl``'s results by job key, read without changing the folder (damaged lines left
    out, as a bench run would); one clear error for a folder that holds none."""

    path = Path(folder) / "jobs.jsonl"
    if not path.is_file():
        raise FormatError(f"{folder}: not a bench results folder (no {path.name})")
    try:
        return Store(folder, repair=False).results
    except OSError as e:
        raise FormatError(f"{folder}: not a bench results folder ({path.name}: {e.strerror or e})") from None


def _differences(a, b, where: str = "") -> list[tuple[str, object, object]]:
    """``(path, before, after)`` where ``a`` and ``b`` differ (paths as ``field.sub[2]``), measured fields
    left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(a):                 # a field only the later folder has is new, not a change
            if not measured(k):
                out += _differences(a.get(k), b.get(k), f"{where}.{k}" if where else k)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [(where or "result", a, b)]


@dataclass
class FolderComparison:
    """Jobs in both folders, in one only, and those whose results differ (job key -> the differing
    fields, each with its value before and after)."""

    common: int
    only_before: list[str] = field(default_factory=list)
    only_after: list[str] = field(default_factory=list)
    changes: dict[str, dict[str, list]] = field(default_factory=dict)
    timed: int = 0          #: jobs bound to wall-clock time (either folder), left out

    @property
    def same(self) -> bool:
        """No job both folders hold differs (and they hold at least one in common: two folders with
        nothing in common are not the same)."""
        return self.common > 0 and not self.changes

    @property
    def differ(self) -> dict[str, list[str]]:
        """Job key -> the paths of its fields that differ."""
        return {k: list(v) for k, v in self.changes.items()}

    def to_dict(self) -> dict:
        return {"common": self.common, "only_before": self.only_before, "only_after": self.only_after,
                "differ": self.differ, "changes": self.changes, "timed": self.timed, "same": self.same}


def compare_folders(before: str | Path, after: str | Path) -> FolderComparison:
    """Compare the jobs two results folders both hold (see the module docstring); jobs bound to wall-clock
    time (:data:`~autoplace.bench.jobs.SAME_WALL`: what they find depends on the machine's speed) are left
    out."""
    a, b = _read(before), _read(after)
    timed = {k for k in set(a) | set(b) if f'"{SAME_WALL}"' in k}
    common = sorted(set(a) & set(b) - timed)
    changes = {k: {path: [x, y] for path, x, y in d} for k in common if (d := _differences(a[k], b[k]))}
    return FolderComparison(len(common), sorted(set(a) - set(b) - timed), sorted(set(b) - set(a) - timed), changes,
                            len(timed))


def change_text(path: str, before, after) -> str:
    """``step_s 0.1234 -> 0.1301``: numbers to four significant digits, or as many more as it takes to
    tell the two apart."""
    digits = 4
    if isinstance(before, float) and isinstance(after, float):
        while digits < 17 and f"{before:.{digits}g}" == f"{after:.{digits}g}":
            digits += 1

    def v(x):
        return f"{x:.{digits}g}" if isinstance(x, float) else json.dumps(x)
    return f"{path} {v(before)} -> {v(after)}"
