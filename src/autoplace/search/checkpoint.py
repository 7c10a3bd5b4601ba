"""Checkpoints of a learned search, written atomically and read back as untrusted input.

A checkpoint is one file, ``DIR/checkpoint.safetensors``: a state file (:mod:`autoplace.formats.state`:
tensors in safetensors, the rest JSON; nothing in it can run code) holding the policy and optimizer state,
random-number generator states, baselines, best placement, curve, score cache and counters, with the
identity of the search it belongs to (:func:`identity`: the graph's and cluster's content hashes, the
config, the seed). It is written as every output is (a temporary file renamed over the old one): a reader
sees the old checkpoint or the new one, never half of one.

Reading checks the identity first (a checkpoint of a graph with the same name but other content is refused,
naming what differs), then every field before it is used (:class:`~autoplace.formats.state.StateFields`
and the helpers below): a damaged file is one line naming the file and the field.
"""

from __future__ import annotations

import math
import time
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from autoplace.errors import FormatError
from autoplace.formats.state import (
    Settings,
    StateFields,
    canonical,
    check_identity,
    cluster_hash,
    graph_hash,
    read_state,
    write_state,
)
from autoplace.search.curve import Curve, CurvePoint

__all__ = ["CHECKPOINT_FILE", "save_checkpoint", "load_checkpoint", "Checkpointer", "identity", "open_checkpoint",
           "checkpoint_path", "cache_state", "load_cache", "load_curve", "load_torch", "load_optimizer",
           "load_counters", "load_best", "load_generator", "policy_search_state", "load_policy_search",
           "check_scores", "check_best"]

CHECKPOINT_FILE = "checkpoint.safetensors"
_OLD_FILE = "checkpoint.pt"       # the pickle checkpoints of earlier versions: never read


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``directory/checkpoint.safetensors`` atomically; returns the path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    write_state(d / CHECKPOINT_FILE, state)
    return d / CHECKPOINT_FILE


def checkpoint_path(directory: str | Path) -> Path:
    return Path(directory) / CHECKPOINT_FILE


def load_checkpoint(directory: str | Path) -> dict[str, Any]:
    """The state saved in ``directory`` (a dict with a ``format``); :class:`FormatError` naming the path if
    there is none or it is not a checkpoint. Its fields are checked by the search that resumes it."""
    d = Path(directory)
    path = d / CHECKPOINT_FILE
    if not path.exists() and not path.is_symlink():
        if (d / _OLD_FILE).is_file():
            raise FormatError(f"{d / _OLD_FILE}: a pickle checkpoint of an earlier autoplace is never loaded (it "
                              f"could run code); start the search again")
        raise FormatError(f"no checkpoint to resume from: {path} does not exist")
    state = read_state(path, "checkpoint")
    if not isinstance(state, dict) or not isinstance(state.get("format"), str):
        raise FormatError(f"{path}: not a checkpoint (no format)")
    return state


def identity(graph, cluster, config, seed: int, env: str, **extra) -> dict:
    """What a checkpoint belongs to: the graph and cluster (names and content hashes), the config and seed,
    the env that scored its placements (a simulated search's scores are no measurements), and ``extra`` (a
    placer's node count …). The config carries its fields' defaults (:class:`~autoplace.formats.state.
    Settings`): a checkpoint written before a setting existed holds that setting at its default."""
    config_dict = Settings(asdict(config))
    config_dict.defaults = {f.name: f.default for f in fields(config) if f.default is not MISSING}
    return {"graph": graph.name, "graph_hash": graph_hash(graph), "cluster": cluster.name,
            "cluster_hash": cluster_hash(cluster), "config": config_dict, "seed": seed, "env": env, **extra}


