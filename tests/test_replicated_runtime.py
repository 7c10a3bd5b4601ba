"""Data-parallel replicas and hybrids on the torch.distributed runtime: R replicas, each on its share of the
batch, gradients all-reduced in DDP's buckets, train exactly as eager gradient accumulation over R
micro-batches (losses and weights to 1e-5 over 5 steps) on 2 and 4 gloo ranks."""

from __future__ import annotations

import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import autoplace  # noqa: E402
from autoplace.cluster import Cluster, Device, LinkSpec  # noqa: E402
from autoplace.errors import AutoplaceError  # noqa: E402

STEPS = 5
TOL = 1e-5


def cpus(n: int) -> Cluster:
    """``n`` CPU devices of this machine, each a rank of its own."""
    dev = Device("cpu:0", "cpu", 4 * 2**30, 5e10, 1e10, 5e-6, 1, {"cores": 1})
    return Cluster(f"cpu{n}", [dataclasses.replace(dev, name=f"cpu:{i}") for i in range(n)],
                   default_link=LinkSpec(5e9, 20e-6))


class CNN(nn.Module):
    """Convolutions with BatchNorm (no bias before a norm, as ResNets have it), pooled into a classifier."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.body(x))


class TinyLM(nn.Module):
    """Embedding, a transformer encoder layer, a vocabulary head."""

    def __init__(self, vocab: int = 30, d: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.block = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.block(self.emb(x)))


class LSTMNet(nn.Module):
    """An LSTM cell unrolled over the sequence, a classifier on its last state."""

    def __init__(self, n_in: int = 6, hidden: int = 12, steps: int = 4):
        super().__init__()
        self.cell, self.head, self.steps, self.hidden = nn.LSTMCell(n_in, hidden), nn.Linear(hidden, 3), steps, hidden

    def forward(self, x):
        h = c = x.new_zeros(x.shape[0], self.hidden)
        for t in range(self.steps):
            h, c = self.cell(x[:, t], (h, c))
        return self.head(h)


def lm_loss(out, y):
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _case(kind: str, batch: int):
    """A fresh model of ``kind``, its optimizer, the loss and ``STEPS`` batches of ``batch``."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if kind == "cnn":
        model = CNN()
        data = [(torch.randn(batch, 3, 8, 8, generator=g), torch.randint(0, 5, (batch,), generator=g))
                for _ in range(STEPS)]
        return model, lambda ps: torch.optim.Adam(ps, lr=1e-2), nn.functional.cross_entropy, data
    if kind == "lm":
        model = TinyLM()
        data = [(torch.randint(0, 30, (batch, 6), generator=g), torch.randint(0, 30, (batch, 6), generator=g))
                for _ in range(STEPS)]
        # not Adam: attention's key bias has a gradient of zero up to rounding, which Adam scales up to its lr
        return model, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), lm_loss, data
    model = LSTMNet()
    data = [(torch.randn(batch, 4, 6, generator=g), torch.randint(0, 3, (batch,), generator=g)) for _ in range(STEPS)]
    return model, lambda ps: torch.optim.SGD(ps, lr=0.1), nn.functional.cross_entropy, data


def _accumulated(model, opt, loss_fn, data, m: int) -> list[float]:
    """Eager gradient accumulation over ``m`` micro-batches; the mean loss of each step."""
    losses = []
    for x, y in data:
        opt.zero_grad()
        parts = []
        for xm, ym in zip(x.chunk(m), y.chunk(m)):
            loss = loss_fn(model(xm), ym)
            (loss / m).backward()
            parts.append(loss.item())
        opt.step()
        losses.append(sum(parts) / m)
    return losses


