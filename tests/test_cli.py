"""The command line: happy paths, and bad input -> one line naming the culprit, exit 2, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autoplace.cli import main

GOLDEN = Path(__file__).parent / "golden"
GRAPH, CLUSTER = str(GOLDEN / "graph_v1.json"), str(GOLDEN / "cluster_v1.json")


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def write(tmp_path, name, obj):
    f = tmp_path / name
    f.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(f)


def test_place_then_simulate_with_trace(tmp_path, capsys):
    p, trace = str(tmp_path / "p.json"), str(tmp_path / "t.json")
    rc, out, _ = run(capsys, "place", "toy-mlp", "-c", "k80x2", "-m", "single-gpu", "-o", p, "-P", "layers=2")
    assert rc == 0 and "single-gpu" in out
    placement = json.loads(Path(p).read_text())
    assert placement["format"] == "autoplace.placement/v1" and placement["result"]["ok"]
    assert set(placement["assignment"].values()) == {"gpu:0"}
    rc, out, _ = run(capsys, "simulate", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "-p", p, "--trace", trace)
    assert rc == 0 and "step time" in out
    events = json.loads(Path(trace).read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == len(placement["assignment"])
    rc, out, _ = run(capsys, "simulate", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "-p", p, "--json")
    assert json.loads(out)["step_time_s"] == pytest.approx(placement["result"]["step_time_s"])


def test_place_defaults_to_auto(tmp_path, capsys):
    """No --method: auto, whose placement says which fast placer it started from and what each scored."""
    p = str(tmp_path / "p.json")
    rc, out, _ = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "-o", p, "--budget", "1")
    assert rc == 0 and out.startswith("auto:")
    placement = json.loads(Path(p).read_text())
    assert placement["method"] == "auto" and placement["result"]["ok"]
    meta = placement                                     # the placer's meta sits at the top level
    assert meta["from"] in [c["method"] for c in meta["candidates"]]
    assert min(c["step_time_s"] for c in meta["candidates"] if c["ok"]) >= placement["result"]["step_time_s"]


def test_compare_table_json_markdown(capsys):
    rc, out, _ = run(capsys, "compare", GRAPH, "-c", CLUSTER)
    assert rc == 0 and "single-cpu" in out and "single-gpu" in out
    rc, out, _ = run(capsys, "compare", GRAPH, "-c", CLUSTER, "--json")
    doc = json.loads(out)
    table = doc["rows"]
    assert table[0]["method"] == "auto" and "from " in table[0]["note"]   # what a user runs first, first
    assert table[0]["step_time_s"] <= min(r["step_time_s"] for r in table if r["ok"])
    rows = {r["method"]: r for r in table}
    # the fastest row: the row auto took its placement from is marked, and every row has its regret
    assert "chosen by regret" not in table[0]["note"] and doc["auto_choice"]["faster"] is None
    picked = doc["auto_choice"]["picked"]
    assert picked is None or "auto's pick" in rows[picked]["note"]
    assert all(r["regret"] >= 1 for r in table if r["ok"]) and table[0]["regret"] == min(r["regret"] for r in table
                                                                                        if r["ok"])
    from autoplace.formats import load_cluster, load_graph
    from autoplace.placers import place
    from autoplace.sim import simulate

    g, c = load_graph(GRAPH), load_cluster(CLUSTER)
    gpu = simulate(g, c, place(g, c, "single-gpu")).step_time
    for method in ("single-cpu", "metis", "m-etf"):  # each row: its placer's simulated step, and the ratios
        step = simulate(g, c, place(g, c, method)).step_time
        assert rows[method]["step_time_s"] == pytest.approx(step, rel=1e-12)
        assert rows[method]["speedup_vs_single_gpu"] == pytest.approx(gpu / step, rel=1e-12)
    rc, out, _ = run(capsys, "compare", GRAPH, "-c", CLUSTER, "--markdown", "--methods", "single-gpu")
    assert out.startswith("| method |")


def test_listings_and_exports(tmp_path, capsys):
    rc, out, _ = run(capsys, "clusters")
    assert rc == 0 and "k80x4" in out and "h100x8" in out
    rc, out, _ = run(capsys, "clusters", "k80x2", "--json")
    assert json.loads(out)["format"] == "autoplace.cluster/v1"
    c = str(tmp_path / "c.json")
    assert run(capsys, "clusters", "p100x4", "-o", c)[0] == 0
    assert run(capsys, "compare", "toy-mlp", "-P", "layers=1", "-c", c, "--json")[0] == 0
    rc, out, _ = run(capsys, "zoo", "list")
    assert "toy-mlp" in out
    g = str(tmp_path / "g.json.gz")
    assert run(capsys, "zoo", "export", "toy-mlp", "-o", g, "-P", "layers=3")[0] == 0
    assert run(capsys, "place", g, "-c", "k80x2", "-m", "single-cpu", "-o", str(tmp_path / "p.json"))[0] == 0


OPS_OK = [{"name": "a", "type": "t", "output_bytes": [8]}, {"name": "b", "type": "t", "inputs": ["a"]}]


def graph_doc(ops, fmt="autoplace.graph/v1"):
    return {"format": fmt, "name": "g", "ops": ops}


BAD_GRAPHS = {
    "cycle": (graph_doc([{"name": "a", "type": "t", "inputs": ["b"]}, {"name": "b", "type": "t", "inputs": ["a"]}]),
              "cycle: a -> b -> a"),
    "unknown-op": (graph_doc([{"name": "a", "type": "t", "inputs": ["zz"]}]), "unknown op 'zz'"),
    "unknown-output": (graph_doc([OPS_OK[0], {"name": "b", "type": "t", "inputs": ["a:2"]}]), "names output 2"),
    "duplicate": (graph_doc([OPS_OK[0], OPS_OK[0]]), "duplicate op name 'a'"),
    "negative": (graph_doc([{"name": "a", "type": "t", "param_bytes": -3}]), "'param_bytes'"),
    "nonfinite": ('{"format": "autoplace.graph/v1", "name": "g", "ops": '
                  '[{"name": "a", "type": "t", "cost": {"gpu": Infinity}}]}',
                  "cost['gpu']"),
    "malformed": ('{"format": "autoplace.graph/v1", "name": ', "malformed JSON"),
    "version": (graph_doc(OPS_OK, "autoplace.graph/v9"), "unknown format 'autoplace.graph/v9'"),
}


@pytest.mark.parametrize("case", list(BAD_GRAPHS))
def test_bad_graph_exit_2_nothing_written(tmp_path, capsys, case):
    doc, message = BAD_GRAPHS[case]
    g = write(tmp_path, "g.json", doc)
    out = tmp_path / "p.json"
    rc, _, err = run(capsys, "place", g, "-c", CLUSTER, "-m", "single-gpu", "-o", str(out))
    assert rc == 2
    assert err.startswith("autoplace: error: ") and err.count("\n") == 1 and message in err
    assert not out.exists()


def placement_doc(assignment):
    return {"format": "autoplace.placement/v1", "graph": "g", "cluster": "c", "method": "manual",
            "assignment": assignment}


@pytest.mark.parametrize("assignment, message", [
    ({"a": "gpu:0", "b": "gpu:7"}, "unknown device 'gpu:7'"),
    ({"a": "gpu:0"}, "no device for op 'b'"),
    ({"a": "gpu:0", "b": "gpu:0", "c": "gpu:0"}, "op 'c' which is not in graph"),
    ({"a": "gpu:0", "b": 3}, "assignment['b'] must be a device name"),
])
def test_bad_placement(tmp_path, capsys, assignment, message):
    g = write(tmp_path, "g.json", graph_doc(OPS_OK))
    p = write(tmp_path, "p.json", placement_doc(assignment))
    trace = tmp_path / "t.json"
    rc, _, err = run(capsys, "simulate", g, "-c", CLUSTER, "-p", p, "--trace", str(trace))
    assert rc == 2 and message in err and err.count("\n") == 1
    assert not trace.exists()


def test_op_on_a_device_type_it_cannot_run_on(tmp_path, capsys):
    g = write(tmp_path, "g.json", graph_doc([{"name": "a", "type": "t", "device_types": ["cpu"]}]))
    p = write(tmp_path, "p.json", placement_doc({"a": "gpu:1"}))
    rc, _, err = run(capsys, "simulate", g, "-c", CLUSTER, "-p", p)
    assert rc == 2 and "op 'a' cannot run on 'gpu:1' (type gpu); allowed types: cpu" in err


@pytest.mark.parametrize("argv, message, code", [
    (["place", "toy-mlp", "-c", "k80x2", "-m", "nonsense", "-o", "{out}"], "unknown placement method 'nonsense'", 2),
    (["place", "toy-mlp", "-c", "k80x9", "-m", "single-gpu", "-o", "{out}"], "unknown cluster 'k80x9'", 2),
    (["place", "resnet-9000", "-c", "k80x2", "-m", "single-gpu", "-o", "{out}"], "unknown graph 'resnet-9000'", 2),
    (["place", "toy-mlp", "-P", "depth=3", "-c", "k80x2", "-m", "single-gpu", "-o", "{out}"],
     "no parameter 'depth'", 2),
    (["place", "toy-mlp", "-c", "k80x2", "-m", "single-gpu", "-o", "/no/such/dir/p.json"], "does not exist", 2),
    (["place", "{gpuonly}", "-c", "k80x2", "-m", "single-gpu", "-o", "{out}"], "needs a device of type tpu", 3),
])
def test_bad_names_and_infeasible(tmp_path, capsys, argv, message, code):
    out = tmp_path / "p.json"
    gpuonly = write(tmp_path, "g.json", graph_doc([{"name": "a", "type": "t", "device_types": ["tpu"]}]))
    argv = [a.format(out=out, gpuonly=gpuonly) for a in argv]
    rc, _, err = run(capsys, *argv)
    assert rc == code and message in err and err.count("\n") == 1
    assert not out.exists()


def test_console_script_exit_code_and_no_traceback(tmp_path):
    g = write(tmp_path, "g.json", "{oops")
    proc = subprocess.run([sys.executable, "-m", "autoplace.cli", "place", g, "-c", "k80x2", "-m", "single-gpu",
                           "-o", str(tmp_path / "p.json")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("autoplace: error:")


def test_missing_scotch_binary_is_a_clear_error(tmp_path, capsys, monkeypatch):
    import shutil

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if "gmap" in name or name == "amk_grf" else real_which(name))
    out = tmp_path / "p.json"
    rc, _, err = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "-m", "scotch", "-o", str(out))
    assert rc == 2 and "Scotch tools (scotch_gmap, amk_grf) are not installed" in err and err.count("\n") == 1
    assert not out.exists()
    rc, text, _ = run(capsys, "compare", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "--methods",
                      "single-gpu,scotch,mincut,metis", "--json")
    rows = {r["method"]: r for r in json.loads(text)["rows"]}              # the others still run
    assert rc == 0 and rows["single-gpu"]["ok"] and rows["metis"]["ok"]
    assert all(rows[m]["error"].startswith("skipped: the Scotch tools") for m in ("scotch", "mincut"))
    rc, text, _ = run(capsys, "compare", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "--methods", "single-gpu,scotch",
                      "--markdown")
    assert rc == 0 and "| scotch |" in text and "skipped: the Scotch tools" in text


def test_place_refine(tmp_path, capsys):
    base, refined = tmp_path / "a.json", tmp_path / "b.json"
    args = ["place", "toy-mlp", "-P", "layers=3", "-c", "k80x4", "-m", "metis", "--seed", "1"]
    assert main([*args, "-o", str(base)]) == 0
    assert main([*args, "--refine", "--refine-budget", "5", "-o", str(refined)]) == 0
    a, b = json.loads(base.read_text()), json.loads(refined.read_text())
    assert b["method"] == "metis+ls" and b["refined_from"] == "metis"
    assert "metis+ls: simulated step time" in capsys.readouterr().out
    assert b["result"]["step_time_s"] <= a["result"]["step_time_s"] * (1 + 1e-9)


TINY_MEMORY = {"format": "autoplace.cluster/v1", "name": "small", "devices": [     # 1000 bytes a device
    {"name": "cpu:0", "type": "cpu", "memory_bytes": 1000, "peak_flops": 1e11, "memory_bandwidth": 1e10},
    {"name": "gpu:0", "type": "gpu", "memory_bytes": 1000, "peak_flops": 1e12, "memory_bandwidth": 1e11}],
    "default_link": {"bandwidth": 1e10, "latency_s": 1e-5}}


def test_no_feasible_placement_exit_3(tmp_path, capsys):
    c = write(tmp_path, "c.json", TINY_MEMORY)
    out = tmp_path / "p.json"
    rc, _, err = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", c, "-m", "m-etf", "-o", str(out))
    assert rc == 3 and "m-etf: no device can take op" in err and "memory" in err and err.count("\n") == 1
    assert not out.exists()


def test_a_failing_placement_exits_1_from_every_verb_and_is_still_written(tmp_path, capsys):
    c = write(tmp_path, "c.json", TINY_MEMORY)
    out = tmp_path / "p.json"
    rc, text, _ = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", c, "-m", "single-gpu", "-o", str(out))
    assert rc == 1 and "FAILING" in text and out.exists()
    rc, text, _ = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", c, "-m", "single-gpu", "-o", str(out),
                      "--json")
    assert rc == 1 and json.loads(text)["ok"] is False
    for extra in ([], ["--json"]):
        rc, _, _ = run(capsys, "simulate", "toy-mlp", "-P", "layers=2", "-c", c, "-p", str(out), *extra)
        assert rc == 1
    rc, text, _ = run(capsys, "simulate", "toy-mlp", "-P", "layers=2", "-c", c, "-p", str(out), "--json")
    simulated = json.loads(text)
    rc, text, _ = run(capsys, "compare", "toy-mlp", "-P", "layers=2", "-c", c, "--methods", "single-gpu,single-cpu",
                      "--json")
    rows = json.loads(text)["rows"]
    assert rc == 1 and all(r["step_time_s"] is None and not r["ok"] for r in rows)   # every row fails: exit 1
    schema = set(simulated) - {"graph", "cluster", "method"}
    assert all(schema <= set(r) for r in rows) and rows[0]["devices"][0].keys() == simulated["devices"][0].keys()
    rc, _, err = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "-o", "-", "--json")
    assert rc == 2 and "-o FILE" in err


def test_scoring_a_placement_made_for_another_cluster_says_so(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["place", "toy-mlp", "-P", "layers=2", "-c", "k80x4", "-m", "single-cpu", "-o", str(out)]) == 0
    capsys.readouterr()
    rc, _, err = run(capsys, "simulate", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "-p", str(out))
    assert rc == 0 and err.strip() == "note: placement made for cluster 'k80x4', scored on 'k80x2'"
    rc, _, err = run(capsys, "simulate", "toy-mlp", "-P", "layers=2", "-c", "k80x4", "-p", str(out))
    assert rc == 0 and err == ""


def test_compare_includes_cp_sat_bound(capsys):
    rc, out, _ = run(capsys, "compare", "toy-mlp", "-P", "layers=1", "-c", "k80x2", "--methods",
                     "single-gpu,cp-sat", "--json", "--budget", "10")
    doc = json.loads(out)
    b = doc["bounds"]
    assert rc == 0 and b["cp_sat_s"] is not None and b["cp_sat_s"] > b["critical_path_s"]  # it tightens
    assert b["best_s"] == max(b["critical_path_s"], b["load_s"], b["cp_sat_s"])
    for r in doc["rows"]:
        assert r["gap_to_bound"] == pytest.approx(r["step_time_s"] / b["best_s"] - 1) and r["gap_to_bound"] >= 0
    cp = next(r for r in doc["rows"] if r["method"] == "cp-sat")
    assert cp["details"]["model"] == "ops" and cp["details"]["bound_s"] == b["cp_sat_s"]


# ---------------------------------------------------------------------- names and outputs
def test_names_with_markup_print_as_they_are(tmp_path, capsys):
    """Rich markup and emoji codes in graph, op and device names are text, not styling."""
    g = json.loads((GOLDEN / "graph_v1.json").read_text())
    g["name"] = "[/x] :smile: [bold]g"
    c = json.loads((GOLDEN / "cluster_v1.json").read_text().replace('"gpu:1"', '"[/]gpu"'))
    c["name"] = "[red]c"
    names = {d["name"] for d in c["devices"]}
    p = json.loads((GOLDEN / "placement_v1.json").read_text().replace('"gpu:1"', '"[/]gpu"'))
    assert set(p["assignment"].values()) <= names
    gf, cf, pf = write(tmp_path, "g.json", g), write(tmp_path, "c.json", c), write(tmp_path, "p.json", p)
    rc, out, err = run(capsys, "simulate", gf, "-c", cf, "-p", pf)
    assert rc == 0, err
    assert "[/x] :smile: [bold]g" in out and "[red]c" in out and "[/]gpu" in out
    rc, out, err = run(capsys, "compare", gf, "-c", cf, "--methods", "single-gpu")
    assert rc == 0 and "[/x] :smile: [bold]g" in out, err


def test_undecodable_argument_is_one_line(capsys):
    rc, out, err = run(capsys, "compare", "toy-mlp", "-c", "k80x2", "--methods", "single-gpu,\udcff")
    assert rc == 2 and err.count("\n") == 1 and "\\udcff" in err


def test_dash_writes_to_stdout(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import io

    buf = io.BytesIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(buf, encoding="utf-8"))
    assert main(["zoo", "export", "toy-mlp", "-P", "layers=2", "-o", "-"]) == 0
    import sys

    sys.stdout.flush()
    assert json.loads(buf.getvalue().decode())["format"] == "autoplace.graph/v1"
    assert not (tmp_path / "-").exists()


def test_outputs_follow_symlinks_devices_and_umask(tmp_path, capsys):
    import os
    import stat

    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert run(capsys, "clusters", "k80x2", "-o", str(link))[0] == 0
    assert link.is_symlink() and json.loads(target.read_text())["name"] == "k80x2"
    assert run(capsys, "clusters", "k80x2", "-o", os.devnull)[0] == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    old = os.umask(0o027)
    try:
        assert run(capsys, "clusters", "k80x2", "-o", str(tmp_path / "new.json"))[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "new.json", "real.json"]


def test_an_interrupted_write_leaves_the_old_file_and_no_temp(tmp_path, capsys, monkeypatch):
    import os

    out = tmp_path / "c.json"
    out.write_text("old")

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    assert run(capsys, "clusters", "k80x2", "-o", str(out))[0] == 130
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["c.json"]


@pytest.mark.slow
def test_a_long_chain_file_goes_through_every_placer(tmp_path, capsys):
    from autoplace.formats import save_graph
    from autoplace.graph import Graph, Op

    path = tmp_path / "chain.json"
    save_graph(Graph([Op(f"n{i}", "mm", (f"n{i - 1}",) if i else (), output_bytes=(4096,), flops=1e6)
                      for i in range(2000)], name="chain"), path)
    rc, out, err = run(capsys, "compare", str(path), "-c", "k80x2", "--budget", "0.5", "--json")
    assert rc == 0, err
    assert all(r["ok"] for r in json.loads(out)["rows"])


def test_numbers_never_print_in_exponent_notation():
    from autoplace.units import fmt_bytes, fmt_flops, fmt_rate, fmt_time

    assert fmt_bytes(999.7 * 2**20) == "1000 MiB" and fmt_bytes(1019.6 * 2**20) == "1020 MiB"
    assert fmt_time(0.9997) == "1000 ms" and fmt_time(1234.0) == "1234 s" and fmt_time(0.0123) == "12.3 ms"
    assert fmt_flops(999.9e9) == "1000 GFLOP" and fmt_rate(2.5e9) == "2.5 GB/s" and fmt_bytes(5) == "5 B"
    for f, lo in ((fmt_bytes, 1.0), (fmt_time, 1e-12), (fmt_flops, 1.0), (fmt_rate, 1.0)):
        for x in np.geomspace(lo, 1e17, 400):
            assert "e+" not in f(float(x)) and "e-" not in f(float(x)), (f.__name__, x, f(float(x)))


def _verbs(parser, prefix=()):
    """(name path, parser) for every verb, nested ones (zoo list, cluster detect) included."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                if nested:
                    yield from _verbs(sub, (*prefix, name))
                else:
                    yield (*prefix, name), sub


