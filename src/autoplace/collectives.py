"""Collectives: all-reduce, reduce-scatter, all-gather and broadcast over a set of devices.

In the IR a collective is one op per participant (its *rank*), all of one type in :data:`COLLECTIVES`, tied by
``meta["collective"]`` (the group's name) with ``meta["rank"]`` and ``meta["bytes"]`` (the size of the full
buffer ``B``). Each reads its local tensor (its first input) and writes its result:

============== ================== ================ ==================================================
type           input              output           result
============== ================== ================ ==================================================
all_reduce     ``B``              ``B`` (in place) the sum of every rank's input
reduce_scatter ``B``              ``B / N``        rank r's share of the sum
all_gather     ``B / N``          ``B``            every rank's input, concatenated
broadcast      ``B``              ``B`` (in place) rank ``meta["root"]``'s input (default 0)
============== ================== ================ ==================================================

:func:`collective` builds the ops. Before a placement is simulated, :func:`lower` replaces each collective by
the steps the communication library runs between the participants' devices (NCCL's algorithms,
https://github.com/NVIDIA/nccl and its tests' ``doc/PERFORMANCE.md``):

* **ring** — the participants in a ring (grouped by host, so the ring crosses each host boundary once). A
  reduce-scatter is ``N - 1`` steps and an all-gather ``N - 1`` steps in which every rank sends one ``B / N``
  chunk to the next and receives one from the previous; an all-reduce is both, ``2 (N - 1)`` steps. On
  links of bandwidth ``W`` and latency ``a`` an all-reduce takes ``2 (N - 1) / N * B / W + 2 (N - 1) a``
  (nccl-tests: bus bandwidth = algorithm bandwidth x ``2 (N - 1) / N``; ``(N - 1) / N`` for reduce-scatter
  and all-gather).
* **chain** (broadcast) — the data flows from the root along the ring in chunks of 512 KiB (NCCL's default
  4 MiB buffer over its 8 pipeline steps), at most 64: each rank sends its chunks back to back, so
  ``(N - 2 + C) B / (C W) + (N - 1) a``, which tends to ``B / W`` (nccl-tests: bus bandwidth = algorithm
  bandwidth for a broadcast).
* **hierarchical** (all-reduce across hosts, ``G`` ranks on each of ``H`` hosts): a ring reduce-scatter within
  each host (``B / G`` chunks), a ring all-reduce across hosts among the ranks of one local index (of their
  ``B / G`` share), a ring all-gather within each host — ``2 (G - 1) + 2 (H - 1)`` steps, of which only the
  middle ones cross the network (NCCL's ``NVLS``/``CollNet`` and Horovod's hierarchical all-reduce share this
  shape; NCCL's double binary tree is not modelled).

Like NCCL's tuner (``src/graph/tuning.cc``: each algorithm's predicted time from bandwidth and latency, the
least is run), :func:`lower` picks the algorithm with the least :func:`estimate`; ``meta["algorithm"]`` pins
one. Each step is a *communication op* of the simulator (:mod:`autoplace.sim._kernel`): it takes no device
time; its chunk is a transfer over the cluster's links and segments, sharing them with every other transfer.
A received chunk takes memory from its transfer's issue until the next step has read it (NCCL's staging
buffers hold a few chunks): one or two chunks per rank at a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from autoplace.cluster import Cluster
from autoplace.errors import GraphError
from autoplace.graph import Graph, Op, parse_input

__all__ = ["COLLECTIVES", "STEP", "BUCKET_VIEW", "ALGORITHMS", "COMMUNICATION_TYPES", "collective", "groups",
           "Lowered", "lower", "steps", "estimate", "choose", "ring_time"]

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
STEP = "collective_step"  #: the type of a lowered step
#: a gradient's view into a reduced bucket (DDP's gradients are views of its flat buffers: no kernel)
BUCKET_VIEW = "bucket_view"
#: ops the communication library runs or its buffers provide: no device time, no launch (the simulator's
#: communication ops)
COMMUNICATION_TYPES = frozenset((*COLLECTIVES, STEP, BUCKET_VIEW))
ALGORITHMS = ("ring", "chain", "hierarchical")
#: a broadcast's chunk: NCCL's default buffer (NCCL_BUFFSIZE, 4 MiB) over its NCCL_STEPS (8) slots
BROADCAST_CHUNK = 512 * 1024
MAX_CHUNKS = 64


def collective(kind: str, name: str, inputs: Sequence[str], nbytes: int, *, phase: str | None = None,
               root: int = 0, algorithm: str | None = None) -> list[Op]:
    """The ops of one collective of ``kind`` named ``name``: op ``f"{name}/{r}"`` is rank ``r``, reading
    ``inputs[r]``; ``nbytes`` is the full buffer ``B``."""
    if kind not in COLLECTIVES:
        raise GraphError(f"unknown collective {kind!r} (known: {', '.join(COLLECTIVES)})")
    n = len(inputs)
    share = -(-int(nbytes) // max(n, 1))
    out = share if kind == "reduce_scatter" else int(nbytes)
    meta = {"collective": name, "bytes": int(nbytes), "view": kind in ("all_reduce", "broadcast")}
    if kind == "broadcast":
        meta["root"] = root
    if algorithm is not None:
        meta["algorithm"] = algorithm
    return [Op(f"{name}/{r}", kind, inputs=(ref,), output_bytes=(out,), phase=phase, meta={**meta, "rank": r})
            for r, ref in enumerate(inputs)]


def groups(graph: Graph) -> dict[str, np.ndarray]:
    """Each collective's name and its participants (op indices, by rank), checked: one type and size per
    group, ranks ``0 .. N - 1``, one data input, a known algorithm (a :class:`GraphError` naming the op)."""
    found: dict[str, dict[int, int]] = {}
    first: dict[str, Op] = {}
    for i, op in enumerate(graph.ops):
        if op.type not in COLLECTIVES:
            continue
        name, rank, nbytes = op.meta.get("collective"), op.meta.get("rank"), op.meta.get("bytes")
        where = f"collective op {op.name!r}:"
        if not isinstance(name, str) or not name:
            raise GraphError(f"{where} meta 'collective' must name its group")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise GraphError(f"{where} meta 'rank' must be an integer >= 0, got {rank!r}")
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise GraphError(f"{where} meta 'bytes' must be an integer >= 0, got {nbytes!r}")
        if len(op.inputs) != 1:
            raise GraphError(f"{where} reads {len(op.inputs)} tensors (a collective reads one)")
        algo = op.meta.get("algorithm")
        if algo is not None and algo not in ALGORITHMS:
            raise GraphError(f"{where} unknown algorithm {algo!r} (known: {', '.join(ALGORITHMS)})")
        ref = first.setdefault(name, op)
        if (ref.type, ref.meta.get("bytes"), ref.meta.get("root", 0), ref.meta.get("algorithm")) != \
                (op.type, nbytes, op.meta.get("root", 0), algo):
            raise GraphError(f"{where} differs from {ref.name!r} of collective {name!r} in type, bytes, root "
                             "or algorithm")
        ranks = found.setdefault(name, {})
        if rank in ranks:
            raise GraphError(f"{where} rank {rank} of collective {name!r} is also op {graph.ops[ranks[rank]].name!r}")
        ranks[rank] = i
    out = {}
    for name, ranks in found.items():
        n = len(ranks)
        if sorted(ranks) != list(range(n)):
            raise GraphError(f"collective {name!r} has ranks {sorted(ranks)}, expected 0 .. {n - 1}")
        root = first[name].meta.get("root", 0)
        if first[name].type == "broadcast" and (isinstance(root, bool) or not isinstance(root, int)
                                                or not 0 <= root < n):
            raise GraphError(f"collective {name!r}: root {root!r} is not a rank (0 .. {n - 1})")
        out[name] = np.array([ranks[r] for r in range(n)], np.int64)
    return out


# ---------------------------------------------------------------------------------------------- algorithms
@dataclass(frozen=True)
class _Steps:
    """A lowered collective: ``send[s, r]`` the rank rank ``r`` sends its chunk to at step ``s`` (-1: none),
    ``nbytes[s]`` the chunk's bytes, ``algorithm`` its name."""

    send: np.ndarray
    nbytes: np.ndarray
    algorithm: str