def check_scores(f: StateFields, key: str, scorer, cache: dict[bytes, tuple[float, bool]], *,
                 chunk: int = 256) -> None:
    """Where ``scorer`` is deterministic (the simulator), every cached score is scored again and must be the
    stored one: a checkpoint cannot make a search trust a step time its placement does not have. (A
    measured search's scores are measurements: they are checked for range only.)"""
    if not scorer.deterministic or not cache:
        return
    keys = list(cache)
    for start in range(0, len(keys), chunk):
        part = keys[start:start + chunk]
        groups = np.frombuffer(b"".join(part), dtype=np.int64).reshape(len(part), -1)
        step, ok = scorer.score_ops(scorer.grouping.expand_many(groups))
        for k, s, r in zip(part, step.tolist(), ok.tolist()):
            s0, r0 = cache[k]
            if bool(r) != r0 or (r and not math.isclose(s, s0, rel_tol=1e-9)):
                raise FormatError(f"{f.where}: field {f.name(key)!r} holds a step time its placement does not have "
                                  f"(stored {s0!r}, simulated {float(s) if r else math.inf!r})")


def check_best(f: StateFields, cache: dict, best_step: float, best_groups: np.ndarray | None,
               key: str = "best_step") -> None:
    """The best placement must be one the cache scored, with the best step: the search found it so."""
    if best_groups is None:
        return
    entry = cache.get(np.ascontiguousarray(best_groups, dtype=np.int64).tobytes())
    if entry is None or not entry[1] or entry[0] != best_step:
        raise f.fail(key, "the step time the cache holds for best_groups")


def open_checkpoint(state: dict, fmt: str, mine: dict, where: str) -> StateFields:
    """The fields of ``state`` once its format and identity are those of this search (``mine``); else one
    :class:`FormatError` naming ``where`` and what differs. The reader calls the fields' ``finish()`` once it
    has read every one: a field it did not ask for is refused."""
    check_identity(state, fmt, mine, where)
    f = StateFields(state, where)
    f.mark("format", *mine)
    return f


# ------------------------------------------------------------------------------------------ shared fields
def cache_state(scorer, n_groups: int) -> dict:
    """A scorer's cache (group placement -> (step, ran)) and its run counts as five arrays: ``groups``,
    ``step`` (the mean of the runs that ran; ``inf`` if none), ``ok``, ``runs`` and ``failed``."""
    cache = scorer.cache
    keys = list(cache)
    groups = (np.frombuffer(b"".join(keys), dtype=np.int64).reshape(len(keys), n_groups) if keys
              else np.zeros((0, n_groups), dtype=np.int64))
    counts = [scorer.runs.get(k, (1, 0) if cache[k][1] else (0, 1)) for k in keys]
    return {"groups": groups, "step": np.array([cache[k][0] for k in keys], dtype=np.float64),
            "ok": np.array([cache[k][1] for k in keys], dtype=bool),
            "runs": np.array([c[0] for c in counts], dtype=np.int64),
            "failed": np.array([c[1] for c in counts], dtype=np.int64)}


def load_cache(f: StateFields, key: str, n_groups: int,
               n_devices: int) -> tuple[dict[bytes, tuple[float, bool]], dict[bytes, tuple[int, int]]]:
    """The cache and run counts saved by :func:`cache_state` under ``key``, every entry checked: device
    indices in range, a step time > 0 where the placement ran and ``inf`` where it did not, counts >= 0
    with at least one run that ran exactly where it ran."""
    c = f.sub(key)
    groups = c.array("groups", (-1, n_groups), "iu")
    step = c.array("step", (len(groups),), "f")
    ok = c.array("ok", (len(groups),), "b")
    runs, failed = c.array("runs", (len(groups),), "iu"), c.array("failed", (len(groups),), "iu")
    if len(groups) and (groups.min() < 0 or groups.max() >= n_devices):
        raise c.fail("groups", f"device indices in [0, {n_devices})")
    if not (np.all(np.where(ok, np.isfinite(step) & (step > 0), step == np.inf))):
        raise c.fail("step", "step times > 0 where a placement ran and inf where it failed")
    if len(groups) and (runs.min() < 0 or failed.min() < 0 or np.any((runs > 0) != ok) or runs.max() >= 2**40
                        or failed.max() >= 2**40 or np.any(runs + failed < 1)):
        raise c.fail("runs", "counts of runs >= 1 exactly where a placement ran (failed runs >= 0)")
    groups = np.ascontiguousarray(groups, dtype=np.int64)
    keys = [row.tobytes() for row in groups]
    return ({k: (float(s), bool(r)) for k, s, r in zip(keys, step.tolist(), ok.tolist())},
            {k: (int(n), int(m)) for k, n, m in zip(keys, runs.tolist(), failed.tolist())})


