"""The papers' human-expert placements, from the structural metadata capture puts on every op.

Where the papers give the rule, the expert follows it (Mirhoseini et al. 2017 §4.2; Wu et al. 2016):

* **recurrent models** (ops with ``role=lstm``): LSTM layer ``k`` — of the encoder and of the decoder —
  on GPU ``k mod G``; attention and softmax with the top layer; embeddings with the first layer;
* **Inception** (ops with ``block``): the blocks in network order cut into ``G`` contiguous parts with
  roughly equal numbers of convolution layers.

For the other models (Transformer-XL, WaveNet, AmoebaNet, VGG, ...) the papers give no rule, so the expert
does what a person balancing a layer pipeline would: the units in network order — each ``layer`` (or
``cell``) index, with the embedding and the softmax as units of their own, since a large-vocabulary
softmax can outweigh every layer — are cut into at most ``G`` contiguous ranges that minimise the heaviest
range's FLOPs (forward and backward), ties broken towards evenly loaded ranges (:func:`balanced_split`).

Ops without such metadata (parameters, optimizer updates, the loss) follow their co-location group, else
the producer (or consumer) they exchange most bytes with. Ops a GPU cannot run go to the CPU.

``seed`` and ``budget`` are unused: the placement is a function of the graph's metadata. Time is linear in
the graph's size plus ``O(U^2 G)`` for ``U`` layer units.
"""

from __future__ import annotations

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import feasible_devices
from autoplace.errors import GraphError, InfeasibleError
from autoplace.graph import Graph, Phase
from autoplace.placement import Placement
from autoplace.placers.registry import register_placer

__all__ = ["expert"]


def _contiguous(weights: list[float], parts: int) -> list[int]:
    """Cut a sequence into ``parts`` contiguous runs of roughly equal total weight; part index per item."""
    total = float(sum(weights)) or 1.0
    out, acc = [], 0.0
    for w in weights:
        out.append(min(parts - 1, int(acc / total * parts)))
        acc += w
    return out


def balanced_split(weights: list[float], parts: int) -> list[int]:
    """Cut a sequence into at most ``parts`` contiguous runs minimising the heaviest run's weight (the
    linear-partition problem, solved exactly by dynamic programming in ``O(n^2 parts)``); among the optimal
    cuts, the one with the smallest sum of squared run weights. Part index per item, parts numbered from 0
    in sequence order."""
    n = len(weights)
    if n == 0:
        return []
    parts = max(1, min(parts, n))
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(weights, dtype=float))])
    # top[k, j], squares[k, j]: (heaviest run, sum of squares) cutting the first j items into k non-empty runs,
    # the least in that order; cut[k, j]: where its last run starts (the first such cut among equals)
    top = np.full((parts + 1, n + 1), np.inf)
    squares = np.full((parts + 1, n + 1), np.inf)
    cut = np.zeros((parts + 1, n + 1), dtype=np.int64)
    top[0, 0] = squares[0, 0] = 0.0
    for k in range(1, parts + 1):
        for j in range(k, n + 1):
            i = np.arange(k - 1, j)
            w = prefix[j] - prefix[i]
            heaviest = np.maximum(top[k - 1, i], w)
            least = heaviest.min()
            if least == np.inf:
                continue
            sq = np.where(heaviest == least, squares[k - 1, i] + w * w, np.inf)
            at = int(np.argmin(sq))
            top[k, j], squares[k, j], cut[k, j] = least, sq[at], k - 1 + at
    k = min(range(1, parts + 1), key=lambda k: (top[k, n], squares[k, n], k))
    out, j = [0] * n, n
    while k > 0:
        i = int(cut[k, j])
        out[i:j] = [k - 1] * (j - i)
        j, k = i, k - 1
    return out


def _units(graph: Graph) -> tuple[str, dict[int, object]]:
    """Which rule applies, and each tagged op's unit (layer index, block name, ...); a tag that is not a
    string or a number is one clear error naming the op."""
    metas = [op.meta for op in graph.ops]
    for op in graph.ops:
        for key in ("layer", "block", "cell", "role"):
            v = op.meta.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (str, int, float))):
                raise GraphError(f"op {op.name!r}: field {key!r} must be a string or a number, got "
                                 f"{type(v).__name__}")
    if any(m.get("role") == "lstm" for m in metas):
        return "recurrent", {i: m.get("layer") for i, m in enumerate(metas) if m.get("layer") is not None}
    if any("block" in m for m in metas):
        return "blocks", {i: m["block"] for i, m in enumerate(metas) if "block" in m}
    for key in ("layer", "cell"):
        if any(key in m for m in metas):
            # the embedding and the softmax are units of their own: they can outweigh any layer
            return "layers", {i: (m["role"], m[key]) if m.get("role") in _OWN_UNIT else m[key]
                              for i, m in enumerate(metas) if key in m}
    return "none", {}


