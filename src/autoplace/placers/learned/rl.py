"""The reinforcement-learning placer of Mirhoseini et al., "Device Placement Optimization with
Reinforcement Learning" (ICML 2017).

A sequence-to-sequence policy (:class:`~autoplace.policies.seq2seq.Seq2SeqPolicy`, §3.2) proposes a device
for every group of the graph (§3.3) — by default for every structural unit of groups, below; each
proposal is scored by the env (the simulator, or real runs), and
the step time trains the policy with REINFORCE (§3.1):

.. math::

    R(P) = \\sqrt{r(P)}, \\qquad
    \\nabla_\\theta J(\\theta) \\approx \\frac{1}{K} \\sum_{i=1}^{K} (R(P_i) - B) \\,
    \\nabla_\\theta \\log p(P_i \\mid G; \\theta)
    \\quad \\text{(eq. 3)}

with ``K`` samples per update, ``B`` a moving average of the rewards initialised, in the paper, to the
*failing signal* (the reward a placement that runs out of memory or fails to run gets instead of ``sqrt``
of its time; by default here to the first update's mean reward: :attr:`RLConfig.baseline_start`), and
Adam. After :attr:`RLConfig.only_ok_after` updates, only placements that ran enter an update (the paper
does this after 5,000 steps, against sporadic failures late in training).

What is adapted, and why:

* *groups*: the paper groups by hand (each LSTM cell, each Inception branch) and by a consumer-only
  merging rule; here the groups are the co-location groups with the structural rule (layers, cells,
  branches: :mod:`autoplace.grouping`), at most :attr:`RLConfig.groups` (256) of them so that the
  decoder's length stays bounded whatever the graph's size: a recurrent layer's steps are taken in
  blocks, or METIS merges them where blocks cannot get there (:func:`rl_grouping`); ``paper=True`` takes
  the paper's rules, the consumer-only merge among them, and does not coarsen (212 groups on rnnlm-2, 386
  on nmt-2, 68 on Inception-V3 against the paper's Table 1: 188, 280, 83);
* *structured exploration* (not in the paper): each sample adds Gaussian noise to the logits, one draw per
  structural unit (a layer with its weights, at every time step) and device, and the logits are bounded
  (:attr:`RLConfig.exploration_noise`, :attr:`RLConfig.logit_clip`), so that a sample moves whole layers
  (the paper's algorithm, ``paper=True``, ends behind the expert on nmt-2 after a minute of nominal
  work: docs/benchmarks.md);
* *the failing signal*: the paper sets it by hand per graph (:attr:`RLConfig.failing_step_s`); unset, it
  is ``sqrt`` of :attr:`RLConfig.failing_factor` times the graph's serial time on its slowest devices
  (:func:`~autoplace.search.evaluation.default_failing_step`), above every placement that runs;
* *controllers*: the paper runs up to 20 asynchronous controllers of 4 or 8 workers on a parameter server
  (§3.4); :func:`rl_distributed` runs that layout on Ray, and a paper-mode search with fewer controllers,
  or without a failing signal set by hand, says so in its placement's meta (``paper_reduced``);
* *one decision per structural unit* (:attr:`RLConfig.decide`, not in the paper): the groups of one
  layer (with its weights, at every time step), branch or cell are placed together, so that every sample
  keeps each layer whole;
* *the product attention* (:attr:`RLConfig.attention`): a scaled dot product in place of the paper's
  additive score, so that one matrix product per decoder step serves every sample of an update;
* *the paper's algorithm*: ``paper=True`` (:attr:`RLConfig.PAPER`) turns every addition of ours off;
* *a seen placement is not re-run*: scores are cached by placement
  (:class:`~autoplace.search.evaluation.Evaluator`) — under the simulator a placement's score never
  changes, and real runs of a converging policy repeat the same few placements.

``budget`` (seconds, through :func:`~autoplace.placers.place`) counts work, not wall-clock time, so that
a search is reproducible for a seed on any machine: it allows ``budget / (n_ops / OPS_PER_SECOND + n_groups
* RL_SECONDS_PER_GROUP + RL_SECONDS_PER_SAMPLE)`` samples (a simulation plus a nominal policy cost per
decoder step and per sample; :mod:`autoplace.search.work`). A search also ends once the policy has
converged: every sample of
:attr:`RLConfig.converged_updates` consecutive updates the same placement.
:func:`rl_search` takes an explicit :class:`~autoplace.search.budget.SearchBudget` of samples or
wall-clock seconds, checkpoints and resumes, and writes the training curve.

Cost per update: ``K`` simulations plus one encoder pass and ``G`` decoder steps on a batch of ``K``.

Size: one readable file per placer (the project's style: the paper's configuration, its searcher,
the distributed controllers and the entry points in one place); its neural parts are in
:mod:`autoplace.policies`, the search loop in :mod:`autoplace.search`.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from functools import partial

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.env import BaseEnv
from autoplace.errors import AutoplaceError, FormatError, InfeasibleError
from autoplace.graph import Graph
from autoplace.grouping import Grouping, coarsen, grouped_graph, runnable_grouping
from autoplace.placement import Placement
from autoplace.placers.registry import register_placer
from autoplace.policies.features import group_features, unit_nodes
from autoplace.progress import report_progress
from autoplace.search import work
from autoplace.search.budget import SearchBudget
from autoplace.search.checkpoint import (
    Checkpointer,
    checkpoint_path,
    identity,
    load_checkpoint,
    load_optimizer,
    load_policy_search,
    load_torch,
    open_checkpoint,
    policy_search_state,
)
from autoplace.search.config import Interval, Options, SearchConfig, TorchDevice, check_network_size
from autoplace.search.curve import Curve, CurvePoint
from autoplace.search.distributed import ParameterServer, RayScorer, ray_session
from autoplace.search.engine import policy_device, torch_threads
from autoplace.search.evaluation import Evaluator, SampledSearch, check_params_fit, default_failing_step
from autoplace.search.runner import SearchOptions, SearchResult, learned_search
from autoplace.validation import seed_int

__all__ = ["RLConfig", "SearchResult", "RLSearch", "rl_search", "rl_distributed", "rl", "samples_for_budget",
           "work_budget", "policy_parts"]



@dataclass(frozen=True)
class RLConfig(SearchConfig):
    """Every knob of the RL placer; the paper's value where it gives one."""

    LABEL = "RL"

    CONSTRAINTS = {
        "groups": Interval("int", 1, 10**6, none=True), "coarsen": Options(("steps", "metis")),
        "failing_step_s": Interval("float", 0, 1e9, lo_open=True, none=True),
        "samples_per_update": Interval("int", 1, 4096), "learning_rate": Interval("float", 0, 1, lo_open=True),
        "baseline_decay": Interval("float", 0, 1, hi_open=True), "failing_factor": Interval("float", 1, 1e6),
        "only_ok_after": Interval("int", 0, 10**9), "entropy_weight": Interval("float", 0, 100),
        "temperature": Interval("float", 1e-3, 100),
        "logit_clip": Interval("float", 0, 100, lo_open=True, none=True),
        "exploration_noise": Interval("float", 0, 1e6),
        "grad_clip": Interval("float", 0, 1e6, lo_open=True, none=True),
        "hidden": Interval("int", 1, 4096), "type_dim": Interval("int", 1, 1024),
        "device_dim": Interval("int", 1, 1024),
        "max_outputs": Interval("int", 1, 1024),
        "torch_device": TorchDevice(), "torch_threads": Interval("int", 1, 256),
        "converged_updates": Interval("int", 0, 10**9), "attention": Options(("additive", "dot")),
        "decide": Options(("group", "unit")), "baseline_start": Options(("failing", "first")),
    }

    #: what the paper fixes (§3): its co-location groups (§3.3: TensorFlow's, the consumer-only merge
    #: applied recursively, and the per-model groups of §4.1: each LSTM cell, embedding lookup, attention and
    #: softmax step, each Inception branch), not coarsened; no exploration noise, no logit bound,
    #: temperature or entropy bonus, no gradient clipping, no convergence stop, Bahdanau's attention, a
    #: decision per group, the baseline from the failing signal, K = 8 (a controller's workers), only
    #: placements that ran in the updates after the first 5,000
    PAPER = {"groups": None, "group_rules": "colocation,gradient,single-consumer,structure,structure-first",
             "exploration_noise": 0.0, "logit_clip": None, "temperature": 1.0, "entropy_weight": 0.0,
             "grad_clip": None, "converged_updates": 0, "attention": "additive", "decide": "group",
             "baseline_start": "failing", "samples_per_update": 8, "only_ok_after": 5000}

    groups: int | None = 256
    """Groups the policy places: at most about this many (ours; see :func:`rl_grouping`; none: the rules'
    groups, not coarsened, as the paper)."""
    group_rules: str = "colocation,gradient,structure,structure-first"
    """The grouping rules (:mod:`autoplace.grouping`), comma-separated, before coarsening (§3.3)."""
    coarsen: str = "steps"
    """Over ``groups`` groups: ``steps`` takes a recurrent layer's time steps in blocks (a layer stays one
    column of groups, so a layer-per-device split stays possible), METIS where blocks cannot get there;
    ``metis``: METIS alone."""
    samples_per_update: int = 8
    """K, placements sampled per update (§3.1, eq. 3; the paper's controllers had 4 or 8 workers). More
    samples per update cost little more with the product attention, but at a given number of samples
    they leave fewer updates: at 32, 2,000 samples of the tiny LM on ``p100x2`` end 23 % slower than at 8."""
    learning_rate: float = 3e-4
    """Adam's step size (§3.1 uses Adam; the rate is not given: ours)."""
    baseline_decay: float = 0.9
    """B <- decay * B + (1 - decay) * mean reward of an update (§3.1: a simple moving average)."""
    baseline_start: str = "first"
    """Where B starts: "failing", the failing signal (§3.1: "more exploration"), or "first", the first
    update's mean reward (ours: from the failing signal, far above every reward, every early sample's
    advantage R - B is negative, so the first updates raise the probability of whatever was sampled)."""
    failing_factor: float = 10.0
    """A failing placement scores as this many times the serial step on the slowest devices (ours)."""
    failing_step_s: float | None = None
    """A failing placement's step time in seconds, set by hand (§3.1: "we specify the failing signal
    manually depending on the input graph"; its square root is the failing signal); none: failing_factor's."""
    only_ok_after: int = 5000
    """After this many updates, only placements that ran enter an update (§3.1: 5,000 steps)."""
    entropy_weight: float = 0.0
    """Weight of an entropy bonus in the loss (not in the paper: 0)."""
    temperature: float = 1.0
    """Divides the decoder's logits (not in the 2017 paper: 1)."""
    logit_clip: float | None = 3.0
    """Bounds the logits to ±C with C·tanh(logits / C) (not in the 2017 paper; the authors' later
    hierarchical placer bounds them by c·tanh(logits); ours: 3, so that the exploration noise keeps some
    effect; None: off)."""
    exploration_noise: float = 2.0
    """σ of the structured exploration noise: one N(0, σ²) draw per sample, structural unit and device, added
    to the logits (not in the paper; ours; 0: off; see :mod:`autoplace.policies.seq2seq`)."""
    grad_clip: float | None = 1.0
    """Clip the gradient's norm to this (not in the paper; None: off)."""
    hidden: int = 128
    """Encoder, decoder and attention size (ours)."""
    type_dim: int = 32
    """Op-type embedding size (ours)."""
    device_dim: int = 32
    """Device embedding size (ours)."""
    max_outputs: int = 8
    """Output sizes per group in the zero-padded list (§3.2; the length is ours)."""
    torch_device: str = "auto"
    """Where the policy runs: "cpu", "cuda", or "auto" (a GPU when one is present)."""
    torch_threads: int = 1
    """CPU threads for the policy (its matrices are small: more threads mostly contend; ours)."""
    decide: str = "unit"
    """What one decision places: "group" (§3.3: every group, up to ``groups`` of them), or "unit": each
    structural unit whole — a layer with its weights at every time step, a branch, a cell (the units of
    :mod:`autoplace.policies.features`), where a device runs every unit whole and the units' parameters
    fit the devices together; else per group (ours)."""
    attention: str = "dot"
    """The decoder's attention scores (:data:`~autoplace.policies.seq2seq.ATTENTION`): "additive" (§3.2,
    Bahdanau et al.'s), or "dot", a scaled product that serves every sample of an update with one matrix
    product per decoder step (ours)."""
    paper: bool = False
    """True: the paper's algorithm (§3) with nothing of ours on — the settings :attr:`PAPER` lists take the
    paper's values; the rest keep theirs (the paper gives no learning rate, sizes or failing signal)."""
    learn: bool = True
    """False: the same search with the policy frozen at its initialisation (no gradient step), what the
    search finds without learning: the baseline a learned search is paired against (ours)."""
    converged_updates: int = 20
    """Stop when every sample of this many consecutive updates is one placement (ours; 0: never). With the
    exploration noise on, samples almost never repeat so: the stop is for the paper's policy."""

    def __post_init__(self):
        self.apply_paper()
        self.check(at_least_one=("samples_per_update",), positive=("learning_rate",))
        if not 0 <= self.baseline_decay < 1:
            raise AutoplaceError(f"RLConfig.baseline_decay must be in [0, 1), got {self.baseline_decay!r}")
        if not (self.exploration_noise >= 0 and math.isfinite(self.exploration_noise)):
            raise AutoplaceError(f"RLConfig.exploration_noise must be >= 0, got {self.exploration_noise!r}")
        if self.coarsen not in ("steps", "metis"):
            raise AutoplaceError(f"RLConfig.coarsen must be 'steps' or 'metis', got {self.coarsen!r}")


