"""Compare placers on one graph and cluster: the papers' table (Mirhoseini et al. 2017, Table 2).

``compare(graph, cluster, methods)`` places with each method, scores every placement (simulated, or
measured), and returns one :class:`ComparisonRow` per method; a method that finds no feasible placement
gets a row saying why instead of a step time. Each row carries what its placer reported about how it
ended (:attr:`ComparisonRow.details`: a solver's status and model bound, a search's stop reason, which
path m-SCT took) and two times: the placer's own (``search_time_s``) and the row's whole wall time,
scoring included (``wall_time_s``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from autoplace.bounds import Bounds, lower_bounds
from autoplace.cluster import Cluster
from autoplace.env import BaseEnv, SimulatedEnv, make_env
from autoplace.errors import InfeasibleError, UnavailableError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.placers import available_placers, place
from autoplace.placers.auto import NEAR_TIE, robust_simulator, uncertainty
from autoplace.replicas import can_replicate
from autoplace.robust import SCENARIOS, strategy_range
from autoplace.sim import SimResult, Simulator
from autoplace.units import fmt_bytes

if TYPE_CHECKING:
    from autoplace.runtime import MeasuredResult

__all__ = ["ComparisonRow", "Comparison", "compare", "speedup", "row_note", "AutoChoice", "auto_choice"]


@dataclass(frozen=True)
class ComparisonRow:
    """One method's outcome: its placement and simulated step, or the reason it has none."""

    method: str
    placement: Placement | None
    result: SimResult | MeasuredResult | None
    search_time_s: float
    error: str | None = None
    wall_time_s: float = float("nan")

    @property
    def details(self) -> dict:
        """What the placer reported about its run (its placement's meta, less the seed and timing)."""
        if self.placement is None:
            return {}
        return {k: v for k, v in self.placement.meta.items() if k not in ("seed", "search_time_s")}

    @property
    def step_time(self) -> float:
        """Step time; ``inf`` for a failing placement (OOM, a failed run) or a method that found none."""
        if self.result is None or not self.result.ok:
            return float("inf")
        return self.result.step_time


def failure_reason(result) -> str:
    """Why a scored placement fails, in a few words: the run's own error, else the devices whose peak memory
    exceeds their capacity, each with both figures."""

    error = getattr(result, "error", None)
    if error:
        return str(error)
    over = [f"{d} ({fmt_bytes(p)} of {fmt_bytes(c)})" for d, p, c in
            zip(result.device_names, result.peak_memory, result.memory_capacity) if p > c]
    return "out of memory on " + (", ".join(over) if over else ", ".join(getattr(result, "oom_devices", ())))


def row_note(row: ComparisonRow) -> str:
    """A few words on how a row's placer ended, from what it reported (empty when there is nothing to say):
    a solver's status and model, why a search stopped, which path m-SCT took."""
    d = row.details
    notes = []
    if "cp_sat_status" in d:
        notes.append(f"{d['cp_sat_status']} on {d.get('model', '?')}")
        if d.get("stopped_by") == "wall-clock cap":
            notes.append("stopped by the wall-clock cap")
    if "stop_reason" in d:
        notes.append(f"stopped: {d['stop_reason']}")
    if "favourites" in d:
        notes.append(f"favourites: {d['favourites']}")
    if "from" in d:
        notes.append(f"from {d['from']}" + "".join(f" + {k}" for k in d.get("improved_by", ())))
    return "; ".join(notes)


def speedup(baseline: float, value: float) -> float:
    """``baseline / value`` (how many times faster than the baseline); nan when either is unusable."""
    if not np.isfinite(baseline) or not np.isfinite(value) or value <= 0:
        return float("nan")
    return baseline / value


