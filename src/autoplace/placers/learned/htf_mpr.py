"""HTF-MPR (Albaqsami, Hosseini and Bagherzadeh, "HTF-MPR: a heterogeneous TensorFlow mapper targeting performance using
genetic algorithms and gradient boosting regressors"): a genetic search over mappings whose children are
screened by a learned fitness predictor, only the most promising run for real.

*Nodes.* HTF-MPR maps only the ops a user can place; the hidden ops TensorFlow creates follow their
master. Ours: the groups of :attr:`HTFMPRConfig.group_rules` (co-location groups by default — a parameter
with its gradient and update ops), a mapping a device per node. On graphs of thousands of such nodes
:attr:`HTFMPRConfig.groups` coarsens them as the RL placer does (not in the paper).

*Initial mappings* (§III-E, :func:`initial_mappings`), evaluated for real; they train the predictor and
seed the population:

* **default**: every node on the first GPU (TensorFlow's default with GPUs) and every node on the CPU;
* **homogeneous**: every node on one device, for each device;
* **longest path**: the node DAG (nodes in topological order of their first op, the edges that go forward
  in it) split into vertex-disjoint paths, each the heaviest path left (node weight: its FLOPs, plus one
  per op); for each permutation π of the devices, path ``k`` goes to device ``π(k mod D)`` — the longest
  path on one device, ``D!`` mappings (at most :attr:`HTFMPRConfig.max_permutations`, drawn at random
  beyond);
* **random homogeneous**: the longest path on one device, every other path on one random device each
  (:attr:`HTFMPRConfig.random_homogeneous` mappings);
* **colour**: a greedy colouring of the undirected node graph with ``D`` colours, largest degree first,
  each node the colour fewest of its coloured neighbours have (no monochrome edge wherever that greedy
  order finds ``D`` colours enough), over the permutations of colours to devices.

A node on a device that cannot run it moves to the first device that can.

*Fitness predictor* (§III-F, :class:`~autoplace.placers.learned.predictor.FitnessPredictor`): fitness ``1 / step``
(0 for a failing mapping), features the one-hot device of every node, scikit-learn's gradient-boosting
regressor, refitted on every mapping evaluated so far after each generation.

*Genetic algorithm* (§III-G, one generation per engine update; the paper breeds thousands of children
from a predictor trained once on the initial mappings and runs the top 50 once — ours runs the top
:attr:`HTFMPRConfig.top_x` of every generation and refits the predictor on them, "fed back"): the population is the
:attr:`HTFMPRConfig.population` fittest mappings evaluated so far; :attr:`HTFMPRConfig.pairs` parent pairs
are drawn with fitness-proportional (roulette-wheel) selection; each pair breeds by both crossovers —
*stochastic* (each node from the fitter parent with probability ``f_a / (f_a + f_b)``: one child) and
*crossover points* (1–3 random cut points in node order, ``N_c``; every mixture of the ``N_c + 1``
segments but the two parents: ``2^(N_c+1) − 2`` children — Figure 7's six for two points; the paper's
formula ``(N_c + 1)^2 − 2`` agrees with it for one and three points, not for two); ours then mutates every
child (each node to a random device with probability :attr:`HTFMPRConfig.mutation` ``/ N``; the paper
describes no mutation, and ``paper=true`` has none). The predictor
ranks the children not evaluated before, and the top :attr:`HTFMPRConfig.top_x` run for real (the
simulator or a measured env) and join the evaluated set. The best evaluated mapping wins.

``budget`` (seconds, through :func:`~autoplace.placers.place`) counts work, not wall-clock time: each
evaluation costs ``n_ops / OPS_PER_SECOND`` and each generation a nominal predictor cost
(:func:`work_budget`, :mod:`autoplace.search.work`). ``samples`` in the engine's terms are real
evaluations; ``meta["screened"]`` counts
the new children the predictor ranked, so ``screened - (evaluations - initial)`` are the runs it saved.
The initial mappings always run whole, so a budget smaller than they are is overrun by them (the
engine stops between updates, and the first update runs them all).

Size: one readable file per placer (the project's style: the paper's configuration, its genetic
operators, the searcher and the entry points in one place); its fitness predictor is
:mod:`autoplace.placers.learned.predictor`.
"""

from __future__ import annotations