#: what a paper-mode search states it ran short of (§3.4: "up to 20 controllers, each with either 4 or 8
#: workers", asynchronous, one parameter server); the distributed search runs that layout on Ray
#: (``--workers``, ``--controllers``), a machine permitting
PAPER_REDUCED = ("{controllers} controller(s) where the paper ran up to 20 asynchronous controllers of 4 or 8 "
                 "workers each on a parameter server (--workers, --controllers: the distributed search)")
#: and where no failing signal is set by hand (§3.1: "we specify the failing signal manually")
PAPER_FAILING = ("a failing signal of sqrt({factor:g} x the serial step) where the paper set one by hand per "
                 "graph (set failing_step_s)")


def paper_reduced(config: RLConfig, controllers: int) -> str | None:
    """What a paper-mode search ran short of the paper (``None``: nothing, or not paper mode)."""
    if not config.paper:
        return None
    parts = [PAPER_REDUCED.format(controllers=controllers)] if controllers < 20 else []
    if config.failing_step_s is None:
        parts.append(PAPER_FAILING.format(factor=config.failing_factor))
    return "; ".join(parts) or None


def samples_for_budget(graph: Graph, n_groups: int, budget: float) -> int:
    """The samples a work budget of ``budget`` seconds allows (see the module docstring)."""
    return work.rl_samples(budget, graph.n_ops, n_groups)