def _trains_as_accumulation(kind: str, ranks: int, method: str, cluster_size: int | None = None, **options):
    """Compile ``kind`` with ``method`` on ``cluster_size`` CPU ranks (default ``ranks``), train it ``STEPS``
    steps on batches of ``2 * cluster_size`` and check it against eager accumulation over ``ranks``."""
    model, make_opt, loss_fn, data = _case(kind, 2 * (cluster_size or ranks))
    ref = copy.deepcopy(model)
    expected = _accumulated(ref, make_opt(ref.parameters()), loss_fn, data, ranks)
    opt = make_opt(model.parameters())
    with autoplace.compile(model, data[0][0], loss_fn, opt, targets=data[0][1], cluster=cpus(cluster_size or ranks),
                           method=method,
                           cache=False, progress=False, **options) as step:
        assert step.runtime == "distributed"
        got = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
        step.load_into(model, opt)
    assert got == pytest.approx(expected, abs=TOL)
    for name, p in ref.named_parameters():
        assert torch.allclose(state[name], p.detach(), atol=TOL, rtol=0), name
        assert torch.allclose(dict(model.named_parameters())[name], p.detach(), atol=TOL, rtol=0), name
    for name, b in _first_share_buffers(kind, ranks, cluster_size).items():   # replica 0's, as DDP's
        assert torch.allclose(state[name].double(), b.double(), atol=TOL, rtol=0), name
    return step


def _first_share_buffers(kind: str, ranks: int, cluster_size: int | None) -> dict:
    """The buffers (BatchNorm's statistics) replica 0 ends with: the model's forward on the first of ``ranks``
    shares of every batch, with the parameters eager accumulation has at that step."""
    model, make_opt, loss_fn, data = _case(kind, 2 * (cluster_size or ranks))
    if not list(model.buffers()):
        return {}
    ref = copy.deepcopy(model)
    shadow = copy.deepcopy(model)
    opt = make_opt(ref.parameters())
    for x, y in data:
        with torch.no_grad():
            for p, q in zip(shadow.parameters(), ref.parameters()):
                p.copy_(q)
            shadow(x.chunk(ranks)[0])
        _accumulated(ref, opt, loss_fn, [(x, y)], ranks)
    return dict(shadow.named_buffers())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cnn", "lm", "lstm"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_data_parallel_replicas_train_as_eager_gradient_accumulation(kind, ranks):
    step = _trains_as_accumulation(kind, ranks, "data-parallel")
    assert step.replicas == ranks
    assert step.placement.meta["strategy"]["replicas"] == ranks


def _captured_cnn():
    """The CNN's step as ``hybrid_placement`` captures it (its micro-batch captures registered)."""
    from autoplace.capture import capture_training_step
    from autoplace.replicas import set_micro_batched

    model, make_opt, loss_fn, data = _case("cnn", 8)
    opt = make_opt(model.parameters())
    cap = lambda m: capture_training_step(model, data[0][0], loss_fn, opt, targets=data[0][1],  # noqa: E731
                                          micro_batches=m, name="CNN")
    return set_micro_batched(cap(1), cap)


