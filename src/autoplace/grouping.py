"""Co-location groups: ops that must (or should) share a device, and the grouped graph placers work on.

Sources of groups, combined with one union-find (TensorFlow whitepaper §4.3: "union-find on
the co-location constraint graph"):

* ``colocation`` — the graph's own ``colocation_group`` fields (always honoured: they are constraints);
* ``gradient`` — TensorFlow's ``colocate_gradients_with_ops``, which Mirhoseini et al. 2017 build on:
  each op's gradient ops join the op (capture numbers every torch call of the forward pass, ``fwd``, and
  marks its aten ops and their backward ops with it), and autograd's sum of a tensor's gradients joins
  the gradient ops that read it when they are one group (TensorFlow aggregates gradients colocated with
  the tensor's producer). On by default, and for the paper's baselines (``scotch``, ``mincut``) and the
  list schedulers;
* ``single-consumer`` — Mirhoseini et al. 2017 §3.3: an op whose output is consumed by exactly one op is
  co-located with that op; then, as the paper recurses, groups are taken as ops and a group whose outputs
  one other group alone reads joins it, until none does;
* ``structure`` — the capture metadata: each LSTM cell (``role=lstm`` at one ``layer`` and ``step``),
  each attention step, each softmax step, each embedding lookup, each Inception branch, each AmoebaNet
  cell step, else each ``layer`` (Mirhoseini §4.1's groups);
* ``structure-first`` — with ``gradient`` and ``structure``: the structural groups are formed first and
  the gradient rule never joins two of them. Without it, the gradient of an op that feeds several
  structural groups joins them all: the backward of an Inception block's concatenation slices the
  gradient for each branch, and one forward call owns the slices, so every branch of a block becomes one
  group — too coarse for a learned placer, which must be able to split a block's branches (Mirhoseini
  §4.1 places Inception by branch).

A :class:`Grouping` maps ops to groups; :func:`grouped_graph` aggregates a graph over it (FLOPs, bytes,
parameters, per-device times as the sum of the members') so any placer can place groups, and
:meth:`Grouping.expand` turns a group placement back into an op placement.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pymetis

from autoplace.cluster import Cluster
from autoplace.cost import op_time_matrix
from autoplace.errors import InfeasibleError, UnknownNameError
from autoplace.graph import Graph, Op, Phase

__all__ = ["RULES", "Grouping", "GroupGraph", "group_ops", "runnable_grouping", "UnionFind", "hashable",
           "grouped_graph", "structural_key", "weighted_csr", "coarsen", "merge_groups", "unit_grouping",
           "part_graph", "floating_ops"]

RULES = ("colocation", "gradient", "single-consumer", "structure", "structure-first")


class UnionFind:
    def __init__(self, n: int):
        self.parent = np.arange(n)

    def find(self, i: int) -> int:
        p = self.parent
        root = i
        while p[root] != root:
            root = p[root]
        while p[i] != root:  # path compression
            p[i], i = root, p[i]
        return int(root)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # keep the smaller index as the root so group numbering follows file order
            if ra < rb:
                self.parent[rb] = ra
            else:
                self.parent[ra] = rb


def hashable(v):
    """A metadata value as a key part: a list (or a dict) a graph file carries becomes a tuple of its items,
    so that any JSON value names a group."""
    if isinstance(v, list):
        return tuple(hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((str(k), hashable(x)) for k, x in v.items()))
    return v


def structural_key(op: Op, step_block: int = 1) -> tuple | None:
    """The structural group an op belongs to (Mirhoseini §4.1), or None if its metadata names none; with
    ``step_block`` > 1, the time steps of a recurrent layer (or cell) are taken ``step_block`` at a time.
    Metadata values are any JSON (a list or an object names its group as a tuple)."""
    m = {k: hashable(v) for k, v in op.meta.items()} if any(
        isinstance(v, (list, dict)) for v in op.meta.values()) else op.meta
    role = m.get("role")
    if role in ("lstm", "attention", "softmax", "embedding") and "step" in m:
        return (role, m.get("part"), m.get("layer"), _block(m.get("step"), step_block), m.get("direction"))
    if "block" in m and "branch" in m:
        return ("branch", m["block"], m["branch"])
    if "cell" in m:
        return ("cell", m["cell"], _block(m.get("step"), step_block))
    if "layer" in m:
        return ("layer", role, m.get("part"), m["layer"], m.get("stack"))
    return None


def _block(step, step_block: int):
    return step // step_block if step_block > 1 and isinstance(step, int) else step


@dataclass(frozen=True)
class Grouping:
    """``group[i]`` is op ``i``'s group (0..n_groups-1, numbered in file order of each group's first op)."""

    group: np.ndarray
    names: tuple[str, ...]
    rules: tuple[str, ...]

    @property
    def n_groups(self) -> int:
        return len(self.names)

    def members(self, g: int) -> np.ndarray:
        return np.flatnonzero(self.group == g)

    def expand_many(self, group_devices: np.ndarray) -> np.ndarray:
        """``[B, n_groups]`` group placements -> ``[B, n_ops]`` op placements."""
        return np.ascontiguousarray(np.asarray(group_devices, dtype=np.int64)[:, self.group])

    def expand(self, group_devices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Op placement (device index per op) from a group placement (device index per group)."""
        group_devices = np.asarray(group_devices, dtype=np.int64)
        if group_devices.shape != (self.n_groups,):
            raise ValueError(f"expected {self.n_groups} group devices, got shape {group_devices.shape}")
        return group_devices[self.group]