def rl_grouping(graph: Graph, cluster: Cluster, config: RLConfig, seed: int = 0) -> Grouping:
    """The groups the policy places (§3.3): ``config.rules``' groups; over ``config.groups`` of them, the
    time steps of every step-tagged structural group (LSTM layer, attention, softmax, embedding, cell)
    taken in the smallest blocks that make them few enough (``coarsen="steps"``); where even one block
    per layer leaves too many, or with ``coarsen="metis"``, METIS merges the groups instead. ``config``: any
    search config with ``rules``, ``groups`` and ``coarsen`` (HTF-MPR's coarsens the same way); with
    ``decide="unit"``, those groups merged into their structural units where they can be
    (:func:`~autoplace.policies.features.unit_nodes`)."""
    grouping = _rl_groups(graph, cluster, config, seed)
    if getattr(config, "decide", "group") == "unit":

        return unit_nodes(graph, cluster, grouping)
    return grouping


def _rl_groups(graph: Graph, cluster: Cluster, config: RLConfig, seed: int = 0) -> Grouping:
    ok = feasible_devices(graph, cluster)
    base = runnable_grouping(graph, config.rules, ok)
    if config.groups is None:                      # the rules' groups as they are (the paper's)
        return base
    n_steps = 1 + max((op.meta["step"] for op in graph.ops if isinstance(op.meta.get("step"), int)), default=0)
    if config.coarsen == "steps" and base.n_groups > config.groups and n_steps > 1:

        def blocked(block: int) -> Grouping | None:   # None: no device runs some block whole
            g = runnable_grouping(graph, config.rules, ok, step_block=block)
            return g if g.rules == base.rules else None

        whole = blocked(n_steps)
        if whole is not None and whole.n_groups <= config.groups:
            lo, hi, best = 2, n_steps, whole           # the smallest block that is few enough (bisection:
            while lo < hi:                             # a group count never grows with the block)
                mid = (lo + hi) // 2
                g = blocked(mid)
                if g is not None and g.n_groups <= config.groups:
                    hi, best = mid, g
                else:
                    lo = mid + 1
            return best
        # blocks alone cannot get there (most groups are not recurrent): METIS on the finest groups
    try:
        return coarsen(graph, base, config.groups, cluster, seed=seed)
    except InfeasibleError:          # a structural group no device runs whole: place the finer groups
        return base


