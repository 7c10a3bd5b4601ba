"""Shared helpers: tiny graphs and clusters with round numbers, so expected values can be done by hand."""

from __future__ import annotations

import os
import time

import pytest

# compile measures a machine it has not measured before placing (seconds per model): the suite turns that
# default off and tests it where it asks for it (test_eager_parity.py)
os.environ.setdefault("AUTOPLACE_CALIBRATE", "0")

from autoplace.cluster import Cluster, Device, Link, LinkSpec
from autoplace.graph import Graph, Op


def op(name, inputs=(), cost=1.0, out=0, params=0, **kw):
    """An op with the same measured ``cost`` (seconds) on both device types and ``out`` output bytes."""
    costs = cost if isinstance(cost, dict) else {"cpu": cost, "gpu": cost}
    return Op(name, kw.pop("type", "op"), tuple(inputs), output_bytes=(out,), cost=costs, param_bytes=params, **kw)


def two_devices(bandwidth=1000.0, latency=0.5, memory=10**9, concurrency=1) -> Cluster:
    """Devices ``A`` (cpu) and ``B`` (gpu) joined by links of ``bandwidth`` B/s and ``latency`` s."""
    devs = [Device("A", "cpu", memory, 1e9, 1e9, 0.0, concurrency),
            Device("B", "gpu", memory, 1e9, 1e9, 0.0, concurrency)]
    return Cluster("two", devs, [Link("A", "B", bandwidth, latency), Link("B", "A", bandwidth, latency)])


def uniform_cluster(n: int, bandwidth=1e9, latency=1e-5, memory=10**12, kind="gpu") -> Cluster:
    devs = [Device(f"d{i}", kind, memory, 1e12, 1e11, 1e-6) for i in range(n)]
    return Cluster(f"uniform{n}", devs, default_link=LinkSpec(bandwidth, latency))


def wait_for(condition, limit_s: float = 300.0, what: str = "the condition") -> None:
    """Poll ``condition`` until it holds; fail (rather than hang the suite) if it has not after ``limit_s``
    seconds — a process that died or hung never makes it hold. The limit only ends a broken run: a passing
    test never comes near it, so no result depends on the machine's speed."""
    end = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"waited {limit_s:.0f} s for {what}")
        time.sleep(0.02)


@pytest.fixture
def two():
    return two_devices()


def chain(n: int = 3, cost=1.0, out=100) -> Graph:
    return Graph([op(f"n{i}", [f"n{i-1}"] if i else [], cost, out) for i in range(n)], name="chain")


def independent_products(flops: float, n: int = 40) -> tuple[Graph, Cluster]:
    """``n`` independent products of ``flops`` each, summed, on a GPU ten times faster than the other: the
    best placement puts about nine in ten on the fast GPU, a rule per product a learned policy can find."""
    ops = [Op("x", "input", output_bytes=(8,))] + [Op(f"op{i}", "mm", ("x",), output_bytes=(8,), flops=flops)
                                                   for i in range(n)]
    g = Graph([*ops, Op("sum", "add", tuple(f"op{i}" for i in range(n)), output_bytes=(8,), flops=1e3)], name="rule")
    c = Cluster("c", [Device("gpu:0", "gpu", 10**9, 1e12, 1e11), Device("gpu:1", "gpu", 10**9, 1e11, 1e11)],
                default_link=LinkSpec(1e10, 1e-6))
    return g, c


def spy_on_updates(holder, optimizer, param):
    """Lists that fill as a search updates: every batch of placements ``holder.evaluate`` scores, and
    ``param``'s gradient at every step of ``optimizer`` (taken just before the step)."""
    seen, grads = [], []
    scorer, step = holder.evaluate, optimizer.step
    holder.evaluate = lambda groups: (seen.append(groups.copy()), scorer(groups))[1]
    optimizer.step = lambda: (grads.append(param.grad.clone()), step())[1]
    return seen, grads
