"""Per-group input features of the seq2seq placer (Mirhoseini et al. 2017, §3.2).

The paper embeds each operation as the concatenation of (1) a tunable embedding of its type, (2) the sizes
of its output tensors in a fixed-size zero-padded list, and (3) a one-hot encoding of the operations that
are its direct inputs and outputs. The policy here decides per group (§3.3), so each group gets:

1. the mean of its member ops' type embeddings (the types are the graph's own op kinds; an
   ``EmbeddingBag`` over ``type_index``/``type_offsets``);
2. its output sizes: the bytes of each distinct tensor that leaves the group, largest first,
   as ``log2(bytes) / 40`` (a 1 TB tensor is 1.0), the first ``max_outputs`` of them, zero-padded;
3. its adjacency: a multi-hot vector over the groups that feed it, then one over the groups it feeds
   (``2 * n_groups`` entries).

Beside the features, each group's *unit*: the structural unit it belongs to (a layer, an attention or
softmax layer, an Inception branch, a cell — :func:`~autoplace.grouping.structural_key` without the time
step), the one most of its ops belong to. A group whose ops name none (a parameter with its gradient and
update, an input) joins the unit of the tagged group it exchanges the most bytes with, or else is a unit
of its own. The policy's
exploration noise is drawn per unit (:class:`~autoplace.policies.seq2seq.Seq2SeqPolicy`).

Groups are ordered topologically (by their first op in the graph's topological order), the order in which
the encoder reads them.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import Counter
from dataclasses import dataclass

import numpy as np

from autoplace.graph import PHASES, Graph
from autoplace.grouping import Grouping, structural_key, unit_grouping

__all__ = ["GroupFeatures", "group_features", "unit_nodes", "NodeFeatures", "node_features", "type_bucket",
           "N_TYPE_BUCKETS", "NODE_DENSE", "META_DENSE", "meta_features", "output_dims", "first_ops"]


@dataclass(frozen=True)
class GroupFeatures:
    """Features of ``n_groups`` groups, in encoder order ``order`` (group ids).

    **Shapes:** ``type_index`` ``[sum of group sizes]`` and ``type_offsets`` ``[n_groups]`` (an
    ``EmbeddingBag``'s input, groups in encoder order); ``dense`` ``[n_groups, max_outputs + 2 * n_groups]``
    (output sizes, then in- and out-adjacency, rows and adjacency columns in encoder order).
    """

    order: np.ndarray
    type_names: tuple[str, ...]
    type_index: np.ndarray
    type_offsets: np.ndarray
    dense: np.ndarray
    unit: np.ndarray

    @property
    def n_groups(self) -> int:
        return len(self.order)

    @property
    def n_types(self) -> int:
        return len(self.type_names)

    @property
    def n_units(self) -> int:
        return int(self.unit.max()) + 1 if len(self.unit) else 0

    @property
    def unit_of_group(self) -> np.ndarray:
        """Each group's unit by group id (``unit`` is in encoder order)."""
        out = np.empty(self.n_groups, dtype=np.int64)
        out[self.order] = self.unit
        return out


def topological_order(graph: Graph, grouping: Grouping) -> tuple[np.ndarray, np.ndarray]:
    """The groups ordered by their first op in the graph's topological order: ``order`` (group id at each
    position) and ``position`` (each group's position)."""
    first = np.full(grouping.n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, grouping.group, graph.rank)
    order = np.argsort(first, kind="stable")
    position = np.empty(grouping.n_groups, dtype=np.int64)
    position[order] = np.arange(grouping.n_groups)
    return order, position


def group_features(graph: Graph, grouping: Grouping, max_outputs: int = 8) -> GroupFeatures:
    """The features of ``grouping``'s groups of ``graph`` (see the module docstring)."""
    G = grouping.n_groups
    g_of = grouping.group
    order, position = topological_order(graph, grouping)

    kinds = [op.type for op in graph.ops]
    type_names = tuple(sorted(set(kinds)))
    type_id = {t: i for i, t in enumerate(type_names)}
    op_type = np.array([type_id[k] for k in kinds], dtype=np.int64)
    by_group = np.argsort(position[g_of], kind="stable")        # ops grouped in encoder order
    type_index = op_type[by_group]
    sizes = np.bincount(position[g_of], minlength=G)
    type_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    src, dst, _ = graph.edges()
    ps, pd = position[g_of[src]], position[g_of[dst]]
    cross = ps != pd
    dense = np.zeros((G, max_outputs + 2 * G), dtype=np.float32)
    dense[pd[cross], max_outputs + ps[cross]] = 1.0                  # groups feeding it
    dense[ps[cross], max_outputs + G + pd[cross]] = 1.0              # groups it feeds
    # distinct tensors leaving each group, by size
    tensors = graph.pair_tensor[cross]
    leaving = np.unique(np.stack([ps[cross], tensors], axis=1), axis=0) if cross.any() else np.zeros((0, 2), np.int64)
    out_sizes: list[list[float]] = [[] for _ in range(G)]
    for p, t in leaving.tolist():
        out_sizes[p].append(float(graph.tensor_bytes[t]))
    for p, s in enumerate(out_sizes):
        s = sorted(s, reverse=True)[:max_outputs]
        dense[p, :len(s)] = np.log2(np.maximum(s, 1.0)) / 40.0
    return GroupFeatures(order, type_names, type_index, type_offsets, dense, _units(graph, g_of, order))


def unit_nodes(graph: Graph, cluster, grouping: Grouping) -> Grouping:
    """``grouping``'s groups merged into their structural units (:attr:`GroupFeatures.unit_of_group`), where
    a placement of whole units can run (:func:`~autoplace.grouping.unit_grouping`); else ``grouping``."""
    units = unit_grouping(graph, cluster, grouping, group_features(graph, grouping, 1).unit_of_group)
    return grouping if units is None else units


def _units(graph: Graph, g_of: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Each group's structural unit (see the module docstring), numbered in encoder order."""
    whole = 1 + max((op.meta["step"] for op in graph.ops if isinstance(op.meta.get("step"), int)), default=0)
    votes: list[Counter] = [Counter() for _ in range(len(order))]
    for op, g in zip(graph.ops, g_of.tolist()):
        key = structural_key(op, step_block=whole)           # one block of every step: the step drops out
        if key is not None:
            votes[g][key] += 1
    key = [v.most_common(1)[0][0] if v else None for v in votes]
    # an untagged group (a parameter with its gradient and update, an input) joins the tagged group it
    # exchanges the most bytes with: a layer's weights move with the layer
    src, dst, nbytes = graph.edges()
    a, b = g_of[src], g_of[dst]
    traffic: dict[int, Counter] = {}
    for x, y, n in zip(np.concatenate([a, b]).tolist(), np.concatenate([b, a]).tolist(), np.tile(nbytes, 2).tolist()):
        if key[x] is None and key[y] is not None:
            traffic.setdefault(x, Counter())[y] += n
    unit_key = []
    for g, k in enumerate(key):
        if k is None:
            k = key[traffic[g].most_common(1)[0][0]] if g in traffic else ("group", g)
        unit_key.append(k)
    ids: dict = {}
    return np.array([ids.setdefault(unit_key[g], len(ids)) for g in order.tolist()], dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------
# Per-node features of the graph-neural placers (HDP's grouper, GDP)

N_TYPE_BUCKETS = 1024       #: op types hash into this many embedding rows, the same for every graph
NODE_DENSE = 17             #: dense features per node (see :func:`node_features`)


@dataclass(frozen=True)
class NodeFeatures:
    """Features of the nodes (groups of a fine grouping: co-located ops) of one graph, nodes in
    topological order, for policies that must read *any* graph with one set of parameters.

    **Shapes:** ``type_index`` ``[sum of node sizes]`` and ``type_offsets`` ``[N]`` (an ``EmbeddingBag``'s
    input: the member ops' type buckets, nodes in order); ``dense`` ``[N, NODE_DENSE]``; ``edge_index``
    ``[2, E]`` (node positions: the distinct edges between two nodes in their own direction, then the same
    edges reversed, so that a node's neighbours are its producers and its consumers); ``order`` ``[N]``
    (group id of each position); ``unit`` ``[N]``: each node's structural unit (a layer with its weights,
    at every time step; see :class:`GroupFeatures`), numbered in order.
    """

    order: np.ndarray
    type_index: np.ndarray
    type_offsets: np.ndarray
    dense: np.ndarray
    edge_index: np.ndarray
    unit: np.ndarray
    graph_name: str = ""

    @property
    def n_nodes(self) -> int:
        return len(self.order)


def type_bucket(op_type: str) -> int:
    """The embedding row of an op type: a stable hash, so that one type has one row in every graph."""

    return zlib.crc32(op_type.encode()) % N_TYPE_BUCKETS


def node_features(graph: Graph, grouping: Grouping) -> NodeFeatures:
    """Features of ``grouping``'s groups of ``graph`` as the nodes of a graph-neural policy.

    Per node (the op meta features GDP §3.1 names — type, output shapes, adjacency — in a form that means
    the same in every graph, so that a policy trained on some graphs reads others):

    * its member ops' op types, hashed to :data:`N_TYPE_BUCKETS` rows (:func:`type_bucket`);
    * ``dense``: the four largest output tensors (``log2(bytes) / 40``), ``log2(1 + FLOPs) / 50``,
      ``log2(1 + parameter bytes) / 40``, ``log2(1 + degree) / 8`` in and out, its position in topological
      order and its depth (longest path from an input, in nodes), each as a fraction of the graph's;
      layer and time step as fractions of the graph's (with a flag saying whether the capture named
      them); the phase (forward, backward, update) one-hot;
    * adjacency as ``edge_index``: the graph's distinct edges between nodes, then the same reversed.
    """
    N = grouping.n_groups
    order, pos = topological_order(graph, grouping)
    p_of = pos[grouping.group]                                                     # node position of each op

    by_node = np.argsort(p_of, kind="stable")
    buckets = np.array([type_bucket(op.type) for op in graph.ops], dtype=np.int64)
    sizes = np.bincount(p_of, minlength=N)
    type_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    src, dst, _ = graph.edges()
    a, b = p_of[src], p_of[dst]
    keep = a != b
    pairs = np.unique(np.stack([a[keep], b[keep]], axis=1), axis=0) if keep.any() else np.zeros((0, 2), np.int64)
    indeg = np.bincount(pairs[:, 1], minlength=N)
    outdeg = np.bincount(pairs[:, 0], minlength=N)
    # depth: longest path in nodes (pairs go from an earlier to a later position: one pass in order)
    depth = np.zeros(N, dtype=np.int64)
    if len(pairs):
        srt = pairs[np.argsort(pairs[:, 1], kind="stable")]
        ptr = np.searchsorted(srt[:, 1], np.arange(N + 1))
        for v in range(N):
            s, e = ptr[v], ptr[v + 1]
            if e > s:
                depth[v] = depth[srt[s:e, 0]].max() + 1

    dense = np.zeros((N, NODE_DENSE), dtype=np.float32)
    outs: list[list[int]] = [[] for _ in range(N)]
    for op, p in zip(graph.ops, p_of.tolist()):
        outs[p].extend(op.out_bytes)
    for p, s in enumerate(outs):
        s = sorted(s, reverse=True)[:4]
        dense[p, :len(s)] = np.log2(np.maximum(s, 1.0)) / 40.0
    dense[:, 4] = np.log2(1.0 + np.bincount(p_of, weights=graph.flops, minlength=N)) / 50.0
    dense[:, 5] = np.log2(1.0 + np.bincount(p_of, weights=graph.param_bytes.astype(float), minlength=N)) / 40.0
    dense[:, 6] = np.log2(1.0 + indeg) / 8.0
    dense[:, 7] = np.log2(1.0 + outdeg) / 8.0
    dense[:, 8] = np.arange(N) / max(N - 1, 1)
    dense[:, 9] = depth / max(int(depth.max()) if N else 0, 1)
    for col, key in ((10, "layer"), (12, "step")):
        vals = [(p, op.meta[key]) for op, p in zip(graph.ops, p_of.tolist()) if isinstance(op.meta.get(key), int)]
        if vals:
            top = max(v for _, v in vals) + 1
            for p, v in vals:
                dense[p, col] = max(dense[p, col], (v + 1) / top)
                dense[p, col + 1] = 1.0
    for op, p in zip(graph.ops, p_of.tolist()):
        if op.phase in PHASES:
            dense[p, 14 + PHASES.index(op.phase)] = 1.0
    edge_index = np.concatenate([pairs.T, pairs[:, ::-1].T], axis=1).astype(np.int64)
    return NodeFeatures(order, buckets[by_node], type_offsets, dense, edge_index,
                        _units(graph, grouping.group, order), graph.name)


# ---------------------------------------------------------------------------------------------------------
# The meta features GDP names (§3.1: "operation type, output shape, adjacent node ids"), raw

MAX_OUTPUTS = 5     #: outputs per node in the meta features
MAX_DIMS = 5        #: dimensions per output
MAX_NEIGHBOURS = 10  #: (id, ±1) pairs per node
META_DENSE = MAX_OUTPUTS * MAX_DIMS + 2 * MAX_NEIGHBOURS


def output_dims(graph: Graph, op: int, fill: float) -> np.ndarray:
    """``[MAX_OUTPUTS * MAX_DIMS]``: the first :data:`MAX_DIMS` dimensions of op ``op``'s first
    :data:`MAX_OUTPUTS` outputs, ``fill`` where there are none (an output known by its bytes alone is one
    dimension of that many float32 elements)."""
    out = np.full(MAX_OUTPUTS * MAX_DIMS, fill, dtype=np.float32)
    o = graph.ops[op]
    shapes = ([t.shape for t in o.outputs] if o.outputs is not None
              else [(b // 4,) for b in o.out_bytes] if o.declares_outputs else [])
    for i, shape in enumerate(shapes[:MAX_OUTPUTS]):
        for j, d in enumerate(shape[:MAX_DIMS]):
            if d > 0 or (fill < 0 and d == 0):      # with fill -1 a zero dimension shows; with fill 0 it is absent
                out[i * MAX_DIMS + j] = d
    return out


def first_ops(graph: Graph, grouping: Grouping, order: np.ndarray) -> np.ndarray:
    """Each group's first op in topological order (the op that stands for it), groups in ``order``."""
    first = np.full(grouping.n_groups, -1, dtype=np.int64)
    for i in graph.topological_order[::-1].tolist():
        first[grouping.group[i]] = i
    return first[order]


def meta_features(graph: Graph, grouping: Grouping) -> NodeFeatures:
    """:func:`node_features` with the dense features GDP names in their place, raw: per node, its first op's
    output dimensions (:func:`output_dims`, ``-1`` where absent) and the ids (topological positions) of its
    first :data:`MAX_NEIGHBOURS` neighbours as ``(id, -1)`` for a producer and ``(id, +1)`` for a consumer,
    producers first, zero-padded: ``[N, META_DENSE]``."""
    f = node_features(graph, grouping)
    src, dst = f.edge_index[:, :f.edge_index.shape[1] // 2]          # the edges' own direction
    neighbours: list[list[int]] = [[] for _ in range(f.n_nodes)]
    for a, b in sorted(zip(src.tolist(), dst.tolist()), key=lambda e: (e[1], e[0])):
        neighbours[b].extend([a, -1])
    for a, b in sorted(zip(src.tolist(), dst.tolist())):
        neighbours[a].extend([b, 1])
    dense = np.zeros((f.n_nodes, META_DENSE), dtype=np.float32)
    S = MAX_OUTPUTS * MAX_DIMS
    for p, op in enumerate(first_ops(graph, grouping, f.order).tolist()):
        dense[p, :S] = output_dims(graph, op, -1.0)
        nb = neighbours[p][:2 * MAX_NEIGHBOURS]
        dense[p, S:S + len(nb)] = nb
    return dataclasses.replace(f, dense=dense)
