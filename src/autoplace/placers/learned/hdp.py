"""HDP, the hierarchical device placer of Mirhoseini et al., "A Hierarchical Model for Device Placement"
(ICLR 2018), GDP's main baseline.

Two networks, trained jointly: a feed-forward *grouper* (:class:`~autoplace.policies.grouper.Grouper`)
samples a group for every node (the graph's co-location groups: co-located ops never part) out of a
fixed number of groups, and the seq2seq *placer* of the RL placer
(:class:`~autoplace.policies.seq2seq.Seq2SeqPolicy`, Mirhoseini et al. 2017 §3.2) reads the groups'
embeddings (:func:`~autoplace.policies.grouper.group_inputs`: type counts, sizes, adjacency) in the order
of their nodes' mean topological position and samples a device for each. A placement's probability is
the product of both, and one REINFORCE step trains both on the same reward:

.. math::

    \\nabla J \\approx \\frac{1}{K} \\sum_{i=1}^{K} (R_i - B)\\,
        \\nabla \\big(\\log p_g(\\text{groups}_i) + \\log p_d(\\text{devices}_i \\mid \\text{groups}_i)\\big),
    \\qquad R = \\sqrt{\\text{step time}}

with ``B`` a moving average of the rewards (initialised to the failing signal) and Adam, as the RL placer
(:mod:`autoplace.placers.learned.rl`). A placement that runs out of memory scores the failing signal.

Adapted: the number of groups (:attr:`HDPConfig.groups`, 64 here: the decoder's length) and the group
embedding's exact layout are ours; the 2018 paper is not among this project's references, and these
follow its description.

``paper=True`` is HDP as its authors released it (TensorFlow's ``grappler/hierarchical_controller.py`` and
``graph_placer.py``): their networks and embeddings (:mod:`autoplace.policies.hierarchical`), Adam at 0.1
decayed ×0.95 every 50 updates after 400, global-norm clip 1, logit noise for 750 updates, one placement
per update, a failing run of 100 s, only successful placements training after 1,000 updates and the
placer's draw kept after 500 (:attr:`HDPConfig.PAPER`; docs/algorithms.md tabulates each point).

``budget`` (seconds, through :func:`~autoplace.placers.place`) counts work like the RL placer's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.env import BaseEnv
from autoplace.errors import AutoplaceError
from autoplace.graph import Graph
from autoplace.grouping import Grouping, grouped_graph, runnable_grouping
from autoplace.placement import Placement
from autoplace.placers.registry import register_placer
from autoplace.policies.features import N_TYPE_BUCKETS, node_features
from autoplace.search import work
from autoplace.search.budget import SearchBudget
from autoplace.search.checkpoint import identity, load_policy_search, open_checkpoint, policy_search_state
from autoplace.search.config import Interval, Options, SearchConfig, TorchDevice, check_network_size
from autoplace.search.curve import Curve, CurvePoint
from autoplace.search.engine import policy_device, torch_threads
from autoplace.search.evaluation import Evaluator, SampledSearch, check_params_fit, default_failing_step
from autoplace.search.runner import SearchOptions, SearchResult, learned_search
from autoplace.validation import seed_int

__all__ = ["HDPConfig", "HDPSearch", "hdp_search", "hdp", "work_budget"]

CHECKPOINT_FORMAT = "autoplace.hdp/v3"   #: v3: the released node embedding on cyclic groups keeps every consumer


@dataclass(frozen=True)
class HDPConfig(SearchConfig):
    """Every knob of HDP."""

    LABEL = "HDP"

    CONSTRAINTS = {
        "groups": Interval("int", 1, 4096, none=True), "samples_per_update": Interval("int", 1, 4096),
        "network": Options(("ours", "released")),
        "lr_decay": Interval("float", 0, 1, lo_open=True), "lr_decay_start": Interval("int", 0, 10**9),
        "lr_decay_every": Interval("int", 1, 10**9),
        "logit_noise": Interval("float", 0, 100), "noise_updates": Interval("int", 0, 10**9),
        "failing_step_s": Interval("float", 0, 1e9, lo_open=True, none=True),
        "only_successful_after": Interval("int", 0, 10**9, none=True),
        "placer_sampling_updates": Interval("int", 0, 10**9, none=True),
        "learning_rate": Interval("float", 0, 1, lo_open=True),
        "baseline_decay": Interval("float", 0, 1, hi_open=True),
        "failing_factor": Interval("float", 1, 1e6), "grouper_hidden": Interval("int", 1, 4096),
        "hidden": Interval("int", 1, 4096), "type_dim": Interval("int", 1, 1024),
        "device_dim": Interval("int", 1, 1024),
        "logit_clip": Interval("float", 0, 100, lo_open=True, none=True),
        "grad_clip": Interval("float", 0, 1e6, lo_open=True, none=True),
        "torch_device": TorchDevice(), "torch_threads": Interval("int", 1, 256),
    }

    #: the authors' released code (``tensorflow/python/grappler/hierarchical_controller.py``:
    #: ``hierarchical_controller_hparams``, ``HierarchicalController``; ``graph_placer.py``: ``PlaceGraph``
    #: runs one child), where the paper is silent; docs/algorithms.md lists each point
    PAPER = {"network": "released", "group_rules": "colocation", "groups": None, "samples_per_update": 1,
             "learning_rate": 0.1,
             "lr_decay": 0.95, "lr_decay_start": 400, "lr_decay_every": 50, "grad_clip": 1.0,
             "logit_clip": 1.0, "logit_noise": 0.5, "noise_updates": 750, "hidden": 512, "grouper_hidden": 64,
             "baseline_decay": 0.9, "failing_step_s": 100.0, "only_successful_after": 1000,
             "placer_sampling_updates": 500}

    groups: int | None = 64
    """Groups the grouper's softmax chooses from (ours: 64; none: min(256, 20 x devices), the released
    code's)."""
    network: str = "ours"
    """The networks: "ours" (a ReLU grouper over our node features, the RL placer's seq2seq) or
    "released" (the authors' released grouper, group embedding and bidirectional placer:
    autoplace.policies.hierarchical)."""
    group_rules: str = "colocation"
    """The nodes the grouper groups: groups of these rules (co-location groups by default)."""
    samples_per_update: int = 8
    """K, placements sampled per update."""
    learning_rate: float = 3e-4
    """Adam's step size, both networks (ours)."""
    lr_decay: float = 1.0
    """The step size is multiplied by this every lr_decay_every updates after lr_decay_start (1: constant)."""
    lr_decay_start: int = 400
    """Updates before the step size starts to decay."""
    lr_decay_every: int = 50
    """Updates between two decays (a staircase)."""
    baseline_decay: float = 0.9
    """B <- decay * B + (1 - decay) * mean reward of an update."""
    failing_factor: float = 10.0
    """A failing placement scores as this many times the serial step on the slowest devices (as rl)."""
    failing_step_s: float | None = None
    """A failing placement's step time in seconds, in place of failing_factor's (none: failing_factor)."""
    only_successful_after: int | None = None
    """After this many updates the loss reads only placements that ran, and the baseline from one update
    earlier (the released code moves it after the update is counted; none: never)."""
    placer_sampling_updates: int | None = None
    """After this many updates the placer stops sampling and scores the devices it last drew for the new
    groupings (none: it always samples; the released network only)."""
    logit_noise: float = 0.0
    """Gaussian noise on both networks' logits, its deviation this times the logits' RMS (0: none; the
    released network only)."""
    noise_updates: int = 750
    """Updates with logit noise (while the update count is at most this)."""
    grouper_hidden: int = 64
    """The grouper's width (ours)."""
    hidden: int = 128
    """The placer's encoder, decoder and attention size (ours)."""
    type_dim: int = 16
    """Op-type embedding size, grouper and placer (ours)."""
    device_dim: int = 32
    """Device embedding size (ours)."""
    logit_clip: float | None = 5.0
    """Bounds the placer's logits to ±C: C·tanh(logits / C) in our network, C·tanh(logits) in the released
    one (its tanh_constant, 1; None: off)."""
    grad_clip: float | None = 1.0
    """Clip the gradient's norm to this (ours; None: off)."""
    torch_device: str = "auto"
    """Where the networks run: "cpu", "cuda", or "auto"."""
    torch_threads: int = 1
    """CPU threads for the networks (ours)."""
    paper: bool = False
    """True: the paper's joint update with nothing of ours on (the settings :attr:`PAPER` lists)."""
    learn: bool = True
    """False: the same search with the policy frozen at its initialisation (no gradient step), what the
    search finds without learning: the baseline a learned search is paired against (ours)."""

    def __post_init__(self):
        self.apply_paper()
        self.check(at_least_one=("samples_per_update", "grouper_hidden", "hidden", "type_dim", "device_dim"),
                   positive=("learning_rate",))
        if not 0 <= self.baseline_decay < 1:
            raise AutoplaceError(f"HDPConfig.baseline_decay must be in [0, 1), got {self.baseline_decay!r}")
        if self.network == "released" and self.hidden % 2:
            raise AutoplaceError(f"HDPConfig.hidden must be even for the released network (two directions), "
                                 f"got {self.hidden}")
        if self.network != "released":
            for name in ("logit_noise", "placer_sampling_updates"):
                if getattr(self, name) != getattr(type(self), name):
                    raise AutoplaceError(f"HDPConfig.{name} applies to the released network only "
                                         f"(set network=released)")

    def n_groups(self, cluster: Cluster) -> int:
        """The grouper's number of groups on ``cluster``: :attr:`groups`, or the released code's
        min(256, 20 x devices)."""
        return self.groups if self.groups is not None else min(256, 20 * cluster.n_devices)

    def step_size(self, updates: int) -> float:
        """Adam's step size at update ``updates`` (the released code's staircase decay)."""
        if self.lr_decay == 1.0 or updates < self.lr_decay_start:
            return self.learning_rate
        return self.learning_rate * self.lr_decay ** ((updates - self.lr_decay_start) // self.lr_decay_every)


def hdp_nodes(graph: Graph, cluster: Cluster, config: HDPConfig) -> Grouping:
    """The nodes the grouper assigns to groups (co-location groups by default)."""
    return runnable_grouping(graph, config.rules, feasible_devices(graph, cluster))


class HDPSearch(SampledSearch):
    """Grouper and placer of one graph on one cluster, trained jointly: the engine's
    :class:`~autoplace.search.engine.Searcher`. ``scorer``: scores node placements in place of the env
    (a Ray worker pool)."""

    method = "hdp"

    def __init__(self, graph: Graph, cluster: Cluster, config: HDPConfig = HDPConfig(), *, seed=None,
                 env: str | BaseEnv = "simulated", scorer=None):
        import torch

        from autoplace.policies.grouper import Grouper, group_input_dim
        from autoplace.policies.seq2seq import Seq2SeqPolicy

        self.graph, self.cluster, self.config = graph, cluster, config
        self.seed = seed_int(seed)
        self.nodes = hdp_nodes(graph, cluster, config)
        check_params_fit(graph, cluster, self.nodes, "hdp")
        self.features = node_features(graph, self.nodes)
        self.feasible = grouped_graph(graph, self.nodes, cluster).feasible[self.features.order]   # [N, D]
        self.device = policy_device(config.torch_device)
        self.n_groups = G = config.n_groups(cluster)
        self.released = config.network == "released"
        if self.released:
            from autoplace.policies.hierarchical import released_inputs

            self.released_inputs = released_inputs(graph, self.nodes, self.features)
            self.node_embedding = torch.as_tensor(self.released_inputs.embedding)

        def make():
            if self.released:
                from autoplace.policies.hierarchical import MAX_DIMS, MAX_OUTPUTS, ReleasedGrouper, ReleasedPlacer

                return [ReleasedGrouper(G, config.grouper_hidden),
                        ReleasedPlacer(2 * G + self.released_inputs.n_types + MAX_OUTPUTS * MAX_DIMS, cluster.n_devices,
                                       hidden=config.hidden, tanh_constant=config.logit_clip)]
            return [Grouper(G, config.grouper_hidden, config.type_dim),
                    Seq2SeqPolicy(N_TYPE_BUCKETS, group_input_dim(G), cluster.n_devices,
                                  type_dim=config.type_dim, hidden=config.hidden, device_dim=config.device_dim,
                                  logit_clip=config.logit_clip)]

        check_network_size(make, "HDP")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.grouper, self.placer = (m.to(self.device) for m in make())
        self.optimizer = torch.optim.Adam([*self.grouper.parameters(), *self.placer.parameters()],
                                          lr=config.learning_rate)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.use_env(env, graph, cluster, scorer)
        self.evaluate = scorer if scorer is not None else Evaluator(self.env, self.nodes)
        self.failing_step = (config.failing_step_s if config.failing_step_s is not None
                             else default_failing_step(graph, cluster, config.failing_factor))
        self.failing_signal = math.sqrt(self.failing_step)
        self.baseline = self.failing_signal
        self.last_devices: np.ndarray | None = None     # the placer's last draw [G] (placer_sampling_updates)
        self.best_step = math.inf
        self.best_groups: np.ndarray | None = None
        self.samples = self.updates = 0
        self.wall_s = 0.0
        self.curve = Curve()
        self.timings: dict[str, float] = {}

    @property
    def converged(self) -> bool:
        return False

    def update(self) -> CurvePoint:
        with torch_threads(self.config.torch_threads):
            return self._update()

    def _group_devices_ok(self, a: np.ndarray) -> np.ndarray:
        """``[k, G, D]``: the devices that run every node of each group of groupings ``a`` ``[k, N]`` (a group
        no device runs whole: all, and the placement fails)."""
        k = len(a)
        bad = np.zeros((k, self.n_groups, self.cluster.n_devices), dtype=np.int64)
        for i in range(k):
            np.add.at(bad[i], a[i], ~self.feasible)
        ok = bad == 0
        ok[~ok.any(axis=2)] = True
        return ok

    def _finish(self, a: np.ndarray, gdev: np.ndarray, logp):
        """Node devices ``[k, N]`` of groupings ``a`` and group devices ``gdev`` ``[k, G]``, whether each
        placement runs, and ``logp``."""
        node_dev = np.take_along_axis(gdev, a, axis=1)                                    # [k, N]
        runs = self.feasible[np.arange(self.features.n_nodes)[None, :], node_dev].all(axis=1)
        return node_dev, runs, logp

    def _sample(self, k: int):
        """``k`` groupings and placements: node devices ``[k, N]`` (nodes in order), whether every node
        landed on a device that runs it, and the log-probabilities ``[k]`` (with gradient)."""
        if self.released:
            return self._sample_released(k)
        import torch

        from autoplace.policies.grouper import group_inputs

        G, f = self.n_groups, self.features
        glogp = torch.log_softmax(self.grouper(f), dim=1)                                  # [N, G]
        assign = torch.multinomial(glogp.detach().exp().cpu(), k, replacement=True, generator=self.generator).T
        logp = glogp.gather(1, assign.T.to(self.device)).sum(0)                           # [k]
        a = assign.numpy()
        x = group_inputs(f, a, G, self.placer.type_embedding)                             # [k, G, F]
        # the groups in the order of their nodes' mean position (empty groups last)
        pos = np.zeros((k, G))
        for i in range(k):
            count = np.bincount(a[i], minlength=G)
            pos[i] = np.where(count > 0, np.bincount(a[i], weights=np.arange(f.n_nodes), minlength=G)
                              / np.maximum(count, 1), np.inf)
        order = np.argsort(pos, axis=1, kind="stable")                                   # [k, G]
        x = torch.gather(x, 1, torch.as_tensor(order, device=self.device).unsqueeze(2).expand(-1, -1, x.shape[2]))
        ok = np.take_along_axis(self._group_devices_ok(a), order[:, :, None], axis=1)
        mask = torch.as_tensor(np.where(ok, 0.0, -np.inf).astype(np.float32), device=self.device)
        devices, plogp, _ = self.placer.decode(self.placer.encode_inputs(x), mask, generator=self.generator)
        gdev = np.empty((k, G), dtype=np.int64)
        np.put_along_axis(gdev, order, devices.cpu().numpy(), axis=1)                   # back to group ids
        return self._finish(a, gdev, logp + plogp)

    def _sample_released(self, k: int):
        """:meth:`_sample` with the released networks: groups in id order, logit noise while the update
        count is at most ``noise_updates``, and, after ``placer_sampling_updates`` updates, the placer's last
        draw scored under the new groupings instead of a new draw."""
        import torch

        from autoplace.policies.hierarchical import group_embedding, noisy_logits

        cfg = self.config
        noise = cfg.logit_noise if self.updates <= cfg.noise_updates else 0.0
        logits = noisy_logits(self.grouper(self.node_embedding.to(self.device)), noise, self.generator)
        glogp = torch.log_softmax(logits, dim=1)                                          # [N, G]
        assign = torch.multinomial(glogp.detach().exp().cpu(), k, replacement=True, generator=self.generator).T
        logp = glogp.gather(1, assign.T.to(self.device)).sum(0)                           # [k]
        a = assign.numpy()
        x = torch.as_tensor(group_embedding(self.released_inputs, a, self.n_groups), device=self.device)
        mask = torch.as_tensor(np.where(self._group_devices_ok(a), 0.0, -np.inf).astype(np.float32),
                               device=self.device)
        frozen = (cfg.placer_sampling_updates is not None and self.updates >= cfg.placer_sampling_updates
                  and self.last_devices is not None)
        given = torch.as_tensor(np.tile(self.last_devices, (k, 1)), device=self.device) if frozen else None
        devices, plogp = self.placer.sample(x, mask, devices=given, noise=noise, generator=self.generator)
        gdev = devices.cpu().numpy()
        self.last_devices = gdev[-1].copy()
        return self._finish(a, gdev, logp + plogp)

    def _read(self, reward: np.ndarray, updates: int) -> np.ndarray:
        """Which of ``reward`` count at ``updates`` updates: after ``only_successful_after`` of them only the
        placements that ran (the released code's ``stop_updating_after_steps``: a reward under the failing
        signal), else all."""
        after = self.config.only_successful_after
        if after is not None and updates >= after:
            return reward < self.failing_signal
        return np.ones(len(reward), dtype=bool)

    def _update(self) -> CurvePoint:
        import torch

        cfg = self.config
        t0 = time.monotonic()
        node_dev, runs, logp = self._sample(cfg.samples_per_update)
        groups = np.empty_like(node_dev)
        groups[:, self.features.order] = node_dev                                        # positions -> node ids
        t1 = time.monotonic()
        step = np.full(len(groups), np.inf)
        ok = np.zeros(len(groups), dtype=bool)
        if runs.any():
            scores = self.evaluate(groups[runs])
            step[runs], ok[runs] = scores.step_time, scores.ok
        t2 = time.monotonic()
        reward = np.where(ok, np.sqrt(np.where(ok, step, 1.0)), self.failing_signal)
        read = self._read(reward, self.updates)
        adv = torch.as_tensor(np.where(read, reward - self.baseline, 0.0), dtype=torch.float32, device=self.device)
        if cfg.learn:
            # none read: a zero loss, and Adam still steps on its moments (the released train_op runs so)
            loss = (adv * logp).mean() if read.all() else (adv * logp).sum() / max(int(read.sum()), 1)
            for group in self.optimizer.param_groups:
                group["lr"] = cfg.step_size(self.updates)
            self.optimizer.zero_grad()
            loss.backward()
            if cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_([*self.grouper.parameters(), *self.placer.parameters()],
                                               cfg.grad_clip)
            self.optimizer.step()
        # the released baseline_update runs after train_op has counted this update: it reads only the
        # placements that ran one update earlier than the loss does
        bl_read = self._read(reward, self.updates + 1)
        if bl_read.any():
            self.baseline = (cfg.baseline_decay * self.baseline
                             + (1 - cfg.baseline_decay) * float(reward[bl_read].mean()))
        if ok.any():
            i = int(np.argmin(step))
            if step[i] < self.best_step:
                self.best_step, self.best_groups = float(step[i]), groups[i].copy()
        self.count_update(cfg.samples_per_update, t0, t1, t2)
        ran = step[ok]
        point = CurvePoint(self.samples, self.wall_s, self.best_step, float(ran.mean()) if len(ran) else math.inf,
                           float(1 - ok.mean()), float(reward.mean()))
        self.curve.append(point)
        return point

    # ----------------------------------------------------------------- checkpoints
    def _identity(self) -> dict:
        return identity(self.graph, self.cluster, self.config, self.seed, self.evaluate.env_name,
                        nodes=self.features.n_nodes)

    def state(self) -> dict:
        return {"format": CHECKPOINT_FORMAT, **self._identity(),
                **policy_search_state(self, self.features.n_nodes, {"grouper": self.grouper, "placer": self.placer}),
                "last_devices": self.last_devices}

    def load(self, state: dict, where: str = "checkpoint") -> None:
        f = open_checkpoint(state, CHECKPOINT_FORMAT, self._identity(), where)
        last = f.groups("last_devices", self.n_groups, self.cluster.n_devices)
        for group in self.optimizer.param_groups:        # the step size the last saved update set
            group["lr"] = self.config.step_size(max(f.int("updates") - 1, 0))
        load_policy_search(f, self, self.features.n_nodes, {"grouper": self.grouper, "placer": self.placer})
        f.finish()
        self.last_devices = last

    @property
    def units(self) -> Grouping:
        return self.nodes


def work_budget(graph: Graph, cluster: Cluster, budget: float | None, config: HDPConfig = HDPConfig()) -> SearchBudget:
    """The samples ``budget`` seconds of nominal work allow (default 60)."""
    budget = work.nominal_budget(budget, "hdp")
    n_nodes = hdp_nodes(graph, cluster, config).n_groups
    samples = work.hdp_samples(budget, graph.n_ops, n_nodes, config.n_groups(cluster))
    return SearchBudget(samples=max(config.samples_per_update, samples))


def hdp_search(graph: Graph, cluster: Cluster, *, budget: SearchBudget | float | None = None,
               config: HDPConfig | dict = HDPConfig(), seed=None, options: SearchOptions | None = None,
               **kwargs) -> SearchResult:
    """Train HDP's grouper and placer on ``graph`` to ``budget`` (a :class:`SearchBudget`, or seconds of
    nominal work: :func:`work_budget`), run as every learned search (:func:`~autoplace.search.runner.learned_search`:
    ``options`` or their fields as keywords, :class:`~autoplace.search.runner.SearchOptions`)."""
    options = SearchOptions.of(options, **kwargs)
    options.only_one_controller("hdp")
    config = HDPConfig.from_dict(config) if isinstance(config, dict) else config
    if not isinstance(budget, SearchBudget):
        budget = work_budget(graph, cluster, budget, config)
    scoring = [(hdp_nodes(graph, cluster, config), graph, cluster)] if options.distributed else []
    with learned_search(lambda scorers: HDPSearch(graph, cluster, config, seed=seed, env=options.env,
                                                  scorer=scorers[0] if scorers else None),
                        budget, options, name="hdp", title=f"hdp on {graph.name}, {cluster.name}",
                        scoring=scoring) as (search, run):
        placement = search.best_placement(samples=search.samples, updates=search.updates,
                                          stop_reason=run.stop_reason, evaluations=search.evaluate.evaluations,
                                          cache_hits=search.evaluate.hits, best_step_s=search.best_step)
        return SearchResult(placement, search.curve, search.samples, search.updates, run.stop_reason,
                            search.evaluate.evaluations, search.evaluate.hits, search.wall_s,
                            {"timings_s": search.timings, "wall_s_this_run": run.wall_s_this_run})


@register_placer("hdp", description="learned grouper + seq2seq placer, trained jointly with REINFORCE",
                 paper="Mirhoseini et al. 2018", memory_aware=True, learned=True, search=hdp_search, config=HDPConfig)
def hdp(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring: ``budget`` seconds of nominal work (default 60) become samples."""
    return hdp_search(graph, cluster, budget=budget, seed=seed).placement