def policy_parts(graph: Graph, cluster: Cluster, config: RLConfig, seed: int):
    """The groups, their features, the device mask and the freshly initialised policy of a search: the same
    for the same arguments, in any process (the parameter server and the controllers build theirs so)."""
    import torch

    from autoplace.policies.seq2seq import Seq2SeqPolicy, device_mask

    grouping = rl_grouping(graph, cluster, config, seed)
    gg = grouped_graph(graph, grouping, cluster)
    features = group_features(graph, grouping, config.max_outputs)
    device = policy_device(config.torch_device)
    mask = device_mask(gg.feasible, features.order).to(device)
    def make():
        return Seq2SeqPolicy(features.n_types, features.dense.shape[1], cluster.n_devices, type_dim=config.type_dim,
                             hidden=config.hidden, device_dim=config.device_dim, temperature=config.temperature,
                             logit_clip=config.logit_clip, attention=config.attention)

    check_network_size(make, "RL")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = make().to(device)
    return grouping, features, mask, policy


CHECKPOINT_FORMAT = "autoplace.rl/v2"
DISTRIBUTED_FORMAT = "autoplace.rl-distributed/v2"


class RLSearch(SampledSearch):
    """One controller: policy, optimizer, baseline and sampler of one graph on one cluster (§3.4 runs
    several of these against a parameter server; :func:`rl_search` runs one)."""

    method = "rl"

    def __init__(self, graph: Graph, cluster: Cluster, config: RLConfig = RLConfig(), *, seed=None,
                 env: str | BaseEnv = "simulated", sample_seed: int | None = None):
        import torch

        self.graph, self.cluster, self.config = graph, cluster, config
        self.seed = seed_int(seed)
        self.grouping, self.features, self.mask, self.policy = policy_parts(graph, cluster, config, self.seed)
        check_params_fit(graph, cluster, self.grouping, "rl")
        self.device = self.mask.device
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.generator = torch.Generator().manual_seed(self.seed if sample_seed is None else sample_seed)
        self.use_env(env, graph, cluster)
        self.evaluate = Evaluator(self.env, self.grouping)
        self.failing_step = (config.failing_step_s if config.failing_step_s is not None
                             else default_failing_step(graph, cluster, config.failing_factor))
        self.failing_signal = math.sqrt(self.failing_step)
        self.baseline = self.failing_signal                  # §3.1: initialised to the failing signal
        self.best_step = math.inf
        self.best_groups: np.ndarray | None = None
        self.samples = self.updates = 0
        self.same_streak = 0                                   # consecutive updates of one placement only
        self.timings: dict[str, float] = {}                    # seconds per part of an update, this process
        self.wall_s = 0.0
        self.curve = Curve()

    # ----------------------------------------------------------------- one update (§3.1, eq. 3)
    def update(self) -> CurvePoint:
        """Sample K placements, score them, and take one REINFORCE step."""
        with torch_threads(self.config.torch_threads):
            return self._update()

    def _update(self) -> CurvePoint:
        import torch

        cfg = self.config
        t0 = time.monotonic()
        devices, logp, entropy = self.policy(self.features, self.mask, cfg.samples_per_update, self.generator,
                                             cfg.exploration_noise)
        groups = np.empty((cfg.samples_per_update, self.features.n_groups), dtype=np.int64)
        groups[:, self.features.order] = devices.cpu().numpy()        # encoder order -> group ids
        t1 = time.monotonic()
        scores = self.evaluate(groups)
        t2 = time.monotonic()
        reward = np.where(scores.ok, np.sqrt(np.where(scores.ok, scores.step_time, 1.0)), self.failing_signal)
        use = scores.ok if self.updates >= cfg.only_ok_after else np.ones(len(reward), dtype=bool)
        if cfg.baseline_start == "first" and self.updates == 0 and use.any():
            self.baseline = float(reward[use].mean())
        if use.any() and cfg.learn:
            adv = torch.as_tensor((reward - self.baseline) * use, dtype=torch.float32, device=self.device)
            loss = (adv * logp).sum() / use.sum() - cfg.entropy_weight * entropy.mean()
            self.optimizer.zero_grad()
            loss.backward()
            if cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
            self.apply_gradients()
        if use.any():
            self.baseline = cfg.baseline_decay * self.baseline + (1 - cfg.baseline_decay) * float(reward[use].mean())
        if scores.ok.any():
            k = int(np.argmin(scores.step_time))
            if scores.step_time[k] < self.best_step:
                self.best_step, self.best_groups = float(scores.step_time[k]), groups[k].copy()
        self.same_streak = self.same_streak + 1 if (groups == groups[0]).all() else 0
        self.count_update(cfg.samples_per_update, t0, t1, t2)
        ran = scores.step_time[scores.ok]
        point = CurvePoint(self.samples, self.wall_s, self.best_step, float(ran.mean()) if len(ran) else math.inf,
                           float(1 - scores.ok.mean()), float(reward.mean()))
        self.curve.append(point)
        return point

    def apply_gradients(self) -> None:
        """Step the parameters with the gradients in ``.grad`` (here: the local Adam; a distributed
        controller sends them to the parameter server instead)."""
        self.optimizer.step()

    # ----------------------------------------------------------------- checkpoints
    def _identity(self) -> dict:
        return identity(self.graph, self.cluster, self.config, self.seed, self.evaluate.env_name,
                        n_groups=self.features.n_groups)

    def state(self) -> dict:
        """Everything a resumed search needs to continue as if it had not stopped."""
        return {"format": CHECKPOINT_FORMAT, **self._identity(), "same_streak": self.same_streak,
                **policy_search_state(self, self.features.n_groups, {"policy": self.policy})}

    def load(self, state: dict, where: str = "checkpoint") -> None:
        """Continue from ``state`` (:meth:`state` of a search of the same graph, cluster and config), every
        field checked first."""
        if isinstance(state, dict) and state.get("format") == DISTRIBUTED_FORMAT:
            raise FormatError(f"{where}: a checkpoint of a distributed search: resume it with the same --workers "
                              "and --controllers")
        f = open_checkpoint(state, CHECKPOINT_FORMAT, self._identity(), where)
        load_policy_search(f, self, self.features.n_groups, {"policy": self.policy}, ("same_streak",))
        f.finish()

    @property
    def converged(self) -> bool:
        return 0 < self.config.converged_updates <= self.same_streak

    @property
    def units(self) -> Grouping:
        return self.grouping