@dataclass(frozen=True)
class Comparison:
    """The rows of a comparison and the lower bounds on the *simulated* step time.

    ``env`` says what scored the rows; gaps to the bounds exist only for simulated rows (a measured step
    is not bounded by figures computed from the cost model)."""

    rows: list[ComparisonRow]
    bounds: Bounds
    env: str = "simulated"
    #: per method with a fitting simulated placement, its step under the cost model's uncertainty
    ranges: dict = field(default_factory=dict)

    def gap(self, row: ComparisonRow) -> float:
        """``row``'s step over the best bound, minus 1; nan for measured rows, failing ones and strategies (the
        bounds are of the step itself; a strategy's replicas each run a share of the batch)."""
        if self.env != "simulated" or (row.placement is not None and row.placement.meta.get("strategy") is not None):
            return float("nan")
        return self.bounds.gap(row.step_time)

    def step_time(self, method: str) -> float:
        return next((r.step_time for r in self.rows if r.method == method), float("nan"))

    def __iter__(self):
        return iter(self.rows)


@dataclass(frozen=True)
class AutoChoice:
    """Why ``auto``'s row is what it is, beside the other rows: the row it took its placement from
    (``picked``: the row of the method it came from, where that row has the same step), each row's regret
    against the best step per scenario over the rows and ``auto``'s own candidates (``regrets``), and where a
    row is nominally faster than ``auto`` (by :data:`SAME_STEP` or more), the fastest such (``faster``), the
    scenario its regret comes from (``scenario``) and ``note``, a line saying why ``auto`` is not it (empty
    where no row is faster)."""

    picked: str | None
    regrets: dict
    faster: str | None = None
    scenario: str | None = None
    note: str = ""


def auto_choice(comparison: Comparison) -> AutoChoice | None:
    """:class:`AutoChoice` of a simulated comparison with an ``auto`` row that runs; ``None`` otherwise."""

    rows = {r.method: r for r in comparison.rows}
    auto = rows.get("auto")
    mine = comparison.ranges.get("auto")
    if auto is None or mine is None or not mine.steps or comparison.env != "simulated":
        return None
    ranged = {m: x for m, x in comparison.ranges.items() if len(x.steps) == len(mine.steps)}
    best = np.min([x.steps for x in ranged.values()], axis=0)
    reference = (auto.placement.meta.get("robust") or {}).get("reference_s")
    if reference is not None and len(reference) == len(best):
        best = np.minimum(best, reference)
    if not (best > 0).all():
        return None
    regrets = {m: float((np.array(x.steps) / best).max()) for m, x in ranged.items()}
    came_from = auto.placement.meta.get("from")
    picked = came_from if came_from in rows and came_from != "auto" and came_from in ranged and np.isclose(
        ranged[came_from].nominal, mine.nominal, rtol=1e-9) else None
    faster = [m for m, x in ranged.items() if x.nominal < mine.nominal * (1 - SAME_STEP)]
    if not faster:
        return AutoChoice(picked, regrets)
    f = min(faster, key=lambda m: ranged[m].nominal)
    k = int(np.argmax(np.array(ranged[f].steps) / best))
    name = SCENARIOS[k].name if len(SCENARIOS) == len(best) else str(k)
    gain = mine.nominal / ranged[f].nominal - 1
    loss = ranged[f].steps[k] / best[k] - 1
    meta = auto.placement.meta
    weighed = set(meta.get("weighed", ()))
    note = f"{f} is {100 * gain:.1f} % faster nominally " + (
        f"but {100 * loss:.1f} % slower than the best in '{name}'" if loss >= SAME_STEP else
        "and as fast as the best in every scenario")
    note += f": regret {regrets[f]:.3f} against auto's {regrets['auto']:.3f}"
    own = None if reference is None else (np.array(ranged[f].steps) / np.asarray(reference)).max()
    mine_own = (meta.get("robust") or {}).get("regret")
    if f in weighed and own is not None and mine_own is not None and own < mine_own:
        note += (f"; against the candidates auto weighed, {own:.3f} and {mine_own:.3f}: a near-tie (within "
                 f"{100 * NEAR_TIE:g} %), where auto takes the fewer cross-device edges")
    elif f not in weighed and regrets[f] < regrets["auto"]:
        note += " (a placement auto did not weigh)"
    return AutoChoice(picked, regrets, f, name, note)


#: nominal steps closer than this (relative) are the same step: no row is "faster" for less
SAME_STEP = 5e-4


_UNSET = object()


