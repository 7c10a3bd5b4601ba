"""Co-location groups: the three rules, expansion, aggregation, and infeasible groups."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import op, two_devices

from autoplace.cost import op_time_matrix
from autoplace.errors import InfeasibleError, UnknownNameError
from autoplace.graph import Graph, Op
from autoplace.grouping import group_ops, grouped_graph


def test_colocation_groups_are_always_honoured():
    g = Graph([op("w", [], colocation_group="w"), op("x", []), op("y", ["w", "x"]), op("u", ["y", "w"], colocation_group="w")])
    gr = group_ops(g, rules=())
    assert gr.group[0] == gr.group[3] and len({gr.group[1], gr.group[2], gr.group[0]}) == 3
    assert gr.names[gr.group[0]] == "w"


def test_single_consumer_rule_is_recursive():
    # a -> b -> c -> d chain with a fork at c: a, b join c (single consumers); c has two consumers
    g = Graph([op("a"), op("b", ["a"]), op("c", ["b"]), op("d", ["c"]), op("e", ["c"])])
    gr = group_ops(g, rules=("single-consumer",))
    assert gr.group[0] == gr.group[1] == gr.group[2]
    assert len(set(gr.group.tolist())) == 3


def test_structure_groups_lstm_cells_and_attaches_private_parameters():
    ops = [op("emb_w", [], params=100, meta={}),
           op("x0", ["emb_w"], meta={"role": "embedding", "step": 0, "layer": 0}),
           op("cell0", ["x0"], meta={"role": "lstm", "step": 0, "layer": 0}),
           op("cell0b", ["cell0"], meta={"role": "lstm", "step": 0, "layer": 0}),
           op("cell1", ["cell0b"], meta={"role": "lstm", "step": 1, "layer": 0})]
    gr = group_ops(Graph(ops), rules=("structure",))
    assert gr.group[2] == gr.group[3] != gr.group[4]
    assert gr.group[0] == gr.group[1]      # the embedding weight is read by one group only: joins it


def test_expand_and_aggregation():
    cl = two_devices()
    g = Graph([op("a", [], {"cpu": 1, "gpu": 2}, 100, params=7, colocation_group="p"),
               op("b", ["a"], {"cpu": 3, "gpu": 1}, 50),
               op("c", ["a", "b"], {"cpu": 1, "gpu": 1}, 0, colocation_group="p")])
    gr = group_ops(g, rules=())
    gg = grouped_graph(g, gr, cl)
    assert gr.n_groups == 2
    assert gr.expand([1, 0]).tolist() == [1, 0, 1]
    t = op_time_matrix(g, cl)
    assert np.allclose(gg.times[gr.group[0]], t[0] + t[2]) and gg.param_bytes[gr.group[0]] == 7
    assert gg.flops.sum() == g.flops.sum()
    edges = {(int(s), int(d)): int(b) for s, d, b in zip(gg.edge_src, gg.edge_dst, gg.edge_bytes)}
    p, q = gr.group[0], gr.group[1]
    assert edges == {(p, q): 100, (q, p): 50}   # contraction makes the group graph cyclic


def test_infeasible_group_and_unknown_rule():
    cl = two_devices()
    g = Graph([Op("a", "t", device_types=("cpu",), colocation_group="z"),
               Op("b", "t", ("a",), device_types=("gpu",), colocation_group="z")])
    with pytest.raises(InfeasibleError, match="group 'z' mixes ops"):
        grouped_graph(g, group_ops(g), cl)
    with pytest.raises(UnknownNameError, match="unknown grouping rule 'magic'"):
        group_ops(g, rules=("magic",))


def test_metis_coarsening_keeps_groups_whole():
    from autoplace.cluster import get_cluster
    from autoplace.grouping import coarsen
    from autoplace.zoo import build_graph

    g = build_graph("toy-mlp", layers=6)
    base = group_ops(g)
    coarse = coarsen(g, base, 4, get_cluster("k80x2"))
    assert 2 <= coarse.n_groups <= 4 < base.n_groups
    for k in range(base.n_groups):  # each original group lands in exactly one coarse group
        assert len(set(coarse.group[base.members(k)].tolist())) == 1
    assert coarsen(g, base, 10_000, get_cluster("k80x2")) is base
