"""The cost model's uncertain constants, their ranges, and placements judged by their worst case.

The simulator's figures rest on constants nobody measured on the machine a placement will run on. Each
has a documented range (docs/algorithms.md, "Uncertainty"), as a factor on the cluster's figure:

==========================  ==========  ==========================================================
constant                    range       why
==========================  ==========  ==========================================================
per-op overhead / launch    0.5 - 2     presets assume 5 us (CPU), 10 us (GPU); PyTorch measures
(``op_overhead_s``)                     2-8 us per eager op (pytorch/pytorch#41383), kernel launches
                                        4-6 us (NVIDIA forums), more with Python around them
compute time (the roofline  1 - 1.5     the achievable rates are a large GEMM's and a STREAM copy's;
at achievable rates)                    small and odd-shaped kernels reach less
link bandwidth              0.5 - 1     presets quote pinned copies; pageable and small copies get
(and segments')                         half or less
per-copy submit overhead    0.5 - 3     5-7 us per ``cudaMemcpyAsync`` (DualPath, sec. 5.2); 14-19
(link ``overhead_s``),                  us staged through the host; latencies double under load
link latency x2
host contention (CPU op     1 - 1.3     this project's CPU workers ran 10-30 % slower split than
times)                                  alone (benchmarks/fidelity.py)
==========================  ==========  ==========================================================

A few corner :data:`SCENARIOS` combine them; every placement is simulated in each (one batch per
scenario). A placement's **range** is its least and largest step over the scenarios, and its **robust
step** its worst case measured against a baseline ``B`` (one GPU): ``max_s step_s(P) * step_0(B) /
step_s(B)`` — each scenario's step rescaled so that the baseline takes its nominal time in all of them.
``P`` is at least as fast as ``B`` in every scenario exactly when its robust step is at most ``B``'s
nominal step. Without a baseline the robust step is the plain worst case.

A choice among candidates is made by **regret** (Savage's minimax regret): a candidate's regret is the
largest, over the scenarios, of its step over the best candidate's step in that scenario
(:func:`regret_scale`, :meth:`RobustSimulator.against`). The candidate of least regret gives up nominal
speed only where every faster one loses at least as much in some scenario — never a large nominal loss
for a small worst-case gain, which ranking by the worst case alone does (it trades any nominal step for
the slightest gain in its worst scenario).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from autoplace.cluster import Cluster, LinkSpec, Segment
from autoplace.graph import Graph
from autoplace.replicas import strategy_graph
from autoplace.sim import BACKEND, BatchResult, Simulator

__all__ = ["Scenario", "SCENARIOS", "scenario_cluster", "RobustSimulator", "RobustIncremental", "StepRange",
           "step_ranges", "cross_edges", "regret_scale", "each_scenario"]


@dataclass(frozen=True)
class Scenario:
    """One corner of the uncertain constants: factors on the cluster's figures."""

    name: str
    overhead: float = 1.0      #: per-op overhead (a GPU's launch)
    compute: float = 1.0       #: roofline time (achievable rates divided by it; at least 1)
    bandwidth: float = 1.0     #: link and segment bandwidth
    copy_overhead: float = 1.0  #: per-copy submit overhead
    latency: float = 1.0       #: link latency
    host: float = 1.0          #: CPU devices' op times (contention on the host)


#: The nominal figures first, then the favourable corner and the adverse ones; the robust step is the
#: worst over all of them (the favourable corner only widens the range).
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("nominal"),
    Scenario("fast host", overhead=0.5, copy_overhead=0.5),
    Scenario("launch-bound", overhead=2.0, copy_overhead=3.0),
    Scenario("slow links", bandwidth=0.5, copy_overhead=3.0, latency=2.0),
    Scenario("contended host", overhead=2.0, host=1.3),
    Scenario("all adverse", overhead=2.0, compute=1.5, bandwidth=0.5, copy_overhead=3.0, latency=2.0, host=1.3),
)


def scenario_cluster(cluster: Cluster, s: Scenario) -> Cluster:
    """``cluster`` with its uncertain figures scaled by scenario ``s``."""
    if s.compute < 1.0:
        raise ValueError(f"scenario {s.name!r}: compute factor {s.compute} below 1 would beat the peaks")
    devices = [dataclasses.replace(d, op_overhead_s=d.op_overhead_s * s.overhead,
                                   achievable_flops=(d.achievable_flops or d.peak_flops) / s.compute,
                                   achievable_bandwidth=(d.achievable_bandwidth or d.memory_bandwidth) / s.compute)
               for d in cluster.devices]
    links = [dataclasses.replace(ln, bandwidth=ln.bandwidth * s.bandwidth, latency_s=ln.latency_s * s.latency,
                                 overhead_s=ln.overhead_s * s.copy_overhead) for ln in cluster.links]
    dl = cluster.default_link
    default = None if dl is None else LinkSpec(dl.bandwidth * s.bandwidth, dl.latency_s * s.latency,
                                               dl.overhead_s * s.copy_overhead, dl.segments)
    segments = [Segment(seg.name, seg.bandwidth * s.bandwidth) for seg in cluster.segments]
    return Cluster(cluster.name, devices, links, default, cluster.meta, segments, derived=True)


