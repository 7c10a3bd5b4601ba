"""The results folder's store of finished jobs: ``jobs.jsonl``, one line per job, appended (flushed and
synced) as each finishes, so that a bench stopped at any point continues with the first job it had not
finished."""

from __future__ import annotations

import json
import os
from pathlib import Path

from autoplace.bench.jobs import Job

__all__ = ["Store"]


class Store:
    """Finished jobs' results in ``folder/jobs.jsonl``, one JSON line per job, appended as each finishes."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / "jobs.jsonl"
        self.results: dict[str, dict] = {}
        if self.path.exists():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):   # a line cut short by a kill: dropped (that job runs again)
                data = data[:data.rfind(b"\n") + 1]
                with open(self.path, "r+b") as f:
                    f.truncate(len(data))
            for line in data.decode("utf-8", errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                    self.results[rec["job"]] = rec["result"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue

    def __contains__(self, job: Job) -> bool:
        return job.key in self.results

    def __getitem__(self, job: Job) -> dict:
        return self.results[job.key]

    def add(self, job: Job, result: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"job": job.key, "result": result}, allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.results[job.key] = result
