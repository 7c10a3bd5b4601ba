"""The results folder's store of finished jobs: ``jobs.jsonl``, one line per job, appended (flushed and
synced) as each finishes, so that a bench stopped at any point continues with the first job it had not
finished.

The store is read back as untrusted input: every line is checked (:func:`check_result`: a JSON object
``{"job": KEY, "result": {...}}`` whose fields have the types and ranges a job writes) before a table
reads it. A damaged line is set aside — moved to ``jobs.rejected.jsonl`` with the reason — and reported
(:attr:`Store.rejected`); its job runs again as if it had never finished.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from autoplace.bench.jobs import JOBS, Job
from autoplace.formats.files import atomic_write_bytes
from autoplace.validation import is_finite

__all__ = ["Store", "check_result", "LINE_FORMAT"]

#: each line's format (a line without one is read as this one)
LINE_FORMAT = "autoplace.bench-job/v1"

#: the fields each job kind always writes
REQUIRED = {"place": ("step_s", "ok", "oom", "error", "search_s", "wall_s"),
            "bounds": ("critical_path_s", "load_s", "ops"),
            "gdp-batch": ("steps_s", "updates", "samples", "wall_s"),
            "gdp-holdout": ("zero_shot_s", "fine_tune_s", "scratch_s", "zero_shot", "pretrain_wall_s",
                            "zero_shot_wall_s", "fine_tune_wall_s", "fine_tune_updates", "scratch_wall_s",
                            "scratch_updates"),
            "predictor": ("mappings", "models", "search_s", "wall_s"),
            "enumerate": ("nodes", "coarsened", "devices", "mappings", "default_step_s", "better_than_default",
                          "failed", "best_step_s", "htf_mpr_step_s", "htf_mpr_rank", "htf_mpr_ties",
                          "htf_mpr_evaluations", "search_s", "enumeration_s", "wall_s")}
#: the fields a job kind writes where its key holds an argument: ``(kind, argument) -> fields``; each field
#: under :data:`SEARCHES` is an object of a search's step and wall time
REQUIRED_WITH = {("gdp-batch", "robust"): ("search_s", "robust_steps_s"),
                 ("gdp-holdout", "baselines"): ("fine_tune", "scratch", "frozen", "frozen_wall")}
SEARCHES = ("fine_tune", "scratch", "frozen", "frozen_wall")
#: fields that are whole counts (>= 0)
COUNTS = {"samples", "updates", "mappings", "nodes", "devices", "devices_used", "ops", "initial", "screened",
          "failed", "better_than_default", "htf_mpr_rank", "htf_mpr_ties", "htf_mpr_evaluations", "samples_to_best",
          "fine_tune_updates", "scratch_updates", "groups", "failed_runs", "replicas", "micro_batches"}
BOOLS = {"ok", "coarsened", "gain_inside_range", "fits"}
TEXTS = {"error", "stop_reason", "prior", "family", "from", "kind", "per_replica", "method"}
MAX_DEPTH = 6
#: step times (a table divides by them): ``None`` (failed) or > 0
STEPS = {"steps_s", "robust_steps_s", "one_gpu_s", "zero_shot_s", "fine_tune_s", "scratch_s", "step_range_s"}
#: a field present means others are there too, inside it or beside it (what the tables read with it)
INSIDE = {"search": ("samples", "updates", "stop_reason", "improvements"), "strategy": ("kind", "replicas")}
BESIDE = {"worst_case_speedup": ("one_gpu_s",)}
#: the fields of each object under these keys (by model)
EACH = {"models": ("mean", "std", "failed_runs")}
#: a zero-shot placement's fields (gdp-batch: one per held-out setting; gdp-holdout: one, and its control)
ZERO_SHOT = ("step_s", "greedy_step_s", "policy_s", "prior_s", "wall_s")


class _Damaged(Exception):
    pass


def _number(v, *, positive: bool = False) -> bool:
    return (isinstance(v, (int, float)) and is_finite(v)
            and (v > 0 if positive else v >= 0))


def _steps(key: str, v) -> bool:
    """A step-time field: ``None`` (failed) or seconds > 0; ``step_range_s`` two of them, ``steps_s`` and
    ``robust_steps_s`` an object of them (by setting)."""
    if key == "step_range_s":
        return isinstance(v, list) and len(v) == 2 and all(_number(x, positive=True) for x in v)
    if key in ("steps_s", "robust_steps_s"):
        return isinstance(v, dict) and all(x is None or _number(x, positive=True) for x in v.values())
    return v is None or _number(v, positive=True)


def _plain(v, depth: int) -> bool:
    """A field this check has no rule for: JSON scalars (finite numbers) and lists of them, not too deep."""
    if isinstance(v, list):
        return depth <= MAX_DEPTH and all(_plain(x, depth + 1) for x in v)
    return v is None or isinstance(v, (str, bool)) or (isinstance(v, (int, float)) and is_finite(v))


def _check(obj: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _Damaged(f"{path or 'result'}: nested too deeply")
    if not isinstance(obj, dict):
        raise _Damaged(f"{path or 'result'}: must be an object")
    for k, v in obj.items():
        name = f"{path}.{k}" if path else k
        if k in COUNTS:
            ok = not isinstance(v, bool) and isinstance(v, int) and 0 <= v < 2**62
        elif k in BOOLS:
            ok = isinstance(v, bool)
        elif k in TEXTS:
            ok = v is None or isinstance(v, str)
        elif k == "oom":
            ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
        elif k == "peak_gib":
            ok = isinstance(v, list) and all(_number(x) for x in v)
        elif k == "worst_case_speedup":
            ok = _number(v, positive=True)
        elif k == "strategies":                               # auto's strategy rows: objects with a method
            ok = isinstance(v, list) and all(isinstance(x, dict) and isinstance(x.get("method"), str) for x in v)
            if ok:
                for j, x in enumerate(v):
                    _check(x, f"{name}[{j}]", depth + 1)
                continue
        elif k == "improvements":
            ok = isinstance(v, list) and all(isinstance(x, list) and len(x) == 2 and _number(x[0])
                                             and (x[1] is None or _number(x[1])) for x in v)
        elif k in ("mean", "std"):
            ok = v is None or _number(v)
        elif k in STEPS or k.endswith("step_s"):
            ok = _steps(k, v)
        elif k.endswith("_s"):
            ok = _number(v)                                   # measured seconds: a number, never None
        elif isinstance(v, dict):
            _check(v, name, depth + 1)
            continue
        else:
            ok = _plain(v, depth + 1)
        if not ok:
            raise _Damaged(f"field {name!r} has the wrong type or range ({json.dumps(v)[:40]})")
    for rules, inside in ((INSIDE, True), (BESIDE, False)):
        for k, needs in rules.items():
            if k not in obj:
                continue
            holder = obj[k] if inside else obj
            if not isinstance(holder, dict):
                raise _Damaged(f"field {(path + '.' if path else '') + k!r} must be an object")
            missing = [n for n in needs if holder.get(n) is None]
            if missing:
                raise _Damaged(f"field {(path + '.' if path else '') + k!r} lacks {missing[0]!r}")
    for k, needs in EACH.items():
        if k in obj:
            if not isinstance(obj[k], dict):
                raise _Damaged(f"field {(path + '.' if path else '') + k!r} must be an object")
            for sub, v in obj[k].items():
                if not isinstance(v, dict) or any(n not in v for n in needs) or (
                        (v.get("mean") is None) != (v.get("std") is None)):
                    raise _Damaged(f"field {(path + '.' if path else '') + k}[{sub!r}] lacks one of {', '.join(needs)}")


def check_result(key: Any, result: Any) -> str | None:
    """Why the stored ``(key, result)`` of a job cannot be used (``None``: it can)."""
    if not isinstance(key, str):
        return "the job key is not a string"
    try:
        job = json.loads(key)
    except (ValueError, RecursionError):
        return "the job key is not a job"
    if not isinstance(job, dict) or job.get("kind") not in JOBS:
        return "the job key names no job kind"
    try:
        _check(result, "", 0)
    except _Damaged as e:
        return str(e)
    missing = [f for f in REQUIRED[job["kind"]] if f not in result]
    missing += [f for (kind, arg), fields in REQUIRED_WITH.items() if kind == job["kind"] and job.get(arg)
                for f in fields if f not in result]
    if missing:
        return f"field {missing[0]!r} is missing"
    if job["kind"] == "gdp-holdout" and job.get("baselines") and not isinstance(result.get("untrained_zero_shot"),
                                                                                 dict):
        return "field 'untrained_zero_shot' must be an object"
    for k in SEARCHES:
        if k in result and not (isinstance(result[k], dict) and "step_s" in result[k] and "wall_s" in result[k]):
            return f"field {k!r} lacks one of step_s, wall_s"
    if job["kind"] == "place" and (result["step_s"] is None) == bool(result["ok"]):
        return "fields 'ok' and 'step_s' disagree"
    if job["kind"] == "place" and "worst_case_speedup" in result and not result["ok"]:
        return "field 'worst_case_speedup' of a placement that did not run"
    if job["kind"] == "enumerate" and not (result["better_than_default"] <= result["mappings"] >= 1
                                           and result["htf_mpr_rank"] >= 1):
        return "fields 'mappings', 'better_than_default' and 'htf_mpr_rank' disagree"
    shots = {}                      # zero-shot placements: one per held-out setting, or one and its control
    if job["kind"] == "gdp-batch":
        shots = result.get("zero_shot", {})
    elif job["kind"] == "gdp-holdout":
        shots = {k: result[k] for k in ("zero_shot", "untrained_zero_shot")      # no control: null
                 if k == "zero_shot" or result.get(k) is not None}
    if not isinstance(shots, dict):
        return "field 'zero_shot' must be an object"
    for k, z in shots.items():
        if not isinstance(z, dict) or any(n not in z for n in ZERO_SHOT):
            return f"field 'zero_shot' ({str(k)[:40]}) lacks one of {', '.join(ZERO_SHOT)}"
    return None


class Store:
    """Finished jobs' results in ``folder/jobs.jsonl``, one JSON line per job, appended as each finishes;
    :attr:`rejected` lists ``(line number, reason)`` for the damaged lines set aside when it was read.
    ``repair=False`` reads the folder without changing it (another run's folder, compared)."""

    def __init__(self, folder: str | Path, *, repair: bool = True):
        self.folder = Path(folder)
        self.path = self.folder / "jobs.jsonl"
        self.results: dict[str, dict] = {}
        self.rejected: list[tuple[int, str]] = []
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):   # a line cut short by a kill: dropped (that job runs again)
            data = data[:data.rfind(b"\n") + 1]
            if repair:
                with open(self.path, "r+b") as f:
                    f.truncate(len(data))
        good, bad = [], []
        for i, raw in enumerate(data.split(b"\n")[:-1], 1):
            why = None
            try:
                rec = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                why = "not UTF-8"
            except json.JSONDecodeError:
                why = "not JSON"
            except ValueError:
                why = "a number too long to read"
            except RecursionError:
                why = "nested too deeply"
            if why is None:
                if not isinstance(rec, dict) or set(rec) - {"format"} != {"job", "result"}:
                    why = 'not {"format": ..., "job": ..., "result": ...}'
                elif rec.get("format", LINE_FORMAT) != LINE_FORMAT:
                    why = f"format {str(rec['format'])[:40]!r} is not {LINE_FORMAT!r}"
                else:
                    why = check_result(rec["job"], rec["result"])
            if why is None:
                self.results[rec["job"]] = rec["result"]
                good.append(raw)
            elif raw.strip():
                self.rejected.append((i, why))
                bad.append(json.dumps({"line": i, "reason": why, "text": raw.decode("utf-8", "replace")[:10_000]}))
        if bad and repair:

            with open(self.folder / "jobs.rejected.jsonl", "a", encoding="utf-8") as f:
                f.write("\n".join(bad) + "\n")
            atomic_write_bytes(self.path, b"".join(line + b"\n" for line in good))

    def __contains__(self, job: Job) -> bool:
        return job.key in self.results

    def __getitem__(self, job: Job) -> dict:
        return self.results[job.key]

    def add(self, job: Job, result: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"format": LINE_FORMAT, "job": job.key, "result": result}, allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.results[job.key] = result
