"""Strategies over the batch dimension: ``data-parallel``, ``towers`` and ``hybrid``.

Each returns a placement of the *replicated* step (:mod:`autoplace.replicas`), whose ``meta["strategy"]``
says how to rebuild that step from the user's (:func:`strategy_graph`): the replicas, the micro-batch capture
they came from, each replica's devices and one replica's placement on them.

* ``data-parallel`` — PyTorch DDP: one replica per GPU (per device where the cluster has no GPU), each on
  ``1 / R`` of the batch, gradients all-reduced in 25 MiB buckets while backward runs.
* ``towers`` — the synchronous towers of Mirhoseini et al. 2017 (sec. 4.4) and the TensorFlow whitepaper's
  synchronous data parallelism: a tower per GPU computes forward and backward on its slice of the batch; the
  parameters, their gradient sums and the update stay on the CPU (every step sends the parameters to each
  tower and the gradients back). No collective: the step captured with one micro-batch per tower, placed.
  ``towers-async``: the paper's asynchronous towers, each applying its own gradients to the CPU's parameters
  with its own update (its step: each tower's one update); different math, so a throughput figure only —
  ``auto`` never weighs it.
* ``hybrid`` — ``R`` replicas for every ``R`` dividing the GPU count (``R = 1`` excepted: that is a plain
  placement), each replica on ``D / R`` neighbouring GPUs and the CPU(s) of their hosts, placed as one
  replica's step on those devices by the fast placers (:data:`autoplace.placers.fast.FAST_PLACERS`; the
  :data:`TOP_PER_REPLICAS` fastest by the replica's own step) and, where a replica has two GPUs or more, by
  the ``pipeline`` placer over the step re-captured with more micro-batches (:func:`_pipeline_micro`); the
  fastest combination, simulated with its synchronisation on the whole cluster.
* ``pipelined`` — the step re-captured with two micro-batches per GPU (at most :data:`MAX_MICRO_BATCHES`) and
  placed by ``pipeline``: a GPipe or 1F1B pipeline over the GPUs, the step's own math.

The math is the single-device step's on the same global batch (gradient accumulation over the replicas'
micro-batches); only its BatchNorm statistics are per replica, as in DDP.
"""

from __future__ import annotations

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import op_time_matrix
from autoplace.errors import InfeasibleError
from autoplace.graph import Graph, OpRole, Phase
from autoplace.placement import Placement
from autoplace.placers.fast import FAST_PLACERS, run_fast_placers
from autoplace.placers.registry import place, register_placer
from autoplace.replicas import expand, micro_batched, remember, replica_graph, strategy_graph, towers_graph
from autoplace.sim import Simulator

__all__ = ["data_parallel", "towers", "hybrid", "replica_devices", "strategy_placement"]

def replica_devices(cluster: Cluster) -> list[int]:
    """The devices replicas are spread over: the GPUs, else every device."""
    return cluster.devices_of_kind("gpu") or list(range(cluster.n_devices))


def _groups(cluster: Cluster, replicas: int, distinct: bool = False) -> list[list[int]]:
    """``replicas`` groups of neighbouring GPUs (``D / R`` each) and CPUs: those on the hosts of the group's GPUs
    (``meta["host"]``) where every group has as many, else every CPU in every group (``distinct``: none, so
    that no two groups share a device); each group in cluster order, as a placement on group 0's devices
    (``cluster.without`` the others) numbers its slots."""
    gpus = replica_devices(cluster)
    if replicas < 1 or len(gpus) % replicas:
        raise InfeasibleError(f"{replicas} replicas do not divide the {len(gpus)} devices of {cluster.name!r}")
    per = len(gpus) // replicas
    others = [d for d in range(cluster.n_devices) if d not in gpus]
    host = lambda d: cluster.devices[d].meta.get("host")  # noqa: E731
    blocks = [gpus[r * per:(r + 1) * per] for r in range(replicas)]
    local = [[d for d in others if host(d) in {host(g) for g in block}] for block in blocks]
    if len({len(c) for c in local}) != 1 or not local[0] or \
            (distinct and len({d for c in local for d in c}) < sum(map(len, local))):
        local = [[] for _ in blocks] if distinct else [others] * replicas
    return [sorted(c + block) for c, block in zip(local, blocks)]


