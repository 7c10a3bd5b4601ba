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
    g = Graph([op("w", [], colocation_group="w"), op("x", []), op("y", ["w", "x"]),
               op("u", ["y", "w"], colocation_group="w")])
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


# ---------------------------------------------------------------------- groups of a captured training step
@pytest.fixture(scope="module")
def captured_bn_mlp():
    torch = pytest.importorskip("torch")
    from autoplace.capture import capture_training_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 4),
                                torch.nn.BatchNorm1d(4))
    return capture_training_step(model, torch.randn(5, 8), torch.nn.functional.cross_entropy,
                                 torch.optim.SGD(model.parameters(), lr=0.1), targets=torch.randint(0, 4, (5,)),
                                 name="bn-mlp")


def test_a_parameters_gradient_ops_join_its_group(captured_bn_mlp):
    """Each parameter's group holds its update and the op producing its gradient; under the paper's rule
    (gradients with their forward ops) the FLOPs computing the gradients (the mms) join them too."""
    g = captured_bn_mlp
    group = {op.name: op.colocation_group for op in g.ops}
    backward = [op for op in g.ops if op.phase == "backward"]
    producers = {group[op.name] for op in backward} - {None}
    assert {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight"} <= producers
    assert all(group[op.name] is not None for op in g.ops if op.phase == "update")
    paper = group_ops(g, rules=("colocation", "gradient"))
    # each linear layer: its weight, its forward addmm and every backward mm differentiating it (the
    # weight's gradient with its FLOPs, and the input's) share one group
    layer_of = {g.ops[g.index("addmm")].meta["fwd"]: "0.weight", g.ops[g.index("addmm_1")].meta["fwd"]: "2.weight"}
    mms = [o for o in backward if o.type == "aten.mm"]
    assert len(mms) == 3 and all(o.flops > 0 for o in mms)
    for mm in mms:
        weight = layer_of[mm.meta["fwd"]]
        assert paper.group[g.index(mm.name)] == paper.group[g.index(weight)] == paper.group[
            g.index("addmm" if weight == "0.weight" else "addmm_1")]
    assert paper.group[g.index("0.weight")] != paper.group[g.index("2.weight")]
    # BatchNorm: one backward op computes the weight's and the bias's gradients, so they share a group;
    # the forward op writes the running statistics in place, so it lives with them
    assert group["native_batch_norm_backward"] == group["3.weight"] == group["3.bias"]
    assert group["native_batch_norm"] == group["3.running_mean"] == group["3.running_var"]
    nbt = [o for o in g.ops if o.phase != "update" and o.type == "aten.add_"]
    assert nbt and all(group[o.name] == group["3.num_batches_tracked"] for o in nbt)


def test_gradient_rule_puts_each_ops_gradient_with_it(captured_bn_mlp):
    g = captured_bn_mlp
    gr = group_ops(g, rules=("colocation", "gradient"))
    by_fwd: dict[int, set[int]] = {}
    for i, o in enumerate(g.ops):
        if o.meta.get("fwd") is not None:
            by_fwd.setdefault(o.meta["fwd"], set()).add(int(gr.group[i]))
    assert all(len(groups) == 1 for groups in by_fwd.values())
    # the first linear layer's forward addmm, its weight gradient mm and its input-free backward share one
    fwd = g.ops[g.index("addmm")].meta["fwd"]
    members = [op for op in g.ops if op.meta.get("fwd") == fwd]
    assert {op.phase for op in members} == {"forward", "backward"}
    assert gr.group[g.index("addmm")] == gr.group[g.index("0.weight")]   # through the weight gradient
    assert gr.n_groups < group_ops(g, rules=("colocation",)).n_groups


def test_autograd_sums_join_the_gradient_ops_that_read_them():
    """A layer applied three times gets three weight gradients that autograd adds up in a chain; the sums
    are no forward call's gradients, so they carry no ``fwd``, and capture puts only the last in the
    weight's group. TensorFlow colocates the sum of a tensor's gradients with the tensor's producer: here
    the weight, whose group (update included) reads it. Without the rule the first sum is a group of its
    own."""
    torch = pytest.importorskip("torch")
    from autoplace.capture import capture_training_step

    class Thrice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 6)

        def forward(self, x):
            return self.lin(torch.relu(self.lin(torch.relu(self.lin(x)))))

    torch.manual_seed(0)
    model = Thrice()
    g = capture_training_step(model, torch.randn(5, 6), lambda y, t: ((y - t) ** 2).mean(),
                              torch.optim.SGD(model.parameters(), lr=0.1), targets=torch.randn(5, 6), name="thrice")
    sums = [i for i, op in enumerate(g.ops) if op.phase == "backward" and op.meta.get("fwd") is None
            and op.colocation_group is None and op.type == "aten.add"]
    assert sums
    with_rule, without = group_ops(g, rules=("colocation", "gradient")), group_ops(g, rules=("colocation",))
    weight = g.index("lin.weight")
    joined = [i for i in sums if with_rule.group[i] == with_rule.group[weight]]
    assert joined and all(without.group[i] != without.group[weight] for i in joined)
    for i in sums:      # every sum is in the group of the ops that read it
        readers = {int(with_rule.group[c]) for c in g.successors(i)}
        assert readers == {int(with_rule.group[i])}