def regret_scale(steps: np.ndarray) -> np.ndarray:
    """``[S]``: per scenario, the best nominal step over the best step in that scenario, of the candidates
    whose steps (``[S, B]``, those that fit) are given. A placement's steps times it, worst taken, are the
    best nominal step times its regret (the module docstring)."""
    best = np.asarray(steps, dtype=np.float64).min(axis=1)
    if not (best > 0).all() or not np.isfinite(best).all():
        raise ValueError("a regret needs candidates whose steps are finite and above zero in every scenario")
    return best[0] / best


def cross_edges(graph: Graph, devs: np.ndarray) -> np.ndarray:
    """Per placement (rows of ``devs``), how many (tensor, consumer) pairs cross devices."""
    devs = np.atleast_2d(devs)
    src, dst, _ = graph.edges()
    return (devs[:, src] != devs[:, dst]).sum(axis=1)


def _threads() -> int:
    """Scenarios simulated at once: ``AUTOPLACE_SIM_THREADS``, else one per core this process may use."""
    env = os.environ.get("AUTOPLACE_SIM_THREADS", "")
    if env.isascii() and env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_POOL: tuple[int, ThreadPoolExecutor] | None = None   # (threads, the pool)


def _forget_pool() -> None:
    """In a forked child: the parent's pool has no threads here."""
    global _POOL
    _POOL = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def each_scenario(fn: Callable, items: Sequence) -> list:
    """``[fn(x) for x in items]``, the calls in threads where there are cores for them: the C event loop
    releases the GIL, so the scenarios of a robust simulation run side by side (the results do not depend on
    it; the numba loop, which holds the GIL, runs them in turn)."""
    global _POOL
    threads = min(_threads(), len(items))
    if threads < 2 or BACKEND != "c":
        return [fn(x) for x in items]
    if _POOL is None or _POOL[0] != threads:
        if _POOL is not None:
            _POOL[1].shutdown(wait=False)
        _POOL = (threads, ThreadPoolExecutor(max_workers=threads, thread_name_prefix="autoplace-sim"))
    return list(_POOL[1].map(fn, items))


class RobustSimulator:
    """Simulates placements in every scenario of ``scenarios`` (one :class:`Simulator` each).

    ``baseline`` (a device index per op, one GPU say) sets the scale of each scenario for
    :meth:`robust_steps` (module docstring); ``None`` compares raw worst cases. ``op_times`` are the
    nominal op times, if not the cost model's (measured costs are taken as they are in every scenario,
    but for host contention)."""

    def __init__(self, graph: Graph, cluster: Cluster, *, scenarios: Sequence[Scenario] = SCENARIOS,
                 baseline: np.ndarray | None = None, op_times: np.ndarray | None = None):
        if not scenarios or scenarios[0].name != "nominal" or any(
                getattr(scenarios[0], f.name) != 1.0 for f in dataclasses.fields(Scenario) if f.name != "name"):
            raise ValueError("the first scenario must be the nominal one")
        self.graph, self.cluster, self.scenarios = graph, cluster, tuple(scenarios)
        cpu = np.array([d.kind == "cpu" for d in cluster.devices])
        self.sims = []
        for s in self.scenarios:
            if s.name == "nominal":
                self.sims.append(Simulator(graph, cluster, op_times))
                continue
            # host contention scales the CPUs' op times, alone and loaded (the contention blend stays)
            scale = np.where(cpu, s.host, 1.0) if s.host != 1.0 else None
            self.sims.append(Simulator(graph, scenario_cluster(cluster, s), op_times, time_scale=scale))
        self.nominal = self.sims[0]
        self.baseline = None if baseline is None else np.asarray(baseline, dtype=np.int64)
        self.scale = np.ones(len(self.sims))
        if baseline is not None:
            steps = self.steps(np.asarray(baseline, dtype=np.int64)[None, :])[:, 0]
            if (steps > 0).all() and np.isfinite(steps).all():
                self.scale = steps[0] / steps
            else:   # a baseline of no time (or failing) sets no scale
                self.baseline = None

    def against(self, steps: np.ndarray) -> RobustSimulator:
        """This simulator judging by regret against the candidates whose per-scenario ``steps`` (``[S, B]``)
        are given: its robust step is then the best nominal step times the regret (:func:`regret_scale`)."""
        judge = copy.copy(self)
        judge.baseline, judge.scale = None, regret_scale(steps)
        return judge

    def simulate(self, devs: np.ndarray, schedules: np.ndarray | None = None) -> tuple[np.ndarray, BatchResult]:
        """``([S, B], nominal)``: each placement's step in each scenario (under ``schedules``, priorities per op,
        if given), and the nominal scenario's :class:`BatchResult` (memory, out of memory)."""
        devs = np.ascontiguousarray(np.atleast_2d(devs), dtype=np.int64)
        batches = each_scenario(lambda sim: sim.run_batch(devs, schedules), self.sims)
        return np.stack([b.step_time for b in batches]), batches[0]

    def steps(self, devs: np.ndarray, schedules: np.ndarray | None = None) -> np.ndarray:
        """``[S, B]``: each placement's step in each scenario (under ``schedules`` if given)."""
        return self.simulate(devs, schedules)[0]

    def robust_steps(self, steps: np.ndarray) -> np.ndarray:
        """``[B]``: the robust step of placements whose per-scenario ``steps`` (``[S, B]``) are given."""
        return (steps * self.scale[:, None]).max(axis=0)

    def judged(self, steps: np.ndarray, nominal: BatchResult) -> BatchResult:
        """``nominal`` with each step replaced by the robust step of its per-scenario ``steps``."""
        return dataclasses.replace(nominal, step_time=self.robust_steps(steps))

    def run_batch(self, devs: np.ndarray, schedules: np.ndarray | None = None) -> BatchResult:
        """The nominal :class:`BatchResult` with each step replaced by its robust step (what a search
        minimises to be robust: :func:`autoplace.placers.local_search.refine` takes this as ``run_batch``)."""
        return self.judged(*self.simulate(devs, schedules))

    @property
    def incremental_exact(self) -> bool:
        """Does :meth:`incremental` re-simulate from snapshots in every scenario
        (:attr:`autoplace.sim.Simulator.incremental_exact`)?"""
        return all(sim.incremental_exact for sim in self.sims)

    def incremental(self, placement: np.ndarray) -> RobustIncremental:
        """:meth:`run_batch` for placements near ``placement``, each scenario re-simulated from the first
        event the moves change (:class:`~autoplace.sim.Incremental`): the same results."""
        return RobustIncremental(self, placement)