def test_one_grammar_every_verb_has_json_and_the_graph_comes_first():
    from autoplace.cli import build_parser

    verbs = dict(_verbs(build_parser()))
    assert {("export",), ("capture",), ("import",), ("profile",), ("zoo", "export"), ("measure",)} <= set(verbs)
    for path, sub in verbs.items():
        options = {o for a in sub._actions for o in a.option_strings}
        assert "--json" in options, path
        positional = [a.dest for a in sub._actions if not a.option_strings and a.dest != "help"]
        if "graph" in positional:
            assert positional[0] == "graph", path
        if "--seed" in options:                       # always a placer's (or a search's) seed
            help_text = next(a.help for a in sub._actions if "--seed" in a.option_strings)
            assert "placer" in help_text or "search" in help_text, path
    assert [a.dest for a in verbs[("export",)]._actions if not a.option_strings][0] == "graph"


def test_json_summaries_of_what_was_written(tmp_path, capsys):
    out = tmp_path / "g.json"
    rc, text, _ = run(capsys, "zoo", "export", "toy-mlp", "-P", "layers=2", "-o", str(out), "--json")
    doc = json.loads(text)
    assert rc == 0 and doc["output"] == str(out) and doc["ops"] > 0 and out.exists()
    rc, _, err = run(capsys, "zoo", "export", "toy-mlp", "-o", "-", "--json")
    assert rc == 2 and "-o FILE" in err