def load_curve(f: StateFields, key: str = "curve") -> Curve:
    """The curve rows under ``key``, each checked (samples and seconds >= 0, step times > 0 or ``inf``, the
    failed share in [0, 1], a finite mean reward)."""
    points = []
    for i, r in enumerate(f.list(key)):
        try:
            points.append(CurvePoint.checked(r))
        except ValueError as e:
            raise FormatError(f"{f.where}: field {f.name(key)!r} row {i} is {e}") from None
    return Curve(points)


def load_torch(f: StateFields, key: str, module) -> None:
    """``module.load_state_dict`` of the state dict under ``key``: the same parameter names and shapes as
    ``module``'s (a policy of another architecture is one line naming the parameter)."""
    import torch

    saved = f.dict(key)
    mine = module.state_dict()
    for name, t in mine.items():
        v = saved.get(name)
        if not isinstance(v, torch.Tensor) or tuple(v.shape) != tuple(t.shape) or v.dtype != t.dtype:
            got = ("missing" if v is None else f"a {str(v.dtype)[6:]} tensor of shape {tuple(v.shape)}"
                   if isinstance(v, torch.Tensor) else "not a tensor")
            raise FormatError(f"{f.where}: field {f.name(key)!r}: parameter {name!r} must be a "
                              f"{str(t.dtype)[6:]} tensor of shape {tuple(t.shape)}, got {got}")
        if v.is_floating_point() and not torch.isfinite(v).all():
            raise FormatError(f"{f.where}: field {f.name(key)!r}: parameter {name!r} holds NaN or infinity")
    extra = sorted(set(saved) - set(mine))
    if extra:
        raise FormatError(f"{f.where}: field {f.name(key)!r}: unknown parameter {str(extra[0])[:40]!r}")
    f.apply(key, module.load_state_dict)


def load_optimizer(f: StateFields, key: str, optimizer) -> None:
    """``optimizer.load_state_dict`` (an Adam's) of the state under ``key``, once its parameter groups equal
    this optimizer's — the same parameters and the same settings (learning rate, betas …: those the config
    gives) — and every parameter's state is Adam's: ``step`` a count, ``exp_avg`` and ``exp_avg_sq`` (>= 0)
    finite tensors of the parameter's shape."""
    import torch

    s = f.sub(key)
    groups, state = s.list("param_groups"), s.dict("state")
    mine = optimizer.state_dict()["param_groups"]
    if len(groups) != len(mine) or any(not isinstance(g, dict) or set(g) != set(m) or any(
            type(v) is not type(m[k]) or canonical(v) != canonical(m[k]) for k, v in g.items())
            for g, m in zip(groups, mine)):
        raise s.fail("param_groups", "this search's parameter groups and optimizer settings")
    params = [p for g in optimizer.param_groups for p in g["params"]]
    names = {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if mine and mine[0].get("amsgrad") else set())
    for i, st in state.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(params) or not isinstance(st, dict):
            raise s.fail("state", f"per-parameter state of parameters 0..{len(params) - 1}")
        if set(st) != names or not all(isinstance(v, torch.Tensor) for v in st.values()):
            raise FormatError(f"{s.where}: field {s.name('state')!r}: parameter {i} must hold the tensors "
                              f"{', '.join(sorted(names))}")
        step = st["step"]                     # Adam's steps so far: >= 1 once it holds moments (0 divides by 0)
        if step.dim() != 0 or not torch.isfinite(step) or not 1 <= float(step) <= 2**53 or float(step) % 1:
            raise FormatError(f"{s.where}: field {s.name('state')!r}: parameter {i}'s step must be a count >= 1")
        for name in names - {"step"}:
            v = st[name]
            if (tuple(v.shape) != tuple(params[i].shape) or v.dtype != params[i].dtype
                    or not torch.isfinite(v).all() or (name != "exp_avg" and bool((v < 0).any()))):
                raise FormatError(f"{s.where}: field {s.name('state')!r}: {name} of parameter {i} must be a finite "
                                  f"{str(params[i].dtype)[6:]} tensor of shape {tuple(params[i].shape)}"
                                  + (" (>= 0)" if name != "exp_avg" else ""))
    f.apply(key, optimizer.load_state_dict)


