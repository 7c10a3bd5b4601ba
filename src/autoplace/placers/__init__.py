"""Placers: algorithms ``place(graph, cluster, *, seed, budget) -> Placement``, looked up by name.

The learned placers (RL, HDP, GDP, HTF-MPR) are in :mod:`autoplace.placers.learned`. Each placer module
registers its functions with :func:`register_placer`; the CLI and
:func:`place` pick them from the registry (no if/elif chains). A placer never mutates its inputs and
is deterministic for a given ``seed``.
"""

from __future__ import annotations

from autoplace.placers.registry import PlacerFn, PlacerInfo, available_placers, get_placer, place, register_placer

__all__ = ["PlacerFn", "PlacerInfo", "register_placer", "get_placer", "available_placers", "place"]

# Built-in placer modules register themselves on import (available_placers() lists them in registry.LISTING's order).
from autoplace.placers import auto, baselines, cpsat, dp_split, pipeline, expert  # noqa: E402,F401,I001
from autoplace.placers.learned import rl, gdp, hdp, htf_mpr  # noqa: E402,F401,I001
from autoplace.placers import (  # noqa: E402,F401,I001
    list_scheduling, baechi, local_search, partitioning, replicated)