_OWN_UNIT = ("embedding", "softmax")


@register_placer("expert", description="the papers' human placements: one LSTM layer per GPU, Inception in "
                 "contiguous parts, FLOP-balanced layer ranges otherwise", paper="Mirhoseini et al. 2017 §4.2")
def expert(graph: Graph, cluster: Cluster, *, seed=None, budget=None) -> Placement:
    gpus = cluster.devices_of_kind("gpu") or list(range(cluster.n_devices))
    cpus = cluster.devices_of_kind("cpu")
    G = len(gpus)
    ok = feasible_devices(graph, cluster)
    dev = np.full(graph.n_ops, -1, dtype=np.int64)
    rule, unit = _units(graph)
    if rule == "recurrent":
        layers = sorted({u for u in unit.values() if isinstance(u, int)})
        top = max(layers) if layers else 0
        for i, layer in unit.items():
            role = graph.ops[i].meta.get("role")
            k = top if role in ("attention", "softmax") else (0 if role == "embedding" else layer)
            dev[i] = gpus[int(k) % G]
    elif rule in ("blocks", "layers"):
        order: dict[object, None] = {}   # units in network order (first forward appearance), then the rest
        for i in graph.topological_order.tolist():
            u = unit.get(i)
            if u is not None and u not in order and graph.ops[i].phase in (None, Phase.FORWARD):
                order[u] = None
        for u in unit.values():
            order.setdefault(u)
        order = list(order)
        if rule == "blocks":  # equal numbers of convolution layers (Mirhoseini: "roughly the same number of layers")
            w = {u: 0.0 for u in order}
            for i, u in unit.items():
                if "conv" in graph.ops[i].type and graph.ops[i].phase in (None, Phase.FORWARD):
                    w[u] += 1.0
        else:                 # the heaviest part as light as possible
            w = {u: 0.0 for u in order}
            for i, u in unit.items():
                w[u] += graph.flops[i]
        split = _contiguous if rule == "blocks" else balanced_split
        part = dict(zip(order, split([w[u] for u in order], G)))
        for i, u in unit.items():
            dev[i] = gpus[part[u]]
    _follow_groups_and_neighbours(graph, dev, gpus[0])
    for i in np.flatnonzero(~ok[np.arange(graph.n_ops), dev]):  # no kernel there: CPU, else anywhere
        choice = next((d for d in [*cpus, *range(cluster.n_devices)] if ok[i, d]), None)
        if choice is None:
            raise InfeasibleError(f"expert: no device of cluster {cluster.name!r} can run op {graph.ops[i].name!r}")
        dev[i] = choice
    _unify_groups(graph, dev, ok)
    return Placement.from_array(graph, cluster, dev, "expert", rule=rule)


def _follow_groups_and_neighbours(graph: Graph, dev: np.ndarray, default: int) -> None:
    for members in graph.colocation_groups().values():
        placed = [dev[i] for i in members if dev[i] >= 0]
        if placed:
            d = np.bincount(placed).argmax()
            for i in members:
                if dev[i] < 0:
                    dev[i] = d
    # neighbours with the bytes exchanged: producers (inputs) and consumers (outputs) of each op
    src, dst, nbytes = graph.edges()
    ins: list[list[tuple[int, int]]] = [[] for _ in range(graph.n_ops)]
    outs: list[list[tuple[int, int]]] = [[] for _ in range(graph.n_ops)]
    for s_, d_, b in zip(src.tolist(), dst.tolist(), nbytes.tolist()):
        ins[d_].append((b, s_))
        outs[s_].append((b, d_))
    for _ in range(2):  # forward along producers, then back from consumers, twice
        for neighbours, order in ((ins, graph.topological_order), (outs, graph.topological_order[::-1])):
            for i in order:
                if dev[i] < 0:
                    placed = [(b, j) for b, j in neighbours[i] if dev[j] >= 0]
                    if placed:
                        dev[i] = dev[max(placed)[1]]  # the neighbour it exchanges most bytes with
    dev[dev < 0] = default


def _unify_groups(graph: Graph, dev: np.ndarray, ok: np.ndarray) -> None:
    """Co-location groups end on one device: the most common feasible one among their members."""
    for name, members in graph.colocation_groups().items():
        feasible = ok[members].all(axis=0)
        counts = np.bincount(dev[members], minlength=ok.shape[1]) * feasible
        if not feasible.any():
            raise InfeasibleError(f"expert: no single device can run all of co-location group {name!r}")
        dev[members] = int(np.argmax(counts)) if counts.any() else int(np.flatnonzero(feasible)[0])