def test_compare_draws_step_times_and_memory_against_capacity(tmp_path, capsys):
    from autoplace.cluster import get_cluster
    from autoplace.comparison import compare
    from autoplace.formats import load_cluster
    from autoplace.plots import comparison_data
    from autoplace.zoo import build_graph

    png = tmp_path / "cmp.png"
    rc, _, _ = run(capsys, "compare", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "--methods", "single-gpu,metis",
                   "--plot", str(png), "--markdown")
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    g = build_graph("toy-mlp", layers=2)
    ok = compare(g, get_cluster("k80x2"), ["single-gpu", "metis"])
    methods, steps, names, share = comparison_data(ok)
    assert methods == ["single-gpu", "metis"] and np.isfinite(steps).all() and names == ["cpu:0", "gpu:0", "gpu:1"]
    assert share[0, 1] > 0 and share[0, 2] == 0 and (share <= 100).all()    # single-gpu: all on gpu:0
    tiny = load_cluster(write(tmp_path, "c.json", TINY_MEMORY))
    failing = compare(g, tiny, ["single-gpu"])
    _, steps, _, share = comparison_data(failing)
    assert np.isinf(steps[0]) and share[0, 1] > 100                        # drawn as out of memory
    rc, _, err = run(capsys, "compare", "toy-mlp", "-c", "k80x2", "--plot", str(tmp_path / "no" / "x.png"))
    assert rc == 2 and "does not exist" in err and err.count("\n") == 1


