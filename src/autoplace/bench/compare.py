"""Two results folders side by side: did a change alter any job's result?

``autoplace bench -o AFTER --against BEFORE`` reads both folders' ``jobs.jsonl`` (read only: neither is
written) and compares every job they both hold, leaving out the fields that measure this machine rather
than the placement (:data:`MEASURED`: search and wall-clock seconds). A job's result is its simulated step
times, memory peaks, errors, sample counts: every other field, compared exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from autoplace.errors import FormatError

__all__ = ["MEASURED", "FolderComparison", "compare_folders"]

#: result fields (at any depth) that are seconds measured on this machine: ``search_s`` and ``*wall_s``
MEASURED = ("search_s",)


def _measured(key: str) -> bool:
    return key in MEASURED or key.endswith("wall_s")


def _read(folder: str | Path) -> dict[str, dict]:
    """``folder/jobs.jsonl``'s results by job key; one clear error for a folder that holds none."""
    path = Path(folder) / "jobs.jsonl"
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise FormatError(f"{folder}: not a bench results folder ({path.name}: {e.strerror or e})") from None
    out = {}
    for line in lines:
        try:
            rec = json.loads(line)
            if isinstance(rec, dict) and isinstance(rec.get("job"), str) and isinstance(rec.get("result"), dict):
                out[rec["job"]] = rec["result"]
        except json.JSONDecodeError:
            continue                        # a line cut short by a kill: that job is not compared
    return out


def _differences(a, b, where: str = "") -> list[str]:
    """The paths (``field.sub[2]``) where ``a`` and ``b`` differ, measured fields left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if not _measured(k):
                out += _differences(a.get(k), b.get(k), f"{where}.{k}" if where else k)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [where or "result"]


@dataclass
class FolderComparison:
    """Jobs in both folders, in one only, and those whose results differ (job key -> differing fields)."""

    common: int
    only_before: list[str] = field(default_factory=list)
    only_after: list[str] = field(default_factory=list)
    differ: dict[str, list[str]] = field(default_factory=dict)

    @property
    def same(self) -> bool:
        return not self.differ

    def to_dict(self) -> dict:
        return {"common": self.common, "only_before": self.only_before, "only_after": self.only_after,
                "differ": self.differ, "same": self.same}


def compare_folders(before: str | Path, after: str | Path) -> FolderComparison:
    """Compare the jobs two results folders both hold (see the module docstring)."""
    a, b = _read(before), _read(after)
    common = sorted(set(a) & set(b))
    differ = {k: d for k in common if (d := _differences(a[k], b[k]))}
    return FolderComparison(len(common), sorted(set(a) - set(b)), sorted(set(b) - set(a)), differ)
