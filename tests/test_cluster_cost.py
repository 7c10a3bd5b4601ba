"""Cluster presets and validation; the cost model (measured cost, roofline, device constraints)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from autoplace.cluster import CLUSTER_PRESETS, Cluster, Device, Link, LinkSpec, Segment, get_cluster
from autoplace.cost import check_runnable, feasible_devices, op_time_matrix
from autoplace.errors import ClusterError, InfeasibleError, UnknownNameError
from autoplace.graph import Graph, Op


@pytest.mark.parametrize("name", list(CLUSTER_PRESETS))
def test_presets_are_complete(name):
    c = get_cluster(name)
    assert c.name == name
    off = ~np.eye(c.n_devices, dtype=bool)  # a device to itself is free (infinite bandwidth)
    assert np.isfinite(c.bandwidth[off]).all() and (c.bandwidth[off] > 0).all()
    assert c.devices_of_kind("cpu")


def test_paper_machines():
    k80 = get_cluster("k80x4")
    assert k80.device_names == ["cpu:0", "gpu:0", "gpu:1", "gpu:2", "gpu:3"]
    assert k80.device("gpu:0").memory_bytes == 12 * 2**30
    assert k80.device("cpu:0").memory_bytes == 50 * 10**9
    assert len(get_cluster("p100x8").devices_of_kind("gpu")) == 8
    h = get_cluster("h100x8")
    assert h.link("gpu:0", "gpu:7").bandwidth > h.link("cpu:0", "gpu:0").bandwidth  # NVLink beats PCIe


def test_presets_describe_their_topology():
    """Transfers on the presets: one H100 broadcasting a 450 MB tensor to its seven peers copies on its
    two send engines, two at a time sharing its NVLink port (450 GB/s out), the last alone at the link's
    376 GB/s; two dies of one K80 board share its x16 uplink while dies of two boards do not; P100s under
    one switch copy below it."""
    from autoplace.sim import simulate

    def fan(sources, dests, nbytes, cluster):
        ops = [Op(f"s{k}", "t", output_bytes=(nbytes,), cost={"gpu": 0.0, "cpu": 0.0}) for k in range(len(sources))]
        ops += [Op(f"d{k}", "t", (f"s{k if len(sources) > 1 else 0}",), cost={"gpu": 0.0, "cpu": 0.0})
                for k in range(len(dests))]
        dev = [cluster.index(x) for x in [*sources, *dests]]
        return simulate(Graph(ops), cluster, np.array(dev), trace=True)

    h100 = get_cluster("h100x8")
    r = fan(["gpu:0"], [f"gpu:{k}" for k in range(1, 8)], 450 * 10**6, h100)
    # six copies at 225 GB/s each, the seventh alone at 376 GB/s (a few us of submits and latency on top)
    assert r.timeline.transfer_arrival.max() == pytest.approx(6 * 450e6 / 450e9 + 450e6 / 376e9, rel=1e-3)
    k80 = get_cluster("k80x4")
    same = fan(["gpu:0", "gpu:1"], ["cpu:0", "cpu:0"], 10**8, k80)   # both cross board0.up
    apart = fan(["gpu:0", "gpu:2"], ["cpu:0", "cpu:0"], 10**8, k80)  # board0.up and board1.up
    up, die = k80.segment_bandwidth[0], k80.link("gpu:0", "cpu:0").bandwidth
    assert same.step_time == pytest.approx(2e8 / up, rel=1e-3)       # the uplink shared, 6.4 GB/s each
    assert apart.step_time == pytest.approx(1e8 / die, rel=1e-3)     # each die at its own link's rate
    assert k80.link("gpu:0", "gpu:1").segments == ()                   # peer to peer on the board
    assert k80.link("gpu:0", "gpu:2").segments == ("board0.up", "board1.down")  # through host memory
    p100 = get_cluster("p100x8")
    assert p100.link("gpu:0", "gpu:3").segments == () and p100.link("gpu:3", "gpu:4").segments == (
        "switch0.up", "switch1.down")


def test_multi_node_presets():
    """FlexFlow's clusters and the 4 x 8 H100 pod: four GPUs (eight) a node, each node's CPU, devices of one node
    on the node's links, of two nodes over both NICs at the InfiniBand rate less its encoding; the H100 pod's
    GPUs each on their own NIC."""
    p100 = get_cluster("flexflow-p100x16")
    assert len(p100.devices_of_kind("gpu")) == 16 and len(p100.devices_of_kind("cpu")) == 4
    assert {p100.device(f"gpu:{k}").meta["host"] for k in range(4)} == {"node0"}
    assert p100.device("gpu:4").meta["host"] == "node1" and p100.device("cpu:1").meta["host"] == "node1"
    assert p100.link("gpu:0", "gpu:3").bandwidth == 20e9 and p100.link("gpu:0", "gpu:3").segments == ()
    net = p100.link("gpu:0", "gpu:4")
    assert net.bandwidth == pytest.approx(100e9 / 8 * 64 / 66) and net.segments == ("node0.nic.out", "node1.nic.in")
    k80 = get_cluster("flexflow-k80x8")
    assert k80.link("gpu:4", "gpu:6").segments == ("node1.board0.up", "node1.board1.down")   # as k80x4, per node
    assert k80.link("gpu:3", "gpu:4").bandwidth == pytest.approx(56e9 / 8 * 64 / 66)
    assert len(get_cluster("flexflow-p100x2").devices_of_kind("gpu")) == 2
    pod = get_cluster("h100x8x4")
    assert len(pod.devices_of_kind("gpu")) == 32
    assert pod.link("gpu:3", "gpu:11").segments == ("node0.gpu:3.nic.out", "node1.gpu:11.nic.in")
    assert pod.link("gpu:3", "gpu:5").segments == ("node0.gpu:3.nvlink.out", "node0.gpu:5.nvlink.in")


def test_unknown_preset():
    with pytest.raises(UnknownNameError, match="unknown cluster 'k80x3'"):
        get_cluster("k80x3")


@pytest.mark.parametrize("build, message", [
    (lambda: Cluster("c", []), "has no devices"),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1), Device("a", "gpu", 1, 1, 1)]), "duplicate device name 'a'"),
    (lambda: Cluster("c", [Device("a", "gpu", 0, 1, 1)]), "memory_bytes must be an integer in [1, "),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1), Device("b", "gpu", 1, 1, 1)]),
     "no link from 'a' to 'b' and no default_link"),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1)], [Link("a", "z", 1, 0)]), "unknown device 'z'"),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1, concurrency=0)]),
     "concurrency must be an integer in [1, 1,024]"),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1), Device("b", "gpu", 1, 1, 1)],
                     default_link=LinkSpec(-1, 0)), "bandwidth must be a number in [1, "),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1), Device("b", "gpu", 1, 1, 1)],
                     [Link("a", "b", 1, 0, 0, ("sw",)), Link("b", "a", 1)]),
     "link 'a' -> 'b' crosses an unknown segment 'sw'"),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1)], segments=[Segment("s", 1), Segment("s", 2)]),
     "duplicate segment name 's'"),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1)], segments=[Segment("s", 0)]),
     "segment 's': bandwidth must be a number in [1, "),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1, send_engines=-1)]), "send_engines must be an integer in [0, "),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1, achievable_flops=0.0)]),
     "achievable_flops must be a number in [1, "),
    (lambda: Cluster("c", [Device("a", "gpu", 1, 1, 1), Device("b", "gpu", 1, 1, 1)],
                     default_link=LinkSpec(1, 0, -1)), "overhead_s must be a number in [0, "),
])
def test_cluster_validation(build, message):
    with pytest.raises(ClusterError, match=re.escape(message)):
        build()


def test_cost_model_measured_roofline_and_constraints():
    c = Cluster("c", [Device("cpu:0", "CPU", 10, 1e9, 1e8, 1e-6), Device("gpu:0", "gpu", 10, 1e10, 1e9, 2e-6)],
                default_link=LinkSpec(1e9))
    g = Graph([
        Op("measured", "t", cost={"cpu": 0.5, "gpu:0": 0.25}),   # by type (case-insensitive) and by name
        Op("roof", "t", flops=1e9, output_bytes=(10**8,)),
        Op("cpu_only", "t", device_types=("cpu",), flops=1e9),
        Op("touch", "t", flops=0.0, meta={"bytes_touched": 1e9}),
    ])
    t = op_time_matrix(g, c)
    assert t[0].tolist() == [0.5, 0.25]                       # measured: no overhead added
    assert t[1, 0] == pytest.approx(1e-6 + max(1.0, 1.0))      # 1 s of FLOPs, 1 s of bytes
    assert t[1, 1] == pytest.approx(2e-6 + max(0.1, 0.1))
    assert t[2, 1] == np.inf and np.isfinite(t[2, 0])
    assert t[3, 0] == pytest.approx(1e-6 + 10.0)
    assert feasible_devices(g, c)[2].tolist() == [True, False]
    # the roofline runs at the achievable rates where a device declares them: half the peak FLOP/s and a
    # quarter of the peak bandwidth make "roof" 2 s of FLOPs and 4 s of bytes on cpu:0; measured costs win
    slow = Cluster("s", [Device("cpu:0", "CPU", 10, 1e9, 1e8, 1e-6, achievable_flops=5e8, achievable_bandwidth=2.5e7),
                         Device("gpu:0", "gpu", 10, 1e10, 1e9, 2e-6, achievable_flops=5e9)], default_link=LinkSpec(1e9))
    ts = op_time_matrix(g, slow)
    assert ts[1, 0] == pytest.approx(1e-6 + 4.0) and ts[1, 1] == pytest.approx(2e-6 + 0.2)
    assert ts[3, 0] == pytest.approx(1e-6 + 40.0) and ts[0].tolist() == [0.5, 0.25]
    gpu_only = Cluster("g", [Device("gpu:0", "gpu", 10, 1e9, 1e9)])
    with pytest.raises(InfeasibleError, match="op 'cpu_only' needs a device of type cpu"):
        check_runnable(g, gpu_only)