def test_simulate_draws_where_the_step_time_goes(tmp_path, capsys):
    from autoplace.cluster import get_cluster
    from autoplace.placers import place
    from autoplace.plots import PHASES, step_data
    from autoplace.sim import simulate
    from autoplace.zoo import build_graph

    g, c = build_graph("toy-mlp", layers=3), get_cluster("k80x4")
    p = place(g, c, "metis", seed=0)
    r = simulate(g, c, p, trace=True)
    compute, copies = step_data(g, r)
    assert compute.shape == (c.n_devices, 3) and np.allclose(compute.sum(1), r.busy_time)
    assert (compute[:, PHASES.index("backward")] > 0).any() and (compute[:, PHASES.index("update")] > 0).any()
    assert np.allclose(copies, r.link_time) and copies.sum() > 0        # metis splits: copies between GPUs
    with pytest.raises(ValueError, match="timeline"):
        step_data(g, simulate(g, c, p))
    path = tmp_path / "p.json"
    assert main(["place", "toy-mlp", "-P", "layers=3", "-c", "k80x4", "-m", "metis", "-o", str(path)]) == 0
    png = tmp_path / "step.png"
    rc, _, _ = run(capsys, "simulate", "toy-mlp", "-P", "layers=3", "-c", "k80x4", "-p", str(path), "--plot", str(png))
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_compare_prints_each_row_as_it_is_done_on_a_terminal_and_nothing_under_json(capsys, monkeypatch):
    args = ("compare", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "--methods", "single-gpu,expert,metis")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    rc, out, err = run(capsys, *args)
    assert rc == 0
    import re

    plain = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", err).replace("\r", "\n")
    lines = [ln for ln in plain.splitlines() if ln.startswith(("single-gpu:", "expert:", "metis:"))]
    assert [ln.split(":")[0] for ln in lines] == ["single-gpu", "expert", "metis"]     # in order, one each
    rc, out, err = run(capsys, *args, "--json")
    assert rc == 0 and err == "" and json.loads(out)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    rc, out, err = run(capsys, *args)
    assert rc == 0 and err == ""