def rl_search(graph: Graph, cluster: Cluster, *, budget: SearchBudget | float | None = None,
              config: RLConfig | dict = RLConfig(), seed=None, options: SearchOptions | None = None,
              **kwargs) -> SearchResult:
    """Run the RL placer to ``budget`` (a :class:`SearchBudget`, or seconds of nominal work as ``place``'s
    budget: :func:`work_budget`), as every learned search (:func:`~autoplace.search.runner.learned_search`:
    ``options`` or their fields as keywords: checkpoints, resume, curve files, Ctrl-C ending it early with
    the best placement so far). With ``workers`` > 1 or a ``ray_address``, the search is the paper's
    distributed one on Ray (:func:`rl_distributed`; ``env`` and ``env_kwargs`` then build each worker's
    env)."""
    options = SearchOptions.of(options, **kwargs)
    config = RLConfig.from_dict(config) if isinstance(config, dict) else config
    if not isinstance(budget, SearchBudget):
        budget = work_budget(graph, cluster, budget, config)
    if options.distributed:
        o = options
        return rl_distributed(graph, cluster, budget=budget, workers=o.workers, controllers=o.controllers,
                              config=config, seed=seed, env=o.env_name, env_kwargs=o.env_kwargs,
                              ray_address=o.ray_address, curve_csv=o.curve_csv, curve_png=o.curve_png,
                              checkpoint=o.checkpoint, resume=o.resume, checkpoint_every_s=o.checkpoint_every_s)
    with learned_search(lambda _: RLSearch(graph, cluster, config, seed=seed, env=options.env), budget, options,
                        name="rl", title=f"rl on {graph.name}, {cluster.name}") as (search, run):
        stop = run.stop_reason
        placement = search.best_placement(
            samples=search.samples, updates=search.updates, stop_reason=stop, evaluations=search.evaluate.evaluations,
            cache_hits=search.evaluate.hits, groups=search.features.n_groups, best_step_s=search.best_step)
        extra = {"failing_step_s": search.failing_step, "baseline": search.baseline, "timings_s": search.timings,
                 "wall_s_this_run": run.wall_s_this_run}
        reduced = paper_reduced(config, 1)
        if reduced:
            placement.meta["paper_reduced"] = extra["paper_reduced"] = reduced
        return SearchResult(placement, search.curve, search.samples, search.updates, stop,
                            search.evaluate.evaluations, search.evaluate.hits, search.wall_s, extra)


