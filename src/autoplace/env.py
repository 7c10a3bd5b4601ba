"""Environments: what scores a placement — the simulator, or real runs on this machine's devices.

Both envs have one interface, so every placer and search method can be scored either way
(``--env simulated|measured`` on the command line):

- ``evaluate(placement) -> result`` with ``step_time``, ``ok``, ``peak_memory``, ``memory_capacity``,
  ``device_names``, ``busy_time``, ``n_transfers``, ``transfer_bytes`` and ``oom_devices``
  (:class:`~autoplace.sim.SimResult` or :class:`~autoplace.runtime.MeasuredResult`);
- ``evaluate_batch(devs) -> BatchResult`` for ``[B, n_ops]`` device-index arrays (a failing measured run
  has an infinite step time);
- ``close()`` (the measured env's worker processes); both are context managers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autoplace.cluster import Cluster
from autoplace.errors import UnknownNameError
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.runtime import make_pool
from autoplace.runtime.pool import DEFAULT_TIMEOUT_S
from autoplace.sim import BatchResult, Simulator, simulate

__all__ = ["BaseEnv", "SimulatedEnv", "MeasuredEnv", "make_env", "ENV_NAMES"]

ENV_NAMES = ("simulated", "measured")


class BaseEnv:
    """Scores placements of one graph on one cluster."""

    name = "base"

    def __init__(self, graph: Graph, cluster: Cluster):
        self.graph, self.cluster = graph, cluster

    def evaluate(self, placement: Placement | np.ndarray) -> Any:
        raise NotImplementedError

    def evaluate_batch(self, devs: np.ndarray) -> BatchResult:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SimulatedEnv(BaseEnv):
    """The discrete-event simulator."""

    name = "simulated"

    def __init__(self, graph: Graph, cluster: Cluster, op_times: np.ndarray | None = None, *,
                 simulator: Simulator | None = None):
        super().__init__(graph, cluster)
        self.simulator = simulator if simulator is not None else Simulator(graph, cluster, op_times)

    def evaluate(self, placement):
        if isinstance(placement, Placement) and placement.meta.get("strategy") is not None:
            return simulate(self.graph, self.cluster, placement)   # the replicated step it was made for
        return self.simulator.run(placement)

    def evaluate_batch(self, devs: np.ndarray) -> BatchResult:
        return self.simulator.run_batch(devs)


class MeasuredEnv(BaseEnv):
    """Real runs: ``steps`` training steps per placement on one worker process per device (``runtime``:
    :func:`~autoplace.runtime.make_pool`), the first dropped and the rest averaged (Mirhoseini et al.
    2017 §3.4). Failures (OOM, a crashed worker, a
    timeout) come back as failing results."""

    name = "measured"

    def __init__(self, graph: Graph, cluster: Cluster, *, steps: int = 10, seed: int = 0,
                 timeout: float = DEFAULT_TIMEOUT_S, runtime: str = "auto"):

        super().__init__(graph, cluster)
        self.steps, self.seed = int(steps), int(seed)
        self.pool = make_pool(cluster, runtime=runtime, timeout=timeout)
        self.pool.program_of(graph)  # fail now, with the culprit named, if the graph cannot run

    def evaluate(self, placement):
        if not isinstance(placement, Placement):
            placement = Placement.from_array(self.graph, self.cluster, np.asarray(placement), "array")
        return self.pool.run(self.graph, placement, steps=self.steps, seed=self.seed)

    def evaluate_batch(self, devs: np.ndarray) -> BatchResult:
        devs = np.atleast_2d(np.asarray(devs, dtype=np.int64))
        results = [self.evaluate(row) for row in devs]
        D = self.cluster.n_devices
        return BatchResult(np.array([r.step_time if r.ok else np.inf for r in results]),
                           np.stack([r.busy_time if r.busy_time is not None else np.zeros(D) for r in results]),
                           np.stack([r.peak_memory for r in results]).astype(np.int64),
                           self.cluster.memory_bytes.copy(), np.zeros((len(devs), D, D)),
                           np.zeros((len(devs), D, D), np.int64),
                           np.array([r.n_transfers for r in results], dtype=np.int64),
                           np.zeros((len(devs), len(self.cluster.segments))), np.zeros((len(devs), D)))

    def close(self) -> None:
        self.pool.close()


def make_env(name: str | BaseEnv, graph: Graph, cluster: Cluster, **kwargs: Any) -> BaseEnv:
    """``"simulated"`` or ``"measured"`` (keyword arguments go to the env); an env is returned as is."""
    if isinstance(name, BaseEnv):
        return name
    if name == "simulated":
        return SimulatedEnv(graph, cluster, **kwargs)
    if name == "measured":
        return MeasuredEnv(graph, cluster, **kwargs)
    raise UnknownNameError(f"unknown env {name!r} (choose from: {', '.join(ENV_NAMES)})")