def test_a_cluster_of_estimates_says_so_once_and_names_the_command_that_measures_it(tmp_path, capsys):
    p = str(tmp_path / "p.json")
    assert run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", "localhost", "-m", "single-cpu", "-o", p)[0] == 0
    rc, out, err = run(capsys, "simulate", "toy-mlp", "-P", "layers=2", "-c", "localhost", "-p", p)
    assert rc == 0 and err.count("are estimates") == 1 and "autoplace cluster detect" in err
    rc, out, err = run(capsys, "compare", "toy-mlp", "-P", "layers=2", "-c", "localhost", "--methods", "single-cpu")
    assert rc == 0 and err.count("are estimates") == 1
    from autoplace.cluster import get_cluster
    from autoplace.formats import save_cluster

    measured = get_cluster("localhost")
    for d in measured.devices:                                          # what 'cluster detect' writes
        d.meta.pop("estimated", None)
    save_cluster(measured, tmp_path / "c.json")
    rc, out, err = run(capsys, "simulate", "toy-mlp", "-P", "layers=2", "-c", str(tmp_path / "c.json"), "-p", p)
    assert rc == 0 and "estimates" not in err


def test_budget_is_work_and_time_limit_caps_the_wall_clock(tmp_path, capsys):
    p = str(tmp_path / "p.json")
    rc, out, _ = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "-m", "local-search",
                     "--budget", "1", "-o", p)
    assert rc == 0 and "budget 1 s of nominal work" in out and "s of wall clock" in out
    rc, out, _ = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "-m", "rl", "--budget", "100000",
                     "--time-limit", "0.5", "-o", p)                  # a day of work, cut to half a second
    assert rc == 0 and "(stopped: time limit)" in out and "--time-limit 0.5 s" in out
    assert json.loads(Path(p).read_text())["stop_reason"] == "time limit"
    with pytest.raises(SystemExit) as e:
        main(["place", "toy-mlp", "-c", "k80x2", "-m", "rl", "--time-limit", "0", "-o", p])
    assert e.value.code == 2 and "--time-limit" in capsys.readouterr().err


