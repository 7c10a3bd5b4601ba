"""What every table of one bench run shares: the budgets, the seed, the learned placers' settings and the
method variants (:class:`Run`), and how a table's method name becomes a ``place`` job; what a table is
(:class:`TableSpec`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoplace.bench.jobs import LEARNED, Job, Setting
from autoplace.bench.render import Table
from autoplace.bench.store import Store
from autoplace.errors import AutoplaceError, UnknownNameError
from autoplace.placers import available_placers, get_placer

__all__ = ["Budgets", "QUICK", "FULL", "Variant", "Run", "TableSpec", "REFINE", "OFF"]

#: a method name ending so (``rl+refine``) is that method's placement refined by the local search
REFINE = "+refine"

#: each learned placer's settings with learning off: the same search, its policy never trained (HTF-MPR:
#: children screened at random instead of by the predictor); the column ``PLACER-off``
OFF = {"rl": {"learn": False}, "hdp": {"learn": False}, "gdp": {"learn": False}, "htf-mpr": {"model": "random"}}
OFF_SUFFIX = "-off"


@dataclass(frozen=True)
class Budgets:
    """How much work each kind of placer gets (seconds: the search placers' own budgets, and the learned
    placers' nominal work, which does not depend on the machine's speed)."""

    search: float                 #: auto, local-search and the other placers that take a budget; a refine
    learned: float                #: rl, hdp, gdp, htf-mpr on one setting
    fine_tune_updates: int        #: GDP's fine-tune on a held-out graph (the paper: under 50)
    predictor_runs: int           #: HTF-MPR's Figure 8: cross-validation runs per predictor


QUICK = Budgets(search=1.0, learned=2.0, fine_tune_updates=2, predictor_runs=2)
FULL = Budgets(search=60.0, learned=600.0, fine_tune_updates=40, predictor_runs=5)

Config = tuple[tuple[str, Any], ...]

_LABEL = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Variant:
    """A method column of its own: a learned placer under other settings (``bench --variant frozen=rl
    --set frozen.learn=false``), shown beside the placer in every table that has it."""

    label: str
    placer: str
    config: Config = ()

    def __str__(self) -> str:
        return f"{self.label} = {self.placer} [{_config_text(self.config)}]"


def _config_text(config: Config) -> str:
    return ", ".join(f"{k}={v}" for k, v in config)


@dataclass(frozen=True)
class Run:
    """The budgets and seed of a bench run, the settings of learned placers (``configs``: placer ->
    settings, from ``bench --set PLACER.KEY=VALUE``; they apply wherever the placer runs, GDP's batch and
    hold-out jobs included) and the ``variants``. Settings enter the jobs' keys: results under other
    settings never mix."""

    budgets: Budgets
    seed: int = 0
    configs: tuple[tuple[str, Config], ...] = ()
    variants: tuple[Variant, ...] = ()
    quick: bool = False                 #: the tables' small settings
    graphs: tuple[str, ...] = ()        #: graphs in place of the tables' models (``--graph``)
    versus: tuple[tuple[str, str], ...] = ()    #: method pairs compared head to head (``--versus A:B``)
    #: the seeds every learned search runs with, each a job of its own (``--seeds``), each learned placer
    #: then paired with its learning-off self (:data:`OFF`); empty: ``seed`` alone, unpaired
    seeds: tuple[int, ...] = ()

    def __post_init__(self):

        names = set(available_placers())
        for placer, config in self.configs:
            _check_config(placer, config)
        seen = set()
        for v in self.variants:
            if (v.label in names or v.label in seen or v.label.endswith((REFINE, OFF_SUFFIX))
                    or not _LABEL.fullmatch(v.label)):
                raise AutoplaceError(f"variant label {v.label!r}: a label is letters, digits, '-' and '_', not a "
                                     f"placer's name, not given twice, not ending in {REFINE!r} or {OFF_SUFFIX!r}")
            seen.add(v.label)
            get_placer(v.placer)
            _check_config(v.placer, v.config)

    def config(self, placer: str) -> Config:
        return dict(self.configs).get(placer, ())

    @property
    def learned_seeds(self) -> tuple[int, ...]:
        return self.seeds or (self.seed,)

    def off(self, name: str) -> Variant | None:
        """The learning-off self of a learned placer or of a variant of one (``name``: its settings and
        :data:`OFF`'s) where the run pairs them (``seeds`` given); else None (a variant that already learns
        nothing has none). A paper mode that fixes the setting :data:`OFF` changes (HTF-MPR's predictor) is
        turned off as the paper's settings spelled out, without ``paper``."""
        if not self.seeds:
            return None
        v = next((v for v in self.variants if v.label == name), None)
        placer, config = (v.placer, dict(v.config)) if v else (name, dict(self.config(name)))
        if placer not in OFF or all(config.get(k) == x for k, x in OFF[placer].items()):
            return None
        off = {**config, **OFF[placer]}
        if off.get("paper"):

            fixed = get_placer(placer).config.PAPER
            if set(fixed) & set(OFF[placer]):
                off = {**fixed, **{k: x for k, x in off.items() if k != "paper"}}
        return Variant(name + OFF_SUFFIX, placer, tuple(sorted(off.items())))

    def off_label(self, method: str) -> str | None:
        """The method name of ``method``'s learning-off self (``rl-off``, ``rl-paper-off``, ``rl-off+refine``),
        or None where it has none."""
        base, refined = _unrefined(method)
        if base.endswith(OFF_SUFFIX) or self.off(base) is None:
            return None
        return base + OFF_SUFFIX + (REFINE if refined else "")

    def budget(self, placer: str) -> float:
        return self.budgets.learned if placer in LEARNED else self.budgets.search

    def variant(self, label: str) -> Variant | None:
        off = self.off(label[: -len(OFF_SUFFIX)]) if label.endswith(OFF_SUFFIX) else None
        return off or next((v for v in self.variants if v.label == label), None)

    def resolve(self, method: str) -> tuple[str, Config, bool]:
        """``(placer, settings, refined)`` of a table's method name: a placer, a variant's label, either
        followed by ``+refine``."""
        base, refined = _unrefined(method)
        v = self.variant(base)
        return (v.placer, v.config, refined) if v else (base, self.config(base), refined)

    def place(self, setting: Setting, method: str, seed: int | None = None) -> Job:
        """The ``place`` job of ``method`` on ``setting`` (with ``seed``, default the run's)."""
        placer, config, refined = self.resolve(method)
        return Job.of("place", setting=setting, method=placer, budget=self.budget(placer),
                      seed=self.seed if seed is None else seed, config=config,
                      refine_budget=self.budgets.search if refined else None)

    def place_all(self, setting: Setting, method: str) -> list[Job]:
        """The ``place`` jobs of ``method`` on ``setting``: one per seed of :attr:`learned_seeds` for a
        learned placer (its variants and refined placements included), else one."""
        if self.resolve(method)[0] in LEARNED:
            return [self.place(setting, method, s) for s in self.learned_seeds]
        return [self.place(setting, method)]

    def equal_wall_jobs(self, setting: Setting, method: str) -> dict[str, list[Job]]:
        """Beside a learned method run over the seeds and paired (a learned placer, a variant of one, either
        refined: :meth:`off_label`): per seed, its learning-off self for the wall time that seed's learned
        search took (then refined alike), and ``auto`` for that search's wall time and its refine's
        (``{"frozen": [...], "auto": [...]}``, seeds in order; empty where the run pairs nothing)."""
        if self.off_label(method) is None:
            return {}
        base, refined = _unrefined(method)
        off = self.off(base)
        out: dict[str, list[Job]] = {"frozen": [], "auto": []}
        for seed in self.learned_seeds:
            learned = self.place(setting, method, seed).key
            out["frozen"].append(Job.of("place", setting=setting, method=off.placer, seed=seed, config=off.config,
                                        same_wall_as=learned,
                                        refine_budget=self.budgets.search if refined else None))
            out["auto"].append(Job.of("place", setting=setting, method="auto", seed=seed, same_wall_as=learned))
        return out

    def result(self, store: Store, setting: Setting, method: str) -> dict:
        """``method``'s result on ``setting``; a learned one over the run's seeds: the first seed's (the first
        failing seed's, if one failed) with ``step_s`` the mean of the seeds' steps (None unless every seed's
        placement ran), ``seed_steps_s`` each seed's, and the mean search and wall times."""
        rs = [store[j] for j in self.place_all(setting, method)]
        if not (self.seeds and self.resolve(method)[0] in LEARNED):
            return rs[0]
        failed = next((r for r in rs if not r["ok"]), None)
        out = {**(failed or rs[0]), "seed_steps_s": [r["step_s"] for r in rs]}      # a failure's own fields
        out["step_s"] = None if failed else sum(r["step_s"] for r in rs) / len(rs)
        for k in ("search_s", "wall_s"):
            out[k] = sum(r[k] for r in rs) / len(rs)
        return out

    def methods(self, methods: tuple[str, ...]) -> tuple[str, ...]:
        """``methods`` with each variant after its placer (and the placer's ``+refine``) where the placer
        is one of them, a learned placer's learning-off self first."""
        out = list(methods)
        for v in self.variants:
            at = [i for i, m in enumerate(out) if self.resolve(m)[0] == v.placer]
            if at:
                out.insert(at[-1] + 1, v.label)
        return tuple(x for m in out for x in (m, self.off_label(m)) if x is not None)

    def note(self, learned: bool = True, paired: bool = True) -> str:
        """The run's settings and variants, a sentence for a table's header ('' when there are none);
        ``learned``: the table shows learned searches over the seeds, ``paired``: beside their learning-off
        selves."""
        parts = [f"{p} with {_config_text(c)}" for p, c in self.configs]
        parts += [f"{v.label}: {v.placer} with {_config_text(v.config) or 'its defaults'}" for v in self.variants]
        text = ("Learned placers' settings: " + "; ".join(parts) + ".") if parts else ""
        if self.seeds and learned:
            off = (f", each beside its learning-off self (`PLACER{OFF_SUFFIX}`: "
                   + ", ".join(f"{p} with {_config_text(tuple(c.items()))}" for p, c in OFF.items()) + ")"
                   if paired else "")
            text = (f"Learned placers over seeds {', '.join(map(str, self.seeds))} (a cell: the mean step){off}. "
                    + text).strip()
        return text


def _unrefined(method: str) -> tuple[str, bool]:
    """``method`` without its ``+refine``, and whether it had one."""
    refined = method.endswith(REFINE)
    return (method[: -len(REFINE)] if refined else method), refined


def _check_config(placer: str, config: Config) -> None:
    """One clear error for settings a placer does not take (an unknown name, a bad value)."""

    info = get_placer(placer)
    if info.config is None:
        raise UnknownNameError(f"placer {placer!r} takes no settings (only the learned placers do: "
                               f"{', '.join(LEARNED)})")
    info.config.from_dict(dict(config))


@dataclass(frozen=True)
class TableSpec:
    """One table of the suite: its settings (full and ``--quick``), the jobs it needs for a choice of
    settings, and how its :class:`Table` is built from their results."""

    name: str
    title: str
    full: tuple[Setting, ...]
    quick: tuple[Setting, ...]
    jobs: Callable[[TableSpec, tuple[Setting, ...], Run], list[Job]]
    build: Callable[[TableSpec, tuple[Setting, ...], Run, Store], Table]
    about: str = ""
    methods: tuple[str, ...] = ()       #: a placer table's methods (default: every placer, or every classic one)
    classic: bool = False               #: the default methods leave out the learned placers
    baseline: str = ""
    paper: Callable[[Setting, str], float | None] | None = field(default=None, repr=False)
    memory_tight: float | None = None   #: a graph given by ``--graph`` runs with this GPU memory fraction
    paper_unit: str = "s"               #: what the paper's steps are in
    memory_checks: bool = False         #: check the memory-aware placers' promise (a section of its own)
    zero_shot: tuple[Setting, ...] = ()         #: GDP-batch: larger graphs its policy places zero-shot
    zero_shot_quick: tuple[Setting, ...] = ()
    versus: tuple[tuple[str, str], ...] = ()    #: method pairs (a, b) compared head to head: a's speedup over b
