"""The benchmark suite: the papers' experiments as tables of jobs.

A *table spec* (:data:`TABLES`) names its settings (full and ``--quick``), the jobs it needs for a choice
of settings (:mod:`autoplace.bench.jobs`) and how its :class:`~autoplace.bench.render.Table` is built from
their results (:mod:`autoplace.bench.builders`). Every job's result is kept in the results folder's
:class:`~autoplace.bench.store.Store`, so a bench stopped at any point continues where it stopped and
jobs shared by two tables run once. :class:`~autoplace.bench.plan.Run` holds what the tables of one run
share: budgets, seed, the learned placers' settings and variants.
"""

from __future__ import annotations

import hashlib
import json
import os

import autoplace.bench.builders as b
import autoplace.bench.gdp_tables as gdp_tables
import autoplace.bench.htf_tables as htf_tables
import autoplace.bench.published as published
from autoplace.bench.jobs import LEARNED, SAME_WALL, WALL_OF, WALL_PARTS, Job, Setting
from autoplace.bench.plan import TableSpec
from autoplace.resolve import looks_like_file

__all__ = ["TableSpec", "TABLES", "table_settings", "nominal_work", "file_digest"]


#: Placers whose budget is spent in full (the others return as soon as they have placed).
BUDGETED = ("auto", "local-search", "cp-sat")


def nominal_work(job: Job) -> float:
    """Seconds of search budget ``job`` spends (nominal work for the learned placers, about seconds for
    ``auto``, ``local-search``, ``cp-sat`` and a refine; 0 for placers that take no budget): a plan's size,
    not a measured time."""
    a = dict(job.args)
    if SAME_WALL in a:                                # as long as the search (and refine) it is timed by
        other = json.loads(a[SAME_WALL])
        if WALL_OF in a:                              # a part of another job (a fine-tune) of no nominal work
            return 0.0
        kind = other.pop("kind")
        return nominal_work(Job(kind, tuple(sorted(other.items())))) / a.get(WALL_PARTS, 1)
    if job.kind == "place":
        return (a["budget"] if a["method"] in LEARNED + BUDGETED else 0.0) + a.get("refine_budget", 0.0)
    if job.kind == "bounds":
        return 0.0
    if job.kind == "gdp-batch":
        return a["budget"] * len(a["settings"])
    if job.kind == "gdp-holdout":
        return a["budget"] * len(a["others"])
    return a["budget"]


def _s(model: str, cluster: str, gpu_memory: float | None = None, **params) -> Setting:
    return Setting(model, cluster, tuple(sorted(params.items())), gpu_memory)


def _mirhoseini_paper(s: Setting, m: str):
    return published.mirhoseini_seconds(s.model, s.n_gpus, m)


def _large_paper(s: Setting, m: str):
    return {"rl": published.MIRHOSEINI_LARGE_RL[s.model]}[m]


def _gdp_paper(s: Setting, m: str):
    return published.gdp_table1_seconds(s.model, s.n_gpus, m)


def _htf_paper(s: Setting, m: str):
    speedup = published.HTF_SPEEDUP[s.model]
    return {"single-gpu": 1.0, "htf-mpr": 1.0 / speedup}[m]


_MIRHOSEINI_METHODS = ("single-cpu", "single-gpu", "scotch", "mincut", "expert", "rl", "rl+refine", "auto",
                       "dp-split", "hdp", "gdp", "htf-mpr")
_GDP_METHODS = ("expert", "single-gpu", "metis", "hdp", "gdp", "auto")
_MIRHOSEINI = tuple(_s(m, f"k80x{g}") for m in published.MIRHOSEINI_TABLE2 for g in (2, 4))
_GDP_SETTINGS = tuple(_s(m, f"p100x{g}") for m, g in published.GDP_TABLE1)
_GDP_BATCH = tuple(_s(m, f"p100x{g}") for m, g in published.GDP_TABLE2)
_HOLDOUT = tuple(_s(m, f"p100x{g}") for m, g in published.GDP_FIGURE2)
_HTF = tuple(_s(m, "gtx1050tix2") for m in published.HTF_SPEEDUP)
_FIELD = _MIRHOSEINI + _GDP_SETTINGS
_FLEXFLOW_MODELS = ("alexnet", "inception-v3", "resnet-101", "rnntc", "rnnlm-2", "nmt-2")
_FLEXFLOW = tuple(_s(m, f"flexflow-{c}x{g}") for m in _FLEXFLOW_MODELS for c in ("p100", "k80") for g in (2, 4, 8, 16))
_STRATEGY_METHODS = ("single-gpu", "expert", "data-parallel", "towers", "hybrid", "pipelined", "auto")
_FIELD_QUICK = (_s("rnnlm-2", "k80x2"), _s("transformer-xl-2", "p100x2"))