import copy
import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.env import BaseEnv
from autoplace.errors import AutoplaceError, InfeasibleError
from autoplace.graph import Graph
from autoplace.grouping import Grouping, grouped_graph, runnable_grouping
from autoplace.placement import Placement
from autoplace.placers.learned.predictor import MODELS, FitnessPredictor
from autoplace.placers.learned.rl import rl_grouping
from autoplace.placers.registry import register_placer
from autoplace.policies.features import topological_order
from autoplace.search import work
from autoplace.search.budget import SearchBudget
from autoplace.search.checkpoint import (
    cache_state,
    check_scores,
    identity,
    load_cache,
    load_counters,
    load_curve,
    open_checkpoint,
)
from autoplace.search.config import Interval, Options, SearchConfig
from autoplace.search.curve import Curve, CurvePoint
from autoplace.search.evaluation import CachedScorer, Evaluator, SampledSearch, check_params_fit
from autoplace.search.runner import SearchOptions, SearchResult, learned_search
from autoplace.validation import seed_int

__all__ = ["HTFMPRConfig", "HTFMPRSearch", "htf_mpr_search", "htf_mpr_nodes", "fitness", "initial_mappings",
           "node_paths", "colouring",
           "stochastic_crossover", "point_crossover", "roulette_pair", "mutate", "work_budget"]

CHECKPOINT_FORMAT = "autoplace.htf-mpr/v2"
STALL_GENERATIONS = 20               #: generations in a row with no child not evaluated before: converged


@dataclass(frozen=True)
class HTFMPRConfig(SearchConfig):
    """Every knob of HTF-MPR; the paper's value where it gives one."""

    LABEL = "HTF-MPR"

    CONSTRAINTS = {
        "groups": Interval("int", 0, 10**6), "coarsen": Options(("steps", "metis")),
        "random_homogeneous": Interval("int", 0, 10**5), "max_permutations": Interval("int", 1, 40320),
        "population": Interval("int", 1, 10**5), "pairs": Interval("int", 1, 10**5),
        "mutation": Interval("float", 0, 1e6), "top_x": Interval("int", 1, 10**5),
        "model": Options((*MODELS, "random")), "screen_generations": Interval("int", 1, 10**5),
    }

    #: what the paper fixes (§III-F, §III-G): the gradient-boosting predictor fitted once on the initial
    #: mappings, the genetic search bred on its predictions, one batch of the top ``top_x`` run at the end;
    #: the nodes as the paper's (no coarsening); no mutation (§III-G breeds by the two crossovers alone)
    PAPER = {"feedback": False, "model": "gbr", "groups": 0, "mutation": 0.0}

    group_rules: str = "colocation"
    """The nodes a mapping places: groups of these rules (:mod:`autoplace.grouping`)."""
    groups: int = 0
    """0: the nodes are ``group_rules``' groups (the paper: every op a user can place); ``N > 0``: at most
    about ``N`` of them, coarsened as the RL placer's (:func:`~autoplace.placers.learned.rl.rl_grouping`) — for
    graphs of thousands of nodes (ours)."""
    coarsen: str = "steps"
    """With ``groups``: ``steps`` (a recurrent layer's time steps in blocks, METIS where blocks cannot get
    there) or ``metis`` (see :class:`~autoplace.placers.learned.rl.RLConfig`)."""
    random_homogeneous: int = 20
    """Random homogeneous initial mappings (ours)."""
    max_permutations: int = 24
    """Device permutations of the longest-path and colour mappings: all ``D!`` up to this many (ours)."""
    population: int = 20
    """Parents: the fittest mappings evaluated so far (ours)."""
    pairs: int = 10
    """Parent pairs bred per generation (ours)."""
    mutation: float = 1.0
    """Expected nodes per child drawn anew, uniform over the devices (its own included: ``mutation (D - 1) / D``
    nodes moved) (ours; the paper describes no mutation: 0)."""
    top_x: int = 10
    """Children of the highest predicted fitness evaluated per generation (the paper: 10; 50 for MNIST)."""
    model: str = "gbr"
    """The fitness predictor's regressor (:data:`~autoplace.placers.learned.predictor.MODELS`; the paper: gbr);
    ``random``: no predictor, the ``top_x`` children run are drawn at random (an ablation: what the
    predictor's screening is worth)."""

    feedback: bool = True
    """True (ours): every generation's top ``top_x`` children run, join the population and refit the
    predictor. False (the paper, Fig. 3): the predictor is fitted once on the initial mappings; the genetic
    search runs :attr:`screen_generations` generations on its predictions alone (a child's fitness is
    predicted, and children join the population so), and then the ``top_x`` children of highest predicted
    fitness run once; the best mapping that ran wins and the search ends."""
    screen_generations: int = 100
    """With ``feedback=False``: the generations bred on predicted fitness before the one batch runs (the
    paper gives no number; ours)."""
    paper: bool = False
    """True: the paper's algorithm with nothing of ours on — the settings :attr:`PAPER` lists take the
    paper's values; the rest keep theirs (the paper gives no population or pairs)."""

    def __post_init__(self):
        self.apply_paper()
        self.check(at_least_one=("population", "pairs", "top_x", "max_permutations", "screen_generations"))
        if self.random_homogeneous < 0 or self.groups < 0 or not (self.mutation >= 0 and math.isfinite(self.mutation)):
            raise AutoplaceError("HTFMPRConfig.random_homogeneous, groups and mutation must be >= 0")
        if self.model not in (*MODELS, "random"):
            raise AutoplaceError(f"HTFMPRConfig.model must be one of {', '.join(MODELS)} or random, got {self.model!r}")
        if self.coarsen not in ("steps", "metis"):
            raise AutoplaceError(f"HTFMPRConfig.coarsen must be 'steps' or 'metis', got {self.coarsen!r}")


