"""GDP, generalized device placement (Zhou et al., "GDP: Generalized Device Placement for Dataflow
Graphs"): a graph-neural policy that places every op of a graph at once, trained with PPO, over one graph
or many, and placing graphs it has not seen.

The policy (:class:`~autoplace.policies.gdp.GDPPolicy`, made by :func:`new_policy`) is the paper's Figure 1: a
GraphSAGE embedding of the nodes (§3.1, eq. 2–3, :mod:`autoplace.policies.graphsage`) feeding a Transformer-XL
placer with segment-level recurrence and superposition (§3.2–3.3, eq. 4,
:mod:`autoplace.policies.transformer_xl`), whose output is a distribution over devices for every node. The
nodes are the graph's co-location groups (:attr:`GDPConfig.group_rules`: with the ``colocation`` rule alone an op
co-located with no other is a node of its own; co-location enforced by placing a group's ops together), or with
``nodes="ops"`` (paper mode's) every op, a placement that splits a co-location group invalid; there is no
grouping stage. One sample
draws every node's device independently from its distribution.

Training (§4.1) maximises eq. 1 over a set of graphs with PPO (Schulman et al. 2017): every update samples
``K`` placements of each graph, scores them (the reward is ``-sqrt(step time)``, ``-10`` for a placement
that fails), takes the advantage against the mean of all the graph's previous rewards, and runs
:attr:`GDPConfig.ppo_epochs` epochs of the clipped surrogate

.. math::

    L(\\theta) = -\\frac{1}{|B|}\\sum_{G}\\frac{1}{K N_G}\\sum_{k, v}
        \\min\\big(\\rho_{k,v} A_k,\\ \\mathrm{clip}(\\rho_{k,v}, 1 - \\epsilon, 1 + \\epsilon) A_k\\big),
    \\qquad \\rho_{k,v} = \\frac{\\pi_\\theta(d_{k,v} \\mid G)}{\\pi_{\\theta_{old}}(d_{k,v} \\mid G)}

with one ratio per node decision (ours: the placement's advantage shared by its nodes; a ratio of the whole
placement's probability, a product over thousands of nodes, leaves or hits the clip range at once). With
``paper=True`` the ratio is the whole placement's, PPO's ratio of the action (:attr:`GDPConfig.ratio`).

Modes: one graph (*GDP-one*: ``place -m gdp``); a batch of graphs with one policy (*GDP-batch*:
:func:`gdp_train`, ``autoplace train``), whose policy is saved (:func:`save_policy`) and then places a
held-out graph zero-shot (:func:`zero_shot`) or after a short fine-tune (``place -m gdp --policy FILE``).

What is adapted, and why:

* *node features*: GDP names op type, output shape and adjacent node ids; ids mean nothing across graphs,
  so adjacency enters through the graph embedding, and each node also gets its topological position and
  depth, and the capture's layer and step, as fractions of the graph's
  (:func:`~autoplace.policies.features.node_features`); ``paper=True`` reads the named ones, raw
  (:func:`~autoplace.policies.features.meta_features`);
* *advantage scale*: the advantage is divided by the standard deviation of the graph's previous rewards
  (:attr:`GDPConfig.normalize_advantage`), so that one learning rate serves graphs whose steps differ by
  orders of magnitude; the failing reward stays the paper's ``-10``;
* *devices*: the output layer has :attr:`GDPConfig.max_devices` logits, those a cluster lacks masked out,
  so that one policy serves clusters of 2 to 8 GPUs;
* *search near the best placement* (:attr:`GDPConfig.prior`; ``None`` with ``unit_moves=0``: the paper's
  policy): a fresh network draws every node's device uniformly, scattering a graph of thousands of nodes
  over every device, and PPO first learns to pile it onto one; so the search starts from the fast placers' best
  placement, scored first, and the logits of the best placement so far get a bias ``w`` (re-centred after every
  update) under which a sample moves about :attr:`GDPConfig.node_moves` nodes — the network's own logits
  decide which;
* *structured exploration* (:attr:`GDPConfig.unit_moves`): one Gaussian draw per sample, structural unit
  and device added to the logits, so that samples also move whole layers;
* *samples per update*: 32, not a handful: the network's passes are per update, so on a large graph more
  samples cost little.

``budget`` (seconds, through :func:`~autoplace.placers.place`) counts work, not wall-clock time:
:func:`work_budget` turns it into samples with a nominal cost per simulated op and per policy node.

Size: one readable file per placer (the project's style: a learned placer's configuration,
searcher, policy files and entry points in one place); its neural parts are in :mod:`autoplace.policies`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.env import BaseEnv, make_env
from autoplace.errors import AutoplaceError, FormatError, InfeasibleError
from autoplace.formats.state import StateFields, canonical, cluster_hash, graph_hash, read_state, write_state
from autoplace.graph import Graph
from autoplace.grouping import Grouping, group_ops, grouped_graph, runnable_grouping
from autoplace.placement import Placement
from autoplace.placers.fast import FAST_PLACERS, best_fast
from autoplace.placers.registry import place, register_placer
from autoplace.policies.features import meta_features, node_features, unit_nodes
from autoplace.search import work
from autoplace.search.budget import SearchBudget
from autoplace.search.checkpoint import (
    cache_state,
    check_best,
    check_scores,
    load_best,
    load_cache,
    load_counters,
    load_curve,
    load_generator,
    load_optimizer,
    load_torch,
    open_checkpoint,
)
from autoplace.search.config import Interval, Options, SearchConfig, TorchDevice, check_network_size
from autoplace.search.curve import Curve, CurvePoint
from autoplace.search.engine import policy_device, torch_threads
from autoplace.search.evaluation import CachedScorer, Evaluator, Scores, check_params_fit, confirm_best
from autoplace.search.runner import SearchOptions, SearchResult, learned_search
from autoplace.stats import geomean
from autoplace.validation import seed_int

__all__ = ["GDPConfig", "new_policy", "GDPResult", "GDPSearch", "gdp_search", "gdp_train", "zero_shot",
           "save_policy", "load_policy", "work_budget", "gdp"]

#: the largest |reward|: invalid_reward's bound, and -sqrt of the longest step a cost can give (1e6 s)
_MAX_ABS_REWARD = 1e6
POLICY_FORMAT = "autoplace.gdp-policy/v2"
CHECKPOINT_FORMAT = "autoplace.gdp/v2"


@dataclass(frozen=True)
class GDPConfig(SearchConfig):
    """Every knob of GDP; the paper's value where it gives one."""

    LABEL = "GDP"

    CONSTRAINTS = {
        "hidden": Interval("int", 1, 4096), "type_dim": Interval("int", 1, 1024),
        "sage_layers": Interval("int", 0, 16),
        "placer_layers": Interval("int", 1, 16), "heads": Interval("int", 1, 64), "ff": Interval("int", 1, 16384),
        "segment": Interval("int", 1, 4096), "memory": Interval("int", 0, 4096),
        "max_devices": Interval("int", 1, 1024),
        "samples_per_update": Interval("int", 1, 4096), "ppo_epochs": Interval("int", 1, 100),
        "clip": Interval("float", 0, 1, lo_open=True, hi_open=True),
        "learning_rate": Interval("float", 0, 1, lo_open=True), "entropy_weight": Interval("float", 0, 100),
        "invalid_reward": Interval("float", -1e6, 0), "grad_clip": Interval("float", 0, 1e6, lo_open=True, none=True),
        "node_moves": Interval("float", 0, 1e12, lo_open=True), "unit_moves": Interval("float", 0, 1e6),
        "zero_shot_samples": Interval("int", 1, 4096), "decide": Options(("node", "unit")),
        "nodes": Options(("groups", "ops")),
        "ratio": Options(("node", "placement")), "features": Options(("ours", "paper")),
        "torch_device": TorchDevice(), "torch_threads": Interval("int", 1, 256),
    }

    group_rules: str = "colocation"
    """The nodes with ``nodes="groups"``: the groups of these rules (:mod:`autoplace.grouping`); with
    ``colocation`` alone, the co-location groups (an op co-located with no other is a group of its own)."""
    nodes: str = "groups"
    """What a node is: "groups" (the groups of :attr:`group_rules`: co-located ops are one node and never part;
    ours, the default) or "ops" (§1, §3, paper mode's: every op a node of its own; a placement that puts two ops of
    one co-location group on different devices is invalid, §4.1's "violation of co-location constraint":
    :attr:`invalid_reward`)."""
    decide: str = "node"
    """What one decision places: "node" (§3: every node, as :attr:`nodes` says), or "unit":
    each structural unit whole — a layer with its weights at every time step, a branch, a cell (the units
    of :mod:`autoplace.policies.features`), where a device runs every unit whole and the units' parameters
    fit the devices together; else per node (ours)."""
    features: str = "ours"
    """The nodes' dense features: "ours" (normalised sizes, FLOPs, degrees, positions, layer, step, phase:
    :func:`~autoplace.policies.features.node_features`) or "paper" (§3.1's output shapes and adjacent node
    ids, raw: :func:`~autoplace.policies.features.meta_features`); the op type is an embedding in both."""
    ratio: str = "node"
    """PPO's probability ratio: "node", one per node decision (ours), or "placement", the whole sampled
    placement's (the product over its nodes: PPO's ratio of the action, the paper's)."""
    hidden: int = 64
    """Width of the graph embedding and the placer (ours)."""
    type_dim: int = 16
    """Op-type embedding size (ours)."""
    sage_layers: int = 2
    """GraphSAGE iterations (eq. 2–3; ours)."""
    placer_layers: int = 2
    """Transformer-XL layers (ours)."""
    heads: int = 4
    """Attention heads (ours)."""
    ff: int = 128
    """Feed-forward width of a Transformer-XL layer (ours)."""
    segment: int = 128
    """Nodes per Transformer-XL segment (ours)."""
    memory: int = 128
    """Nodes of cached memory per layer (ours)."""
    attention: bool = True
    """The placer's attention (off: GDP §4.4's ablation)."""
    superposition: bool = True
    """Eq. 4's conditioning of the dense layers (off: GDP §4.4's ablation)."""
    max_devices: int = 16
    """Logits of the output layer: the most devices a cluster may have (ours)."""
    samples_per_update: int = 32
    """K: placements sampled per graph per update (ours: the policy's passes are per update, not per sample,
    so on a large graph 32 samples cost little more than 8)."""
    ppo_epochs: int = 4
    """Gradient steps on each batch of samples (PPO; ours)."""
    clip: float = 0.2
    """PPO's clipping ε (Schulman et al.'s value)."""
    learning_rate: float = 1e-4
    """Adam's step size (ours: at 1e-3 the policy collapses onto one slow placement within 300 samples)."""
    entropy_weight: float = 0.0
    """Weight of an entropy bonus (not in the paper: 0)."""
    invalid_reward: float = -10.0
    """Reward of a placement that fails (§4.1: -10)."""
    normalize_advantage: bool = True
    """Divide the advantage by the standard deviation of the graph's previous rewards (ours)."""
    grad_clip: float | None = 1.0
    """Clip the gradient's norm to this (ours; None: off)."""
    prior: str | None = "fast"
    """Search near the best placement so far (ours; None, with ``unit_moves=0``: the paper's policy,
    sampling from the network alone). The search starts from ``"fast"``, the best of the fast placers
    (:func:`~autoplace.placers.fast.best_fast`), or from the named fast placer's placement, scored first
    (its time counts in the search's wall time, not in its work budget); every node's logit of its device
    in the best placement found so far is raised by ``w`` (see :attr:`node_moves`), and each update
    re-centres the bias on the new best. Zero-shot, the bias is on the prior: a trained network moves a
    node off it only where its logits differ by more than ``w``."""
    node_moves: float = 1.0
    """The bias ``w = log((D - 1) N / node_moves)`` (``N`` nodes, ``D`` devices): with the network's logits
    level, a sample moves about this many nodes off the best placement (ours; ``w`` is at least 0)."""
    unit_moves: float = 0.5
    """Structured exploration (ours; 0: off): one N(0, σ²) draw per sample, structural unit (a layer with
    its weights, at every time step) and device is added to the logits, so that a sample moves whole
    layers as well as single nodes (as the RL placer's noise); σ is set so that about this many units move
    per sample against the bias ``w``: ``σ = w / (√2 Φ⁻¹(1 - min(unit_moves / (U (D - 1)), 0.45)))``;
    without a prior (no ``w``), none."""
    zero_shot_samples: int = 8
    """Zero-shot: placements sampled beside the most likely one, the best that runs kept (ours)."""
    torch_device: str = "auto"
    """Where the policy runs: "cpu", "cuda", or "auto" (a GPU when one is present)."""
    torch_threads: int = 1
    """CPU threads for the policy (ours: more contend with the simulator and other searches)."""
    paper: bool = False
    """True: the paper's algorithm (§4.1) with nothing of ours on — the settings :attr:`PAPER` lists take
    the paper's values; the rest keep theirs (the paper gives no sizes, rate or PPO epochs)."""
    learn: bool = True
    """False: the same search with the policy frozen at its initialisation (no gradient step), what the
    search finds without learning: the baseline a learned search is paired against (ours)."""

    #: what the paper fixes (§3, §4.1): the network alone (no prior, no structured noise) over the meta
    #: features §3.1 names, PPO's ratio of the whole placement, the raw advantage (reward minus the mean of
    #: the graph's previous rewards), no entropy bonus, no gradient clipping, -10 for a failing placement,
    #: every op a node (§3's ops, §1's "per-node granularity") with a placement that splits a co-location
    #: group invalid
    PAPER = {"prior": None, "unit_moves": 0.0, "normalize_advantage": False, "entropy_weight": 0.0,
             "grad_clip": None, "invalid_reward": -10.0, "decide": "node", "ratio": "placement",
             "features": "paper", "nodes": "ops"}

    #: the fields that shape the network: a saved policy keeps them
    ARCHITECTURE = ("hidden", "type_dim", "sage_layers", "placer_layers", "heads", "ff", "segment", "memory",
                    "attention", "superposition", "max_devices", "features")

    def __post_init__(self):
        self.apply_paper()
        self.check(at_least_one=("hidden", "type_dim", "placer_layers", "heads", "ff", "segment", "max_devices",
                                 "samples_per_update", "ppo_epochs", "zero_shot_samples"), positive=("learning_rate",))
        if self.hidden % self.heads:
            raise AutoplaceError(f"GDPConfig.hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.nodes == "ops" and self.decide == "unit":
            raise AutoplaceError("GDPConfig.nodes='ops' decides op by op: it takes decide='node', not 'unit'")
        if self.nodes == "ops" and self.rules != ("colocation",):
            raise AutoplaceError(f"GDPConfig.nodes='ops' makes every op a node: group_rules does not apply "
                                 f"(got {self.group_rules!r}; leave it out)")
        for name in ("node_moves", "unit_moves"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise AutoplaceError(f"GDPConfig.{name} must be a number >= 0, got {v!r}")
        if isinstance(self.prior, str) and self.prior.lower() in ("none", "null", ""):
            object.__setattr__(self, "prior", None)                    # --set prior=none
        if self.node_moves == 0:
            raise AutoplaceError("GDPConfig.node_moves must be > 0")
        if self.prior is not None:

            if self.prior != "fast" and self.prior not in FAST_PLACERS:
                raise AutoplaceError(f"GDPConfig.prior must be 'fast', one of the fast placers "
                                     f"({', '.join(FAST_PLACERS)}) or None; got {self.prior!r}")
        if not 0 < self.clip < 1:
            raise AutoplaceError(f"GDPConfig.clip must be in (0, 1), got {self.clip!r}")

    def architecture(self) -> dict:
        return {k: getattr(self, k) for k in self.ARCHITECTURE}


#: the whole placement's log-ratio is capped here before ``exp`` (float32 overflows past 88): a sample whose
#: ratio passes e^30 (far outside any clip range) gives no gradient rather than an infinite loss
MAX_LOG_RATIO = 30.0


def new_policy(config: GDPConfig = GDPConfig()):
    """A fresh :class:`~autoplace.policies.gdp.GDPPolicy` of ``config``'s architecture."""
    from autoplace.policies.gdp import GDPPolicy as Net

    def make():
        return Net(**config.architecture())

    check_network_size(make, "GDP")
    return make()


@dataclass
class _Problem:
    """One graph on one cluster of a (batch) search: its nodes, features, mask and scorer, its reward
    statistics (the baseline is the mean of all its previous rewards) and its best placement."""

    graph: Graph
    cluster: Cluster
    grouping: Grouping
    features: object
    mask: object
    evaluate: CachedScorer
    env: BaseEnv | None
    bias: object = None
    weight: float = 0.0
    sigma: float = 0.0
    prior: np.ndarray | None = None
    prior_method: str = ""
    prior_s: float = 0.0
    prior_step: float = math.inf
    reward_n: int = 0
    reward_sum: float = 0.0
    reward_sq: float = 0.0
    best_step: float = math.inf
    best_groups: np.ndarray | None = None

    def stats(self) -> dict:
        return {"reward_n": self.reward_n, "reward_sum": self.reward_sum, "reward_sq": self.reward_sq,
                "best_step": self.best_step, "best_groups": self.best_groups,
                "cache": cache_state(self.evaluate, self.features.n_nodes)}

    def load(self, f: StateFields) -> None:
        """Continue from :meth:`stats` (``f``: its fields), every field checked first."""
        n, d = self.features.n_nodes, self.cluster.n_devices
        best = load_best(f, n, d)
        cache, runs = load_cache(f, "cache", n, d)
        # every reward is in [invalid_reward or -sqrt(MAX step), 0]: the sums of n of them are bounded so
        reward_n, reward_sum = f.int("reward_n"), f.float("reward_sum", -1e300, 0.0)
        reward_sq = f.float("reward_sq", 0.0, 1e300)
        if not (reward_sum >= -_MAX_ABS_REWARD * reward_n and reward_sq <= _MAX_ABS_REWARD ** 2 * reward_n
                and reward_sum * reward_sum <= reward_sq * reward_n * (1 + 1e-9) + 1e-300):
            raise f.fail("reward_sum", f"the sum of {reward_n} rewards whose squares sum to reward_sq")
        check_best(f, cache, *best)
        check_scores(f, "cache", self.evaluate, cache)
        self.reward_n, self.reward_sum, self.reward_sq = reward_n, reward_sum, reward_sq
        self.best_step, self.best_groups = best
        self.evaluate.restore(cache, runs)

    def placement(self, method: str, **meta) -> Placement:
        if self.best_groups is None:
            raise InfeasibleError(f"{method}: no sampled placement of {self.graph.name!r} ran on cluster "
                                  f"{self.cluster.name!r} (all failed)")
        return Placement.from_array(self.graph, self.cluster, self.grouping.expand(self.best_groups), method, **meta)


def gdp_nodes(graph: Graph, cluster: Cluster, config: GDPConfig) -> Grouping:
    """The nodes GDP places: ``config.rules``' groups (co-location groups by default), or with
    ``nodes="ops"`` every op; with ``decide="unit"``, those merged into their structural units where they can
    be (:func:`~autoplace.policies.features.unit_nodes`)."""
    if config.nodes == "ops":
        return Grouping(np.arange(graph.n_ops), tuple(op.name for op in graph.ops), ("op",))
    nodes = runnable_grouping(graph, config.rules, feasible_devices(graph, cluster))
    if config.decide == "unit":

        return unit_nodes(graph, cluster, nodes)
    return nodes


class ColocationChecked:
    """A scorer of op placements (its nodes are the ops: ``nodes="ops"``) whose placements fail where they
    split a co-location group (``colocation[i]``: op ``i``'s group), without being run: in a search
    (``__call__``) and when a checkpoint's cached scores are scored again (``score_ops``). Everything else is
    the wrapped scorer's."""

    def __init__(self, scorer, colocation: np.ndarray):
        self.scorer = scorer
        _, first, inverse = np.unique(colocation, return_index=True, return_inverse=True)
        self.first = first[inverse]                         # each op's group's first op

    def __getattr__(self, name):
        if name in ("scorer", "first"):                     # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.scorer, name)

    def whole(self, op_devices: np.ndarray) -> np.ndarray:
        """Which rows of ``[B, n_ops]`` keep every co-location group on one device."""
        return (op_devices == op_devices[:, self.first]).all(axis=1)

    def __call__(self, group_devices: np.ndarray) -> Scores:
        gd = np.atleast_2d(np.asarray(group_devices, dtype=np.int64))
        kept = self.whole(gd)
        out = Scores(np.full(len(gd), np.inf), np.zeros(len(gd), dtype=bool), np.zeros(len(gd), dtype=bool))
        if kept.any():                                      # a split placement is not run
            scores = self.scorer(gd[kept])
            out.step_time[kept], out.ok[kept], out.cached[kept] = scores.step_time, scores.ok, scores.cached
        return out

    def score_ops(self, op_devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        od = np.atleast_2d(np.asarray(op_devices, dtype=np.int64))
        kept = self.whole(od)
        step, ok = np.full(len(od), np.inf), np.zeros(len(od), dtype=bool)
        if kept.any():
            step[kept], ok[kept] = self.scorer.score_ops(od[kept])
        return step, ok


def _problem(graph: Graph, cluster: Cluster, config: GDPConfig, device, env, scorer=None, seed=0) -> _Problem:
    import torch


    if cluster.n_devices > config.max_devices:
        raise AutoplaceError(f"cluster {cluster.name!r} has {cluster.n_devices} devices; the GDP policy places on "
                             f"at most {config.max_devices} (GDPConfig.max_devices)")
    grouping = gdp_nodes(graph, cluster, config)
    check_params_fit(graph, cluster, grouping, "gdp")
    f = (node_features if config.features == "ours" else meta_features)(graph, grouping)
    can_run = grouped_graph(graph, grouping, cluster).feasible                    # [N, D], group id order
    feasible = can_run[f.order]
    m = np.full((f.n_nodes, config.max_devices), -np.inf, dtype=np.float32)
    m[:, :cluster.n_devices] = np.where(feasible, 0.0, -np.inf)
    own = scorer is None and not isinstance(env, BaseEnv)
    env_obj = (make_env(env, graph, cluster) if own else env) if scorer is None else None
    scorer = scorer if scorer is not None else Evaluator(env_obj, grouping)
    if config.nodes == "ops":
        scorer = ColocationChecked(scorer, group_ops(graph, rules=("colocation",)).group)
    p = _Problem(graph, cluster, grouping, f, torch.as_tensor(m, device=device), scorer, env_obj if own else None)
    D, U = cluster.n_devices, int(f.unit.max()) + 1 if f.n_nodes else 1
    if config.prior is not None:
        t0 = time.monotonic()
        p.prior, p.prior_method = prior_nodes(graph, cluster, grouping, config.prior, seed, can_run)
        p.prior_s = time.monotonic() - t0
        p.weight = max(math.log(max(D - 1, 1) * f.n_nodes / config.node_moves), 0.0) if D > 1 else 0.0
        if config.unit_moves and p.weight > 0:

            tail = min(config.unit_moves / (U * (D - 1)), 0.45)
            p.sigma = p.weight / (math.sqrt(2) * NormalDist().inv_cdf(1 - tail))
        centre(p, p.prior)
    return p


def centre(p: _Problem, groups: np.ndarray) -> None:
    """Bias problem ``p``'s logits toward ``groups`` (a device per node, group id order) by its weight."""
    import torch

    f = p.features
    bias = torch.zeros(p.mask.shape, dtype=torch.float32, device=p.mask.device)
    bias[torch.arange(f.n_nodes), torch.as_tensor(groups[f.order])] = p.weight
    p.bias = bias


def prior_nodes(graph: Graph, cluster: Cluster, grouping: Grouping, prior: str, seed,
                feasible: np.ndarray) -> tuple[np.ndarray, str]:
    """The prior placement of :attr:`GDPConfig.prior` as a device per node (group id order; a node whose
    ops the prior splits takes the device of most of them among those that can run it all: ``feasible``
    ``[N, D]``, group id order), and the placer that made it."""

    placement = best_fast(graph, cluster, seed=seed)[0] if prior == "fast" else place(graph, cluster, prior,
                                                                                       seed=seed)
    dev = placement.to_array(graph, cluster)
    counts = np.zeros((grouping.n_groups, cluster.n_devices), dtype=np.int64)
    np.add.at(counts, (grouping.group, dev), 1)
    return np.where(feasible, counts, -1).argmax(1), placement.method


@dataclass
class GDPResult(SearchResult):
    """What a GDP search returns: a learned search's result (``placement``: the first graph's best), and
    the best placement that ran of every graph of the batch."""

    placements: list[Placement] = field(default_factory=list)


class GDPSearch:
    """PPO over one or several graphs with one policy (GDP-one, GDP-batch): the engine's
    :class:`~autoplace.search.engine.Searcher`. ``policy``: a network to start from (fine-tuning), else a
    fresh one for ``seed``. ``scorers``: one scorer per graph in place of the env (a Ray worker pool)."""

    def __init__(self, graphs: list[Graph], clusters: list[Cluster], config: GDPConfig = GDPConfig(), *,
                 seed=None, env: str | BaseEnv = "simulated", policy=None, scorers: list | None = None):
        import torch

        if len(graphs) != len(clusters) or not graphs:
            raise AutoplaceError(f"GDP needs one cluster per graph ({len(graphs)} graphs, {len(clusters)} clusters)")
        self.config, self.seed = config, seed_int(seed)
        self.device = policy_device(config.torch_device)
        self.problems = [_problem(g, c, config, self.device, env, None if scorers is None else scorers[i],
                                  self.seed) for i, (g, c) in enumerate(zip(graphs, clusters))]
        for p in self.problems:                     # the prior is scored first: the search never returns worse
            if p.prior is not None:
                scores = p.evaluate(p.prior[None, :])
                if scores.ok[0]:
                    p.prior_step = float(scores.step_time[0])
                    p.best_step, p.best_groups = float(scores.step_time[0]), p.prior.copy()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.policy = (policy if policy is not None else new_policy(config)).to(self.device)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.samples = self.updates = 0
        self.wall_s = sum(p.prior_s for p in self.problems)       # the search's time includes its prior's
        self.curve = Curve()
        self.timings: dict[str, float] = {}

    @property
    def best_step(self) -> float:
        """The best step of the graph (one graph), or the geometric mean of the graphs' best steps."""
        return _objective([p.best_step for p in self.problems])

    @property
    def converged(self) -> bool:
        return False

    def update(self) -> CurvePoint:
        with torch_threads(self.config.torch_threads):
            return self._update()

    def _logits(self, p: _Problem):
        """The policy's logits of problem ``p``'s nodes ``[N, D]``, the prior's bias added."""
        logits = self.policy(p.features, p.mask)
        return logits if p.bias is None else logits + p.bias

    def _noise(self, p: _Problem, k: int):
        """The structured exploration noise of ``k`` samples ``[k, N, D]`` (None when off)."""
        import torch

        sigma = p.sigma
        if not sigma:
            return None
        unit = torch.as_tensor(p.features.unit)
        eps = torch.randn(k, int(unit.max()) + 1, self.config.max_devices, generator=self.generator) * sigma
        return eps[:, unit].to(self.device)

    def _sample(self, p: _Problem, k: int):
        """``k`` placements of problem ``p`` (nodes in order), each node decision's log-probability, and the
        exploration noise they were drawn with (None: none)."""
        import torch

        with torch.no_grad():
            eps = self._noise(p, k)
            logits = self._logits(p).expand(k, -1, -1)
            logp = torch.log_softmax(logits if eps is None else logits + eps, dim=2)     # [k, N, D]
            flat = logp.exp().reshape(-1, logp.shape[2]).cpu()
            d = torch.multinomial(flat, 1, generator=self.generator).reshape(k, -1).to(logp.device)   # [k, N]
            old = logp.gather(2, d.unsqueeze(2)).squeeze(2)                                   # [k, N]
        return d, old, eps

    def _update(self) -> CurvePoint:
        import torch

        cfg = self.config
        t0 = time.monotonic()
        batch = []
        means, fails, rewards_all = [], [], []
        for p in self.problems:
            d, old, eps = self._sample(p, cfg.samples_per_update)
            groups = np.empty((cfg.samples_per_update, p.features.n_nodes), dtype=np.int64)
            groups[:, p.features.order] = d.cpu().numpy()
            scores = p.evaluate(groups)
            reward = np.where(scores.ok, -np.sqrt(np.where(scores.ok, scores.step_time, 1.0)), cfg.invalid_reward)
            baseline = p.reward_sum / p.reward_n if p.reward_n else float(reward.mean())   # §4.1
            adv = reward - baseline
            if cfg.normalize_advantage:
                n, s, q = p.reward_n + len(reward), p.reward_sum + reward.sum(), p.reward_sq + (reward ** 2).sum()
                std = math.sqrt(max(q / n - (s / n) ** 2, 0.0))
                adv = adv / (std if std > 1e-12 else 1.0)
            p.reward_n += len(reward)
            p.reward_sum += float(reward.sum())
            p.reward_sq += float((reward ** 2).sum())
            if scores.ok.any():
                i = int(np.argmin(scores.step_time))
                if scores.step_time[i] < p.best_step:
                    p.best_step, p.best_groups = float(scores.step_time[i]), groups[i].copy()
            batch.append((p, d, old, eps, torch.as_tensor(adv, dtype=torch.float32, device=self.device)))
            ran = scores.step_time[scores.ok]
            means.append(float(ran.mean()) if len(ran) else math.inf)
            fails.append(float(1 - scores.ok.mean()))
            rewards_all.append(float(reward.mean()))
        t1 = time.monotonic()
        for _ in range(cfg.ppo_epochs if cfg.learn else 0):                # PPO's clipped surrogate
            loss = 0.0
            for p, d, old, eps, adv in batch:
                logits = self._logits(p).expand(d.shape[0], -1, -1)
                logp = torch.log_softmax(logits if eps is None else logits + eps, dim=2)          # [k, N, D]
                new = logp.gather(2, d.unsqueeze(2)).squeeze(2)                                   # [k, N]
                if cfg.ratio == "placement":        # the whole placement's: a product over its nodes
                    log_ratio = (new.sum(1) - old.sum(1)).clamp(max=MAX_LOG_RATIO)           # finite in float32
                    ratio, a = torch.exp(log_ratio), adv                                        # [k]
                else:                               # one per node decision, the advantage shared
                    ratio, a = torch.exp(new - old), adv.unsqueeze(1)                           # [k, N]
                surrogate = torch.minimum(ratio * a, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * a).mean()
                loss = loss - surrogate / len(batch)
                if cfg.entropy_weight:
                    probs = logp.exp()
                    ent = -(probs * torch.where(probs > 0, logp, torch.zeros_like(logp))).sum(2).mean()
                    loss = loss - cfg.entropy_weight * ent / len(batch)
            self.optimizer.zero_grad()
            loss.backward()
            if cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
            self.optimizer.step()
        for p in self.problems:
            if p.bias is not None and p.best_groups is not None:
                centre(p, p.best_groups)
        t2 = time.monotonic()
        self.samples += cfg.samples_per_update * len(self.problems)
        self.updates += 1
        for part, dt in (("sample_and_evaluate", t1 - t0), ("ppo", t2 - t1)):
            self.timings[part] = self.timings.get(part, 0.0) + dt
        self.wall_s += t2 - t0
        point = CurvePoint(self.samples, self.wall_s, self.best_step, _objective(means), float(np.mean(fails)),
                           float(np.mean(rewards_all)))
        self.curve.append(point)
        return point

    # ----------------------------------------------------------------- checkpoints
    def _identity(self) -> dict:
        return {"graphs": [p.graph.name for p in self.problems],
                "graph_hashes": [graph_hash(p.graph) for p in self.problems],
                "clusters": [p.cluster.name for p in self.problems],
                "cluster_hashes": [cluster_hash(p.cluster) for p in self.problems],
                "nodes": [p.features.n_nodes for p in self.problems], "config": asdict(self.config),
                "seed": self.seed, "env": self.problems[0].evaluate.env_name}

    def state(self) -> dict:
        import torch

        return {"format": CHECKPOINT_FORMAT, **self._identity(), "policy": self.policy.state_dict(),
                "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
                "torch_rng": torch.get_rng_state(), "problems": [p.stats() for p in self.problems],
                "samples": self.samples, "updates": self.updates, "wall_s": self.wall_s,
                "curve": self.curve.to_rows()}

    def load(self, state: dict, where: str = "checkpoint") -> None:
        f = open_checkpoint(state, CHECKPOINT_FORMAT, self._identity(), where)
        problems = f.items("problems", len(self.problems))
        curve = load_curve(f)
        for p, fields_of in zip(self.problems, problems):
            p.load(fields_of)
            if p.bias is not None and p.best_groups is not None:
                centre(p, p.best_groups)
        load_torch(f, "policy", self.policy)
        load_optimizer(f, "optimizer", self.optimizer)
        load_generator(f, "generator", self.generator)
        load_generator(f, "torch_rng", None)
        load_counters(f, self)
        f.finish()
        self.curve = curve

    def confirm(self) -> None:
        """Where the env is noisy, each graph's best placements measured again and the best mean kept."""
        for p in self.problems:
            confirm_best(p, p.evaluate)

    def close(self) -> None:
        for p in self.problems:
            if p.env is not None:
                p.env.close()


def _objective(xs: list[float]) -> float:
    """The geometric mean of every graph's step; infinite while any graph has no fitting placement."""
    if not xs or not all(math.isfinite(x) and x > 0 for x in xs):
        return math.inf
    return geomean(xs)


# --------------------------------------------------------------------------------------------- policy files
def save_policy(policy, config: GDPConfig, path: str | Path, *, graphs: list[str] = (),
                graph_hashes: list[str] = (), clusters: list[str] = (), cluster_hashes: list[str] = (),
                samples: int = 0, seed: int | None = None) -> None:
    """Write ``policy`` with ``config``'s architecture, and what it was trained on (the graphs' and clusters'
    names and content hashes, the samples and the seed), to ``path`` as a state file
    (:mod:`autoplace.formats.state`: no pickle), atomically."""
    meta = {"graphs": list(graphs), "graph_hashes": list(graph_hashes), "clusters": list(clusters),
            "cluster_hashes": list(cluster_hashes), "samples": int(samples), "seed": seed}
    write_state(path, {"format": POLICY_FORMAT, "config": asdict(config),
                       "state": {k: v.cpu() for k, v in policy.state_dict().items()}, "meta": meta})


def _check_meta(f: StateFields) -> None:
    """The policy file's record of its training (:func:`save_policy`), each field optional (a file written
    with none has ``{}``): names and hashes as lists of strings, samples a count, the seed an integer or
    none; any other field is refused by :meth:`StateFields.finish`."""
    m = f.sub("meta")
    for key in ("graphs", "graph_hashes", "clusters", "cluster_hashes"):
        if key in m.state and not all(isinstance(x, str) for x in m.list(key)):
            raise m.fail(key, "a list of strings")
    if "samples" in m.state:
        m.int("samples")
    if m.state.get("seed") is not None:
        m.int("seed", -2**63, 2**64)
    m.mark("seed")


def load_policy(path: str | Path, config: GDPConfig | dict | None = None):
    """The policy saved in ``path`` and its config: the file's architecture, with the training settings of
    ``config`` (a dict: only the fields it names; a :class:`GDPConfig`: its training fields). The file is
    untrusted input: a pickle is refused unread, and every field, setting and parameter is checked before
    use (a field the format does not have is refused)."""
    where = str(path)
    saved = read_state(path, "GDP policy file")
    if not isinstance(saved, dict) or not (isinstance(saved.get("format"), str) and saved["format"] == POLICY_FORMAT):
        raise FormatError(f"{where}: not a GDP policy file (expected format {POLICY_FORMAT!r})")
    f = StateFields(saved, where)
    values = dict(f.dict("config"))
    unknown = sorted(str(k) for k in set(values) - set(GDPConfig.field_names()))
    if unknown:
        raise FormatError(f"{where}: field 'config': unknown GDP setting {unknown[0][:40]!r}")
    values.setdefault("features", "ours")      # a policy saved before the setting existed
    missing = [k for k in GDPConfig.ARCHITECTURE if k not in values]
    if missing:
        raise FormatError(f"{where}: field 'config': missing {missing[0]!r} (the network's shape)")
    if isinstance(config, GDPConfig):
        values.update({k: v for k, v in asdict(config).items() if k not in GDPConfig.ARCHITECTURE})
    elif config:
        clash = sorted(set(config) & set(GDPConfig.ARCHITECTURE))
        if clash and any(canonical(config[k]) != canonical(values.get(k)) for k in clash):
            raise AutoplaceError(f"GDP setting {clash[0]!r} shapes the network: a saved policy keeps its own")
        values.update(config)
    try:
        cfg = GDPConfig.from_dict(values)
    except AutoplaceError as e:
        raise FormatError(f"{where}: field 'config': {e}") from None
    policy = new_policy(cfg)
    load_torch(f, "state", policy)
    f.mark("format")
    if "meta" in saved:                       # a policy written before the record existed has none
        _check_meta(f)
    f.finish()
    return policy, cfg


# --------------------------------------------------------------------------------------------- entry points
def work_budget(graphs: list[Graph], clusters: list[Cluster], budget: float | None,
                config: GDPConfig = GDPConfig()) -> SearchBudget:
    """The samples ``budget`` seconds of nominal work allow (default 60), in whole rounds of one update per
    graph: :func:`autoplace.search.work.gdp_samples`."""
    budget = work.nominal_budget(budget, "gdp")
    sizes = [(g.n_ops, gdp_nodes(g, c, config).n_groups) for g, c in zip(graphs, clusters)]
    return SearchBudget(samples=work.gdp_samples(budget, sizes, config.samples_per_update, config.ppo_epochs))


def _config(config) -> GDPConfig:
    if config is None:
        return GDPConfig()
    return GDPConfig.from_dict(config) if isinstance(config, dict) else config


def gdp_train(graphs: list[Graph], clusters: list[Cluster], *, budget: SearchBudget | float | None = None,
              config: GDPConfig | dict | None = None, seed=None, policy: str | Path | None = None,
              output: str | Path | None = None, method: str = "gdp", options: SearchOptions | None = None,
              **kwargs) -> GDPResult:
    """Train one GDP policy on ``graphs`` (each on its cluster) to ``budget`` (a :class:`SearchBudget`, or
    seconds of nominal work: :func:`work_budget`), starting from the policy file ``policy`` if given;
    save it to ``output``. Run as every learned search (:func:`~autoplace.search.runner.learned_search`:
    ``options`` or their fields as keywords); distributed, one pool of Ray workers per graph."""
    options = SearchOptions.of(options, **kwargs)
    options.only_one_controller("gdp")
    net = None
    if policy is not None:           # the file's settings, but for those ``config`` names
        net, config = load_policy(policy, config)
    config = _config(config)
    if not isinstance(budget, SearchBudget):
        budget = work_budget(graphs, clusters, budget, config)
    scoring = [(gdp_nodes(g, c, config), g, c) for g, c in zip(graphs, clusters)] if options.distributed else []
    names = ", ".join(g.name for g in graphs)
    with learned_search(lambda scorers: GDPSearch(graphs, clusters, config, seed=seed, env=options.env, policy=net,
                                                  scorers=scorers),
                        budget, options, name=method, title=f"{method} on {names}", scoring=scoring) as (search, run):
        if output is not None:
            save_policy(search.policy, config, output, graphs=[g.name for g in graphs],
                        graph_hashes=[graph_hash(g) for g in graphs], clusters=[c.name for c in clusters],
                        cluster_hashes=[cluster_hash(c) for c in clusters], samples=search.samples,
                        seed=search.seed)
        evaluations = sum(p.evaluate.evaluations for p in search.problems)
        hits = sum(p.evaluate.hits for p in search.problems)
        placements = [p.placement(method, samples=search.samples, updates=search.updates,
                                  stop_reason=run.stop_reason, nodes=p.features.n_nodes, best_step_s=p.best_step,
                                  prior=p.prior_method or None,
                                  prior_step_s=p.prior_step if math.isfinite(p.prior_step) else None,
                                  prior_s=p.prior_s)
                      for p in search.problems if p.best_groups is not None]
        if not placements:
            search.problems[0].placement(method)          # raises: nothing ran
        extra = {"timings_s": search.timings, "wall_s_this_run": run.wall_s_this_run,
                 "best_steps_s": [p.best_step for p in search.problems], "policy": search.policy}
        return GDPResult(placements[0], search.curve, search.samples, search.updates, run.stop_reason, evaluations,
                         hits, search.wall_s, extra, placements=placements)


def gdp_search(graph: Graph, cluster: Cluster, *, budget: SearchBudget | float | None = None,
               config: GDPConfig | dict | None = None, seed=None, policy: str | Path | None = None,
               zero_shot_only: bool = False, options: SearchOptions | None = None, **kwargs) -> GDPResult:
    """GDP on one graph: trained from scratch (GDP-one), or fine-tuned from the policy file ``policy``;
    with ``zero_shot_only``, the saved policy's placement without training (:func:`zero_shot`)."""
    options = SearchOptions.of(options, **kwargs)
    options.only_one_controller("gdp")
    if zero_shot_only:
        if policy is None:
            raise AutoplaceError("a zero-shot placement needs a trained policy (--policy FILE)")
        net, cfg = load_policy(policy, config)
        t0 = time.monotonic()
        placement = zero_shot(net, graph, cluster, cfg, seed=seed, env=options.env)
        return GDPResult(placement, Curve(), cfg.zero_shot_samples + 1, 0, "zero-shot", cfg.zero_shot_samples + 1,
                         0, time.monotonic() - t0, placements=[placement])
    return gdp_train([graph], [cluster], budget=budget, config=config, seed=seed, policy=policy, options=options)


def zero_shot(policy, graph: Graph, cluster: Cluster, config: GDPConfig = GDPConfig(), *, seed=None,
              env: str | BaseEnv = "simulated") -> Placement:
    """A trained policy's placement of a graph it may never have seen, without training: the most likely
    device of every node, :attr:`GDPConfig.zero_shot_samples` samples beside it, and the prior's placement
    (with a prior); the fastest that runs. ``meta["policy_time_s"]``: the seconds the policy took
    (embedding, placer, sampling); ``prior_s``: the prior's."""
    import torch

    search = GDPSearch([graph], [cluster], config, seed=seed, env=env, policy=policy)
    try:
        p = search.problems[0]
        t0 = time.monotonic()
        with torch.no_grad():
            greedy = search._logits(p).argmax(1).unsqueeze(0)
        d, _, _ = search._sample(p, config.zero_shot_samples)
        policy_s = time.monotonic() - t0
        groups = np.empty((1 + config.zero_shot_samples, p.features.n_nodes), dtype=np.int64)
        groups[:, p.features.order] = torch.cat([greedy, d]).cpu().numpy()
        if p.best_groups is not None:                       # the prior, scored already: never return worse
            groups = np.concatenate([groups, p.best_groups[None, :]])
        scores = p.evaluate(groups)
        if not scores.ok.any():
            raise InfeasibleError(f"gdp: none of the zero-shot placements of {graph.name!r} ran on cluster "
                                  f"{cluster.name!r}")
        i = int(np.argmin(scores.step_time))
        return Placement.from_array(graph, cluster, p.grouping.expand(groups[i]), "gdp", mode="zero-shot",
                                    policy_time_s=policy_s, best_step_s=float(scores.step_time[i]),
                                    greedy_step_s=float(scores.step_time[0]), nodes=p.features.n_nodes,
                                    prior=p.prior_method or None, prior_s=p.prior_s,
                                    prior_step_s=p.prior_step if math.isfinite(p.prior_step) else None)
    finally:
        search.close()


@register_placer("gdp", description="GraphSAGE + Transformer-XL policy placing every op at once, trained with PPO",
                 paper="Zhou et al. (GDP)", memory_aware=True, learned=True, search=gdp_search, config=GDPConfig)
def gdp(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """GDP-one (see the module docstring): ``budget`` seconds of nominal work (default 60) become samples."""
    return gdp_search(graph, cluster, budget=budget, seed=seed).placement
