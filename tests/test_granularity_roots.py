"""Module granularity says what it did: a root module's own tensors go with their first user (not the whole
model into one unit), a map that merges devices or a model that stays one unit is a warning naming why,
and a map that splits tied weights is refused naming the tie and the module to move."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from autoplace.capture import capture_training_step  # noqa: E402
from autoplace.cluster import get_cluster  # noqa: E402
from autoplace.errors import AutoplaceError  # noqa: E402
from autoplace.granularity import with_granularity  # noqa: E402
from autoplace.placement import Placement  # noqa: E402
from autoplace.runtime.export import device_map, from_device_map  # noqa: E402


class TokenNet(nn.Module):
    """A class token and a position table of the root's own, a buffer of the root's own, two layers."""

    def __init__(self):
        super().__init__()
        self.cls = nn.Parameter(torch.zeros(1, 1, 8))
        self.pos = nn.Parameter(torch.zeros(1, 5, 8))
        self.register_buffer("scale", torch.ones(8))
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x):
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.b(torch.relu(self.a(x * self.scale)))[:, 0]


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.mid, self.head = nn.Embedding(20, 8), nn.Linear(8, 8), nn.Linear(8, 20, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, x):
        return self.head(torch.tanh(self.mid(self.tok(x))))


def _graph(model, x, y, loss=nn.functional.cross_entropy):
    return capture_training_step(model, x, loss, torch.optim.SGD(model.parameters(), lr=0.1), targets=y)


def _token_graph():
    return _graph(TokenNet(), torch.randn(2, 4, 8), torch.randint(0, 3, (2,)))


def test_the_roots_own_tensors_go_with_their_first_user_not_the_whole_model():
    g = with_granularity(_token_graph(), "module")
    group = {op.name: op.colocation_group for op in g.ops}
    assert group["a.weight"] != group["b.weight"]                      # the layers are units of their own
    assert group["cls"] not in (group["a.weight"], group["b.weight"])
    assert group["pos"] == group["cls"] == group["scale"]              # with their first users: the root's ops
    cluster = get_cluster("p100x2")
    g0, g1 = cluster.index("gpu:0"), cluster.index("gpu:1")
    dev = [g1 if op.colocation_group == group["b.weight"] else g0 for op in g.ops]
    dmap = device_map(g, Placement.from_array(g, cluster, dev, "manual"), cluster)
    assert dmap == {"a": "cuda:0", "b": "cuda:1", "cls": "cuda:0", "pos": "cuda:0", "scale": "cuda:0"}


def test_a_map_that_merges_devices_and_a_model_that_stays_one_unit_are_warnings():
    g = with_granularity(_token_graph(), "module")
    cluster = get_cluster("localhost")                                 # cpu:0 and cpu:1: both torch's "cpu"
    dev = [op.colocation_group == "module:b" for op in g.ops]
    with pytest.warns(UserWarning, match=r"cpu:0, cpu:1 are all torch device 'cpu'"):
        assert device_map(g, Placement.from_array(g, cluster, dev, "manual"), cluster) == {"": "cpu"}

    class Wrapper(nn.Module):                                          # owns a parameter and holds the rest
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
            self.gain = nn.Linear(2, 2)

        def forward(self, x):
            return self.gain(self.inner(x))

    model = nn.Sequential(Wrapper())
    model[0].register_parameter("bias", nn.Parameter(torch.zeros(2)))
    graph = _graph(model, torch.randn(3, 4), torch.randint(0, 2, (3,)))
    with pytest.warns(UserWarning, match=r"is one unit \(module '0' owns parameters"):
        with_granularity(graph, "module")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_granularity(_token_graph(), "module")                     # several units: no warning


def test_a_map_splitting_tied_weights_names_the_tie_and_the_module_to_move():
    g = _graph(Tied(), torch.randint(0, 20, (2, 5)), torch.randint(0, 20, (2, 5)),
               lambda o, y: nn.functional.cross_entropy(o.reshape(-1, 20), y.reshape(-1)))
    cluster = get_cluster("p100x2")
    ok = from_device_map(g, cluster, {"tok": 0, "mid": 1, "head": 0})   # the tie on one device: runs
    assert ok.assignment["head.weight" if "head.weight" in ok.assignment else "tok.weight"] == "gpu:0"
    with pytest.raises(AutoplaceError, match=r"'head.weight' is tied to 'tok.weight' \(one tensor\), but the map "
                                             r"puts module 'head' on gpu:1 and 'tok' on gpu:0: map 'head' to gpu:0"):
        from_device_map(g, cluster, {"tok": 0, "mid": 0, "head": 1})


def test_a_device_map_with_the_roots_own_tensors_reads_back_as_placed():
    g = with_granularity(_token_graph(), "module")
    cluster = get_cluster("p100x2")
    g0, g1 = cluster.index("gpu:0"), cluster.index("gpu:1")
    dev = [g1 if op.colocation_group in ("module:b", "module:(root).cls") else g0 for op in g.ops]
    placed = Placement.from_array(g, cluster, dev, "manual")
    dmap = device_map(g, placed, cluster)
    assert dmap["cls"] == dmap["pos"] == dmap["scale"] == dmap["b"] == "cuda:1" and dmap["a"] == "cuda:0"
    for graph in (g, _token_graph()):                                  # grouped already, or not
        back = from_device_map(graph, cluster, dmap)
        assert back.assignment == placed.assignment                    # every op, the root's own ops too