def _policy_only(graph: Graph, cluster: Cluster, config: RLConfig, seed: int):
    return policy_parts(graph, cluster, config, seed)[3]


def _adam(params, lr: float):
    import torch

    return torch.optim.Adam(params, lr=lr)


class _Controller(RLSearch):
    """One controller of the distributed search (§3.4), run as a Ray actor: its own baseline and sampler,
    its ``n_workers`` evaluation workers, and the policy's parameters from the parameter server."""

    def __init__(self, graph, cluster, config, seed, index, n_workers, env, env_kwargs, server, resume=None):

        import ray


        super().__init__(graph, cluster, config, seed=seed, sample_seed=seed * 1009 + index + 1)
        self.ray, self.server = ray, server
        self.evaluate = RayScorer(ray, self.grouping, graph, cluster, n_workers, env, env_kwargs)
        if resume is not None:
            self.load(resume)
        state, self.total = ray.get(server.parameters.remote())
        self.policy.load_state_dict(state)
        self._sent = False
        self._lock = threading.Lock()     # a snapshot (the actor's second thread) waits for the update under way
        self._stop = False

    def update(self) -> CurvePoint:
        with self._lock:
            return super().update()

    def snapshot(self) -> dict:
        """This controller's part of a checkpoint (its baseline, sampler, best placement, curve, cache)."""
        with self._lock:
            return self.state()

    def stop(self) -> None:
        """End :meth:`run` after the update under way (Ctrl-C on the driver)."""
        self._stop = True

    def apply_gradients(self) -> None:
        import torch

        # a parameter the loss does not reach (the additive score's, under the product attention) has none
        grads = [torch.zeros_like(p, device="cpu") if p.grad is None else p.grad.detach().cpu()
                 for p in self.policy.parameters()]
        state, self.total = self.ray.get(self.server.apply.remote(grads, self.config.samples_per_update))
        self.policy.load_state_dict(state)
        self._sent = True

    def workers(self) -> list:
        return list(self.evaluate.workers)

    def updates_done(self) -> int:
        return self.updates

    def run(self, samples: int | None, deadline_s: float | None) -> dict:
        """Updates until the server counts ``samples`` or this controller's search time, across resumes,
        reaches ``deadline_s`` seconds."""
        t0, wall0 = time.monotonic(), self.wall_s
        while not ((samples is not None and self.total >= samples) or self._stop
                   or (deadline_s is not None and wall0 + time.monotonic() - t0 >= deadline_s) or self.converged):
            self._sent = False
            p = self.update()
            if not self._sent:                                  # no gradient this time: still count the samples
                state, self.total = self.ray.get(self.server.apply.remote(None, self.config.samples_per_update))
                self.policy.load_state_dict(state)
            self.wall_s = wall0 + time.monotonic() - t0
            self.curve.points[-1] = CurvePoint(self.total, self.wall_s, p.best_step_s, p.mean_step_s,
                                               p.failed, p.mean_reward)
        if not self._stop:
            self.confirm()                                      # a noisy env's best: measured again
        self.evaluate.close()
        return {"curve": self.curve.to_rows(), "best_step": self.best_step, "best_groups": self.best_groups,
                "evaluations": self.evaluate.evaluations, "hits": self.evaluate.hits,
                "replaced": self.evaluate.replaced, "updates": self.updates, "converged": self.converged,
                "wall_s": self.wall_s}