def test_structure_first_keeps_the_branches_a_gradient_would_join():
    """The backward of a block's concatenation slices the gradient for each branch, and one forward call
    owns the slices: under the gradient rule that call joins every branch into one group. With
    ``structure-first`` the branches stay apart and each op's gradient still joins its forward op."""
    def tagged(name, inputs, fwd, phase="forward", **meta):
        return op(name, inputs, phase=phase, meta={"fwd": fwd, "block": "B", **meta})

    g = Graph([op("x"),
               tagged("a", ["x"], 1, branch=0), tagged("b", ["x"], 2, branch=1), tagged("cat", ["a", "b"], 3),
               op("loss", ["cat"]),
               tagged("cat_grad_a", ["loss"], 3, "backward"), tagged("cat_grad_b", ["loss"], 3, "backward"),
               tagged("a_grad", ["cat_grad_a"], 1, "backward", branch=0),
               tagged("b_grad", ["cat_grad_b"], 2, "backward", branch=1)])
    at = {o.name: i for i, o in enumerate(g.ops)}
    merged = group_ops(g, ("colocation", "gradient", "structure"))
    assert merged.group[at["a"]] == merged.group[at["b"]]
    apart = group_ops(g, ("colocation", "gradient", "structure", "structure-first"))
    assert apart.group[at["a"]] != apart.group[at["b"]]
    for fwd, grad in (("a", "a_grad"), ("b", "b_grad"), ("a", "cat_grad_a"), ("b", "cat_grad_b")):
        assert apart.group[at[fwd]] == apart.group[at[grad]], grad
    assert apart.group[at["cat"]] in (apart.group[at["a"]], apart.group[at["b"]])
    # without the structure rule there is nothing to keep apart: the modifier changes nothing
    assert (group_ops(g, ("colocation", "gradient", "structure-first")).group
            == group_ops(g, ("colocation", "gradient")).group).all()


def test_structure_first_labels_a_group_once_it_takes_a_structural_op():
    """An op without structural tags that one forward call shares with two branches joins the first
    branch, and the second branch, now facing a labelled group, stays apart."""
    g = Graph([op("p", meta={"fwd": 5}),
               op("a", ["p"], meta={"fwd": 5, "block": "B", "branch": 0}),
               op("b", ["p"], meta={"fwd": 5, "block": "B", "branch": 1})])
    gr = group_ops(g, ("colocation", "gradient", "structure", "structure-first"))
    assert gr.group[0] == gr.group[1] != gr.group[2]