def test_a_row_that_runs_out_of_memory_says_why_in_its_error(tmp_path, capsys):
    cluster = json.loads(Path(CLUSTER).read_text())
    for d in cluster["devices"][1:]:
        d["memory_bytes"] = 1000                                          # no GPU holds anything
    c = write(tmp_path, "c.json", cluster)
    rc, out, _ = run(capsys, "compare", GRAPH, "-c", c, "--methods", "single-gpu,single-cpu", "--json")
    rows = {r["method"]: r for r in json.loads(out)["rows"]}
    assert rows["single-gpu"]["error"].startswith("out of memory on gpu:0 (") and " of 1000 B)" in \
        rows["single-gpu"]["error"]
    assert rows["single-cpu"]["error"] is None


def test_place_and_compare_help_list_the_methods(capsys):
    for verb in ("place", "compare"):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
        out = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps at hyphens
        assert "local-search" in out and "htf-mpr" in out and "m-sct" in out and "pipeline" in out, verb


def test_a_placement_for_another_cluster_is_named_wherever_it_is_read(tmp_path, capsys):
    from autoplace import build_graph, get_cluster, place, simulate

    graph = build_graph("toy-mlp", layers=2)
    placement = place(graph, get_cluster("p100x2"), "metis")
    with pytest.warns(UserWarning, match="placement made for cluster 'p100x2', simulated on 'p100x4'"):
        simulate(graph, get_cluster("p100x4"), placement)
    out = tmp_path / "p.json"
    assert main(["place", "toy-mlp", "-P", "layers=2", "-c", "p100x2", "-m", "metis", "-o", str(out)]) == 0
    capsys.readouterr()
    rc, _, err = run(capsys, "report", "toy-mlp", "-P", "layers=2", "-c", "p100x4", "-p", str(out),
                     "-o", str(tmp_path / "r.html"))
    assert rc == 0 and "note: placement made for cluster 'p100x2', scored on 'p100x4'" in err