def htf_mpr_nodes(graph: Graph, cluster: Cluster, config: HTFMPRConfig, seed: int = 0) -> Grouping:
    """The nodes HTF-MPR maps: ``config.rules``' groups, coarsened to about ``config.groups`` when set."""
    if config.groups:

        return rl_grouping(graph, cluster, config, seed)
    return runnable_grouping(graph, config.rules, feasible_devices(graph, cluster))


def fitness(steps: np.ndarray) -> np.ndarray:
    """HTF-MPR's fitness of mappings whose steps are ``steps``: ``1 / step``, 0 where one failed (``inf``)."""
    ok = np.isfinite(steps)
    return np.where(ok, 1.0 / np.where(ok, steps, 1.0), 0.0)


# ------------------------------------------------------------------------------------------ initial mappings
def _node_dag(graph: Graph, grouping: Grouping) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Node positions in topological order of their first op (``order``: node at each position), and the
    distinct edges between nodes as positions, each going forward (``src < dst``)."""

    order, pos = topological_order(graph, grouping)
    src, dst, _ = graph.edges()
    a, b = pos[grouping.group[src]], pos[grouping.group[dst]]
    keep = a < b
    pairs = np.unique(np.stack([a[keep], b[keep]], axis=1), axis=0) if keep.any() else np.zeros((0, 2), np.int64)
    return order, pairs[:, 0], pairs[:, 1]


def node_paths(graph: Graph, grouping: Grouping, max_paths: int = 64) -> list[np.ndarray]:
    """The node DAG split into vertex-disjoint paths (node ids), heaviest first: each the heaviest path
    of the nodes left (weight: FLOPs plus one per op). After ``max_paths`` paths the nodes left join the
    path of the node before them in topological order, so that every node is on one path."""
    N = grouping.n_groups
    order, s, d = _node_dag(graph, grouping)
    weight = np.bincount(grouping.group, weights=graph.flops + 1.0, minlength=N)[order]
    preds: list[list[int]] = [[] for _ in range(N)]
    for u, v in zip(s.tolist(), d.tolist()):
        preds[v].append(u)
    left = np.ones(N, dtype=bool)
    path_of = np.full(N, -1, dtype=np.int64)
    paths: list[list[int]] = []
    while left.any() and len(paths) < max_paths:
        best = np.zeros(N)
        back = np.full(N, -1, dtype=np.int64)
        for v in np.flatnonzero(left).tolist():
            b, arg = 0.0, -1
            for u in preds[v]:
                if left[u] and best[u] > b:
                    b, arg = best[u], u
            best[v], back[v] = b + weight[v], arg
        v = int(np.argmax(np.where(left, best, -1.0)))
        path = []
        while v >= 0:
            path.append(v)
            v = int(back[v])
        path.reverse()
        for v in path:
            left[v], path_of[v] = False, len(paths)
        paths.append(path)
    for v in range(N):                               # beyond max_paths: the path of the node before
        if path_of[v] < 0:                          # the node before is on a path already
            path_of[v] = path_of[v - 1] if v > 0 else 0
    return [order[np.flatnonzero(path_of == k)] for k in range(len(paths))]


def colouring(graph: Graph, grouping: Grouping, n_colours: int) -> np.ndarray:
    """A colour per node (node ids) of the undirected node graph with ``n_colours`` colours, greedy in order
    of decreasing degree: each node takes the colour fewest of its coloured neighbours have (no
    monochrome edge wherever that greedy order finds ``n_colours`` enough)."""
    N = grouping.n_groups
    src, dst, _ = graph.edges()
    a, b = grouping.group[src], grouping.group[dst]
    keep = a != b
    adj: list[set[int]] = [set() for _ in range(N)]
    for u, v in zip(a[keep].tolist(), b[keep].tolist()):
        adj[u].add(v)
        adj[v].add(u)
    colour = np.full(N, -1, dtype=np.int64)
    for v in sorted(range(N), key=lambda x: (-len(adj[x]), x)):
        used = np.bincount([colour[u] for u in adj[v] if colour[u] >= 0], minlength=n_colours)
        colour[v] = int(np.argmin(used))
    return colour


def _permutations(n: int, limit: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """All permutations of ``range(n)`` if there are at most ``limit``, else ``limit`` distinct random ones
    (the identity first)."""
    if math.factorial(n) <= limit:
        return list(itertools.permutations(range(n)))
    out = {tuple(range(n))}
    while len(out) < limit:
        out.add(tuple(rng.permutation(n).tolist()))
    return sorted(out)


def initial_mappings(graph: Graph, cluster: Cluster, grouping: Grouping, *, seed=None,
                     random_homogeneous: int = 20, max_permutations: int = 24) -> list[tuple[str, np.ndarray]]:
    """HTF-MPR's initial mappings (see the module docstring) as ``(family, device per node)``, duplicates
    dropped (the first family that makes a mapping keeps it), every node on a device that can run it."""
    rng = np.random.default_rng(seed_int(seed))
    D, N = cluster.n_devices, grouping.n_groups
    can_run = grouped_graph(graph, grouping, cluster).feasible              # [N, D]
    kinds = [dev.kind for dev in cluster.devices]
    out: list[tuple[str, np.ndarray]] = []
    if "gpu" in kinds:
        out.append(("default-gpu", np.full(N, kinds.index("gpu"))))
    if "cpu" in kinds:
        out.append(("default-cpu", np.full(N, kinds.index("cpu"))))
    out += [("homogeneous", np.full(N, d)) for d in range(D)]
    paths = node_paths(graph, grouping)
    for perm in _permutations(D, max_permutations, rng):
        m = np.empty(N, dtype=np.int64)
        for k, p in enumerate(paths):
            m[p] = perm[k % D]
        out.append(("longest-path", m))
    for _ in range(random_homogeneous):
        m = np.empty(N, dtype=np.int64)
        m[paths[0]] = rng.integers(D)
        for p in paths[1:]:
            m[p] = rng.integers(D)
        out.append(("random-homogeneous", m))
    colour = colouring(graph, grouping, D)
    for perm in _permutations(D, max_permutations, rng):
        out.append(("colour", np.asarray(perm)[colour]))
    seen, unique = set(), []
    for family, m in out:
        m = repair(m, can_run)
        key = m.tobytes()
        if key not in seen:
            seen.add(key)
            unique.append((family, m))
    return unique


def repair(mapping: np.ndarray, can_run: np.ndarray) -> np.ndarray:
    """``mapping`` with every node on a device that cannot run it moved to the first device that can."""
    m = np.asarray(mapping, dtype=np.int64).copy()
    bad = ~can_run[np.arange(len(m)), m]
    m[bad] = can_run[bad].argmax(1)
    return m


# ----------------------------------------------------------------------------------------------- breeding
def roulette_pair(fitnesses: np.ndarray, rng: np.random.Generator) -> tuple[int, int]:
    """Two parents (indices into ``fitnesses``) by fitness-proportional (roulette-wheel) selection,
    distinct where two have a fitness above 0; uniform where none has."""
    f = np.asarray(fitnesses, dtype=float)
    prob = f / f.sum() if f.sum() > 0 else np.full(len(f), 1.0 / len(f))
    i, j = rng.choice(len(f), size=2, replace=int((prob > 0).sum()) < 2, p=prob)
    return int(i), int(j)


def mutate(children: np.ndarray, rate: float, n_devices: int, rng: np.random.Generator) -> np.ndarray:
    """``children`` ``[k, n]`` with each node drawn anew (uniform over the devices, its own included) with
    probability ``rate / n``: ``rate`` draws per child, ``rate (D - 1) / D`` nodes moved, expected (0: the
    children as they are, no random numbers drawn)."""
    if rate <= 0:
        return children
    flip = rng.random(children.shape) < rate / max(children.shape[1], 1)
    return np.where(flip, rng.integers(n_devices, size=children.shape), children)


def stochastic_crossover(a: np.ndarray, b: np.ndarray, fa: float, fb: float, rng: np.random.Generator) -> np.ndarray:
    """One child: each node from parent ``a`` with probability ``fa / (fa + fb)`` (from the fitter parent
    more often; even odds when neither ran), else from ``b`` (Figure 6)."""
    pa = fa / (fa + fb) if fa + fb > 0 else 0.5
    return np.where(rng.random(len(a)) < pa, a, b)


def point_crossover(a: np.ndarray, b: np.ndarray, n_points: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n_points`` random cut points (distinct, in node order) split the parents into ``n_points + 1``
    segments; the children are every mixture of the segments but the two parents: ``2^(n_points+1) - 2``
    of them (Figure 7). Fewer points where the mappings are too short for that many cuts."""
    n = len(a)
    n_points = min(n_points, n - 1)
    if n_points < 1:
        return []
    cuts = np.sort(rng.choice(np.arange(1, n), size=n_points, replace=False))
    seg = np.searchsorted(cuts, np.arange(n), side="right")                   # segment of each node
    children = []
    for mask in range(1, 2 ** (n_points + 1) - 1):                           # 0 and all-ones: the parents
        from_b = np.array([(mask >> s) & 1 for s in range(n_points + 1)], dtype=bool)[seg]
        children.append(np.where(from_b, b, a))
    return children