def load_counters(f: StateFields, search, *names: str) -> None:
    """``samples``, ``updates`` (integers >= 0) and ``wall_s`` (seconds >= 0) and the integer counters
    ``names`` onto ``search``."""
    search.samples, search.updates = f.int("samples"), f.int("updates")
    search.wall_s = f.float("wall_s")
    for n in names:
        setattr(search, n, f.int(n))


def load_best(f: StateFields, n_groups: int, n_devices: int) -> tuple[float, np.ndarray | None]:
    """``best_step`` (> 0, or ``inf`` with no ``best_groups``) and ``best_groups``, consistent."""
    best = f.float("best_step", 1e-300, inf=True)
    groups = f.groups("best_groups", n_groups, n_devices)
    if (groups is None) != (best == math.inf):
        raise f.fail("best_groups", "a placement exactly when best_step is finite")
    return best, groups


def load_generator(f: StateFields, key: str, generator) -> None:
    """A torch generator's (``generator``; ``None``: torch's global one) state under ``key``."""
    import torch

    f.tensor(key, torch.uint8)
    f.apply(key, torch.set_rng_state if generator is None else generator.set_state)


def policy_search_state(search, n: int, modules: dict) -> dict:
    """What a policy-gradient search with one baseline (RL, HDP) saves beside its identity: its networks
    (``modules``: field name -> module), optimizer, generators, baseline, best placement of ``n`` nodes,
    counters, curve and score cache."""
    import torch

    return {**{k: m.state_dict() for k, m in modules.items()}, "optimizer": search.optimizer.state_dict(),
            "generator": search.generator.get_state(), "torch_rng": torch.get_rng_state(),
            "baseline": search.baseline, "best_step": search.best_step, "best_groups": search.best_groups,
            "samples": search.samples, "updates": search.updates, "wall_s": search.wall_s,
            "curve": search.curve.to_rows(), "cache": cache_state(search.evaluate, n)}


def load_policy_search(f: StateFields, search, n: int, modules: dict, counters: tuple[str, ...] = ()) -> None:
    """:func:`policy_search_state`'s fields (and the integer ``counters``) onto ``search``, every field
    checked before any is applied but the networks' (each checked, then loaded), the cached scores too
    (:func:`check_scores`)."""
    best = load_best(f, n, search.cluster.n_devices)
    baseline = f.float("baseline", 0.0, 1e150)
    curve, (cache, runs) = load_curve(f), load_cache(f, "cache", n, search.cluster.n_devices)
    check_best(f, cache, *best)
    check_scores(f, "cache", search.evaluate, cache)
    for key, module in modules.items():
        load_torch(f, key, module)
    load_optimizer(f, "optimizer", search.optimizer)
    load_generator(f, "generator", search.generator)
    load_generator(f, "torch_rng", None)
    load_counters(f, search, *counters)
    search.baseline, (search.best_step, search.best_groups), search.curve = baseline, best, curve
    search.evaluate.restore(cache, runs)


class Checkpointer:
    """Saves ``state_fn()`` to ``directory`` when ``every_s`` seconds have passed since the last save (or
    on :meth:`save`); does nothing without a directory."""

    def __init__(self, directory: str | Path | None, every_s: float = 30.0):
        self.directory = None if directory is None else Path(directory)
        self.every_s = float(every_s)
        self.last = time.monotonic()
        self.saves = 0

    def maybe_save(self, state_fn) -> bool:
        if self.directory is None or time.monotonic() - self.last < self.every_s:
            return False
        self.save(state_fn)
        return True

    def save(self, state_fn) -> None:
        if self.directory is None:
            return
        save_checkpoint(self.directory, state_fn())
        self.last = time.monotonic()
        self.saves += 1
