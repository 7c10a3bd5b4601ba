"""GDP, generalized device placement (Zhou et al., "GDP: Generalized Device Placement for Dataflow
Graphs"): a graph-neural policy that places every op of a graph at once, trained with PPO, over one graph
or many, and placing graphs it has not seen.

The policy (:class:`GDPPolicy`) is the paper's Figure 1: a GraphSAGE embedding of the nodes (§3.1, eq. 2–3,
:mod:`autoplace.policies.graphsage`) feeding a Transformer-XL placer with segment-level recurrence and
superposition (§3.2–3.3, eq. 4, :mod:`autoplace.policies.transformer_xl`), whose output is a distribution
over devices for every node. The nodes are the graph's co-location groups (:attr:`GDPConfig.group_rules`:
the ``colocation`` rule alone places op by op, co-location enforced by placing a group's ops together);
there is no grouping stage. One sample draws every node's device independently from its distribution.

Training (§4.1) maximises eq. 1 over a set of graphs with PPO (Schulman et al. 2017): every update samples
``K`` placements of each graph, scores them (the reward is ``-sqrt(step time)``, ``-10`` for a placement
that fails), takes the advantage against the mean of all the graph's previous rewards, and runs
:attr:`GDPConfig.ppo_epochs` epochs of the clipped surrogate

.. math::

    L(\\theta) = -\\frac{1}{|B|}\\sum_{G}\\frac{1}{K N_G}\\sum_{k, v}
        \\min\\big(\\rho_{k,v} A_k,\\ \\mathrm{clip}(\\rho_{k,v}, 1 - \\epsilon, 1 + \\epsilon) A_k\\big),
    \\qquad \\rho_{k,v} = \\frac{\\pi_\\theta(d_{k,v} \\mid G)}{\\pi_{\\theta_{old}}(d_{k,v} \\mid G)}

with one ratio per node decision (the placement's advantage shared by its nodes: a ratio of the whole
placement's probability, a product over thousands of nodes, would leave or hit the clip range at once).

Modes: one graph (*GDP-one*: ``place -m gdp``); a batch of graphs with one policy (*GDP-batch*:
:func:`gdp_train`, ``autoplace train``), whose policy is saved (:func:`save_policy`) and then places a
held-out graph zero-shot (:func:`zero_shot`) or after a short fine-tune (``place -m gdp --policy FILE``).

What is adapted, and why:

* *node features*: GDP names op type, output shape and adjacent node ids; ids mean nothing across graphs,
  so adjacency enters through the graph embedding, and each node also gets its topological position and
  depth, and the capture's layer and step, as fractions of the graph's
  (:func:`~autoplace.policies.features.node_features`);
* *advantage scale*: the advantage is divided by the standard deviation of the graph's previous rewards
  (:attr:`GDPConfig.normalize_advantage`), so that one learning rate serves graphs whose steps differ by
  orders of magnitude; the failing reward stays the paper's ``-10``;
* *devices*: the output layer has :attr:`GDPConfig.max_devices` logits, those a cluster lacks masked out,
  so that one policy serves clusters of 2 to 8 GPUs.

``budget`` (seconds, through :func:`~autoplace.placers.place`) counts work, not wall-clock time:
:func:`work_budget` turns it into samples with a nominal cost per simulated op and per policy node.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.env import BaseEnv, make_env
from autoplace.errors import AutoplaceError, FormatError, InfeasibleError
from autoplace.graph import Graph
from autoplace.grouping import Grouping, runnable_grouping
from autoplace.placement import Placement
from autoplace.placers import register_placer
from autoplace.placers.rl import RLResult
from autoplace.search.budget import SearchBudget
from autoplace.search.config import SearchConfig
from autoplace.search.curve import Curve, CurvePoint
from autoplace.search.engine import check_checkpoint, run_search, torch_device, torch_threads
from autoplace.search.evaluation import CachedScorer, Evaluator, check_params_fit
from autoplace.validation import check_budget, seed_int

__all__ = ["GDPConfig", "GDPPolicy", "GDPResult", "GDPSearch", "gdp_search", "gdp_train", "zero_shot",
           "save_policy", "load_policy", "work_budget", "gdp"]

DEFAULT_BUDGET_S = 60.0
OPS_PER_SECOND = 1e7                 #: nominal simulator speed, as the other searches'
POLICY_SECONDS_PER_NODE = 2e-5       #: nominal policy cost per node and sample (sampling and PPO epochs)
POLICY_SECONDS_PER_UPDATE = 0.04     #: nominal fixed cost of one graph's update (its PPO epochs' passes)
POLICY_FORMAT = "autoplace.gdp-policy/v1"
CHECKPOINT_FORMAT = "autoplace.gdp/v1"


@dataclass(frozen=True)
class GDPConfig(SearchConfig):
    """Every knob of GDP; the paper's value where it gives one."""

    LABEL = "GDP"

    group_rules: str = "colocation"
    """The nodes: groups of these rules (:mod:`autoplace.grouping`); ``colocation`` places op by op."""
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
    samples_per_update: int = 8
    """K: placements sampled per graph per update (ours)."""
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
    zero_shot_samples: int = 8
    """Zero-shot: placements sampled beside the most likely one, the best that runs kept (ours)."""
    torch_device: str = "auto"
    """Where the policy runs: "cpu", "cuda", or "auto" (a GPU when one is present)."""
    torch_threads: int = 1
    """CPU threads for the policy (ours: more contend with the simulator and other searches)."""

    #: the fields that shape the network: a saved policy keeps them
    ARCHITECTURE = ("hidden", "type_dim", "sage_layers", "placer_layers", "heads", "ff", "segment", "memory",
                    "attention", "superposition", "max_devices")

    def __post_init__(self):
        self.check(at_least_one=("hidden", "type_dim", "placer_layers", "heads", "ff", "segment", "max_devices",
                                 "samples_per_update", "ppo_epochs", "zero_shot_samples"), positive=("learning_rate",))
        if self.hidden % self.heads:
            raise AutoplaceError(f"GDPConfig.hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if not 0 < self.clip < 1:
            raise AutoplaceError(f"GDPConfig.clip must be in (0, 1), got {self.clip!r}")

    def architecture(self) -> dict:
        return {k: getattr(self, k) for k in self.ARCHITECTURE}


def GDPPolicy(config: GDPConfig = GDPConfig()):
    """A fresh :class:`~autoplace.policies.gdp.GDPPolicy` of ``config``'s architecture."""
    from autoplace.policies.gdp import GDPPolicy as Net

    return Net(**config.architecture())


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
    reward_n: int = 0
    reward_sum: float = 0.0
    reward_sq: float = 0.0
    best_step: float = math.inf
    best_groups: np.ndarray | None = None

    def stats(self) -> dict:
        return {"reward_n": self.reward_n, "reward_sum": self.reward_sum, "reward_sq": self.reward_sq,
                "best_step": self.best_step, "best_groups": self.best_groups, "cache": self.evaluate.cache}

    def load(self, s: dict) -> None:
        self.reward_n, self.reward_sum, self.reward_sq = s["reward_n"], s["reward_sum"], s["reward_sq"]
        self.best_step, self.best_groups = s["best_step"], s["best_groups"]
        self.evaluate.cache.update(s["cache"])

    def placement(self, method: str, **meta) -> Placement:
        if self.best_groups is None:
            raise InfeasibleError(f"{method}: no sampled placement of {self.graph.name!r} ran on cluster "
                                  f"{self.cluster.name!r} (all failed)")
        return Placement.from_array(self.graph, self.cluster, self.grouping.expand(self.best_groups), method, **meta)


def gdp_nodes(graph: Graph, cluster: Cluster, config: GDPConfig) -> Grouping:
    """The nodes GDP places: ``config.rules``' groups (co-location groups by default)."""
    return runnable_grouping(graph, config.rules, feasible_devices(graph, cluster))


def _problem(graph: Graph, cluster: Cluster, config: GDPConfig, device, env, scorer=None) -> _Problem:
    import torch

    from autoplace.grouping import grouped_graph
    from autoplace.policies.features import node_features

    if cluster.n_devices > config.max_devices:
        raise AutoplaceError(f"cluster {cluster.name!r} has {cluster.n_devices} devices; the GDP policy places on "
                             f"at most {config.max_devices} (GDPConfig.max_devices)")
    grouping = gdp_nodes(graph, cluster, config)
    check_params_fit(graph, cluster, grouping, "gdp")
    f = node_features(graph, grouping)
    feasible = grouped_graph(graph, grouping, cluster).feasible[f.order]
    m = np.full((f.n_nodes, config.max_devices), -np.inf, dtype=np.float32)
    m[:, :cluster.n_devices] = np.where(feasible, 0.0, -np.inf)
    own = scorer is None and not isinstance(env, BaseEnv)
    env_obj = (make_env(env, graph, cluster) if own else env) if scorer is None else None
    return _Problem(graph, cluster, grouping, f, torch.as_tensor(m, device=device),
                    scorer if scorer is not None else Evaluator(env_obj, grouping), env_obj if own else None)


@dataclass
class GDPResult(RLResult):
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
        self.device = torch_device(config.torch_device)
        self.problems = [_problem(g, c, config, self.device, env, None if scorers is None else scorers[i])
                         for i, (g, c) in enumerate(zip(graphs, clusters))]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.policy = (policy if policy is not None else GDPPolicy(config)).to(self.device)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.samples = self.updates = 0
        self.wall_s = 0.0
        self.curve = Curve()
        self.timings: dict[str, float] = {}

    @property
    def best_step(self) -> float:
        """The best step of the graph (one graph), or the geometric mean of the graphs' best steps."""
        return _geomean([p.best_step for p in self.problems])

    @property
    def converged(self) -> bool:
        return False

    def update(self) -> CurvePoint:
        with torch_threads(self.config.torch_threads):
            return self._update()

    def _sample(self, p: _Problem, k: int):
        """``k`` placements of problem ``p`` (nodes in order) and each node decision's log-probability."""
        import torch

        with torch.no_grad():
            logp = torch.log_softmax(self.policy(p.features, p.mask), dim=1)            # [N, D]
            d = torch.multinomial(logp.exp().cpu(), k, replacement=True, generator=self.generator).T   # [k, N]
            d = d.to(logp.device)
            old = logp.gather(1, d.T).T                                                  # [k, N]
        return d, old

    def _update(self) -> CurvePoint:
        import torch

        cfg = self.config
        t0 = time.monotonic()
        batch = []
        means, fails, rewards_all = [], [], []
        for p in self.problems:
            d, old = self._sample(p, cfg.samples_per_update)
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
            batch.append((p, d, old, torch.as_tensor(adv, dtype=torch.float32, device=self.device)))
            ran = scores.step_time[scores.ok]
            means.append(float(ran.mean()) if len(ran) else math.inf)
            fails.append(float(1 - scores.ok.mean()))
            rewards_all.append(float(reward.mean()))
        t1 = time.monotonic()
        for _ in range(cfg.ppo_epochs):                                    # PPO's clipped surrogate
            loss = 0.0
            for p, d, old, adv in batch:
                logp = torch.log_softmax(self.policy(p.features, p.mask), dim=1)
                new = logp.gather(1, d.T).T                                               # [k, N]
                ratio = torch.exp(new - old)
                a = adv.unsqueeze(1)
                surrogate = torch.minimum(ratio * a, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * a).mean()
                loss = loss - surrogate / len(batch)
                if cfg.entropy_weight:
                    probs = logp.exp()
                    ent = -(probs * torch.where(probs > 0, logp, torch.zeros_like(logp))).sum(1).mean()
                    loss = loss - cfg.entropy_weight * ent / len(batch)
            self.optimizer.zero_grad()
            loss.backward()
            if cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
            self.optimizer.step()
        t2 = time.monotonic()
        self.samples += cfg.samples_per_update * len(self.problems)
        self.updates += 1
        for part, dt in (("sample_and_evaluate", t1 - t0), ("ppo", t2 - t1)):
            self.timings[part] = self.timings.get(part, 0.0) + dt
        self.wall_s += t2 - t0
        point = CurvePoint(self.samples, self.wall_s, self.best_step, _geomean(means), float(np.mean(fails)),
                           float(np.mean(rewards_all)))
        self.curve.append(point)
        return point

    # ----------------------------------------------------------------- checkpoints
    def _identity(self) -> dict:
        return {"graphs": [p.graph.name for p in self.problems], "clusters": [p.cluster.name for p in self.problems],
                "nodes": [p.features.n_nodes for p in self.problems], "config": asdict(self.config),
                "seed": self.seed}

    def state(self) -> dict:
        import torch

        return {"format": CHECKPOINT_FORMAT, **self._identity(), "policy": self.policy.state_dict(),
                "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
                "torch_rng": torch.get_rng_state(), "problems": [p.stats() for p in self.problems],
                "samples": self.samples, "updates": self.updates, "wall_s": self.wall_s,
                "curve": self.curve.to_rows()}

    def load(self, state: dict) -> None:
        import torch

        check_checkpoint(state, CHECKPOINT_FORMAT, self._identity())
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        for p, s in zip(self.problems, state["problems"]):
            p.load(s)
        self.samples, self.updates, self.wall_s = state["samples"], state["updates"], state["wall_s"]
        self.curve = Curve.from_rows(state["curve"])

    def close(self) -> None:
        for p in self.problems:
            if p.env is not None:
                p.env.close()


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs]
    if not xs or not all(math.isfinite(x) and x > 0 for x in xs):
        return math.inf
    return float(math.exp(sum(math.log(x) for x in xs) / len(xs)))