def compare(graph: Graph, cluster: Cluster, methods: Iterable[str] | None = None, *, seed: int = 0,
            budget: float | None = None, progress=None, env: str | BaseEnv = "simulated", on_row=None,
            time_limit: float | None = None, placements: dict[str, Placement] | None = None) -> Comparison:
    """Place ``graph`` on ``cluster`` with each method (default: every registered placer but the learned
    ones, and but the strategies where the step has no micro-batch capture to replicate) and score each
    placement with ``env`` (the simulator by default, or ``"measured"``: real runs).

    ``placements``: more rows, placements made elsewhere (a device map a user runs today), scored the same
    way. ``progress(method)`` is called before each method (the CLI shows a progress bar with it), ``on_row(row)``
    with each :class:`ComparisonRow` as it is done (the CLI prints it above the bar)."""
    sim = Simulator(graph, cluster)
    bounds = lower_bounds(graph, cluster, sim.op_times)
    scorer = SimulatedEnv(graph, cluster, simulator=sim) if env == "simulated" else make_env(env, graph, cluster)
    try:
        result = _compare(graph, cluster, methods, seed, budget, progress, scorer, bounds, on_row, time_limit)
        for name, placement in (placements or {}).items():
            scored = scorer.evaluate(placement)
            row = ComparisonRow(name, placement, scored, 0.0, None if scored.ok else failure_reason(scored), 0.0)
            result = dataclasses.replace(result, rows=[*result.rows, row])
            if on_row is not None:
                on_row(row)
        if result.env == "simulated":
            ok = [r for r in result.rows if r.result is not None and r.result.ok]
            one = next((r.placement for r in result.rows if r.method == "single-gpu"), _UNSET)
            plain = [r for r in ok if r.placement.meta.get("strategy") is None]
            if ok:
                ranges = uncertainty(graph, cluster, [r.placement for r in plain],
                                     *(() if one is _UNSET else (one,))) if plain else []
                found = {r.method: x for r, x in zip(plain, ranges)}
                if len(plain) < len(ok):     # strategies: their own step, against the same baseline
                    robust = robust_simulator(graph, cluster, *(() if one is _UNSET else (one,)))
                    found.update({r.method: strategy_range(robust, r.placement) for r in ok if r not in plain})
                result = dataclasses.replace(result, ranges={r.method: found[r.method] for r in ok})
        return result
    finally:
        if scorer is not env:
            scorer.close()


def _compare(graph, cluster, methods, seed, budget, progress, scorer: BaseEnv, bounds: Bounds, on_row=None,
             time_limit=None) -> Comparison:
    rows = _Rows(on_row)
    # by default the strategies only where the step can be re-captured with micro-batches (they need it)
    # and the simulator scores
    simulated = scorer.name == "simulated"   # a measured run executes placements of the step itself
    default = available_placers(include_learned=False, include_strategies=simulated and can_replicate(graph))
    for method in methods or default:
        if progress is not None:
            progress(method)
        t0 = time.perf_counter()
        try:
            placement = place(graph, cluster, method, seed=seed, budget=budget, time_limit=time_limit,
                              **({} if simulated or method != "auto" else {"strategies": False}))
        except InfeasibleError as e:
            elapsed = time.perf_counter() - t0
            rows.append(ComparisonRow(method, None, None, elapsed, str(e), elapsed))
            continue
        except UnavailableError as e:                  # a tool this machine lacks: the row says so, the rest run
            elapsed = time.perf_counter() - t0
            rows.append(ComparisonRow(method, None, None, elapsed, f"skipped: {e}", elapsed))
            continue
        result = scorer.evaluate(placement)
        rows.append(ComparisonRow(method, placement, result, float(placement.meta["search_time_s"]),
                                  None if result.ok else failure_reason(result), time.perf_counter() - t0))
        if placement.meta.get("bound_s") is not None:
            # a placer's bound on every placement (CP-SAT's op-level model)
            bounds = dataclasses.replace(bounds, cp_sat=float(placement.meta["bound_s"]))
    return Comparison(list(rows), bounds, scorer.name)


class _Rows(list):
    """The rows so far; each appended one is also handed to ``on_row``."""

    def __init__(self, on_row):
        super().__init__()
        self._on_row = on_row

    def append(self, row: ComparisonRow) -> None:
        super().append(row)
        if self._on_row is not None:
            self._on_row(row)
