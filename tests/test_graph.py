"""Graph IR: compilation to arrays, topological order, and lint errors that name the culprit."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import chain, op

from autoplace.errors import GraphError
from autoplace.graph import Graph, Op, TensorSpec, dtype_size


def test_arrays_of_a_small_graph():
    g = Graph([Op("a", "t", output_bytes=(10, 20)), Op("b", "t", ("a:1", "a:1", "a")),
               Op("c", "t", ("a:1",), ("b",)), Op("d", "t", ("c",))])
    # tensors: a:0, a:1, ^b (control), c:0 ; b reads a:1 only once
    assert g.tensor_src.tolist() == [0, 0, 1, 2]
    assert g.tensor_out.tolist() == [0, 1, -1, 0]
    assert g.tensor_bytes.tolist() == [10, 20, 0, 0]
    assert g.n_edges == 5
    assert g.successors(0).tolist() == [1, 2] and g.predecessors(2).tolist() == [0, 1]
    assert g.unconsumed_alloc.tolist() == [0, 0, 0, 0]
    assert g.topological_order.tolist() == [0, 1, 2, 3]
    src, dst, nbytes = g.edges()
    assert sorted(zip(src.tolist(), dst.tolist(), nbytes.tolist())) == [
        (0, 1, 10), (0, 1, 20), (0, 2, 20), (1, 2, 0), (2, 3, 0)]


def test_topological_order_follows_file_order_where_it_can():
    g = Graph([Op("late", "t", ("early",)), Op("early", "t"), Op("free", "t")])
    assert [g.ops[i].name for i in g.topological_order] == ["early", "late", "free"]
    assert g.rank.tolist() == [1, 0, 2]


def test_output_sizes_from_shapes_and_dtypes():
    o = Op("x", "t", outputs=(TensorSpec((2, 3), "bfloat16"), TensorSpec((4,), "torch.int64")))
    assert o.out_bytes == (12, 32)
    assert dtype_size("fp16") == 2
    assert Op("y", "t").out_bytes == (0,)


@pytest.mark.parametrize("ops, message", [
    ([Op("a", "t", ("c",)), Op("b", "t", ("a",)), Op("c", "t", ("b",))], "cycle: a -> b -> c -> a"),
    ([Op("a", "t"), Op("b", "t", ("a", "b"))], "cycle: b -> b"),
    ([Op("a", "t", ("ghost",))], "input 'ghost' names an unknown op 'ghost'"),
    ([Op("a", "t", output_bytes=(1,)), Op("b", "t", ("a:3",))], "names output 3 but 'a' has 1 output(s)"),
    ([Op("a", "t"), Op("b", "t", ("a:1",))], "names output 1"),
    ([Op("a", "t"), Op("a", "t")], "duplicate op name 'a'"),
    ([Op("a", "t", control_inputs=("zz",))], "control input 'zz' names an unknown op"),
    ([Op("a", "t", flops=float("nan"))], "op 'a': flops must be a number in [0, "),
    ([Op("a", "t", output_bytes=(-1,))], "op 'a': output 0 bytes must be"),
    ([Op("a", "t", param_bytes=-5)], "op 'a': param_bytes"),
    ([Op("a", "t", cost={"gpu": float("inf")})], "op 'a': cost['gpu']"),
    ([Op("a", "t", phase="sideways")], "phase 'sideways' is not one of"),
    ([Op("a", "t", device_types=())], "device_types is empty"),
    ([Op("a", "t", outputs=(TensorSpec((2,), "float13"),))], "unknown dtype 'float13'"),
])
def test_lint_errors(ops, message):
    with pytest.raises(GraphError) as e:
        Graph(ops, name="bad")
    assert message in str(e.value)


def test_longest_path():
    g = chain(4, cost=1.0)
    assert g.longest_path(np.array([1.0, 2.0, 3.0, 4.0])) == 10.0
    diamond = Graph([op("a"), op("b", ["a"]), op("c", ["a"]), op("d", ["b", "c"])])
    assert diamond.longest_path(np.array([1.0, 5.0, 2.0, 1.0])) == 7.0


def test_graph_is_immutable_view():
    g = chain(3)
    with pytest.raises(AttributeError):
        g.ops[0].name = "x"  # frozen dataclass
    assert "n1" in g and "zz" not in g and len(g) == 3