# --------------------------------------------------------------------------------------------- policy files
def save_policy(policy, config: GDPConfig, path: str | Path, **meta) -> None:
    """Write ``policy`` with ``config``'s architecture (and ``meta``: the graphs it was trained on …) to
    ``path``, atomically."""
    import io

    import torch

    from autoplace.formats._json import atomic_write_bytes

    buf = io.BytesIO()
    torch.save({"format": POLICY_FORMAT, "config": asdict(config),
                "state": {k: v.cpu() for k, v in policy.state_dict().items()}, "meta": meta}, buf)
    atomic_write_bytes(Path(path), buf.getvalue())


def load_policy(path: str | Path, config: GDPConfig | dict | None = None):
    """The policy saved in ``path`` and its config: the file's architecture, with the training settings of
    ``config`` (a dict: only the fields it names; a :class:`GDPConfig`: its training fields)."""
    import torch

    try:
        saved = torch.load(Path(path), map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such policy file") from None
    except Exception as e:
        raise FormatError(f"{path}: not a GDP policy file ({e})") from None
    if not isinstance(saved, dict) or saved.get("format") != POLICY_FORMAT:
        raise FormatError(f"{path}: not a GDP policy file (expected format {POLICY_FORMAT!r})")
    values = dict(saved["config"])
    if isinstance(config, GDPConfig):
        values.update({k: v for k, v in asdict(config).items() if k not in GDPConfig.ARCHITECTURE})
    elif config:
        clash = sorted(set(config) & set(GDPConfig.ARCHITECTURE))
        if clash and any(config[k] != values[k] for k in clash):
            raise AutoplaceError(f"GDP setting {clash[0]!r} shapes the network: a saved policy keeps its own")
        values.update(config)
    cfg = GDPConfig.from_dict(values)
    policy = GDPPolicy(cfg)
    policy.load_state_dict(saved["state"])
    return policy, cfg


# --------------------------------------------------------------------------------------------- entry points
def work_budget(graphs: list[Graph], clusters: list[Cluster], budget: float | None,
                config: GDPConfig = GDPConfig()) -> SearchBudget:
    """The samples ``budget`` seconds of nominal work allow (default 60): each sample of a graph costs a
    simulation (``n_ops / OPS_PER_SECOND``) and its share of the policy's passes over the nodes, each
    update of a graph a fixed cost besides."""
    budget = DEFAULT_BUDGET_S if check_budget(budget) is None else budget
    per_round = sum(g.n_ops / OPS_PER_SECOND * config.samples_per_update + POLICY_SECONDS_PER_UPDATE
                    + gdp_nodes(g, c, config).n_groups * POLICY_SECONDS_PER_NODE * config.samples_per_update
                    for g, c in zip(graphs, clusters))
    rounds = max(1, int(budget / per_round))
    return SearchBudget(samples=rounds * config.samples_per_update * len(graphs))


def _config(config) -> GDPConfig:
    return GDPConfig.from_dict(config) if isinstance(config, dict) else config


def gdp_train(graphs: list[Graph], clusters: list[Cluster], *, budget: SearchBudget | float | None = None,
              config: GDPConfig | dict = GDPConfig(), seed=None, env: str | BaseEnv = "simulated",
              policy: str | Path | None = None, output: str | Path | None = None, checkpoint=None, resume=None,
              curve_csv=None, curve_png=None, checkpoint_every_s: float = 30.0, stop_after_updates: int | None = None,
              workers: int = 1, ray_address: str | None = None, env_kwargs: dict | None = None,
              method: str = "gdp") -> GDPResult:
    """Train one GDP policy on ``graphs`` (each on its cluster) to ``budget`` (a :class:`SearchBudget`, or
    seconds of nominal work: :func:`work_budget`), starting from the policy file ``policy`` if given;
    save it to ``output``. Checkpoints, resume, curve files and Ctrl-C as every learned search
    (:func:`~autoplace.search.engine.run_search`); ``workers`` > 1 or a ``ray_address`` scores the
    samples on Ray workers (one pool per graph)."""
    import contextlib

    config = _config(config)
    net = None
    if policy is not None:
        net, config = load_policy(policy, config)
    if not isinstance(budget, SearchBudget):
        budget = work_budget(graphs, clusters, budget, config)
    env_name = env.name if isinstance(env, BaseEnv) else env
    with contextlib.ExitStack() as stack:
        scorers = None
        if workers > 1 or ray_address is not None:
            from autoplace.search.distributed import WorkerPool, ray_session

            ray = stack.enter_context(ray_session(ray_address))
            scorers = [WorkerPool(ray, gdp_nodes(g, c, config), g, c, workers, env_name, env_kwargs)
                       for g, c in zip(graphs, clusters)]
            for s in scorers:
                stack.callback(s.close)
        search = GDPSearch(graphs, clusters, config, seed=seed, env=env, policy=net, scorers=scorers)
        stack.callback(search.close)
        names = ", ".join(g.name for g in graphs)
        run = run_search(search, budget, name=method, title=f"{method} on {names}", checkpoint=checkpoint,
                         resume=resume, checkpoint_every_s=checkpoint_every_s, curve_csv=curve_csv,
                         curve_png=curve_png, stop_after_updates=stop_after_updates)
        if output is not None:
            save_policy(search.policy, config, output, graphs=[g.name for g in graphs],
                        clusters=[c.name for c in clusters], samples=search.samples, seed=search.seed)
        evaluations = sum(p.evaluate.evaluations for p in search.problems)
        hits = sum(p.evaluate.hits for p in search.problems)
        placements = [p.placement(method, samples=search.samples, updates=search.updates,
                                  stop_reason=run.stop_reason, nodes=p.features.n_nodes, best_step_s=p.best_step)
                      for p in search.problems if p.best_groups is not None]
        if not placements:
            search.problems[0].placement(method)          # raises: nothing ran
        extra = {"timings_s": search.timings, "wall_s_this_run": run.wall_s_this_run,
                 "best_steps_s": [p.best_step for p in search.problems], "policy": search.policy}
        return GDPResult(placements[0], search.curve, search.samples, search.updates, run.stop_reason, evaluations,
                         hits, search.wall_s, extra, placements=placements)


def gdp_search(graph: Graph, cluster: Cluster, *, budget: SearchBudget | float | None = None,
               config: GDPConfig | dict = GDPConfig(), seed=None, env: str | BaseEnv = "simulated",
               policy: str | Path | None = None, zero_shot_only: bool = False, checkpoint=None, resume=None,
               curve_csv=None, curve_png=None, checkpoint_every_s: float = 30.0,
               stop_after_updates: int | None = None, workers: int = 1, controllers: int | None = None,
               ray_address: str | None = None, env_kwargs: dict | None = None) -> GDPResult:
    """GDP on one graph: trained from scratch (GDP-one), or fine-tuned from the policy file ``policy``;
    with ``zero_shot_only``, the saved policy's placement without training (:func:`zero_shot`)."""
    if controllers is not None:
        raise AutoplaceError("--controllers applies to the rl method only (GDP trains one policy)")
    if zero_shot_only:
        if policy is None:
            raise AutoplaceError("a zero-shot placement needs a trained policy (--policy FILE)")
        net, cfg = load_policy(policy, _config(config) if isinstance(config, dict) else None)
        t0 = time.monotonic()
        placement = zero_shot(net, graph, cluster, cfg, seed=seed, env=env)
        return GDPResult(placement, Curve(), cfg.zero_shot_samples + 1, 0, "zero-shot", cfg.zero_shot_samples + 1,
                         0, time.monotonic() - t0, placements=[placement])
    return gdp_train([graph], [cluster], budget=budget, config=config, seed=seed, env=env, policy=policy,
                     checkpoint=checkpoint, resume=resume, curve_csv=curve_csv, curve_png=curve_png,
                     checkpoint_every_s=checkpoint_every_s, stop_after_updates=stop_after_updates,
                     workers=workers, ray_address=ray_address, env_kwargs=env_kwargs)


def zero_shot(policy, graph: Graph, cluster: Cluster, config: GDPConfig = GDPConfig(), *, seed=None,
              env: str | BaseEnv = "simulated") -> Placement:
    """A trained policy's placement of a graph it may never have seen, without training: the most likely
    device of every node, and :attr:`GDPConfig.zero_shot_samples` samples beside it; the fastest that runs.
    ``meta["policy_time_s"]``: the seconds the policy took (embedding, placer, sampling)."""
    import torch

    search = GDPSearch([graph], [cluster], config, seed=seed, env=env, policy=policy)
    try:
        p = search.problems[0]
        t0 = time.monotonic()
        with torch.no_grad():
            logits = search.policy(p.features, p.mask)
            greedy = logits.argmax(1).unsqueeze(0)
        d, _ = search._sample(p, config.zero_shot_samples)
        policy_s = time.monotonic() - t0
        groups = np.empty((1 + config.zero_shot_samples, p.features.n_nodes), dtype=np.int64)
        groups[:, p.features.order] = torch.cat([greedy, d]).cpu().numpy()
        scores = p.evaluate(groups)
        if not scores.ok.any():
            raise InfeasibleError(f"gdp: none of the zero-shot placements of {graph.name!r} ran on cluster "
                                  f"{cluster.name!r}")
        i = int(np.argmin(scores.step_time))
        return Placement.from_array(graph, cluster, p.grouping.expand(groups[i]), "gdp", mode="zero-shot",
                                    policy_time_s=policy_s, best_step_s=float(scores.step_time[i]),
                                    greedy_step_s=float(scores.step_time[0]), nodes=p.features.n_nodes)
    finally:
        search.close()


@register_placer("gdp", description="GraphSAGE + Transformer-XL policy placing every op at once, trained with PPO",
                 paper="Zhou et al. (GDP)", memory_aware=True, learned=True, search=gdp_search)
def gdp(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """GDP-one (see the module docstring): ``budget`` seconds of nominal work (default 60) become samples."""
    return gdp_search(graph, cluster, budget=budget, seed=seed).placement