def rl_distributed(graph: Graph, cluster: Cluster, *, budget: SearchBudget, workers: int,
                   controllers: int | None = None,
                   config: RLConfig = RLConfig(), seed=None, env: str = "simulated", env_kwargs: dict | None = None,
                   ray_address: str | None = None, curve_csv=None, curve_png=None, checkpoint=None, resume=None,
                   checkpoint_every_s: float = 30.0, on_start=None) -> SearchResult:
    """The distributed search (§3.4) on Ray: ``controllers`` controllers (default: one per
    ``samples_per_update`` workers, at least one), ``workers`` evaluation workers shared out among them,
    one parameter server; local Ray unless ``ray_address``. Checkpoints (the server's parameters and
    optimizer, each controller's baseline, sampler, best placement, curve and cache) go to ``checkpoint``
    (default: the ``resume`` folder) every ``checkpoint_every_s`` seconds, on Ctrl-C and at the end;
    ``resume`` continues one with the same number of controllers. ``on_start(ray, controller_handles)`` is
    called once the controllers run (tests use it to kill a worker mid-search). Not reproducible for a seed."""


    seed = seed_int(seed)
    n_ctrl = controllers or max(1, workers // config.samples_per_update)
    if workers < n_ctrl:
        raise AutoplaceError(f"{workers} workers cannot serve {n_ctrl} controllers (at least one each)")
    saved = None if resume is None else _distributed_checkpoint(load_checkpoint(resume), graph, cluster, config,
                                                                  seed, n_ctrl, env, str(checkpoint_path(resume)))
    ckpt = Checkpointer(checkpoint if checkpoint is not None else resume, checkpoint_every_s)
    stop = None
    with ray_session(ray_address) as ray:
        server = ray.remote(num_cpus=0)(ParameterServer).remote(
            partial(_policy_only, graph, cluster, config, seed), partial(_adam, lr=config.learning_rate))
        if saved is not None:
            ray.get(server.load.remote(saved["server"]))
        g_ref, c_ref = ray.put(graph), ray.put(cluster)
        actor = ray.remote(num_cpus=0, max_concurrency=2)(_Controller)
        shares = [workers // n_ctrl + (i < workers % n_ctrl) for i in range(n_ctrl)]
        ctrls = [actor.remote(g_ref, c_ref, config, seed, i, shares[i], env, env_kwargs, server,
                              None if saved is None else saved["controllers"][i]) for i in range(n_ctrl)]

        def state() -> dict:
            return {"format": DISTRIBUTED_FORMAT, **identity(graph, cluster, config, seed, env, n_controllers=n_ctrl),
                    # the controllers first: the server's counters then cover every point of their curves
                    "controllers": ray.get([c.snapshot.remote() for c in ctrls]),
                    "server": ray.get(server.state.remote())}

        refs = [c.run.remote(budget.samples, budget.seconds) for c in ctrls]
        pending = list(refs)
        try:
            if on_start is not None:
                on_start(ray, ctrls)
            while pending:
                _, pending = ray.wait(pending, timeout=1.0)
                done = ray.get(server.parameters.remote())[1]
                report_progress(f"rl: {done} samples on {n_ctrl} controllers, {workers} workers",
                                None if budget.samples is None else min(1.0, done / budget.samples))
                if pending:
                    ckpt.maybe_save(state)
        except KeyboardInterrupt:
            stop = "interrupted"
            ray.get([c.stop.remote() for c in ctrls])
        results = ray.get(refs)
        ckpt.save(state)
        total = ray.get(server.parameters.remote())[1]
    points = sorted((CurvePoint(*r) for res in results for r in res["curve"]), key=lambda p: (p.samples, p.wall_s))
    best, merged = math.inf, Curve()
    for p in points:                                   # one curve: best so far over every controller
        best = min(best, p.best_step_s)
        merged.append(CurvePoint(p.samples, p.wall_s, best, p.mean_step_s, p.failed, p.mean_reward))
    winner = min(results, key=lambda r: r["best_step"])
    if winner["best_groups"] is None:
        raise InfeasibleError(f"rl: none of the {total} sampled placements of {graph.name!r} ran on cluster "
                              f"{cluster.name!r} (all failed)")
    grouping, features, _, _ = policy_parts(graph, cluster, config, seed)
    reduced = paper_reduced(config, n_ctrl)
    meta = {**({"paper_reduced": reduced} if reduced else {}),
            "samples": total, "updates": sum(r["updates"] for r in results), "controllers": n_ctrl,
            "workers": workers, "evaluations": sum(r["evaluations"] for r in results),
            "cache_hits": sum(r["hits"] for r in results), "workers_replaced": sum(r["replaced"] for r in results),
            "groups": features.n_groups, "best_step_s": winner["best_step"],
            "stop_reason": stop or ("converged" if all(r["converged"] for r in results) else
                                    ("samples" if budget.samples is not None and total >= budget.samples
                                     else "seconds"))}
    if curve_csv is not None:
        merged.write_csv(curve_csv)
    if curve_png is not None:
        merged.plot(curve_png, f"rl on {graph.name}, {cluster.name} ({n_ctrl} controllers, {workers} workers)")
    placement = Placement.from_array(graph, cluster, grouping.expand(winner["best_groups"]), "rl", **meta)
    return SearchResult(placement, merged, total, meta["updates"],
                    meta["stop_reason"], meta["evaluations"], meta["cache_hits"], max(r["wall_s"] for r in results),
                    {"workers_replaced": meta["workers_replaced"]})


def _distributed_checkpoint(state: dict, graph: Graph, cluster: Cluster, config: RLConfig, seed: int,
                            n_ctrl: int, env: str, where: str) -> dict:
    """``state`` if it is a checkpoint of this distributed search whose every controller and the server's
    parameters load (checked here, on the driver, before any actor starts); else :class:`FormatError`
    naming ``where`` and what differs or is damaged."""
    import torch

    f = open_checkpoint(state, DISTRIBUTED_FORMAT,
                        identity(graph, cluster, config, seed, env, n_controllers=n_ctrl), where)
    with torch.random.fork_rng(devices=[]):
        for i, c in enumerate(f.list("controllers", n_ctrl)):
            probe = RLSearch(graph, cluster, config, seed=seed, sample_seed=seed * 1009 + i + 1)
            probe.evaluate.env_name = env               # the workers' env: a simulated one's scores are checked
            try:
                probe.load(c, f"{where}: controllers[{i}]")
            finally:
                probe.close()
    server = f.sub("server")
    policy = _policy_only(graph, cluster, config, seed)
    load_torch(server, "policy", policy)
    load_optimizer(server, "optimizer", _adam(policy.parameters(), config.learning_rate))
    server.int("samples"), server.int("updates")
    f.finish()
    return state


@register_placer("rl", description="seq2seq policy over groups trained with REINFORCE on the step time",
                 paper="Mirhoseini et al. 2017", memory_aware=True, learned=True, search=rl_search, config=RLConfig)
def rl(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring: ``budget`` seconds of nominal work (default 60) become samples."""
    return rl_search(graph, cluster, budget=budget, seed=seed).placement


def work_budget(graph: Graph, cluster: Cluster, budget: float | None,
                config: RLConfig | dict = RLConfig()) -> SearchBudget:
    """The samples ``budget`` seconds of nominal work allow (default 60; see the module docstring)."""
    config = RLConfig.from_dict(config) if isinstance(config, dict) else config
    budget = work.nominal_budget(budget, "rl")
    n_groups = rl_grouping(graph, cluster, config).n_groups
    return SearchBudget(samples=max(config.samples_per_update, samples_for_budget(graph, n_groups, budget)))
