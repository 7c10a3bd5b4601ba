"""The runtimes and which one runs a cluster: ``"shm"`` (:mod:`autoplace.runtime.shm`) or ``"distributed"``
(:mod:`autoplace.runtime.dist`).

Which runtime runs where (:func:`make_pool`): ``"auto"`` is this runtime where a cluster spans hosts or
holds two GPUs (peer copies over NCCL), and the shared-memory executor otherwise (measured faster between
CPU workers of one host: docs/benchmarks.md, "Runtimes side by side").
"""

from __future__ import annotations

from autoplace.cluster import Cluster
from autoplace.collectives import COLLECTIVES
from autoplace.graph import Graph
from autoplace.placement import Placement
from autoplace.runtime.dist.control import hosts_of
from autoplace.runtime.dist.pool import DistributedPool
from autoplace.runtime.pool import DEFAULT_STEPS, DEFAULT_TIMEOUT_S, MeasuredResult, Pool, Runtime
from autoplace.runtime.program import ExecutionError
from autoplace.runtime.shm.pool import WorkerPool

__all__ = ["RUNTIMES", "runtime_for", "make_pool", "measure"]


RUNTIMES = (Runtime.AUTO, Runtime.SHM, Runtime.DISTRIBUTED)   #: what a user may ask for


def runtime_for(cluster: Cluster, runtime: str = "auto") -> str:
    """The runtime ``runtime`` means for ``cluster``: ``"shm"`` (the shared-memory executor) or
    ``"distributed"``; ``"auto"`` picks ``distributed`` where the cluster spans hosts, names a
    rendezvous or holds two CUDA devices, else ``shm``."""
    if runtime not in RUNTIMES:
        raise ExecutionError(f"unknown runtime {runtime!r} (choose from {', '.join(RUNTIMES)})")
    if runtime != Runtime.AUTO:
        return runtime
    gpus = sum(d.name.lower().rsplit("/", 1)[-1].startswith(("cuda", "gpu")) for d in cluster.devices)
    spans = len(hosts_of(cluster)) > 1 or bool(cluster.meta.get("rendezvous"))
    return Runtime.DISTRIBUTED if spans or gpus >= 2 else Runtime.SHM


def make_pool(cluster: Cluster, *, runtime: str = "auto", timeout: float = DEFAULT_TIMEOUT_S) -> Pool:
    """A pool of workers for ``cluster`` on ``runtime`` (see :func:`runtime_for`)."""
    if runtime_for(cluster, runtime) == Runtime.DISTRIBUTED:
        return DistributedPool(cluster, timeout=timeout)
    if len(hosts_of(cluster)) > 1:
        raise ExecutionError(f"cluster {cluster.name!r} spans {len(hosts_of(cluster))} hosts: only the "
                             "distributed runtime runs it (--runtime distributed)")
    return WorkerPool(cluster, timeout=timeout)


def measure(graph: Graph, cluster: Cluster, placement: Placement, *, steps: int = DEFAULT_STEPS, seed: int = 0,
            timeout: float = DEFAULT_TIMEOUT_S, fetch: bool = False, runtime: str = "auto") -> MeasuredResult:
    """Run ``placement`` for real on the cluster's devices (a fresh pool on ``runtime``, closed afterwards:
    :func:`make_pool`; ``"auto"`` is the distributed runtime for a step of replicas, whose collectives run
    over torch.distributed)."""
    if runtime == Runtime.AUTO and any(op.type in COLLECTIVES for op in graph.ops):
        runtime = Runtime.DISTRIBUTED
    with make_pool(cluster, runtime=runtime, timeout=timeout) as pool:
        return pool.run(graph, placement, steps=steps, seed=seed, fetch=fetch)