class RobustIncremental:
    """:meth:`RobustSimulator.run_batch` of placements near one placement, through one
    :class:`~autoplace.sim.Incremental` per scenario."""

    def __init__(self, robust: RobustSimulator, placement: np.ndarray):
        self.robust = robust
        self.incs = each_scenario(lambda sim: sim.incremental(placement), robust.sims)

    def reset(self, placement: np.ndarray) -> None:
        each_scenario(lambda inc: inc.reset(placement), self.incs)

    def run_batch(self, devs: np.ndarray) -> BatchResult:
        devs = np.ascontiguousarray(np.atleast_2d(devs), dtype=np.int64)
        batches = each_scenario(lambda inc: inc.run_batch(devs), self.incs)
        return self.robust.judged(np.stack([b.step_time for b in batches]), batches[0])

    def close(self) -> None:
        for inc in self.incs:
            inc.close()


@dataclass(frozen=True)
class StepRange:
    """A placement's step under the uncertainty: ``nominal``, the least and largest over the scenarios,
    its robust step and, where there is a baseline, one GPU's nominal step."""

    nominal: float
    low: float
    high: float
    robust: float
    one_gpu: float | None = None
    #: the step in each scenario, in the order of the simulator's scenarios
    steps: tuple[float, ...] = ()

    @property
    def gain_inside_range(self) -> bool:
        """Does the placement beat one GPU nominally but not in every scenario (its predicted gain rests
        on a constant inside its range)?"""
        return self.one_gpu is not None and self.nominal < self.one_gpu and self.robust > self.one_gpu * (1 + 1e-12)

    def to_dict(self) -> dict:
        return {"step_range_s": [self.low, self.high], "robust_step_s": self.robust, "one_gpu_s": self.one_gpu,
                "gain_inside_range": self.gain_inside_range}


def strategy_range(robust: RobustSimulator, placement) -> StepRange:
    """:class:`StepRange` of a strategy's placement (``meta["strategy"]``: replicas, towers; its step rebuilt by
    :func:`autoplace.replicas.strategy_graph` from ``robust``'s graph), each scenario rescaled by ``robust``'s
    baseline as the graph's own placements are."""

    big = strategy_graph(robust.graph, placement)
    rs = RobustSimulator(big, robust.cluster, scenarios=robust.scenarios)
    prio = placement.priorities(big)
    steps = rs.steps(placement.to_array(big, robust.cluster)[None, :], None if prio is None else prio[None, :])
    one = None if robust.baseline is None else float(robust.steps(robust.baseline[None, :])[0, 0])
    return StepRange(float(steps[0, 0]), float(steps[:, 0].min()), float(steps[:, 0].max()),
                     float(robust.robust_steps(steps)[0]), one, tuple(steps[:, 0].tolist()))


def step_ranges(robust: RobustSimulator, devs: np.ndarray, schedules: np.ndarray | None = None) -> list[StepRange]:
    """:class:`StepRange` of each placement (rows of ``devs``, under ``schedules`` if given), simulated in one
    batch per scenario."""
    steps = robust.steps(devs, schedules)
    rob = robust.robust_steps(steps)
    one = None if robust.baseline is None else float(robust.steps(robust.baseline[None, :])[0, 0])
    return [StepRange(float(steps[0, b]), float(steps[:, b].min()), float(steps[:, b].max()), float(rob[b]), one,
                      tuple(steps[:, b].tolist()))
            for b in range(steps.shape[1])]
