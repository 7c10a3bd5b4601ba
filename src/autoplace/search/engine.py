"""The loop every learned search runs: update until the budget is spent, report progress, checkpoint, stop
cleanly on Ctrl-C, write the training curve.

A search is an object with the :class:`Searcher` interface: :meth:`~Searcher.update` samples placements,
scores them and trains its policy once, returning the :class:`~autoplace.search.curve.CurvePoint` it
appended to its curve; :meth:`~Searcher.state` / :meth:`~Searcher.load` save and restore everything it
needs to continue as if it had not stopped. :func:`run_search` drives it to a
:class:`~autoplace.search.budget.SearchBudget` and returns why it stopped. The RL placer, HDP and GDP run
on it; so can any new learned placer.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from autoplace.errors import AutoplaceError, UnavailableError
from autoplace.progress import report_progress
from autoplace.search.budget import SearchBudget
from autoplace.search.checkpoint import Checkpointer, checkpoint_path, load_checkpoint
from autoplace.search.curve import Curve, CurvePoint

__all__ = ["Searcher", "SearchRun", "run_search", "fmt_step", "torch_threads", "policy_device"]


class Searcher(Protocol):
    """What :func:`run_search` needs of a search."""

    samples: int          #: placements sampled so far (across resumes)
    wall_s: float         #: seconds of search so far (across resumes)
    best_step: float      #: the best step time that ran so far (``inf``: none yet)
    curve: Curve

    def update(self) -> CurvePoint: ...

    def state(self) -> dict: ...

    def load(self, state: dict, where: str) -> None: ...

    def confirm(self) -> None: ...           #: measure the best placements again before one is kept

    @property
    def converged(self) -> bool: ...


@dataclass
class SearchRun:
    """How one :func:`run_search` call ended: why (``samples``, ``seconds``, ``converged``,
    ``interrupted``), and the seconds this call ran."""

    stop_reason: str
    wall_s_this_run: float
    updates_this_run: int


def run_search(search: Searcher, budget: SearchBudget, *, name: str, title: str = "",
               checkpoint: str | Path | None = None, resume: str | Path | None = None,
               checkpoint_every_s: float = 30.0, curve_csv: str | Path | None = None,
               curve_png: str | Path | None = None, stop_after_updates: int | None = None) -> SearchRun:
    """Run ``search`` until ``budget`` is spent (counting the samples and seconds of a resumed run), it
    converges, ``stop_after_updates`` updates of this call have run (as an interruption would: tests), or
    Ctrl-C. Continues from the checkpoint in ``resume``; checkpoints to ``checkpoint`` (default: the
    ``resume`` folder) every ``checkpoint_every_s`` seconds and once at the end, whatever ended it (unless
Ctrl-C ended it, the search's :meth:`~Searcher.confirm` first measures its best placements again); writes
    the curve to ``curve_csv`` / ``curve_png``. Progress goes to the caller's
    :func:`~autoplace.progress.progress_to` callback as ``name: N samples, R/s, best …, mean reward …``."""
    if resume is not None:
        search.load(load_checkpoint(resume), str(checkpoint_path(resume)))
    ckpt = Checkpointer(checkpoint if checkpoint is not None else resume, checkpoint_every_s)
    clock = budget.start()
    clock.offset_s = search.wall_s
    stop, done_here, t_start = None, 0, time.monotonic()
    try:
        while (stop := clock.done(search.samples)) is None:
            if search.converged:
                stop = "converged"
                break
            if stop_after_updates is not None and done_here >= stop_after_updates:
                stop = "interrupted"
                break
            p = search.update()
            done_here += 1
            rate = search.samples / max(search.wall_s, 1e-9)
            report_progress(f"{name}: {search.samples} samples, {rate:.0f}/s, best {fmt_step(search.best_step)}, "
                            f"mean reward {p.mean_reward:.4f}", clock.fraction(search.samples))
            ckpt.maybe_save(search.state)
    except KeyboardInterrupt:
        stop = "interrupted"
    except (RuntimeError, ValueError) as e:     # torch's sampler on a policy gone to NaN: no checkpoint of it
        if not any(w in str(e).lower() for w in ("nan", "inf")):
            raise
        raise AutoplaceError(f"{name}: the policy diverged after {search.updates} updates (NaN or infinite "
                             "values): lower learning_rate, or set grad_clip") from None
    if stop != "interrupted":
        search.confirm()                        # a noisy env's best: a mean of runs, not one lucky run
    ckpt.save(search.state)
    if curve_csv is not None:
        search.curve.write_csv(curve_csv)
    if curve_png is not None:
        search.curve.plot(curve_png, title or name)
    return SearchRun(stop, time.monotonic() - t_start, done_here)


def fmt_step(step: float) -> str:
    """A best-so-far step time for progress lines: ``12.3 ms``, or ``none yet``."""
    return f"{step * 1e3:.1f} ms" if math.isfinite(step) else "none yet"


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Torch's CPU threads set to ``n`` for the block (a policy's small matrices run best on few threads,
    beside a simulator and other searches), then restored."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def policy_device(name: str):
    """The torch device of a ``torch_device`` setting: ``"auto"`` is a GPU when one is present, else the CPU."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise AutoplaceError(f"torch_device {name!r}: not a torch device (cpu, cuda, cuda:N or auto)") from None
    if device.type not in ("cpu", "cuda"):
        raise AutoplaceError(f"torch_device {name!r}: the policies run on cpu or cuda (or auto), not {device.type}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UnavailableError(f"torch_device {name!r}: this torch has no CUDA device (use cpu or auto)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UnavailableError(f"torch_device {name!r}: there are {torch.cuda.device_count()} CUDA devices")
    return device