def _ring(order: Sequence[int], n_steps: int, chunk: int) -> _Steps:
    nxt = np.empty(len(order), np.int64)
    for k, r in enumerate(order):
        nxt[r] = order[(k + 1) % len(order)]
    return _Steps(np.tile(nxt, (n_steps, 1)), np.full(n_steps, chunk, np.int64), "ring")


def _chain(order: Sequence[int], nbytes: int) -> _Steps:
    """Pipelined broadcast from ``order[0]`` along ``order``."""
    n = len(order)
    c = max(1, min(MAX_CHUNKS, -(-nbytes // BROADCAST_CHUNK)))
    S = n - 2 + c
    send = np.full((S, n), -1, np.int64)
    for k in range(n - 1):           # position k sends chunk j at step k + j
        for j in range(c):
            send[k + j, order[k]] = order[k + 1]
    return _Steps(send, np.full(S, -(-nbytes // c), np.int64), "chain")


def _hierarchical(hosts: list[list[int]], nbytes: int) -> _Steps:
    G, H = len(hosts[0]), len(hosts)
    share = -(-nbytes // G)
    inner = np.empty(G * H, np.int64)
    outer = np.empty(G * H, np.int64)
    for h, ranks in enumerate(hosts):
        for j, r in enumerate(ranks):
            inner[r] = ranks[(j + 1) % G]
            outer[r] = hosts[(h + 1) % H][j]
    send = np.concatenate([np.tile(inner, (G - 1, 1)), np.tile(outer, (2 * (H - 1), 1)),
                           np.tile(inner, (G - 1, 1))])
    nbytes_s = np.concatenate([np.full(G - 1, share), np.full(2 * (H - 1), -(-share // H)), np.full(G - 1, share)])
    return _Steps(send, nbytes_s.astype(np.int64), "hierarchical")


def _hosts(cluster: Cluster, devices: np.ndarray) -> list[list[int]]:
    """The ranks on each host, hosts in order of their first rank (a device without ``meta["host"]`` is
    on the cluster's one unnamed host)."""
    by: dict[str, list[int]] = {}
    for r, d in enumerate(devices.tolist()):
        by.setdefault(str(cluster.devices[d].meta.get("host") or ""), []).append(r)
    return list(by.values())


def steps(kind: str, n: int, nbytes: int, devices: np.ndarray, cluster: Cluster, *, root: int = 0,
          algorithm: str | None = None) -> _Steps:
    """The steps of a collective of ``kind`` over ranks on ``devices`` by ``algorithm`` (None: the one with
    the least :func:`estimate`)."""
    hosts = _hosts(cluster, devices)
    order = [r for ranks in hosts for r in ranks]
    if kind == "broadcast":
        k = order.index(root)
        return _chain(order[k:] + order[:k], nbytes)
    if n == 1:
        return _Steps(np.zeros((0, 1), np.int64), np.zeros(0, np.int64), "ring")
    chunk = -(-nbytes // n)
    ring = _ring(order, 2 * (n - 1) if kind == "all_reduce" else n - 1, chunk)
    candidates = [ring]
    if kind == "all_reduce" and len(hosts) > 1 and len({len(h) for h in hosts}) == 1 and len(hosts[0]) > 1:
        candidates.append(_hierarchical(hosts, nbytes))
    if algorithm is not None:
        picked = [c for c in candidates if c.algorithm == algorithm]
        if not picked:
            raise GraphError(f"algorithm {algorithm!r} does not apply to this {kind} over {n} ranks on "
                             f"{len(hosts)} host(s)")
        return picked[0]
    return choose(candidates, devices, cluster)


def estimate(st: _Steps, devices: np.ndarray, cluster: Cluster) -> float:
    """Predicted seconds of ``st``: per step, the slowest of its transfers, each at the least of its link's
    bandwidth and its equal share of every segment the step's transfers cross, plus the link's latency."""
    total = 0.0
    D = cluster.n_devices
    for s in range(len(st.nbytes)):
        src = np.flatnonzero(st.send[s] >= 0)
        a, b = devices[src], devices[st.send[s][src]]
        keep = a != b
        a, b = a[keep], b[keep]
        if not len(a):
            continue
        links = a * D + b
        count = np.zeros(max(1, len(cluster.segments)))
        for link in links:
            count[cluster.route_seg[cluster.route_ptr[link]:cluster.route_ptr[link + 1]]] += 1
        worst = 0.0
        for x, y, link in zip(a, b, links):
            rate = cluster.bandwidth[x, y]
            for g in cluster.route_seg[cluster.route_ptr[link]:cluster.route_ptr[link + 1]]:
                rate = min(rate, cluster.segment_bandwidth[g] / count[g])
            worst = max(worst, st.nbytes[s] / rate + cluster.latency[x, y])
        total += worst
    return total


def choose(candidates: Sequence[_Steps], devices: np.ndarray, cluster: Cluster) -> _Steps:
    """The candidate with the least :func:`estimate` (the first on a tie)."""
    costs = [estimate(c, devices, cluster) for c in candidates]
    return candidates[int(np.argmin(costs))]


# ---------------------------------------------------------------------------------------------- lowering
@dataclass(frozen=True)
class Lowered:
    """A graph whose collectives are replaced by their steps: ``graph``'s first ``n`` ops are the original
    ones at their indices (a participant now reads its last step), the steps follow; ``origin[j]`` is the
    original op whose device step ``j`` runs on; ``comm`` marks the communication ops; ``tensor_origin`` maps
    each tensor to the original tensor it carries part of; ``algorithms`` names each collective's."""

    graph: Graph
    origin: np.ndarray
    comm: np.ndarray
    tensor_origin: np.ndarray
    algorithms: dict[str, str]


def lower(graph: Graph, cluster: Cluster, dev: np.ndarray, found: dict[str, np.ndarray] | None = None) -> Lowered:
    """Replace each collective of ``graph`` by its steps between the devices placement ``dev`` gives its
    participants (see the module's docstring)."""
    found = groups(graph) if found is None else found
    ops = list(graph.ops)
    origin = list(range(graph.n_ops))
    algorithms = {}
    for name, members in found.items():
        first = graph.ops[int(members[0])]
        n = len(members)
        st = steps(first.type, n, int(first.meta["bytes"]), np.asarray(dev)[members], cluster,
                   root=int(first.meta.get("root", 0)), algorithm=first.meta.get("algorithm"))
        algorithms[name] = st.algorithm
        S = len(st.nbytes)
        recv_from = np.full((S, n), -1, np.int64)
        for s in range(S):
            for r in np.flatnonzero(st.send[s] >= 0):
                recv_from[s, st.send[s, r]] = r
        for r, i in enumerate(members.tolist()):
            op = graph.ops[i]
            prev = op.inputs[0]
            for s in range(S):
                step = f"{op.name}/step{s}"
                ins = (prev,) if s == 0 or recv_from[s - 1, r] < 0 else (
                    prev, f"{graph.ops[int(members[recv_from[s - 1, r]])].name}/step{s - 1}:1")
                ops.append(Op(step, STEP, inputs=ins, control_inputs=op.control_inputs if s == 0 else (),
                              output_bytes=(0, int(st.nbytes[s]) if st.send[s, r] >= 0 else 0),
                              phase=op.phase, meta={"view": True, "collective": name}))
                origin.append(i)
                prev = f"{step}:0"
            if S:
                ins = (prev,) if recv_from[S - 1, r] < 0 else (
                    prev, f"{graph.ops[int(members[recv_from[S - 1, r]])].name}/step{S - 1}:1")
                ops[i] = replace(op, inputs=ins)
    lowered = Graph(ops, name=graph.name, meta=graph.meta)
    origin_arr = np.array(origin, np.int64)
    comm = np.array([op.type in COMMUNICATION_TYPES for op in lowered.ops], bool)
    # each tensor carries (part of) an original one: an original op's output is itself; a step's chunk is
    # part of its participant's input
    index = {(int(p), int(k)): t for t, (p, k) in enumerate(zip(graph.tensor_src, graph.tensor_out))}
    tensor_origin = np.empty(lowered.n_tensors, np.int64)
    for t, (p, k) in enumerate(zip(lowered.tensor_src.tolist(), lowered.tensor_out.tolist())):
        if p < graph.n_ops:
            tensor_origin[t] = index[(p, k)]
        else:
            i = int(origin_arr[p])
            pname, pk = parse_input(graph.ops[i].inputs[0], graph._index)
            tensor_origin[t] = index[(graph.index(pname), pk)]
    return Lowered(lowered, origin_arr, comm, tensor_origin, algorithms)


def ring_time(nbytes: float, n: int, bandwidth: float, latency: float, kind: str = "all_reduce") -> float:
    """A ring collective's seconds on links of ``bandwidth`` and ``latency`` (the closed form the hand tests
    and :mod:`autoplace.bench` use): ``2 (N - 1)`` steps for an all-reduce, ``N - 1`` otherwise."""
    k = 2 * (n - 1) if kind == "all_reduce" else n - 1
    return k * (math.ceil(nbytes / n) / bandwidth + latency)
