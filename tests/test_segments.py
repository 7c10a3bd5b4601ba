"""A device's share of a step as compiled segments: the cut, and the compiled step against the op-by-op one."""

import networkx as nx
import numpy as np
import pytest
import torch
from torch import nn

from autoplace.capture import capture_training_step
from autoplace.runtime.plan import plan_all
from autoplace.runtime.program import Program
from autoplace.runtime.segments import cut
from autoplace.runtime.shm.worker import standalone


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 16), nn.Linear(16, 3)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.a(x))))


@pytest.fixture(scope="module")
def graph():
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    return capture_training_step(model, x, nn.functional.cross_entropy, torch.optim.Adam(model.parameters()),
                                 targets=y, name="net")


def _runtime(program, *, compiled: bool, capacity: float = 1e12):
    """One device's runtime in this process, the whole program on it (no exchange)."""
    return standalone(program, compiled=compiled, capacity=capacity, seed=3)


def _final(rt, program):
    return rt.fetch(list(program.final_versions.values()) + program.outputs)


def test_segments_run_every_op_once_after_what_it_reads(graph):
    program = Program(graph)
    rng = np.random.default_rng(0)
    for trial in range(6):
        assignment = rng.integers(0, 2, graph.n_ops)
        priority = graph.rank.astype(np.int64) if trial % 2 else None   # a schedule: topological order
        plans = plan_all(program, assignment, 2, priority)
        waits = nx.DiGraph()                  # segment -> the segments (of any device) that wait for it
        made_on = {i: (d, s) for d, plan in enumerate(plans) for s, seg in enumerate(cut(program, plan))
                   for i in seg.ops}
        for plan in plans:
            segments = cut(program, plan)
            ran = [i for seg in segments for i in seg.ops]
            assert sorted(ran) == sorted(plan.ops)
            if plan.order is not None:
                assert ran == plan.order                        # a schedule's order, cut into runs
            seg_of = {i: s for s, seg in enumerate(segments) for i in seg.ops}
            place = {i: k for k, i in enumerate(ran)}
            for s, seg in enumerate(segments):
                for i in seg.ops:
                    for j in plan.deps[i]:                      # a local input: earlier here, or a segment waited for
                        assert place[j] < place[i]
                        assert seg_of[j] == s or seg_of[j] in seg.after
                for ref, users in plan.recv_users.items():      # a received input: the segment waits for it
                    for u in users:
                        if seg_of[u] == s:
                            assert ref in seg.recv
                assert all(t < s for t in seg.after)
                waits.add_node((plan.device, s))
                waits.add_edges_from(((plan.device, t), (plan.device, s)) for t in seg.after)
                waits.add_edges_from((made_on[r.op], (plan.device, s)) for r in seg.recv)
        assert nx.is_directed_acyclic_graph(waits)              # no two devices' segments wait for each other


def test_a_compiled_step_computes_and_counts_what_the_op_by_op_step_does(graph):
    program = Program(graph)
    compiled, interpreted = _runtime(program, compiled=True), _runtime(program, compiled=False)
    x = next(i for i in program.placeholders if graph.ops[i].type == "input"
             and graph.ops[i].outputs[0].dtype == "float32")
    peaks = []
    for step in range(4):
        draws = {i: program.draw(i) for i in program.random}    # both runtimes draw the same dropout masks
        batch = torch.randn(8, 6)                                # and take the same new batch, as a step does
        for rt in (compiled, interpreted):
            rt.set_draws({i: d.clone() for i, d in draws.items()})
            rt.assign({x: batch.clone()})
        a, b = compiled.step(step), interpreted.step(step)
        assert a[2] == b[2] > compiled.resident                 # the same peak bytes, counted in segments
        peaks.append(a[2])
        assert compiled._compiled is not None if step else compiled._compiled is None
    assert len(set(peaks)) == 1                                  # every step counts from the same state
    assert interpreted._compiled is None
    for u, v in zip(_final(compiled, program), _final(interpreted, program), strict=True):
        assert torch.equal(u, v)
    assert compiled.live_bytes == interpreted.live_bytes
    assert set(compiled.env) == set(interpreted.env)           # the compiled code released what it read last


def test_a_compiled_step_that_fails_names_its_op(graph):
    program = Program(graph)
    rt = _runtime(program, compiled=True)
    rt.step(0)
    rt.step(1)                                                  # compiled
    x = next(i for i in program.placeholders if graph.ops[i].type == "input"
             and graph.ops[i].outputs[0].dtype == "float32")
    rt.assign({x: torch.randn(8, 5)})                           # a batch of the wrong width
    with pytest.raises(RuntimeError, match=r"^op '[^']+': RuntimeError: .*shapes cannot be multiplied"):
        rt.step(2)


def test_a_compiled_step_over_the_memory_it_counted_is_out_of_memory_at_its_op(graph):
    program = Program(graph)
    rt = _runtime(program, compiled=True)
    peak = rt.step(0)[2]
    rt.capacity = peak - 1                                      # what the op-by-op step counted, a byte short
    with pytest.raises(MemoryError, match=r"cpu:0 ran out of memory at op '[^']+': \d+ bytes over its"):
        rt.step(1)
    assert rt._compiled is not None


def test_a_new_batch_changes_the_resident_bytes_by_its_size_whatever_address_it_gets(graph):
    """A compiled step does not keep the live map up to date, so a new batch may be allocated where a value
    the map still lists used to be; the resident bytes still change by the two batches' sizes."""
    program = Program(graph)
    rt = _runtime(program, compiled=True)
    x = next(i for i in program.placeholders if graph.ops[i].type == "input"
             and graph.ops[i].outputs[0].dtype == "float32")
    for step in range(2):
        rt.set_draws({i: program.draw(i) for i in program.random})
        rt.step(step)
    resident = rt.resident
    batch = torch.randn(8, 6)
    rt.live[batch.untyped_storage().data_ptr()] = [96, 1]      # a stale entry at the new batch's address
    rt.assign({x: batch})
    assert rt.resident == resident
    rt.assign({x: torch.randn(16, 6)})                          # twice the rows: 192 bytes more
    assert rt.resident == resident + 192
