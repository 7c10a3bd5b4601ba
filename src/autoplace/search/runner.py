"""What every learned search shares around its own searcher: the options, one entry, one result.

A learned placer's ``*_search`` function builds its searcher (the policy and its update) and calls
:func:`learned_search` with it; that function opens a Ray session and the workers that score samples when the
:class:`SearchOptions` ask for them, runs :func:`~autoplace.search.engine.run_search` (budget, checkpoints,
resume, curve files, Ctrl-C, progress) and closes everything whatever ended the search. The placer then
reads its result off the searcher as a :class:`SearchResult`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from autoplace.errors import AutoplaceError
from autoplace.placement import Placement
from autoplace.search.budget import SearchBudget
from autoplace.search.curve import Curve
from autoplace.search.distributed import RayScorer, ray_session
from autoplace.search.engine import SearchRun, run_search

__all__ = ["SearchOptions", "SearchResult", "learned_search"]


@dataclass(frozen=True)
class SearchOptions:
    """How a learned search runs, beside what it searches (its budget, config and seed).

    ``env`` scores the samples (``"simulated"``, ``"measured"`` or an env object; ``env_kwargs`` build a
    worker's env by name); ``checkpoint`` (default: the ``resume`` folder) is written every
    ``checkpoint_every_s`` seconds and at the end; ``resume`` continues a checkpoint; the training curve goes
    to ``curve_csv`` / ``curve_png``; ``stop_after_updates`` ends this call after that many updates, as an
    interruption would (tests); ``workers`` > 1 or a ``ray_address`` scores the samples on Ray workers;
    ``controllers`` is the RL placer's number of controllers (its distributed mode, §3.4 of the paper)."""

    env: Any = "simulated"
    env_kwargs: dict | None = None
    checkpoint: str | Path | None = None
    resume: str | Path | None = None
    checkpoint_every_s: float = 30.0
    curve_csv: str | Path | None = None
    curve_png: str | Path | None = None
    stop_after_updates: int | None = None
    workers: int = 1
    controllers: int | None = None
    ray_address: str | None = None

    def __post_init__(self):
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise AutoplaceError(f"workers must be an integer >= 1, got {self.workers!r}")
        if not (isinstance(self.checkpoint_every_s, (int, float)) and math.isfinite(self.checkpoint_every_s)
                and self.checkpoint_every_s >= 0):
            raise AutoplaceError(f"checkpoint_every_s must be a finite number >= 0, got {self.checkpoint_every_s!r}")

    @classmethod
    def of(cls, options: SearchOptions | None = None, **kwargs) -> SearchOptions:
        """``options`` with ``kwargs`` (its field names) overriding; an unknown name is one clear error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown search option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        base = {f.name: getattr(options, f.name) for f in fields(cls)} if options is not None else {}
        return cls(**{**base, **kwargs})

    @property
    def distributed(self) -> bool:
        """Whether samples are scored on Ray workers."""
        return self.workers > 1 or self.ray_address is not None

    @property
    def env_name(self) -> str:
        """The env's name (a worker builds its own env from it)."""
        return self.env if isinstance(self.env, str) else self.env.name

    def only_one_controller(self, method: str) -> None:
        """A clear error where ``controllers`` is given to a placer that trains one policy."""
        if self.controllers is not None:
            raise AutoplaceError(f"--controllers applies to the rl method only ({method} trains one policy)")


@dataclass
class SearchResult:
    """What a learned search returns: the best placement that ran, its curve, and how it ended."""

    placement: Placement
    curve: Curve
    samples: int
    updates: int
    stop_reason: str
    evaluations: int
    cache_hits: int
    wall_s: float
    extra: dict = field(default_factory=dict)


@contextlib.contextmanager
def learned_search(make_search: Callable[[list | None], Any], budget: SearchBudget, options: SearchOptions, *,
                   name: str, title: str, scoring: Sequence[tuple] = ()) -> Iterator[tuple[Any, SearchRun]]:
    """Run a learned search and yield ``(searcher, run)`` while the searcher is still open.

    ``make_search(scorers)`` builds the searcher; ``scorers`` is None, or, when ``options`` are distributed,
    one :class:`~autoplace.search.distributed.RayScorer` per ``(grouping, graph, cluster)`` of ``scoring``
    (the Ray session and the scorers are closed when the block ends, as is the searcher)."""
    with contextlib.ExitStack() as stack:
        scorers = None
        if options.distributed and scoring:

            ray = stack.enter_context(ray_session(options.ray_address))
            scorers = []
            for grouping, graph, cluster in scoring:
                scorers.append(RayScorer(ray, grouping, graph, cluster, options.workers, options.env_name,
                                         options.env_kwargs))
                stack.callback(scorers[-1].close)
        search = make_search(scorers)
        stack.callback(search.close)
        run = run_search(search, budget, name=name, title=title, checkpoint=options.checkpoint,
                         resume=options.resume, checkpoint_every_s=options.checkpoint_every_s,
                         curve_csv=options.curve_csv, curve_png=options.curve_png,
                         stop_after_updates=options.stop_after_updates)
        yield search, run
