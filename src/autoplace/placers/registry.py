"""The placer registry: :func:`register_placer` adds a placer under its name, :func:`place` runs one.

Placer modules import this module (not the package), so the package can import them all to fill the
registry without an import cycle.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import check_runnable
from autoplace.errors import UnknownNameError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.search.budget import time_limit as limit
from autoplace.validation import check_budget, seed_int

__all__ = ["PlacerFn", "PlacerInfo", "register_placer", "get_placer", "available_placers", "place"]

PlacerFn = Callable[..., Placement]


@dataclass(frozen=True)
class PlacerInfo:
    """A registered placer: its name, function, one-line description and source paper."""

    name: str
    fn: PlacerFn
    description: str
    paper: str = ""
    memory_aware: bool = False
    learned: bool = False
    search: Callable | None = None
    config: type | None = None          #: a learned placer's settings (a dataclass with ``from_dict``)
    strategy: bool = False              #: its placement is of a replicated step (``meta["strategy"]``)


_REGISTRY: dict[str, PlacerInfo] = {}

#: the order placers are listed in (tables' columns, ``compare``'s rows, help): by module, as here, then by
#: registration within a module; a placer of another module comes after these, in registration order
LISTING = ("auto", "baselines", "cpsat", "dp_split", "pipeline", "expert", "learned.rl", "learned.gdp", "learned.hdp",
           "learned.htf_mpr", "list_scheduling", "baechi", "local_search", "partitioning", "replicated")


def register_placer(name: str, *, description: str, paper: str = "", memory_aware: bool = False,
                    learned: bool = False, search: Callable | None = None,
                    config: type | None = None, strategy: bool = False) -> Callable[[PlacerFn], PlacerFn]:
    """Decorator adding ``fn(graph, cluster, *, seed=None, budget=None) -> Placement`` under ``name``.

    ``memory_aware`` placers promise that the parameters and outputs they put on a device fit its memory
    (or raise :class:`InfeasibleError`); the conformance suite holds them to it. ``learned`` placers train a
    policy for minutes; ``compare`` runs them only when asked by name. Their ``search`` function takes the
    search's own options (a budget of samples or wall-clock seconds, checkpoint and resume folders, curve
    files; :func:`autoplace.placers.learned.rl.rl_search`) and returns a result with ``.placement``; ``config`` is
    the dataclass of their settings (``--set KEY=VALUE``; ``config.from_dict`` checks a dict of them).
    ``strategy`` placers return a placement of the replicated step (:mod:`autoplace.replicas`) whose
    ``meta["strategy"]`` rebuilds it: :func:`autoplace.replicas.strategy_graph`."""

    def deco(fn: PlacerFn) -> PlacerFn:
        if name in _REGISTRY:
            raise ValueError(f"placer {name!r} is registered twice")
        _REGISTRY[name] = PlacerInfo(name, fn, description, paper, memory_aware, learned, search, config, strategy)
        return fn

    return deco


def get_placer(name: str) -> PlacerInfo:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownNameError(f"unknown placement method {name!r} (known: {', '.join(available_placers())})") from None


def available_placers(*, include_learned: bool = True, include_strategies: bool = True) -> list[str]:
    """Registered placer names, in :data:`LISTING` order (whichever module was imported first);
    ``include_learned=False`` leaves out the learned ones, ``include_strategies=False`` the strategies
    (placements of a replicated step)."""
    def rank(item: tuple[int, tuple[str, PlacerInfo]]) -> tuple[int, int]:
        k, (_, info) = item
        module = info.fn.__module__.removeprefix("autoplace.placers.")
        return (LISTING.index(module) if module in LISTING else len(LISTING), k)

    return [n for _, (n, info) in sorted(enumerate(_REGISTRY.items()), key=rank)
            if (include_learned or not info.learned) and (include_strategies or not info.strategy)]


def place(graph: Graph, cluster: Cluster, method: str, *, seed: int | np.random.Generator | None = None,
          budget: float | None = None, time_limit: float | None = None, **options) -> Placement:
    """Run placer ``method``; the returned placement's meta records ``search_time_s`` and ``seed``.

    Arguments:

    - ``graph``, ``cluster``: what to place, and where.
    - ``method``: a registered placer's name (:func:`available_placers`).
    - ``seed``: the placer's seed (an integer, or a NumPy generator); the same seed, the same placement.
    - ``budget``: nominal work (seconds a reference machine would take: :mod:`autoplace.search.work`), so a
      result does not depend on the machine's load; None: the placer's default.
    - ``time_limit``: seconds of wall clock that stop every search sooner if they come first, with the best
      it has (its meta then says ``"time limit"``).
    - ``options``: keywords for the placer (``auto``'s ``strategies=False``)."""

    info = get_placer(method)
    check_budget(budget)
    if not isinstance(seed, np.random.Generator):
        seed_int(seed)  # a bad seed is one clear error here, not a solver's traceback
    check_runnable(graph, cluster)  # one message for "no device can run op X", whatever the placer
    t0 = time.perf_counter()
    with limit(time_limit):
        placement = info.fn(graph, cluster, seed=seed, budget=budget, **options)
    elapsed = time.perf_counter() - t0
    meta = {**placement.meta, "search_time_s": elapsed}
    if time_limit is not None:
        meta["time_limit_s"] = float(time_limit)
    if isinstance(seed, int):
        meta["seed"] = seed
    return dataclasses.replace(placement, meta=meta)
