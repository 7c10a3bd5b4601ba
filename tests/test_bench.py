"""The benchmark suite: every table from one small graph, no empty cell, resumable, clear errors."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from autoplace import bench
from autoplace.bench import TABLES, published
from autoplace.bench.suite import Job, Setting, Store, tight_cluster
from autoplace.cli import main

QUICK = ["--quick", "--budget", "0.5", "--learned-budget", "0.5"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    code = main(["bench", *QUICK, "--graph", "toy-mlp", "-o", str(out), "--json"])
    assert code == 0
    return out


def _cells(path) -> list[list[str]]:
    """Every row of every Markdown table in ``path``, split into cells."""
    rows = []
    for line in path.read_text().splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|(-+:?\|)+", line):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def test_every_table_written_without_an_empty_cell(results):
    for name in TABLES:
        for ext in ("md", "json", "png"):
            assert (results / f"{name}.{ext}").stat().st_size > 0, f"{name}.{ext}"
        rows = _cells(results / f"{name}.md")
        assert len(rows) >= 2, name
        for r in rows:
            assert all(c for c in r), f"{name}: empty cell in {r}"
        data = json.loads((results / f"{name}.json").read_text())
        for section in data["sections"]:
            assert section["rows"], (name, section["title"])
            for r in section["rows"]:
                assert len(r) == len(section["columns"]) and all(str(c).strip() for c in r), (name, r)
    assert (results / "README.md").read_text().count("](") >= 2 * len(TABLES)


def test_placer_tables_hold_a_step_per_method(results):
    """On toy-mlp every method of the non-tight tables finds a placement that runs: a number in every
    step cell, the baseline at 1.00x, a search wall time, and each method's geomean."""
    for name in ("mirhoseini-table2", "gdp-table1", "htf-mpr"):
        data = json.loads((results / f"{name}.json").read_text())
        every = next(s for s in data["sections"] if s["title"] == "Every cell")
        spec = TABLES[name]
        assert {r[1] for r in every["rows"]} == set(spec.methods)
        for r in every["rows"]:
            assert float(r[2]) > 0, r
            assert float(r[6]) >= 0 and float(r[7]) >= float(r[6]) - 1e-9, r
            if r[1] == spec.baseline:
                assert r[3] == "1.00x"
        geo = next(s for s in data["sections"] if s["title"].startswith("Geometric mean"))
        assert [r[0] for r in geo["rows"]] == list(spec.methods)
        assert all(r[1].endswith("x") for r in geo["rows"])


def test_memory_tight_rows_name_what_failed(results):
    """A graph given by --graph runs memory-tight there: single-gpu runs out of memory, and every
    registered placer has a row."""
    from autoplace.placers import available_placers

    data = json.loads((results / "memory-tight.json").read_text())
    every = next(s for s in data["sections"] if s["title"] == "Every cell")
    assert {r[1] for r in every["rows"]} == set(available_placers())
    single = next(r for r in every["rows"] if r[1] == "single-gpu")
    assert single[2].startswith("OOM (gpu:")
    auto = next(r for r in every["rows"] if r[1] == "auto")
    assert float(auto[2]) > 0


def test_gdp_and_predictor_tables_hold_numbers(results):
    gen = json.loads((results / "gdp-generalisation.json").read_text())["sections"][0]["rows"]
    assert len(gen) == 2                            # toy-mlp on two clusters: each held out once
    for r in gen:
        assert all(float(x) > 0 for x in r[1:6]), r
    pred = json.loads((results / "htf-mpr-predictor.json").read_text())["sections"][0]
    assert pred["columns"][1:7] == ["gbr", "svr", "ridge", "lars", "omp", "knn"]
    row = pred["rows"][0]
    assert row[7] in pred["columns"][1:7]
    means = [float(c.split(" ± ")[0]) for c in row[1:7] if "±" in c]
    assert len(means) >= 5 and all(0 <= m <= 1 for m in means)