# ----------------------------------------------------------------------------------------------- the search
class HTFMPRSearch(SampledSearch):
    """The genetic search with a fitness predictor: the engine's
    :class:`~autoplace.search.engine.Searcher`, one generation per update; ``samples`` counts real
    evaluations. ``scorer``: scores mappings in place of the env (a Ray worker pool); ``nodes``: the nodes'
    grouping when the caller has it (else :func:`htf_mpr_nodes`)."""

    method = "htf-mpr"

    def __init__(self, graph: Graph, cluster: Cluster, config: HTFMPRConfig = HTFMPRConfig(), *, seed=None,
                 env: str | BaseEnv = "simulated", scorer: CachedScorer | None = None, nodes: Grouping | None = None):
        self.graph, self.cluster, self.config, self.seed = graph, cluster, config, seed_int(seed)
        self.nodes = nodes if nodes is not None else htf_mpr_nodes(graph, cluster, config, self.seed)
        check_params_fit(graph, cluster, self.nodes, "htf-mpr")
        self.can_run = grouped_graph(graph, self.nodes, cluster).feasible
        self.use_env(env, graph, cluster, scorer)
        if scorer is None:
            scorer = Evaluator(self.env, self.nodes)
        self.evaluate = scorer
        self.rng = np.random.default_rng(self.seed)
        self.X = np.zeros((0, self.nodes.n_groups), dtype=np.int64)        # every mapping evaluated
        self.steps = np.zeros(0)                                            # their steps (inf: failed)
        self.families: list[str] = []
        self.samples = self.updates = self.screened = 0
        self.wall_s = 0.0
        self.curve = Curve()
        self.predictor: FitnessPredictor | None = None
        self._initialised = False
        self._stalled = 0
        D, n = cluster.n_devices, self.nodes.n_groups
        self._space = D ** n if n * math.log2(max(D, 2)) < 62 else None      # the mappings there are
                                                                             # (None: too many to run)
        self._snapshot: dict | None = None
        self._snapshot = self._state()

    @property
    def fitness(self) -> np.ndarray:
        return fitness(self.steps)

    @property
    def best_step(self) -> float:
        return float(self.steps.min()) if len(self.steps) else math.inf

    @property
    def converged(self) -> bool:
        """Every mapping evaluated, or :data:`STALL_GENERATIONS` generations in a row without a new child;
        without feedback (the paper), once the one screened batch has run."""
        return ((self._space is not None and len(self.X) >= self._space) or self._stalled >= STALL_GENERATIONS
                or (not self.config.feedback and self.updates >= 2))

    def _run(self, mappings: np.ndarray, families: list[str]) -> np.ndarray:
        scores = self.evaluate(mappings)
        step = np.where(scores.ok, scores.step_time, np.inf)
        self.X = np.concatenate([self.X, mappings])
        self.steps = np.concatenate([self.steps, step])
        self.families += families
        self.samples += len(mappings)
        return step

    def _fit(self) -> None:
        """Fit the predictor on every mapping evaluated (without feedback: on the initial mappings alone)."""
        if self.config.model == "random":
            return
        use = (np.array([f != "ga" for f in self.families], dtype=bool) if not self.config.feedback
               else np.ones(len(self.X), dtype=bool))
        self.predictor = FitnessPredictor(self.config.model, n_devices=self.cluster.n_devices,
                                          random_state=self.seed).fit(self.X[use], self.fitness[use])

    def update(self) -> CurvePoint:
        """The initial mappings (first update), then one generation."""
        t0 = time.monotonic()
        if not self._initialised:
            init = initial_mappings(self.graph, self.cluster, self.nodes, seed=self.seed,
                                    random_homogeneous=self.config.random_homogeneous,
                                    max_permutations=self.config.max_permutations)
            step = self._run(np.stack([m for _, m in init]), [f for f, _ in init])
            self._initialised = True
            self._fit()
        elif not self.config.feedback:
            step = self._screened_batch()
        else:
            step = self._generation()
            if len(step):                                # a generation that bred nothing new: nothing to learn
                self._fit()
        self.updates += 1
        self.wall_s += time.monotonic() - t0
        ran = step[np.isfinite(step)]
        point = CurvePoint(self.samples, self.wall_s, self.best_step, float(ran.mean()) if len(ran) else math.inf,
                           float(1 - np.isfinite(step).mean()) if len(step) else 0.0,
                           float(fitness(step).mean()) if len(step) else 0.0)
        self.curve.append(point)
        self._snapshot = self._state()
        return point

    def _breed(self, X: np.ndarray, fit: np.ndarray, seen: set[bytes]) -> np.ndarray:
        """One generation's children of the population (the ``population`` fittest of ``X``, fitnesses
        ``fit``) not in ``seen``, in random order (equal predictions: no bias to low device indices)."""
        cfg, rng = self.config, self.rng
        parents = np.argsort(-fit, kind="stable")[:cfg.population]
        pf = fit[parents]
        children = []
        for _ in range(cfg.pairs):
            i, j = roulette_pair(pf, rng)
            a, b = X[parents[i]], X[parents[j]]
            children.append(stochastic_crossover(a, b, fit[parents[i]], fit[parents[j]], rng))
            children += point_crossover(a, b, int(rng.integers(1, 4)), rng)
        kids = mutate(np.stack(children), cfg.mutation, self.cluster.n_devices, rng)
        kids = np.unique(np.stack([repair(k, self.can_run) for k in kids]), axis=0)
        kids = kids[np.array([k not in seen for k in map(np.ndarray.tobytes, kids)], dtype=bool)]
        return kids[rng.permutation(len(kids))]

    def _top(self, kids: np.ndarray, predicted: np.ndarray | None) -> np.ndarray:
        """The ``top_x`` of ``kids`` by ``predicted`` fitness (None, model "random": the first ones)."""
        if predicted is None:
            return np.arange(min(self.config.top_x, len(kids)))
        return np.argsort(-predicted, kind="stable")[:self.config.top_x]

    def _generation(self) -> np.ndarray:
        kids = self._breed(self.X, self.fitness, {row.tobytes() for row in self.X})
        if not len(kids):
            self._stalled += 1
            return np.zeros(0)
        self._stalled = 0
        self.screened += len(kids)
        top = self._top(kids, None if self.predictor is None else self.predictor.predict(kids))
        return self._run(kids[top], ["ga"] * len(top))

    def _screened_batch(self) -> np.ndarray:
        """The paper's search (``feedback=False``): ``screen_generations`` generations bred on the
        predictor's fitness alone — children join the population with their predicted fitness, nothing
        runs — then the ``top_x`` children of highest predicted fitness run once."""
        X, fit = self.X, self.fitness                    # the initial mappings, their real fitness
        seen = {row.tobytes() for row in X}
        predicted = []
        for _ in range(self.config.screen_generations):
            kids = self._breed(X, fit, seen)
            if not len(kids):
                continue
            f = (self.predictor.predict(kids) if self.predictor is not None
                 else self.rng.random(len(kids)))                   # model "random": no ranking
            seen.update(map(np.ndarray.tobytes, kids))
            X, fit = np.concatenate([X, kids]), np.concatenate([fit, np.maximum(f, 0.0)])
            predicted.append(f)
        if not predicted:
            return np.zeros(0)
        kids, f = X[len(self.X):], np.concatenate(predicted)           # every child, in the order bred
        self.screened += len(kids)
        top = self._top(kids, f)
        return self._run(kids[top], ["ga"] * len(top))

    # ----------------------------------------------------------------- checkpoints
    def _identity(self) -> dict:
        return identity(self.graph, self.cluster, self.config, self.seed, self.evaluate.env_name,
                        nodes=self.nodes.n_groups)

    def state(self) -> dict:
        """The search as it stood after its last whole update (an interrupted update is not half-saved)."""
        return self._snapshot if self._snapshot is not None else self._state()

    def _state(self) -> dict:

        return {"format": CHECKPOINT_FORMAT, **self._identity(), "rng": copy.deepcopy(self.rng.bit_generator.state),
                "X": self.X.copy(), "steps": self.steps.copy(), "families": list(self.families),
                "samples": self.samples, "updates": self.updates, "screened": self.screened, "wall_s": self.wall_s,
                "initialised": self._initialised, "stalled": self._stalled, "curve": self.curve.to_rows(),
                "cache": cache_state(self.evaluate, self.nodes.n_groups)}

    def load(self, state: dict, where: str = "checkpoint") -> None:
        f = open_checkpoint(state, CHECKPOINT_FORMAT, self._identity(), where)
        n, d = self.nodes.n_groups, self.cluster.n_devices
        X = f.array("X", (-1, n), "iu")
        if len(X) and (X.min() < 0 or X.max() >= d):
            raise f.fail("X", f"mappings of device indices in [0, {d})")
        steps = f.array("steps", (len(X),), "f")
        if not np.all((steps > 0) & ~np.isnan(steps)):
            raise f.fail("steps", "step times > 0 (inf: failed), one per mapping")
        families = f.list("families", len(X))
        if not all(isinstance(x, str) for x in families):
            raise f.fail("families", "a list of strings")
        curve, (cache, runs) = load_curve(f), load_cache(f, "cache", n, d)
        for i, (row, step) in enumerate(zip(np.ascontiguousarray(X, dtype=np.int64), steps.tolist())):
            entry = cache.get(row.tobytes())              # every mapping evaluated was scored through the cache
            if entry is None or entry[0] != step:
                raise f.fail("steps", f"the step times the cache holds for X (mapping {i} differs)")
        check_scores(f, "cache", self.evaluate, cache)
        initialised, stalled = f.bool("initialised"), f.int("stalled")
        if initialised != bool(len(X)):                   # the initial mappings are the first ones evaluated
            raise f.fail("initialised", "true exactly when mappings were evaluated")
        f.sub("rng").mark(*self.rng.bit_generator.state)      # NumPy reads these; any other is refused
        f.apply("rng", lambda v: setattr(self.rng.bit_generator, "state", v))
        load_counters(f, self, "screened")
        f.finish()
        self.X, self.steps, self.families = np.ascontiguousarray(X, dtype=np.int64), steps.astype(float), families
        self._initialised, self._stalled = initialised, stalled
        self.curve = curve
        self.evaluate.restore(cache, runs)
        if len(self.X):
            self._fit()
        self._snapshot = self._state()

    def confirm(self) -> None:
        """Where the env is noisy, the best mappings measured again; every mapping's step is then its mean."""
        if self.evaluate.deterministic:
            return
        self.evaluate.confirm()
        self.steps = np.array([self.evaluate.cache[row.tobytes()][0] for row in self.X], dtype=float)
        self._snapshot = self._state()

    def best_placement(self, **meta) -> Placement:
        if not len(self.steps) or not np.isfinite(self.steps).any():
            raise InfeasibleError(f"htf-mpr: no evaluated mapping of {self.graph.name!r} ran on cluster "
                                  f"{self.cluster.name!r} (all failed)")
        i = int(np.argmin(self.steps))
        return Placement.from_array(self.graph, self.cluster, self.nodes.expand(self.X[i]), "htf-mpr",
                                    family=self.families[i], **meta)