def test_a_search_in_a_pipe_reports_progress_as_plain_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    rc, _, err = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "--budget", "1",
                     "-o", str(tmp_path / "p.json"))
    assert rc == 0 and "[autoplace +0." in err and "placing with auto: auto: fast placers" in err
    rc, _, err = run(capsys, "place", "toy-mlp", "-P", "layers=2", "-c", "k80x2", "-m", "metis",
                     "-o", str(tmp_path / "m.json"))
    assert rc == 0 and err == ""                                       # nothing reported, nothing written


@pytest.mark.slow
def test_a_strategy_goes_through_place_simulate_and_report(tmp_path, capsys, monkeypatch):
    """A data-parallel placement of a zoo model: place writes it with its strategy, simulate, report and export
    rebuild the replicated step from the model (its capture with micro-batches), the same step time; a graph file has
    no capture to rebuild it from: one line, exit 2."""
    pytest.importorskip("torch")
    monkeypatch.setenv("AUTOPLACE_CACHE_DIR", str(tmp_path / "cache"))
    small = ["-P", "vocab=50", "-P", "hidden=16", "-P", "layers=2", "-P", "steps=3", "-P", "batch=4"]
    p = str(tmp_path / "dp.json")
    rc, out, err = run(capsys, "place", "rnnlm-2", *small, "-c", "k80x4", "-m", "data-parallel", "-o", p, "--json")
    assert rc == 0, err
    placed = json.loads(out)
    saved = json.loads(open(p).read())
    assert saved["strategy"]["replicas"] == 4 and saved["graph"].endswith("x4")
    rc, out, err = run(capsys, "simulate", "rnnlm-2", *small, "-c", "k80x4", "-p", p, "--json")
    assert rc == 0, err
    assert json.loads(out)["step_time_s"] == pytest.approx(placed["step_time_s"])
    html = str(tmp_path / "r.html")
    rc, _, err = run(capsys, "report", "rnnlm-2", *small, "-p", p, "-o", html)
    assert rc == 0, err
    assert "bucket0/0" in open(html).read()
    py = str(tmp_path / "step.py")         # export: the replicas as one program, no device map of one copy
    rc, _, err = run(capsys, "export", "rnnlm-2", *small, "-p", p, "-o", py)
    assert rc == 0, err
    assert "4 data-parallel replicas" in open(py).read()
    rc, _, err = run(capsys, "export", "rnnlm-2", *small, "-p", p, "-o", str(tmp_path / "x.py"),
                     "--device-map", str(tmp_path / "dm.json"))
    assert rc == 2 and "a device_map places one copy" in err and not (tmp_path / "x.py").exists()
    g = str(tmp_path / "g.json")
    assert run(capsys, "zoo", "export", "rnnlm-2", *small, "-o", g)[0] == 0
    rc, _, err = run(capsys, "simulate", g, "-c", "k80x4", "-p", p)
    assert rc == 2 and "micro_batches=4" in err and "Traceback" not in err