TABLES: dict[str, TableSpec] = {spec.name: spec for spec in (
    TableSpec("mirhoseini-table2", "Mirhoseini et al. 2017, Table 2", full=_MIRHOSEINI,
              quick=(_s("rnnlm-2", "k80x2"), _s("rnnlm-2", "k80x4"), _s("nmt-2", "k80x2"),
                     _s("inception-v3", "k80x2"), _s("inception-v3", "k80x4")),
              jobs=b.placer_jobs, build=b.build_placer_table, methods=_MIRHOSEINI_METHODS,
              baseline="single-gpu", paper=_mirhoseini_paper,
              versus=(("rl", "expert"), ("rl", "single-gpu"), ("rl+refine", "rl")),
              about="The paper's baselines and RL placer, then ours, on K80 machines; speedup over one GPU. "
                    "`rl+refine`: the RL placement refined by the local search."),
    TableSpec("mirhoseini-large", "Mirhoseini et al.'s models made too large for one GPU",
              full=(_s("rnnlm-2-large", "k80x2"), _s("rnnlm-2-large", "k80x4"), _s("nmt-2-large", "k80x2"),
                    _s("nmt-2-large", "k80x4")),
              quick=(_s("rnnlm-2-large", "k80x2"), _s("nmt-2-large", "k80x4")),
              jobs=b.placer_jobs, build=b.build_placer_table, methods=_MIRHOSEINI_METHODS,
              baseline="single-cpu", memory_tight=0.6, paper=_large_paper,
              about="The models of Table 2 at sizes no single K80 die holds; speedup over the CPU (which holds them). "
                    "The paper prints only its RL placer's steps (its section 4.3; the number of GPUs unstated)."),
    TableSpec("gdp-table1", "GDP (Zhou et al.), Table 1", full=_GDP_SETTINGS,
              quick=tuple(s for s in _GDP_SETTINGS if s.cluster == "p100x2" and s.model != "gnmt-2"),
              jobs=b.placer_jobs, build=b.build_placer_table, methods=_GDP_METHODS, baseline="expert",
              paper=_gdp_paper, versus=(("gdp", "hdp"),),
              about="GDP-one (`gdp`), HDP, METIS and the human placement (`expert`) on P100s; speedup over the "
                    "expert."),
    TableSpec("gdp-table2", "GDP (Zhou et al.), Table 2: GDP-batch against GDP-one", full=_GDP_BATCH,
              quick=(_s("rnnlm-2", "p100x2"), _s("transformer-xl-2", "p100x2"), _s("wavenet-2x18", "p100x2")),
              jobs=gdp_tables.gdp_batch_jobs, build=gdp_tables.build_gdp_batch,
              zero_shot=(_s("gnmt-8", "p100x8"),), zero_shot_quick=(_s("rnnlm-4", "p100x4"),),
              about="One GDP policy trained over a batch of graphs against one policy per graph, the same work "
                    "per graph; then the batch policy places a larger graph it never saw zero-shot."),
    TableSpec("gdp-generalisation", "GDP (Zhou et al.), Figure 2: graphs the policy never saw", full=_HOLDOUT,
              quick=(_s("rnnlm-2", "p100x2"), _s("transformer-xl-2", "p100x2"), _s("wavenet-2x18", "p100x2")),
              jobs=gdp_tables.holdout_jobs, build=gdp_tables.build_holdout,
              about="Leave-one-out: a policy pre-trained on the other graphs places the held-out one zero-shot, "
                    "then fine-tuned; against an untrained policy and GDP from scratch with the same updates."),
    TableSpec("htf-mpr", "HTF-MPR (Albaqsami et al.): speedup over the default mapping", full=_HTF,
              quick=_HTF,
              jobs=b.placer_jobs, build=b.build_placer_table,
              methods=("single-gpu", "htf-mpr", "auto"), baseline="single-gpu", paper=_htf_paper,
              paper_unit="x default",
              about="The default mapping is every op on the first GPU (`single-gpu`); the paper prints speedups, "
                    "not steps: its steps are shown relative to the default."),
    TableSpec("htf-mpr-predictor", "HTF-MPR (Albaqsami et al.), Figure 8: the fitness predictors", full=_HTF,
              quick=(_s("alexnet", "gtx1050tix2"), _s("mnist-softmax", "gtx1050tix2")),
              jobs=htf_tables.predictor_jobs, build=htf_tables.build_predictor,
              about="Every predictor ranked on the mappings one HTF-MPR search evaluated."),
    TableSpec("htf-mpr-enumerate", "HTF-MPR (Albaqsami et al.): every mapping of a small graph",
              full=(_s("mnist-softmax", "gtx1050tix2"),), quick=(_s("mnist-softmax", "gtx1050tix2"),),
              jobs=htf_tables.enumerate_jobs, build=htf_tables.build_enumerate,
              about="Every mapping of the graph's HTF-MPR nodes (its co-location groups) to the devices, simulated: "
                    "how many beat the default mapping (every op on the first GPU), and where HTF-MPR's ranks "
                    "(`--quick`: the nodes coarsened to 3^9 mappings)."),
    TableSpec("field", "The classic field: every placer on the papers' settings", full=_FIELD, quick=_FIELD_QUICK,
              jobs=b.placer_jobs, build=b.build_placer_table, classic=True, baseline="expert",
              about="Every registered placer but the learned ones, on Mirhoseini et al.'s Table 2 settings and GDP's "
                    "Table 1 settings at the zoo's default sizes; speedup over the expert placement."),
    TableSpec("schedulers", "The list schedulers against one GPU, and their own estimates", full=_FIELD,
              quick=_FIELD_QUICK, jobs=b.schedulers_jobs, build=b.build_schedulers,
              about="Each list scheduler's simulated step beside its two estimates of it: its schedule model "
                    "replayed in the order the runtime runs the ops, and the schedule as built, in its own order."),
    TableSpec("flexflow", "FlexFlow (Jia et al. 2019): data, model and hybrid parallelism on its clusters",
              full=_FLEXFLOW, quick=(_s("inception-v3", "flexflow-p100x4"), _s("rnnlm-2", "flexflow-k80x8")),
              jobs=b.placer_jobs, build=b.build_strategies_table, methods=_STRATEGY_METHODS, baseline="single-gpu",
              about="FlexFlow's six DNNs (its Table 1; the zoo's sizes, the same global batch at every GPU count) on "
                    "its P100 and K80 clusters (`flexflow-p100xN`, `flexflow-k80xN`: four GPUs a node); speedup "
                    "over one GPU. `data-parallel`: PyTorch DDP; `towers`: the parameters on the CPU; `hybrid`: R "
                    "replicas of a placement on D/R GPUs; `auto` weighs them against its own placement. FlexFlow "
                    "reports up to 3.8x over data and model parallelism; its per-setting figures are not among "
                    "this project's sources."),
    TableSpec("mirhoseini-towers", "Mirhoseini et al. 2017, sec. 4.4: Inception-V3 against synchronous towers",
              full=(_s("inception-v3", "k80x4"),), quick=(_s("inception-v3", "k80x4"),),
              jobs=b.placer_jobs, build=b.build_strategies_table, methods=(*_STRATEGY_METHODS, "towers-async"),
              baseline="single-gpu",
              about="Inception-V3, batch 32 (the same global batch for every strategy), on four K80 dies: the paper's "
                    "synchronous towers (a replica per GPU, the parameters and update on the CPU) against data "
                    "parallelism, the placements and `auto`. The paper reports the RL placement 19.7 % faster to "
                    "train to 72 % accuracy than synchronous towers of 32 images each (its Figure 7). "
                    "`towers-async`, its asynchronous towers (each tower updates with its own gradients: other "
                    "math), is a throughput figure only: its step is each tower's one update."),
    TableSpec("memory-tight", "Memory-tight settings: every placer where no single GPU holds the graph",
              full=(_s("rnnlm-2-large", "k80x2"), _s("rnnlm-2-large", "k80x4"), _s("nmt-2-large", "k80x2"),
                    _s("nmt-2-large", "k80x4"), _s("vgg16", "gtx1050tix2", batch=64),
                    _s("transformer-xl-8", "p100x2", batch=192), _s("inception-v3", "k80x2", gpu_memory=0.6)),
              quick=(_s("rnnlm-2-large", "k80x2"), _s("inception-v3", "k80x2", gpu_memory=0.6)),
              jobs=b.placer_jobs, build=b.build_placer_table, baseline="single-cpu", memory_tight=0.6,
              memory_checks=True,
              about="Every registered placer; a failing placement runs out of memory (OOM), `none` says the placer "
                    "found no placement that fits. Speedup over the CPU, which holds every graph."),
)}


def table_settings(spec: TableSpec, quick: bool, graphs: tuple[str, ...] = ()) -> tuple[Setting, ...]:
    """The settings ``spec`` runs: its own (``quick`` or full), or each graph of ``graphs`` on the
    table's clusters (memory-tight where the table is)."""
    own = spec.quick if quick else spec.full
    if not graphs:
        return own
    clusters = list(dict.fromkeys(s.cluster for s in own))
    if spec.name == "gdp-generalisation" and len(graphs) == 1 and len(clusters) < 2:
        clusters = list(dict.fromkeys(s.cluster for s in spec.full))[:2]   # leave-one-out needs two settings
    return tuple(Setting(g, c, (), spec.memory_tight, file_digest(g)) for g in graphs for c in clusters)


def file_digest(graph: str) -> str:
    """``sha256:`` and the first 12 hex digits of a graph file's bytes; ``""`` for a built-in name."""


    if not (looks_like_file(graph) or graph.endswith(".onnx")) or not os.path.isfile(graph):
        return ""
    with open(graph, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()[:12]