def group_ops(graph: Graph, rules: Iterable[str] = RULES[:4], *, step_block: int = 1) -> Grouping:
    """Co-location groups of ``graph`` under ``rules`` (any of :data:`RULES`, by default all but ``structure-first``;
    ``colocation`` is always on); ``step_block`` coarsens the structural groups of recurrent layers to blocks
    of that many time steps (:func:`structural_key`)."""
    rules = tuple(dict.fromkeys(("colocation", *rules)))
    for r in rules:
        if r not in RULES:
            raise UnknownNameError(f"unknown grouping rule {r!r} (known: {', '.join(RULES)})")
    n = graph.n_ops
    uf = UnionFind(n)
    by_key: dict[object, int] = {}
    gradient, structure = "gradient" in rules, "structure" in rules
    structure_first = structure and gradient and "structure-first" in rules
    skey = [structural_key(op, step_block) if structure else None for op in graph.ops]
    for i, op in enumerate(graph.ops):
        keys = []
        if op.colocation_group is not None:
            keys.append(("colocation", op.colocation_group))
        if gradient and not structure_first and op.meta.get("fwd") is not None:
            keys.append(("gradient", hashable(op.meta["fwd"])))
        if skey[i] is not None:
            keys.append(("structure", skey[i]))
        for key in keys:
            j = by_key.setdefault(key, i)
            uf.union(i, j)
    if structure_first:
        _join_readers_structure(graph, uf, by_key, skey)
        # The structural groups as they stand; a gradient union goes ahead only where it joins no two.
        label: dict[int, frozenset] = {}
        for i, k in enumerate(skey):
            if k is not None:
                r = uf.find(i)
                label[r] = label.get(r, frozenset()) | {k}

        def join(a: int, b: int) -> None:
            ra, rb = uf.find(a), uf.find(b)
            la, lb = label.get(ra, frozenset()), label.get(rb, frozenset())
            if ra != rb and (not la or not lb):             # two labels are two structural groups
                uf.union(a, b)
                label[uf.find(a)] = la | lb

        owner: dict[object, int] = {}
        for i, op in enumerate(graph.ops):
            if op.meta.get("fwd") is not None:
                join(i, owner.setdefault(hashable(op.meta["fwd"]), i))
    else:
        join = uf.union
    if gradient and any(op.meta.get("fwd") is not None for op in graph.ops):
        # Autograd's accumulations (in a captured graph, the backward ops no forward call owns: the sum of a
        # tensor's gradients from its several readers) join their readers when those are one group.
        # TensorFlow aggregates a tensor's gradients colocated with the op that produced the tensor, whose
        # gradient ops read the sum; a chain of sums for a shared weight ends in the weight's group. Readers
        # first (reverse topological order), so a chain joins as a whole.
        for i in graph.topological_order[::-1].tolist():
            op = graph.ops[i]
            if op.phase != Phase.BACKWARD or op.meta.get("fwd") is not None or op.colocation_group is not None:
                continue
            readers = graph.successors(i)
            if len(readers) and len({uf.find(int(c)) for c in readers}) == 1:
                join(i, int(readers[0]))
    if structure and not structure_first:
        _join_readers_structure(graph, uf, by_key, skey)
    if "single-consumer" in rules:
        # Every output of op i (control included) is read by exactly one op c: co-locate i with c, unless
        # that would join two structural groups (a gradient accumulated across time steps would otherwise
        # chain every step's LSTM cell together) or two distinct colocation groups.
        tptr, pptr, pair_op = graph.op_tensor_ptr, graph.tensor_pair_ptr, graph.pair_op
        for i in range(n):
            lo, hi = pptr[tptr[i]], pptr[tptr[i + 1]]
            if hi > lo:
                consumers = np.unique(pair_op[lo:hi])
                if len(consumers) != 1:
                    continue
                c = int(consumers[0])
                if skey[i] is not None and skey[c] != skey[i]:
                    continue
                ci, cc = graph.ops[i].colocation_group, graph.ops[c].colocation_group
                if ci is not None and cc is not None and ci != cc:
                    continue
                uf.union(i, c)
        _merge_single_consumer_groups(graph, uf, skey)
    roots = np.array([uf.find(i) for i in range(n)])
    _, first, inverse = np.unique(roots, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")         # number groups by their first op's position
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    group = rank[inverse].astype(np.int64)
    firsts = np.sort(first)
    names = tuple(_group_name(graph, graph.ops[f]) for f in firsts)
    return Grouping(group, names, rules)



def _merge_single_consumer_groups(graph: Graph, uf: UnionFind, skey: list) -> None:
    """Mirhoseini §3.3's recursion: "after each iteration, we treat the co-location groups as operations until
    there are not any further groups that can be merged" — a group whose outputs (control included) are all
    read by one other group joins it, round after round, with the op rule's two limits: never two structural
    groups, never two colocation groups."""
    n = graph.n_ops
    producer = np.repeat(np.arange(n), np.diff(graph.op_tensor_ptr))[graph.pair_tensor]      # [pairs]
    reader = graph.pair_op
    labels: dict[int, tuple[frozenset, frozenset]] = {}
    for i, op in enumerate(graph.ops):
        r = uf.find(i)
        s, c = labels.get(r, (frozenset(), frozenset()))
        labels[r] = (s | ({skey[i]} if skey[i] is not None else set()),
                     c | ({op.colocation_group} if op.colocation_group is not None else set()))
    merged = True
    while merged:
        merged = False
        roots = np.array([uf.find(i) for i in range(n)], dtype=np.int64)
        a, b = roots[producer], roots[reader]
        cross = a != b
        pairs = np.unique(np.stack([a[cross], b[cross]], axis=1), axis=0) if cross.any() else np.zeros((0, 2), np.int64)
        groups, counts = np.unique(pairs[:, 0], return_counts=True)
        only = dict(zip(pairs[:, 0].tolist(), pairs[:, 1].tolist()))       # a group's reader, where it has one
        for g in groups[counts == 1].tolist():
            rg, ry = uf.find(g), uf.find(only[g])
            if rg == ry:
                continue
            (sg, cg), (sy, cy) = labels[rg], labels[ry]
            if (sg and sy and sg != sy) or (cg and cy and cg != cy):
                continue
            uf.union(rg, ry)
            labels[uf.find(rg)] = (sg | sy, cg | cy)
            merged = True


def _join_readers_structure(graph: Graph, uf: UnionFind, by_key: dict, skey: list) -> None:
    """An op without structural metadata joins the structural group of its readers when they all belong
    to one: a parameter (with its gradient and update ops) read by one Inception branch, autograd's
    gradient accumulation feeding one LSTM cell's backward. Shared weights stay apart."""
    for i, k in enumerate(skey):
        if k is not None:
            continue
        keys = {skey[c] for c in graph.successors(i) if graph.ops[c].phase != Phase.UPDATE}
        keys.discard(None)
        if len(keys) == 1:
            uf.union(i, by_key[("structure", keys.pop())])


def runnable_grouping(graph: Graph, rules: Iterable[str], ok: np.ndarray, *, step_block: int = 1) -> Grouping:
    """:func:`group_ops` under ``rules`` if some device can run every group whole (``ok``: may op ``i`` run
    on device ``d``, ``[n_ops, n_devices]``); else the co-location groups alone — the other rules are
    heuristics, co-location is a constraint (:func:`autoplace.cost.check_runnable` checks it can be met)."""
    grouping = group_ops(graph, rules=rules, step_block=step_block)
    runs = np.ones((grouping.n_groups, ok.shape[1]), dtype=bool)
    np.logical_and.at(runs, grouping.group, ok)
    return grouping if runs.any(axis=1).all() else group_ops(graph, rules=("colocation",))

def _group_name(graph: Graph, op: Op) -> str:
    return op.colocation_group or op.scope or op.name


@dataclass(frozen=True)
class GroupGraph:
    """A graph over groups, for placers that decide per group (partitioners, learned policies).

    Contracting ops into groups generally creates cycles (a parameter's group holds its source op and its
    late gradient/update ops), so this is not a :class:`Graph`: it is arrays. Schedulers that need a DAG
    place groups but schedule the op graph (``Grouping.expand``).

    ``edge_src/edge_dst/edge_bytes``: one row per ordered pair of groups joined by data, with the bytes of
    the distinct tensors crossing. ``times[g, d]`` is the sum of group ``g``'s member op times on device
    ``d`` (``inf`` where a member cannot run), ``feasible`` its finite entries.
    """

    grouping: Grouping
    flops: np.ndarray
    param_bytes: np.ndarray
    out_bytes: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    times: np.ndarray | None = None
    feasible: np.ndarray | None = None

    @property
    def n_groups(self) -> int:
        return self.grouping.n_groups


def grouped_graph(graph: Graph, grouping: Grouping, cluster: Cluster | None = None) -> GroupGraph:
    """Aggregate ``graph`` over ``grouping`` (see :class:`GroupGraph`); with a ``cluster``, per-device times.

    A group whose members no single device can all run raises :class:`InfeasibleError` naming it.
    """
    G = grouping.n_groups
    g_of = grouping.group
    src, dst, _ = graph.edges()
    gs, gd, tensors = g_of[src], g_of[dst], graph.pair_tensor
    cross = gs != gd
    triples = np.unique(np.stack([gs[cross], gd[cross], tensors[cross]], axis=1), axis=0)
    pairs, inverse = np.unique(triples[:, :2], axis=0, return_inverse=True)
    edge_bytes = np.zeros(len(pairs), dtype=np.int64)
    np.add.at(edge_bytes, inverse.ravel(), graph.tensor_bytes[triples[:, 2]])
    times = feasible = None
    if cluster is not None:
        op_times = op_time_matrix(graph, cluster)
        times = np.zeros((G, cluster.n_devices))
        np.add.at(times, g_of, op_times)
        feasible = np.isfinite(times)
        bad = np.flatnonzero(~feasible.any(axis=1))
        if len(bad):
            raise InfeasibleError(f"group {grouping.names[bad[0]]!r} mixes ops that no single device of "
                                  f"cluster {cluster.name!r} can run together")
    return GroupGraph(
        grouping=grouping,
        flops=np.bincount(g_of, weights=graph.flops, minlength=G),
        param_bytes=np.bincount(g_of, weights=graph.param_bytes, minlength=G).astype(np.int64),
        out_bytes=np.bincount(g_of, weights=graph.out_alloc_total, minlength=G).astype(np.int64),
        edge_src=pairs[:, 0].astype(np.int64) if len(pairs) else np.zeros(0, np.int64),
        edge_dst=pairs[:, 1].astype(np.int64) if len(pairs) else np.zeros(0, np.int64),
        edge_bytes=edge_bytes, times=times, feasible=feasible)


def weighted_csr(gg: GroupGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Undirected CSR of a group graph: ``(xadj, adjncy, vertex_weights, edge_weights)``, all positive ints."""
    G = gg.n_groups
    times = np.where(gg.feasible, gg.times, np.inf).min(axis=1) if gg.times is not None else gg.flops
    vw = np.maximum(1, np.round(np.asarray(times) * 1e6)).astype(np.int64)
    a, b = np.minimum(gg.edge_src, gg.edge_dst), np.maximum(gg.edge_src, gg.edge_dst)
    key, inv = np.unique(a * G + b, return_inverse=True)
    kib = np.zeros(len(key))
    np.add.at(kib, inv.ravel(), gg.edge_bytes / 1024.0)
    u, v = key // G, key % G
    w = np.maximum(1, np.round(kib)).astype(np.int64)
    src = np.concatenate([u, v])
    dst = np.concatenate([v, u])
    ew = np.concatenate([w, w])
    order = np.lexsort((dst, src))
    src, dst, ew = src[order], dst[order], ew[order]
    xadj = np.zeros(G + 1, dtype=np.int64)
    np.add.at(xadj, src + 1, 1)
    return np.cumsum(xadj), dst.astype(np.int64), vw, ew


def floating_ops(graph: Graph) -> np.ndarray:
    """``[n_ops]`` bool: ops whose device a placer can leave to their readers — sources (parameters,
    optimizer state, input batches, generated constants), what is computed from resident state alone
    (Adam's bias correction from the step counter), and views of any of these (a view does no work)."""
    source = np.diff(graph.in_ptr) == 0
    state = source & (graph.param_bytes > 0)
    floating = source.copy()
    for i in graph.topological_order.tolist():
        if not source[i]:
            pairs = graph.in_pair[graph.in_ptr[i]:graph.in_ptr[i + 1]]
            producers = graph.tensor_src[graph.pair_tensor[pairs]]
            state[i] = bool(state[producers].all())
            floating[i] = state[i] or bool(graph.is_view[i] and floating[producers].all())
    return floating


def part_graph(n_parts: int, xadj: np.ndarray, adjncy: np.ndarray, vweights: np.ndarray, eweights: np.ndarray,
               seed: int) -> np.ndarray:
    """METIS k-way partition (pymetis) of a weighted CSR graph: part per vertex. METIS prints its complaints
    (a part it cannot bisect further) straight to the process's output; they are silenced here, and the
    caller sees what it got (possibly fewer non-empty parts)."""

    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        _, parts = pymetis.part_graph(int(n_parts), adjacency=pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
                                      eweights=eweights, options=pymetis.Options(seed=int(seed)))
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
    return np.asarray(parts, dtype=np.int64)


def coarsen(graph: Graph, grouping: Grouping, n_groups: int, cluster: Cluster, *, seed: int = 0) -> Grouping:
    """Merge ``grouping``'s groups into about ``n_groups`` with METIS (pymetis), balancing compute and
    cutting few bytes; every original group stays whole (co-location groups remain intact)."""
    if n_groups >= grouping.n_groups:
        return grouping
    gg = grouped_graph(graph, grouping, cluster)
    xadj, adjncy, vw, ew = weighted_csr(gg)
    parts = part_graph(n_groups, xadj, adjncy, vw, ew, seed)
    return merge_groups(grouping, parts, "metis", f"metis:{n_groups}")


def merge_groups(grouping: Grouping, label: np.ndarray, prefix: str, rule: str) -> Grouping:
    """``grouping``'s groups merged by ``label`` (group id -> any label), the merged groups numbered by
    their first op (a stable numbering, empty labels dropped) and named ``prefix0``, ``prefix1`` …;
    ``rule`` is added to the rules."""
    _, first, inverse = np.unique(np.asarray(label)[grouping.group], return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return Grouping(rank[inverse.ravel()].astype(np.int64), tuple(f"{prefix}{k}" for k in range(len(first))),
                    (*grouping.rules, rule))


def unit_grouping(graph: Graph, cluster: Cluster, grouping: Grouping, unit: np.ndarray) -> Grouping | None:
    """``grouping``'s groups merged by ``unit`` (group id -> unit), numbered by their first op; None where
    some unit no single device can run whole (an op type it lacks), or where the units' parameters do not
    pack into the devices' memory first-fit, largest first (then no placement of whole units may fit)."""
    merged = merge_groups(grouping, unit, "unit", "unit")
    try:
        feasible = grouped_graph(graph, merged, cluster).feasible
    except InfeasibleError:                                   # a unit mixes ops no one device runs
        return None
    params = np.bincount(merged.group, weights=graph.param_bytes.astype(float), minlength=merged.n_groups)
    free = cluster.memory_bytes.astype(float).copy()
    for u in np.argsort(-params, kind="stable"):     # the units' weights packed first-fit, largest first
        fits = np.flatnonzero(feasible[u] & (params[u] <= free))
        if not len(fits):
            return None
        free[fits[0]] -= params[u]
    return merged
