"""The three v1 formats: golden files, the issue's minimal examples, round trips, gzip, bad files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from autoplace.cluster import LinkSpec
from autoplace.errors import FormatError, GraphError
from autoplace.formats import (
    cluster_from_dict,
    cluster_to_dict,
    graph_from_dict,
    graph_to_dict,
    load_cluster,
    load_graph,
    load_placement,
    placement_to_dict,
    save_graph,
    save_placement,
)
from autoplace.sim import simulate

GOLDEN = Path(__file__).parent / "golden"


def golden(name):
    return json.loads((GOLDEN / name).read_text())


def test_graph_golden_round_trip():
    g = load_graph(GOLDEN / "graph_v1.json")
    assert g.n_ops == 8 and g.name == "golden-tiny-train"
    assert g.op("mm").meta == {"layer": 0}          # extra op fields kept
    assert g.meta == {"source": "hand-written example of every graph/v1 field"}
    assert g.op("split").out_bytes == (4096, 4096)
    assert g.op("x").out_bytes == (32 * 128 * 4,)
    assert g.op("lookup").device_types == ("cpu",)
    again = graph_from_dict(graph_to_dict(g))
    assert graph_to_dict(again) == graph_to_dict(g)
    raw = golden("graph_v1.json")
    assert graph_to_dict(g)["ops"] == raw["ops"]     # written exactly as the golden file


def test_cluster_and_placement_golden_round_trip():
    c = load_cluster(GOLDEN / "cluster_v1.json")
    assert c.device("cpu:0").concurrency == 2 and c.device("cpu:0").meta == {"model": "Intel Core i7-7700"}
    assert c.link("cpu:0", "gpu:1").bandwidth == 7.88e9  # from default_link
    assert cluster_to_dict(cluster_from_dict(cluster_to_dict(c))) == cluster_to_dict(c)
    p = load_placement(GOLDEN / "placement_v1.json")
    assert p.meta == {"note": "extra fields survive a round trip"}
    d = placement_to_dict(p)
    assert d["assignment"] == golden("placement_v1.json")["assignment"] and d["note"] == p.meta["note"]


def test_simulated_result_matches_golden():
    """The golden placement's step, derived by hand from the golden graph and cluster, equals the
    simulator's and the file's stored result. Roofline ``overhead + max(flops / peak, bytes touched /
    memory bandwidth)``. The cluster file predates copy engines, overheads, segments and launchers, so
    the defaults apply: a GPU's host thread launches its ops ahead of its kernels; a GPU's copies out
    (to a peer too) run on its one send engine, copies from the CPU on its one receive engine; a transfer
    moves ``bytes / bandwidth`` and lands ``latency`` later."""
    g, c = load_graph(GOLDEN / "graph_v1.json"), load_cluster(GOLDEN / "cluster_v1.json")
    p = load_placement(GOLDEN / "placement_v1_with_result.json")
    gpu_bw, link, host = 112e9, 7.88e9, 7.88e9            # gpu memory, gpu<->gpu and cpu<->gpu link bandwidth
    x_end = 1e-5 + 16384 / gpu_bw                          # x on gpu:0 (10 us overhead), 16 KiB out
    mm_start = x_end + 16384 / link + 1e-5                 # x sent to gpu:1 (w is there, ready at once)
    split_end = mm_start + (16384 + 32768 + 8192) / gpu_bw + (8192 + 8192) / gpu_bw  # mm, then split
    # gpu:1's one send engine: split:0 to gpu:0 first, then split:1 to cpu:0
    split0_sent = split_end + 4096 / link
    lookup_end = split0_sent + 4096 / host + 2e-5 + 2.5e-5  # split:1 lands on cpu:0; lookup's measured 25 us
    loss_end = max(split0_sent + 1e-5,                     # split:0 on gpu:0 ...
                   lookup_end + 1024 / host + 2e-5) + 1e-5  # ... and lookup's 1 KiB; loss measured 10 us
    # loss -> gpu:1 takes gpu:0's send engine for the 4-byte loss; the control edge to update_w holds
    # nothing and lands one latency after loss ends
    loss_arrives = loss_end + 4 / link + 1e-5
    control_arrives = loss_end + 1e-5
    grad_end = loss_arrives + (16384 + 4 + 32768) / gpu_bw  # grad_w: memory-bound (0.44 us > 0.25 us of FLOPs)
    step = max(grad_end, control_arrives) + (32768 + 32768) / gpu_bw  # update_w after both
    got = simulate(g, c, p).to_dict()
    assert got["step_time_s"] == pytest.approx(step, rel=1e-9)
    assert got["transfers"] == 6 and got["transfer_bytes"] == 16384 + 4 + 4096 + 4096 + 1024
    # gpu:0's host thread launches x and loss (10 us each); the GPU itself runs only x's kernel (loss's
    # measured 10 us is all launch)
    assert got["devices"][1]["host_s"] == pytest.approx(2e-5) and got["devices"][1]["busy_s"] == pytest.approx(
        16384 / gpu_bw)
    expected = golden("placement_v1_with_result.json")["result"]
    assert expected["step_time_s"] == pytest.approx(step, rel=1e-9)
    assert got["devices"] == expected["devices"] and got["transfers"] == expected["transfers"]


def test_topology_fields_round_trip_and_default():
    """The golden cluster with copy engines, overheads, shared segments and achievable rates reads back
    what it says; the file without them reads with the documented defaults."""
    c = load_cluster(GOLDEN / "cluster_v1_topology.json")
    assert [s.name for s in c.segments] == ["board0.up", "board0.down"]
    assert c.send_engines.tolist() == [0, 1, 2] and c.recv_engines.tolist() == [0, 1, 1]
    assert c.link("gpu:0", "cpu:0") == LinkSpec(12.0e9, 0.0, 6e-6, ("board0.up",))
    assert c.transfer_bandwidth[1, 0] == 10.0e9            # the segment is slower than the link
    assert c.achievable_flops.tolist() == [460.8e9 * 0.79, 1.7e12, 2.138e12]  # gpu:1 gives none: its peak
    assert cluster_to_dict(cluster_from_dict(cluster_to_dict(c))) == cluster_to_dict(c)
    assert cluster_to_dict(c) == {k: v for k, v in golden("cluster_v1_topology.json").items()}
    old = load_cluster(GOLDEN / "cluster_v1.json")
    assert old.send_engines.tolist() == [0, 1, 1] and old.recv_engines.tolist() == [0, 1, 1]  # GPU: 1 each way
    assert not old.segments and not old.overhead.any()
    assert np.array_equal(old.achievable_flops, old.peak_flops)
    assert "segments" not in cluster_to_dict(old) and "send_engines" not in cluster_to_dict(old)["devices"][1]


def test_minimal_documents_from_the_issue_are_accepted():
    g = graph_from_dict({"format": "autoplace.graph/v1", "name": "m", "ops": [
        {"name": "a", "type": "t", "inputs": []}, {"name": "b", "type": "t", "inputs": ["a", "a:0"]}]})
    assert g.n_edges == 1 and g.op("a").out_bytes == (0,)
    c = cluster_from_dict({"format": "autoplace.cluster/v1", "name": "c", "devices": [
        {"name": "d", "type": "gpu", "memory_bytes": 1, "peak_flops": 1, "memory_bandwidth": 1}], "links": []})
    assert c.n_devices == 1


def test_gzip_and_plain_are_equivalent(tmp_path):
    g = load_graph(GOLDEN / "graph_v1.json")
    save_graph(g, tmp_path / "g.json.gz")
    assert gzip.decompress((tmp_path / "g.json.gz").read_bytes())  # really compressed
    assert graph_to_dict(load_graph(tmp_path / "g.json.gz")) == graph_to_dict(g)


@pytest.mark.parametrize("text, message", [
    ("{not json", "malformed JSON at line 1 column 2"),
    ('{"format": "autoplace.graph/v2", "name": "x", "ops": []}', "unknown format 'autoplace.graph/v2'"),
    ('{"name": "x", "ops": []}', "missing field 'format'"),
    ('[1, 2]', "expected a JSON object"),
    ('{"format": "autoplace.graph/v1", "name": "x", "ops": [{"name": "a", "type": "t", "flops": -1}]}',
     "op #0 ('a'): field 'flops' must be a finite non-negative number"),
    ('{"format": "autoplace.graph/v1", "name": "x", "ops": [{"name": "a", "type": "t", "flops": NaN}]}',
     "field 'flops' must be a finite non-negative number"),
    ('{"format": "autoplace.graph/v1", "name": "x", "ops": [{"name": "a", "type": "t", "output_bytes": [-4]}]}',
     "'output_bytes' must list whole numbers of bytes >= 0"),
    ('{"format": "autoplace.graph/v1", "name": "x", "ops": [{"name": "a"}]}', "missing field 'type'"),
])
def test_bad_graph_files_name_the_culprit(tmp_path, text, message):
    f = tmp_path / "g.json"
    f.write_text(text)
    with pytest.raises(FormatError) as e:
        load_graph(f)
    assert message in str(e.value) and str(f) in str(e.value)
    assert "\n" not in str(e.value)


def test_graph_errors_are_prefixed_with_the_file(tmp_path):
    f = tmp_path / "g.json"
    f.write_text(json.dumps({"format": "autoplace.graph/v1", "name": "x", "ops": [
        {"name": "a", "type": "t", "inputs": ["b"]}, {"name": "b", "type": "t", "inputs": ["a"]}]}))
    with pytest.raises(GraphError, match=r"g.json: graph 'x' has a cycle: a -> b -> a"):
        load_graph(f)


def test_missing_file_and_corrupt_gzip(tmp_path):
    with pytest.raises(FormatError, match="no such file"):
        load_graph(tmp_path / "nope.json")
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8bnot really gzip")
    with pytest.raises(FormatError, match="corrupt gzip"):
        load_graph(tmp_path / "bad.json.gz")


def test_writes_are_atomic(tmp_path):
    p = load_placement(GOLDEN / "placement_v1.json")
    out = tmp_path / "p.json"
    out.write_text("previous")

    class Unserialisable:
        pass

    bad = type(p)(p.assignment, p.graph, p.cluster, p.method, {"x": Unserialisable()})
    with pytest.raises(TypeError):
        save_placement(bad, out)
    assert out.read_text() == "previous"                   # old file untouched
    assert [f.name for f in tmp_path.iterdir()] == ["p.json"]  # no temp file left behind