def strategy_placement(graph: Graph, cluster: Cluster, replica: Graph, slots: np.ndarray, groups: list[list[int]],
                       method: str, micro: int, priorities: np.ndarray | None = None, **meta) -> Placement:
    """The placement of ``replica`` (placed on slots of ``groups``) expanded to ``len(groups)`` replicas."""
    ex = expand(replica, slots, groups, priorities=priorities)
    names = cluster.device_names
    strategy = {"kind": "replicas", "replicas": len(groups), "micro_batches": micro,
                "groups": [[names[d] for d in g] for g in groups],
                "slots": {op.name: int(s) for op, s in zip(replica.ops, slots)}, "buckets": len(ex.buckets),
                **({"schedule": {op.name: int(p) for op, p in zip(replica.ops, priorities)}}
                   if priorities is not None else {})}
    remember(graph, strategy, ex.graph)
    return Placement.from_array(ex.graph, cluster, ex.devices, method, ex.priorities, strategy=strategy, **meta)


@register_placer("data-parallel", description="PyTorch DDP: one replica per GPU on 1/R of the batch, gradients "
                 "all-reduced in 25 MiB buckets during backward", paper="TensorFlow whitepaper sec. 4.4 (data "
                 "parallel training); PyTorch DDP (Li et al. 2020)", strategy=True)