def hybrid_placement(kind: str, ranks: int = 4):
    """Two replicas, each over ``ranks // 2`` CPUs: one replica's ops cut at the middle of its modules (the
    first half on its first device, a co-location group with its first op)."""
    import numpy as np

    from autoplace.capture import capture_training_step
    from autoplace.placers.replicated import strategy_placement
    from autoplace.replicas import replica_graph

    model, make_opt, loss_fn, data = _case(kind, 2 * ranks)
    g2 = capture_training_step(model, data[0][0], loss_fn, make_opt(model.parameters()), targets=data[0][1],
                               micro_batches=2, name=type(model).__name__)
    replica = replica_graph(g2, 2)
    # the first half of the modules (in forward order) on slot 0 with their backward and update, so that both
    # devices of a replica hold gradients and each sends the other what it needs in forward and backward
    top = lambda scope: ".".join(scope.split(".")[:2])  # noqa: E731 - a module: "body.3", "head"
    first: dict[str, int] = {}
    for i in np.argsort(replica.rank, kind="stable"):
        op = replica.ops[i]
        if op.scope is not None and op.phase == "forward":
            first.setdefault(top(op.scope), len(first))
    slots = np.array([int(first.get(top(op.scope), 0) >= len(first) // 2) if op.scope is not None
                      else int(replica.rank[i] > np.median(replica.rank)) for i, op in enumerate(replica.ops)],
                     np.int64)
    first: dict[str, int] = {}          # a co-location group goes where its first op does
    for i, op in enumerate(replica.ops):
        if op.colocation_group is not None:
            slots[i] = first.setdefault(op.colocation_group, int(slots[i]))
    half = ranks // 2
    return strategy_placement(g2, cpus(ranks), replica, slots, [list(range(half)), list(range(half, ranks))],
                              "hybrid", 2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cnn", "lm"])
def test_a_hybrid_of_two_replicas_each_over_two_ranks_trains_as_eager_gradient_accumulation(kind):
    placement = hybrid_placement(kind)
    assert len(set(placement.assignment.values())) == 4
    step = _trains_as_accumulation(kind, 2, "auto", cluster_size=4, placement=placement)
    assert step.replicas == 2


def test_an_exported_strategy_runs_its_replicas_in_one_program_as_eager_accumulation(tmp_path):
    """``export`` of data-parallel replicas: one program running every replica on its share of the batch, each
    bucket's all-reduce written as the replicas' sum; its loss and update are eager accumulation's."""
    import runpy

    from autoplace.capture import capture_training_step
    from autoplace.placers import place
    from autoplace.replicas import set_micro_batched, strategy_graph
    from autoplace.runtime.export import device_map, export_python
    from autoplace.runtime.placed import initial_values

    model, make_opt, loss_fn, data = _case("cnn", 4)
    ref = copy.deepcopy(model)
    opt = make_opt(model.parameters())
    (x, y), = data[:1]
    cap = lambda m: capture_training_step(model, x, loss_fn, opt, targets=y, micro_batches=m, name="CNN")  # noqa: E731
    graph = set_micro_batched(cap(1), cap)
    placement = place(graph, cpus(2), "data-parallel")
    run = strategy_graph(graph, placement)
    source = export_python(run, placement, cpus(2))
    assert "2 data-parallel replicas" in source and "all_reduce" not in source.split('"""')[2]
    (tmp_path / "step.py").write_text(source)
    ns = runpy.run_path(str(tmp_path / "step.py"))
    values = initial_values(graph, model, opt)
    args = []
    for name, *_ in ns["INPUTS"]:
        r, base = int(name.split("/")[0][1:]), name.split("/", 1)[1]
        args.append(values[base].clone() if base in values else {"input0": x, "input1": y}[base].chunk(2)[r])
    outputs, updated = ns["step"](*args)
    expected = _accumulated(ref, make_opt(ref.parameters()), loss_fn, data[:1], 2)
    per = len(outputs) // 2
    assert float((outputs[0] + outputs[per]) / 2) == pytest.approx(expected[0], abs=TOL)
    new = dict(zip(ns["UPDATED"], updated))
    for name, p in ref.named_parameters():
        for r in range(2):
            assert torch.allclose(new[f"r{r}/{name}"], p.detach(), atol=TOL, rtol=0), (r, name)
    with pytest.raises(AutoplaceError, match="runs 2 replicas of the model: a device_map places one copy"):
        device_map(run, placement, cpus(2))


@pytest.mark.slow
def test_replicas_draw_dropout_as_eager_accumulation_does_with_eager_rng():
    class Dropped(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.drop, self.head = nn.Embedding(30, 16), nn.Dropout(0.2), nn.Linear(16, 30)

        def forward(self, x):
            return self.head(self.drop(torch.relu(self.emb(x))))

    torch.manual_seed(0)
    model = Dropped()
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randint(0, 30, (4, 6), generator=g), torch.randint(0, 30, (4, 6), generator=g)) for _ in range(3)]
    torch.manual_seed(5)
    expected = _accumulated(ref, torch.optim.SGD(ref.parameters(), lr=0.1), lm_loss, data, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with autoplace.compile(model, data[0][0], lm_loss, opt, targets=data[0][1], cluster=cpus(2),
                           method="data-parallel", cache=False, progress=False, eager_rng=True) as step:
        torch.manual_seed(5)
        got = [float(step(x, y)) for x, y in data]
        state = step.state_dict()
    assert got == pytest.approx(expected, abs=TOL)
    assert all(torch.allclose(state[n], p.detach(), atol=TOL, rtol=0) for n, p in ref.named_parameters())


def test_strategies_compile_cannot_run_are_clear_errors():
    model, make_opt, loss_fn, data = _case("cnn", 4)
    opt = make_opt(model.parameters())
    with pytest.raises(AutoplaceError, match="'towers' is a strategy the simulator judges alone"):
        autoplace.compile(model, data[0][0], loss_fn, opt, targets=data[0][1], cluster=cpus(2), method="towers",
                          cache=False, progress=False)
    with pytest.raises(AutoplaceError, match="runs 2 replicas, whose gradients are all-reduced over "
                                             "torch.distributed: use runtime='distributed' or 'auto'"):
        autoplace.compile(model, data[0][0], loss_fn, opt, targets=data[0][1], cluster=cpus(2),
                          method="data-parallel", runtime="shm", cache=False, progress=False)


def test_a_device_posts_its_all_reduces_in_order_and_waits_for_them_after_what_others_need():
    """The runtime's plan (no processes): on each device the all-reduces follow one another in the program's
    order, and every view of a reduced bucket waits for the device's last all-reduce and for each op before
    the update that another device reads."""
    import numpy as np

    from autoplace.runtime.plan import plan_all
    from autoplace.runtime.program import Program, all_reduce, bucket_view

    placement = hybrid_placement("cnn")
    from autoplace.replicas import strategy_graph

    run = strategy_graph(_captured_cnn(), placement)
    program = Program(run)
    assignment = placement.to_array(run, cpus(4))
    plans = plan_all(program, assignment, 4)
    calls = program.calls
    checked = 0
    for plan in plans:
        posts = [i for i in plan.ops if calls[i] is not None and calls[i].fn is all_reduce]
        views = [i for i in plan.ops if calls[i] is not None and calls[i].fn is bucket_view]
        if not posts:
            assert not views
            continue
        for a, b in zip(posts, posts[1:]):
            assert a in plan.deps[b]
        sent = {r.op for j, c in enumerate(calls) if c is not None and assignment[j] != plan.device
                for r in c.tensor_refs if assignment[r.op] == plan.device and run.ops[r.op].phase != "update"
                and calls[r.op] is not None and calls[r.op].fn is not bucket_view}
        for v in views:
            assert posts[-1] in plan.deps[v] and sent <= set(plan.deps[v])
        checked += bool(sent) and bool(views)
    assert checked >= 2 and np.unique(assignment).size == 4     # both replicas: a device that posts and sends


@pytest.mark.slow
def test_a_last_batch_the_replicas_cannot_share_trains_as_a_placement_of_its_step():
    """Data-parallel on two ranks, then a batch of 5 (an epoch's last): it runs as a placement of its own step,
    and the replicas take the next full batch again, training as eager throughout."""
    model, make_opt, loss_fn, data = _case("lstm", 4)
    g = torch.Generator().manual_seed(7)
    data = [data[0], (torch.randn(5, 4, 6, generator=g), torch.randint(0, 3, (5,), generator=g)), data[1]]
    ref = copy.deepcopy(model)
    ropt = make_opt(ref.parameters())
    expected = [_accumulated(ref, ropt, loss_fn, [(x, y)], 2 if len(x) % 2 == 0 else 1)[0] for x, y in data]
    opt = make_opt(model.parameters())
    with autoplace.compile(model, data[0][0], loss_fn, opt, targets=data[0][1], cluster=cpus(2),
                           method="data-parallel", cache=False, progress=False) as step:
        got = []
        for x, y in data:
            got.append(float(step(x, y)))
            assert step.replicas == (2 if len(x) % 2 == 0 else 1)
        state = step.state_dict()
    assert got == pytest.approx(expected, abs=TOL)
    assert all(torch.allclose(state[n], p.detach(), atol=TOL, rtol=0) for n, p in ref.named_parameters())


def test_a_cached_strategy_is_found_again_with_its_verdict(tmp_path):
    """compile's placement cache checks a cached strategy against its replicated step, so a second compile
    finds it (and the verdict measured for it) instead of searching again."""
    from autoplace.placers import place
    from autoplace.runtime.cache import cached_placement, cached_verdict, store_verdict
    from autoplace.runtime.verdict import Verdict

    graph, cluster = _captured_cnn(), cpus(2)
    searches = []

    def search():
        searches.append(1)
        return place(graph, cluster, "data-parallel")

    first, hit = cached_placement(graph, cluster, "data-parallel", 0, None, search, tmp_path)
    assert not hit and first.meta["strategy"]["replicas"] == 2
    verdict = Verdict("placement", "data-parallel", "cpu:0", [0.1], [0.2], 0.1, 0.2, "here")
    store_verdict(verdict, graph, cluster, "data-parallel", 0, None, tmp_path)
    again, hit = cached_placement(graph, cluster, "data-parallel", 0, None, search, tmp_path)
    assert hit and searches == [1] and again.assignment == first.assignment
    assert cached_verdict(graph, cluster, "data-parallel", 0, None, tmp_path, machine="here") is not None