def test_a_second_run_reuses_every_job_and_a_cut_line_runs_again(results, capsys):
    lines = (results / "jobs.jsonl").read_text().splitlines()
    assert main(["bench", *QUICK, "--graph", "toy-mlp", "-o", str(results), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ran"] == 0 and out["reused"] == len(lines)
    # a bench killed while writing: the last line cut short, and that job not finished
    (results / "jobs.jsonl").write_text("\n".join(lines[:-2]) + "\n" + lines[-2][: len(lines[-2]) // 2])
    assert main(["bench", *QUICK, "--graph", "toy-mlp", "-o", str(results), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ran"] == 2 and out["reused"] == len(lines) - 2


def test_interrupted_bench_keeps_finished_jobs_and_continues(tmp_path, monkeypatch, capsys):
    from autoplace.bench import suite

    real, calls = suite.run_job, []

    def interrupt_third(job):
        calls.append(job)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(job)

    monkeypatch.setattr(bench, "run_job", interrupt_third)
    args = ["bench", *QUICK, "--graph", "toy-mlp", "--tables", "htf-mpr", "-o", str(tmp_path)]
    assert main(args) == 130
    assert "run the same command to continue" in capsys.readouterr().err
    assert len((tmp_path / "jobs.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / "htf-mpr.md").exists()
    monkeypatch.setattr(bench, "run_job", real)
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ran"] == 1 and out["reused"] == 2


def test_interrupted_search_is_not_kept(tmp_path, monkeypatch):
    """A learned search stopped by Ctrl-C returns its best so far; the bench must not store it as done."""
    from autoplace.bench import suite
    from autoplace.placement import Placement

    def interrupted(graph, cluster, method, **kw):
        return Placement.from_array(graph, cluster, np.zeros(graph.n_ops, dtype=int), method,
                                    stop_reason="interrupted", search_time_s=0.0)

    monkeypatch.setattr("autoplace.placers.place", interrupted)
    with pytest.raises(KeyboardInterrupt):
        suite.place_job(Setting("toy-mlp", "k80x2"), "rl", 0.5, 0)


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["bench", "--tables", "no-such-table", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown bench table 'no-such-table'" in err and len(err.strip().splitlines()) == 1
    assert main(["bench", "--graph", "no-such-graph", "-o", str(tmp_path)]) == 2
    assert "no-such-graph" in capsys.readouterr().err
    assert not (tmp_path / "jobs.jsonl").exists()


def test_list_names_every_table(capsys):
    assert main(["bench", "--list", "--quick", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in listing] == list(TABLES)
    assert all(t["settings"] and t["jobs"] >= len(t["settings"]) for t in listing)
    assert main(["bench", "--list", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    # full mode: every learned search gets 600 s of nominal work (Table 2's RL rows alone: 6 x 4 learned)
    table2 = next(t for t in full if t["name"] == "mirhoseini-table2")
    assert len(table2["settings"]) == 6 and table2["search_budget_s"] == 6 * (4 * 600 + 60)


def test_tight_cluster_fits_no_single_gpu():
    from autoplace.cluster import get_cluster
    from autoplace.placers import place
    from autoplace.sim import simulate
    from autoplace.zoo import build_graph

    g, c = build_graph("toy-mlp"), get_cluster("k80x2")
    t = tight_cluster(g, c, 0.6)
    single = simulate(g, t, place(g, t, "single-gpu"))
    assert single.oom_devices == ("gpu:0",)
    assert all(d.memory_bytes == c.devices[i].memory_bytes for i, d in enumerate(t.devices) if d.kind != "gpu")
    assert simulate(g, t, place(g, t, "auto", budget=0.5)).ok


def test_store_skips_a_cut_line(tmp_path):
    s = Store(tmp_path)
    a, b = Job.of("place", setting=Setting("x", "k80x2"), method="m", budget=1.0, seed=0), Job.of("place", x=1)
    s.add(a, {"v": 1})
    with open(tmp_path / "jobs.jsonl", "a") as f:
        f.write('{"job": "cut')
    again = Store(tmp_path)
    assert a in again and b not in again and again[a] == {"v": 1}


def test_published_figures():
    assert published.mirhoseini_seconds("nmt-2", 2, "single-gpu") is None          # OOM in the paper
    assert published.mirhoseini_seconds("inception-v3", 4, "rl") == 3.85
    assert published.gdp_table1_seconds("gnmt-8", 8, "expert") == 0.610
    assert published.gdp_table1_seconds("gnmt-2", 2, "metis") is None
    with pytest.raises(KeyError):
        published.mirhoseini_seconds("toy-mlp", 2, "rl")