def work_budget(graph: Graph, cluster: Cluster, budget: float | None, config: HTFMPRConfig = HTFMPRConfig(),
                n_nodes: int | None = None) -> SearchBudget:
    """The real evaluations ``budget`` seconds of nominal work allow (default 30): the initial mappings,
    then generations of ``top_x`` while they fit, the predictor refitted on ``nodes x devices`` one-hot
    features (:func:`autoplace.search.work.htf_mpr_evaluations`)."""
    budget = work.nominal_budget(budget, "htf-mpr")
    n = n_nodes if n_nodes is not None else htf_mpr_nodes(graph, cluster, config).n_groups
    perms = min(math.factorial(cluster.n_devices), config.max_permutations)
    initial = cluster.n_devices + 2 * perms + config.random_homogeneous         # the initial mappings, about
    return SearchBudget(samples=work.htf_mpr_evaluations(budget, graph.n_ops, n * cluster.n_devices, initial,
                                                         config.top_x))


def htf_mpr_search(graph: Graph, cluster: Cluster, *, budget: SearchBudget | float | None = None,
                   config: HTFMPRConfig | dict | None = None, seed=None, options: SearchOptions | None = None,
                   **kwargs) -> SearchResult:
    """HTF-MPR on ``graph`` to ``budget`` (a :class:`SearchBudget` of real evaluations, or seconds of
    nominal work: :func:`work_budget`), run as every learned search
    (:func:`~autoplace.search.runner.learned_search`: ``options`` or their fields as keywords). The
    result's ``extra``: ``screened``, ``initial`` (initial mappings evaluated), and every mapping evaluated
    (``mappings`` ``[n, n_nodes]``, ``steps``, ``families``)."""
    options = SearchOptions.of(options, **kwargs)
    options.only_one_controller("htf-mpr")
    config = HTFMPRConfig() if config is None else HTFMPRConfig.from_dict(config) if isinstance(config, dict) \
        else config
    seed = seed_int(seed)                     # one draw from a Generator, for the nodes and the search alike
    nodes = htf_mpr_nodes(graph, cluster, config, seed)
    if not isinstance(budget, SearchBudget):
        budget = work_budget(graph, cluster, budget, config, n_nodes=nodes.n_groups)
    with learned_search(lambda scorers: HTFMPRSearch(graph, cluster, config, seed=seed, env=options.env,
                                                     scorer=scorers[0] if scorers else None, nodes=nodes),
                        budget, options, name="htf-mpr", title=f"htf-mpr on {graph.name}, {cluster.name}",
                        scoring=[(nodes, graph, cluster)]) as (search, run):
        placement = search.best_placement(samples=search.samples, updates=search.updates,
                                          stop_reason=run.stop_reason, evaluations=search.samples,
                                          screened=search.screened, best_step_s=search.best_step)
        return SearchResult(placement, search.curve, search.samples, search.updates, run.stop_reason,
                            search.evaluate.evaluations, search.evaluate.hits, search.wall_s,
                            {"wall_s_this_run": run.wall_s_this_run, "screened": search.screened,
                             "initial": len(search.families) - search.families.count("ga"),
                             "mappings": search.X, "steps": search.steps, "families": search.families})


@register_placer("htf-mpr", description="genetic search over mappings, children screened by a gradient-boosting "
                 "fitness predictor", paper="Albaqsami et al. (HTF-MPR)", memory_aware=True, learned=True,
                 search=htf_mpr_search, config=HTFMPRConfig)
def htf_mpr(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring: ``budget`` seconds of nominal work (default 30) become real evaluations."""
    return htf_mpr_search(graph, cluster, budget=budget, seed=seed).placement