def data_parallel(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring."""
    groups = [[d] for d in replica_devices(cluster)]
    R = len(groups)
    micro = micro_batched(graph, R)
    replica = replica_graph(micro, R)
    sub = cluster.without([n for i, n in enumerate(cluster.device_names) if i != groups[0][0]])
    if not np.isfinite(op_time_matrix(replica, sub)).all():
        raise InfeasibleError(f"an op of {graph.name!r} cannot run on {cluster.device_names[groups[0][0]]}")
    return strategy_placement(graph, cluster, replica, np.zeros(replica.n_ops, np.int64), groups, "data-parallel", R)



@register_placer("towers", description="synchronous towers: a replica of forward and backward per GPU, the "
                 "parameters, gradient sums and update on the CPU", paper="Mirhoseini et al. 2017 sec. 4.4",
                 strategy=True)
def towers(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring."""
    return _towers(graph, cluster, "towers")


@register_placer("towers-async", description="asynchronous towers: each tower updates the CPU's parameters with "
                 "its own gradients (different math: a throughput figure; auto never picks it)",
                 paper="Mirhoseini et al. 2017 sec. 4.4", strategy=True)
def towers_async(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring."""
    return _towers(graph, cluster, "towers-async")


def _towers(graph: Graph, cluster: Cluster, kind: str) -> Placement:
    gpus = cluster.devices_of_kind("gpu")
    cpus = cluster.devices_of_kind("cpu")
    if not gpus or not cpus:
        raise InfeasibleError(f"towers need GPUs and a CPU; cluster {cluster.name!r} has "
                              f"{len(gpus)} GPU(s) and {len(cpus)} CPU(s)")
    R = len(gpus)
    step = towers_graph(micro_batched(graph, R), R, asynchronous=kind == "towers-async")
    # the data reading ops stay on the CPU, as the paper's towers share them
    dev = np.array([gpus[op.meta["replica"]] if "replica" in op.meta and op.type != OpRole.INPUT
                    and op.phase != Phase.UPDATE else cpus[0] for op in step.ops], np.int64)
    strategy = {"kind": kind, "replicas": R, "micro_batches": R,
                "groups": [[cluster.device_names[cpus[0]], cluster.device_names[g]] for g in gpus]}
    remember(graph, strategy, step)
    return Placement.from_array(step, cluster, dev, kind, strategy=strategy)


#: the most micro-batches a strategy captures the step with (a capture's size grows with it)
MAX_MICRO_BATCHES = 16
#: per replica count, the fast placements of one replica (by their own step) expanded and simulated whole
TOP_PER_REPLICAS = 3


def _pipeline_micro(replicas: int, gpus_per_replica: int) -> int:
    """Micro-batches per replica for a pipeline over ``gpus_per_replica`` stages: two per stage, within
    :data:`MAX_MICRO_BATCHES` over all replicas; 0 where that leaves fewer than two."""
    k = min(2 * gpus_per_replica, MAX_MICRO_BATCHES // replicas)
    return k if gpus_per_replica >= 2 and k >= 2 else 0


def _candidates(graph: Graph, cluster: Cluster, R: int, seed, with_fast: bool = True,
                distinct: bool = False) -> tuple[list, list]:
    """One replica's placements for ``R`` replicas: the :data:`TOP_PER_REPLICAS` fastest of the fast placers'
    (one micro-batch per replica) and the ``pipeline`` placer's over the replica's GPUs (its micro-batches by
    :func:`_pipeline_micro`), each as ``(method, micro-batches, replica graph, slots, priorities, groups)``;
    and what was tried."""

    out, tried = [], []
    groups = _groups(cluster, R, distinct)
    keep = set(groups[0])
    sub = cluster.without([n for i, n in enumerate(cluster.device_names) if i not in keep])
    gpus = len(groups[0]) - sum(cluster.devices[d].kind != "gpu" for d in groups[0])
    if with_fast:
        replica = replica_graph(micro_batched(graph, R), R)
        cands = run_fast_placers(replica, sub, seed=seed, methods=[m for m in FAST_PLACERS if m != "single-cpu"])
        fits = sorted((c for c in cands if c.placement is not None and c.ok), key=lambda c: c.step_time)
        seen = set()
        for c in fits:
            slots = c.placement.to_array(replica, sub)
            if slots.tobytes() not in seen and len(seen) < TOP_PER_REPLICAS:
                seen.add(slots.tobytes())
                out.append((c.method, R, replica, slots, None, groups))
    k = _pipeline_micro(R, gpus)
    while k >= 2:                       # the most micro-batches the batch splits into, halving
        try:
            replica = replica_graph(micro_batched(graph, R * k), R)
        except InfeasibleError as e:
            tried.append({"replicas": R, "method": "pipeline", "micro_batches": R * k, "error": str(e)})
            k //= 2
            continue
        try:
            pipe = place(replica, sub, "pipeline", seed=seed)
            out.append(("pipeline", R * k, replica, pipe.to_array(replica, sub), pipe.priorities(replica), groups))
        except InfeasibleError as e:
            tried.append({"replicas": R, "method": "pipeline", "micro_batches": R * k, "error": str(e)})
        break
    return out, tried


def _fastest(graph: Graph, cluster: Cluster, candidates: list, method: str, tried: list) -> Placement:
    """Each candidate expanded to its replicas and simulated on the whole cluster; the fastest that fits."""

    best = None
    for per, micro, replica, slots, prio, groups in candidates:
        p = strategy_placement(graph, cluster, replica, slots, groups, method, micro, prio, per_replica=per)
        big = strategy_graph(graph, p)
        r = Simulator(big, cluster).run(p.to_array(big, cluster), schedule=p.priorities(big))
        tried.append({"replicas": len(groups), "method": per, "micro_batches": micro, "step_time_s": r.step_time,
                      "fits": r.ok})
        if r.ok and (best is None or r.step_time < best[0]):
            best = (r.step_time, p)
    if best is None:
        why = "; ".join(dict.fromkeys(t["error"] for t in tried if "error" in t)) or "none fits its memory"
        raise InfeasibleError(f"no {method} strategy fits cluster {cluster.name!r} ({len(tried)} tried: {why})")
    p = best[1]
    return Placement(p.assignment, p.graph, p.cluster, p.method, {**p.meta, "tried": tried}, p.schedule)


@register_placer("hybrid", description="R replicas for every R dividing the GPU count, one replica placed on "
                 "its D/R GPUs and the CPU by the fast placers or as a pipeline; the fastest combination",
                 paper="FlexFlow (Jia et al. 2019); PipeDream, Megatron-LM", strategy=True)
def hybrid(graph: Graph, cluster: Cluster, *, seed=None, budget=None, distinct: bool = False) -> Placement:
    """See the module docstring (``distinct``: no two replicas share a device — the CPU of a host holding
    several replicas takes none of them — as the distributed runtime's one rank per device needs)."""
    cands, tried = [], []
    D = len(replica_devices(cluster))
    for R in [r for r in range(2, D + 1) if D % r == 0]:
        try:
            found, why = _candidates(graph, cluster, R, seed, distinct=distinct)
        except InfeasibleError as e:
            tried.append({"replicas": R, "error": str(e)})
            continue
        cands += found
        tried += why
    return _fastest(graph, cluster, cands, "hybrid", tried)


@register_placer("pipelined", description="the step re-captured with two micro-batches per GPU (at most "
                 f"{MAX_MICRO_BATCHES}), placed by the pipeline placer", paper="Huang et al. 2019 (GPipe); "
                 "Narayanan et al. 2021 (1F1B)", strategy=True)
def pipelined(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    """See the module docstring."""
    D = len(replica_devices(cluster))
    if D < 2:
        raise InfeasibleError(f"a pipeline needs two GPUs or more; cluster {cluster.name!r} has {D}")
    found, tried = _candidates(graph, cluster, 1, seed, with_fast=False)
    return _fastest(graph, cluster, found, "pipelined", tried)
