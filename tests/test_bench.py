"""The benchmark suite: every table from one small graph, no empty cell, resumable, clear errors."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from autoplace import bench
from autoplace.bench import TABLES, published
from autoplace.bench.jobs import LEARNED, Job, Setting, tight_cluster
from autoplace.bench.store import Store
from autoplace.cli import main

QUICK = ["--quick", "--budget", "0.5", "--learned-budget", "0.5", "--seeds", "none"]
SEEDED = [*QUICK[:-2], "--seeds", "0,1"]          # the shared results: learned placers on two seeds, paired


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    code = main(["bench", *SEEDED, "--graph", "toy-mlp", "-o", str(out), "--json"])
    assert code == 0
    return out


def _cells(path) -> list[list[str]]:
    """Every row of every Markdown table in ``path``, split into cells."""
    rows = []
    for line in path.read_text().splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|(-+:?\|)+", line):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


@pytest.mark.slow
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


@pytest.mark.slow
def test_placer_tables_hold_a_step_per_method(results):
    """On toy-mlp every method of the non-tight tables finds a placement that runs: a number in every
    step cell, the baseline at 1.00x, a search wall time, and each method's geomean."""
    from autoplace.bench import make_run

    run = make_run(quick=True, seeds=(0, 1))                      # as the fixture's bench
    for name in ("mirhoseini-table2", "gdp-table1", "htf-mpr"):
        data = json.loads((results / f"{name}.json").read_text())
        every = next(s for s in data["sections"] if s["title"] == "Every cell")
        spec = TABLES[name]
        methods = run.methods(spec.methods)                       # each learned placer's -off beside it
        assert {r[1] for r in every["rows"]} == set(methods) > set(spec.methods)
        for r in every["rows"]:
            assert float(r[2].split()[0]) > 0, r                 # a learned one's: mean ± sd (min)
            assert float(r[6]) >= 0 and float(r[7]) >= float(r[6]) - 1e-9, r
            if r[1] == spec.baseline:
                assert r[3] == "1.00x"
        geo = next(s for s in data["sections"] if s["title"].startswith("Geometric mean"))
        assert [r[0] for r in geo["rows"]] == list(methods)
        assert all(r[1].endswith("x") for r in geo["rows"])


@pytest.mark.slow
def test_memory_tight_rows_name_what_failed(results):
    """A graph given by --graph runs memory-tight there: single-gpu runs out of memory, and every
    registered placer has a row."""
    from autoplace.placers import available_placers

    data = json.loads((results / "memory-tight.json").read_text())
    every = next(s for s in data["sections"] if s["title"] == "Every cell")
    names = {r[1] for r in every["rows"]}
    from autoplace.bench.builders import NOT_BENCHED

    benched = set(available_placers()) - set(NOT_BENCHED)
    assert names >= benched and all(n.endswith("-off") for n in names - benched)
    single = next(r for r in every["rows"] if r[1] == "single-gpu")
    assert single[2].startswith("OOM (gpu:")
    auto = next(r for r in every["rows"] if r[1] == "auto")
    assert float(auto[2]) > 0


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_second_run_reuses_every_job_and_a_cut_line_runs_again(results, capsys):
    lines = (results / "jobs.jsonl").read_text().splitlines()
    assert main(["bench", *SEEDED, "--graph", "toy-mlp", "-o", str(results), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ran"] == 0 and out["reused"] == len(lines)
    # a bench killed while writing: the last line cut short, and that job not finished
    (results / "jobs.jsonl").write_text("\n".join(lines[:-2]) + "\n" + lines[-2][: len(lines[-2]) // 2])
    assert main(["bench", *SEEDED, "--graph", "toy-mlp", "-o", str(results), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ran"] == 2 and out["reused"] == len(lines) - 2


def test_interrupted_bench_keeps_finished_jobs_and_continues(tmp_path, monkeypatch, capsys):
    real, calls = bench.run_job, []

    def interrupt_third(job, results=None):
        calls.append(job)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(job, results)

    monkeypatch.setattr(bench, "run_job", interrupt_third)
    args = ["bench", *QUICK, "--graph", "toy-mlp", "--tables", "htf-mpr", "-o", str(tmp_path)]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "run the same command to continue" in err
    assert "[autoplace +" in err and "job 3 of 4:" in err                # standard error is no terminal: lines
    assert len((tmp_path / "jobs.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / "htf-mpr.md").exists()
    monkeypatch.setattr(bench, "run_job", real)
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ran"] == 2 and out["reused"] == 2                      # bounds, single-gpu; htf-mpr, auto


def test_interrupted_search_is_not_kept(monkeypatch):
    """A learned search stopped by Ctrl-C returns its best so far; the bench must not store it as done."""
    from dataclasses import replace

    from autoplace import placers
    from autoplace.bench import jobs
    from autoplace.placement import Placement

    def interrupted(graph, cluster, **kw):
        from autoplace.search.curve import Curve
        from autoplace.search.runner import SearchResult

        p = Placement.from_array(graph, cluster, np.zeros(graph.n_ops, dtype=int), "rl", stop_reason="interrupted")
        return SearchResult(p, Curve(), 0, 0, "interrupted", 0, 0, 0.0)

    real = placers.get_placer
    monkeypatch.setattr(jobs, "get_placer", lambda name: replace(real(name), search=interrupted))
    with pytest.raises(KeyboardInterrupt):
        jobs.place_job(Setting("toy-mlp", "k80x2"), "rl", 0.5, 0)


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["bench", "--tables", "no-such-table", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown bench table 'no-such-table'" in err and len(err.strip().splitlines()) == 1
    assert main(["bench", "--graph", "no-such-graph", "-o", str(tmp_path)]) == 2
    assert "no-such-graph" in capsys.readouterr().err
    assert not (tmp_path / "jobs.jsonl").exists()


def test_list_names_every_table(capsys):
    assert main(["bench", "--list", "--tables", "htf-mpr,gdp-table2", "--json"]) == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)] == ["htf-mpr", "gdp-table2"]
    assert main(["bench", "--list", "--tables", "nope"]) == 2
    assert "unknown bench table 'nope'" in capsys.readouterr().err
    assert main(["bench", "--list", "--quick", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in listing] == list(TABLES)
    assert all(t["settings"] and t["jobs"] >= len(t["settings"]) for t in listing)
    assert main(["bench", "--list", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    # full mode: every learned search gets 600 s of nominal work, on each of seeds 0-2 (Table 2: 4 learned
    # placers and rl+refine's search with its 60 s refine; the learning-off selves of the 4 placers and of
    # rl+refine, and per seed the learning-off self and auto each for the learned search's time, counted as
    # its 600 s and rl+refine's 660 s), auto 60 s, on each of 6 settings
    table2 = next(t for t in full if t["name"] == "mirhoseini-table2")
    assert len(table2["settings"]) == 6
    refined = 600 + 60
    assert table2["search_budget_s"] == 6 * (3 * (4 * 600 + refined) + 3 * (4 * 600 + refined)
                                             + 3 * 2 * (4 * 600 + refined) + 60)


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


def test_store_skips_a_cut_line_and_keeps_the_next_job(tmp_path):
    """A kill mid-write leaves a line without its newline: the next job appended after it must not be
    glued to it (and lost on the next resume)."""
    s = Store(tmp_path)
    a, b = Job.of("place", setting=Setting("x", "k80x2"), method="m", budget=1.0, seed=0), Job.of("place", x=1)
    ran = {"step_s": 1.0, "ok": True, "oom": [], "error": None, "search_s": 0.1, "wall_s": 0.2}
    s.add(a, {**ran, "v": 1})
    with open(tmp_path / "jobs.jsonl", "a") as f:
        f.write('{"job": "cut')
    again = Store(tmp_path)
    assert a in again and b not in again and again[a] == {**ran, "v": 1}
    again.add(b, {**ran, "v": 2})
    third = Store(tmp_path)
    assert third[a]["v"] == 1 and third[b]["v"] == 2
    assert (tmp_path / "jobs.jsonl").read_text().count("\n") == 2


def test_an_unusable_results_folder_fails_before_any_job(tmp_path, monkeypatch, capsys):
    def never(job):
        raise AssertionError("a job ran")

    monkeypatch.setattr(bench, "run_job", never)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["bench", *QUICK, "--tables", "htf-mpr", "-o", str(blocker / "results")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autoplace: error:") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("blocked", ["README.md", "htf-mpr.png"])
def test_every_output_is_checked_before_any_job_or_table_is_written(tmp_path, monkeypatch, capsys, blocked):
    """A README or table path that cannot be written fails the bench before any job runs and before any
    other table file is rewritten."""
    def never(job):
        raise AssertionError("a job ran")

    monkeypatch.setattr(bench, "run_job", never)
    out = tmp_path / "r"
    out.mkdir()
    (out / blocked).mkdir()                                  # a folder where a file goes
    (out / "htf-mpr.md").write_text("an earlier table")
    assert main(["bench", *QUICK, "--tables", "htf-mpr", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert blocked in err and len(err.strip().splitlines()) == 1
    assert (out / "htf-mpr.md").read_text() == "an earlier table" and not (out / "htf-mpr.json").exists()


@pytest.mark.parametrize("folder", ["", "-", " "])
def test_a_results_folder_that_is_no_folder_name_is_refused(folder, capsys):
    assert main(["bench", *QUICK, "--tables", "htf-mpr", "-o", folder]) == 2
    assert main(["bench", "--list", "-o", folder]) == 2
    err = capsys.readouterr().err
    assert err.count("is not a folder name") + err.count("the path is empty") == 2, err


def test_list_refuses_an_unknown_graph(capsys):
    assert main(["bench", "--list", "--graph", "nosuch"]) == 2
    assert "unknown graph 'nosuch'" in capsys.readouterr().err


RAN = {"step_s": 1.0, "ok": True, "oom": [], "error": None, "search_s": 0.1, "wall_s": 0.2}
DAMAGED_ROWS = {
    "negative step": {**RAN, "step_s": -1.0}, "string step": {**RAN, "step_s": "1.0"},
    "ok without a step": {**RAN, "step_s": None}, "failed with a step": {**RAN, "ok": False},
    "missing error": {k: v for k, v in RAN.items() if k != "error"}, "oom not a list": {**RAN, "oom": "gpu:0"},
    "deep nesting": {**RAN, "x": json.loads("[" * 50 + "]" * 50)}, "nested objects": {**RAN, "a": {"b": {"c": {
        "d": {"e": {"f": {"g": {}}}}}}}},
    "search samples negative": {**RAN, "search": {"samples": -5}}, "peak a string": {**RAN, "peak_gib": ["1"]},
    "speedup zero": {**RAN, "worst_case_speedup": 0}, "improvements": {**RAN, "search": {"improvements": [[1]]}},
    "result a list": [1, 2], "bool wall": {**RAN, "wall_s": True},
}


@pytest.mark.parametrize("what", sorted(DAMAGED_ROWS))
def test_a_damaged_job_line_is_set_aside_and_its_job_runs_again(tmp_path, what):
    job = Job.of("place", setting=Setting("toy-mlp", "k80x2"), method="m", budget=1.0, seed=0)
    other = Job.of("place", x=1)
    lines = [json.dumps({"job": other.key, "result": RAN}), json.dumps({"job": job.key, "result": DAMAGED_ROWS[what]})]
    (tmp_path / "jobs.jsonl").write_text("\n".join(lines) + "\n")
    s = Store(tmp_path)
    assert other in s and job not in s and [n for n, _ in s.rejected] == [2]
    assert (tmp_path / "jobs.jsonl").read_text() == lines[0] + "\n"
    assert json.loads((tmp_path / "jobs.rejected.jsonl").read_text())["line"] == 2
    assert Store(tmp_path).rejected == []                    # set aside once


@pytest.mark.parametrize("line", ["[1]", '{"job": 1, "result": {}}', '{"job": "x", "result": {}}',
                                  '{"job": "{\\"kind\\": \\"nope\\"}", "result": {}}', "\udcff", "{" * 10_000,
                                  '{"job": "a", "result": {}, "extra": 1}'])
def test_a_line_that_is_no_job_is_set_aside(tmp_path, line):
    (tmp_path / "jobs.jsonl").write_text(line + "\n", errors="surrogateescape")
    s = Store(tmp_path)
    assert s.results == {} and len(s.rejected) == 1


def test_a_bench_reruns_a_damaged_job_and_says_so(tmp_path, capsys):
    out = tmp_path / "r"
    args = ["bench", *QUICK, "--tables", "htf-mpr", "--graph", "toy-mlp", "-o", str(out), "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    lines = (out / "jobs.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["result"]["step_s"] = -1
    (out / "jobs.jsonl").write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    assert main(args) == 0
    captured = capsys.readouterr()
    second = json.loads(captured.out)
    assert second["ran"] == 1 and second["reused"] == first["ran"] - 1 and len(second["rejected_lines"]) == 1
    assert "line 1 set aside" in captured.err
    assert second["tables"] == first["tables"]


def test_a_graph_file_is_keyed_by_its_content(tmp_path, capsys):
    """The same path holding another graph runs its jobs again instead of reusing the old results."""
    g, out = tmp_path / "g.json", tmp_path / "r"
    args = ["bench", *QUICK, "--tables", "htf-mpr", "--graph", str(g), "-o", str(out), "--json"]
    assert main(["zoo", "export", "toy-mlp", "-o", str(g)]) == 0
    capsys.readouterr()
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["ran"] == 4
    assert main(["zoo", "export", "toy-mlp", "-P", "layers=3", "-o", str(g)]) == 0
    capsys.readouterr()
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["ran"] == 4 and second["reused"] == 0
    keys = {r[0] for r in second["tables"][0]["sections"][0]["rows"]}
    assert len(keys) == 1 and "[sha256:" in keys.pop()
    moved = tmp_path / "elsewhere.json"                                   # the same content under another name
    moved.write_bytes(g.read_bytes())
    assert main([*args[:-5], "--graph", str(moved), "-o", str(out), "--json"]) == 0
    third = json.loads(capsys.readouterr().out)
    assert third["ran"] == 0 and third["reused"] == 4


def test_speedups_paper_figures_and_geomeans_on_a_paper_setting(tmp_path):
    """The table arithmetic on Table 2's rnnlm-2 on k80x2 with made-up steps: ours over single-gpu, the
    paper's (its seconds: single-gpu 1.57, expert 3.81, rl 1.57, single-cpu 6.89), geomeans."""
    from autoplace.bench import QUICK, make_run
    from autoplace.bench.builders import build_placer_table

    run = make_run(budgets=QUICK)
    spec = TABLES["mirhoseini-table2"]
    s1, s2 = Setting("rnnlm-2", "k80x2"), Setting("nmt-2", "k80x2")
    store = Store(tmp_path)
    steps = {"single-gpu": 2.0, "expert": 1.0, "single-cpu": 4.0, "gdp": 1.5}     # gdp: learned, ahead of auto
    for s, scale in ((s1, 1.0), (s2, 4.0)):
        store.add(Job.of("bounds", setting=s), {"critical_path_s": 0.5, "load_s": 0.25, "ops": 10})
        for m in spec.methods:
            v = steps.get(m, 2.0) * (1.0 if m == "single-gpu" else scale)
            ok = m != "hdp"
            store.add(run.place(s, m), {"step_s": v if ok else None, "ok": ok, "oom": [] if ok else ["gpu:0"],
                                        "error": None, "search_s": 0.5, "wall_s": 0.6})
    t = build_placer_table(spec, (s1, s2), run, store)
    wide, geo, every = (sec.rows for sec in t.sections[:3])
    head = t.sections[0].columns
    row = dict(zip(head, wide[0]))
    assert row["single-gpu"] == "1.00x / 1.00x" and row["expert"] == "2.00x / 0.41x"      # 2/1; 1.57/3.81
    assert row["single-cpu"] == "0.50x / 0.23x" and row["rl"] == "1.00x / 1.00x" and row["hdp"] == "– / –"
    assert dict(zip(head, wide[1]))["expert"] == "0.50x / –"                 # nmt-2: the paper's single-GPU is OOM
    g = {r[0]: r for r in geo}
    assert g["expert"][1:] == ["1.00x", "2/2", "0.41x", "1", "2.00x"]        # sqrt(2 * 0.5); paper and ours on rnnlm-2
    assert g["hdp"][1:3] == ["–", "0/2"]
    cell = next(r for r in every if r[0] == s1.key and r[1] == "hdp")
    assert cell[2] == "OOM (gpu:0)" and cell[4] == "–"
    cell = next(r for r in every if r[0] == s1.key and r[1] == "single-cpu")
    assert cell[2:6] == ["4", "0.50x", "6.89", "0.23x"]
    bounds = next(sec for sec in t.sections if sec.title.startswith("Lower bounds"))
    assert bounds.rows[0][1:] == ["10", "0.5", "0.25", "1 (expert)", "2.00x"]           # 1 s over the 0.5 s bound
    versus = {(r[0], r[1]): r for r in next(sec for sec in t.sections if sec.title.startswith("Head to head")).rows}
    assert versus[(s1.key, "rl vs expert")][2:4] == ["0.50x", "2.43x"]          # 1 / 2; 3.81 / 1.57
    paper = [published.mirhoseini_seconds(s.model, 2, "expert") / published.mirhoseini_seconds(s.model, 2, "rl")
             for s in (s1, s2)]
    assert versus[("geometric mean", "rl vs expert")][2:] == ["0.50x", f"{(paper[0] * paper[1]) ** 0.5:.2f}x",
                                                              "faster on 0 of 2"]
    assert versus[(s2.key, "rl vs single-gpu")][2] == "0.25x"                    # 2 / 8 (single-gpu not scaled)
    faster = next(sec for sec in t.sections if sec.title == "Placements faster than auto's")
    assert [r[1] for r in faster.rows if r[0] == s1.key] == ["expert"]
    assert [r[1] for r in faster.rows if r[0] == s2.key] == ["single-gpu", "expert"]


def test_no_table_sets_auto_head_to_head_against_a_learned_placer():
    """A head-to-head pair compares two steps at their own budgets: auto (the search placers' budget)
    against a learned placer (another budget, a mean over seeds) would be an unequal race; the learned
    placers meet auto at equal wall time in the seeds' sections instead."""
    for spec in TABLES.values():
        for a, b in spec.versus:
            pair = {a.split("+")[0], b.split("+")[0]}
            assert not ("auto" in pair and pair & set(LEARNED)), (spec.name, a, b)


def test_memory_checks_name_a_broken_promise(tmp_path):
    """The memory-tight table says where a memory-aware placer's placement ran out of memory and where
    auto is slower than dp-split; with neither, one row saying so."""
    from autoplace.bench import QUICK, make_run
    from autoplace.bench.builders import all_placers, build_placer_table

    run, spec, s = make_run(budgets=QUICK), TABLES["memory-tight"], Setting("toy-mlp", "k80x2")

    def checks(results: dict) -> list[list[str]]:
        store = Store(tmp_path / str(len(list(tmp_path.iterdir()))))
        store.add(Job.of("bounds", setting=s), {"critical_path_s": 0.5, "load_s": 0.25, "ops": 10})
        for m in all_placers():
            r = results.get(m, {"step_s": 2.0, "ok": True, "oom": []})
            store.add(run.place(s, m), {"error": None, "search_s": 0.1, "wall_s": 0.1, **r})
        t = build_placer_table(spec, (s,), run, store)
        return next(sec for sec in t.sections if sec.title == "Memory checks").rows

    assert checks({})[0][0] == "every setting"
    rows = checks({"m-etf": {"step_s": None, "ok": False, "oom": ["gpu:1"]}, "auto": {"step_s": 3.0, "ok": True,
                                                                                      "oom": []}})
    assert rows == [[s.key, "m-etf runs out of memory (gpu:1)"], [s.key, "auto is not at least as fast as dp-split"]]
    # single-gpu is not memory-aware: its running out of memory breaks no promise
    assert checks({"single-gpu": {"step_s": None, "ok": False, "oom": ["gpu:0"]}})[0][0] == "every setting"


def test_a_variant_is_a_column_beside_its_placer_keyed_by_its_settings(tmp_path, capsys):
    """--variant LABEL=PLACER with --set LABEL.KEY=VALUE: a column after the placer, jobs keyed by the
    settings (a --set on the placer itself changes its jobs too), the learned searches' section showing
    the variant's samples to reach the placer's step."""
    args = ["bench", *QUICK, "--tables", "htf-mpr", "--graph", "toy-mlp", "-o", str(tmp_path), "--json"]
    assert main([*args, "--variant", "random=htf-mpr", "--set", "random.model=random"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ran"] == 5                                 # bounds, single-gpu, htf-mpr, random, auto
    table = out["tables"][0]
    assert table["sections"][0]["columns"] == ["setting", "single-gpu", "htf-mpr", "random", "auto"]
    keys = [json.loads(json.loads(line)["job"]) for line in (tmp_path / "jobs.jsonl").read_text().splitlines()]
    assert [k.get("config") for k in keys if k.get("method") == "htf-mpr"] == [None, [["model", "random"]]]
    learned = next(s for s in table["sections"] if s["title"] == "Learned searches")
    assert [r[1] for r in learned["rows"]] == ["htf-mpr", "random"]
    results = {}
    for line in (tmp_path / "jobs.jsonl").read_text().splitlines():
        key = json.loads(json.loads(line)["job"])
        results["random" if key.get("config") else key.get("method")] = json.loads(line)["result"]
    target, search = results["htf-mpr"]["step_s"], results["random"]["search"]
    first = next((n for n, step in search["improvements"] if step <= target * (1 + 1e-9)), None)
    assert learned["rows"][1][-1] == (str(first) if first is not None else f"not in {search['samples']}")
    assert "random: htf-mpr with model=random" in (tmp_path / "htf-mpr.md").read_text()
    index = (tmp_path / "README.md").read_text()
    assert "--tables htf-mpr --budget 0.5 --learned-budget 0.5 --variant random=htf-mpr --set random.model=" in index
    assert index.count("--seeds none --seed 0") == 1                 # the command runs the same jobs again
    assert main([*args, "--set", "htf-mpr.population=6"]) == 0
    assert json.loads(capsys.readouterr().out)["ran"] == 1          # htf-mpr again, under its new settings
    assert main([a if a != "htf-mpr" else "schedulers" for a in args]) == 0
    capsys.readouterr()
    index = (tmp_path / "README.md").read_text()                    # this run's table, and the earlier one's
    assert "(schedulers.md)" in index and "earlier run" in index and "(htf-mpr.md)" in index


def test_learned_placers_run_over_seeds_beside_their_learning_off_self(tmp_path, capsys):
    """--seeds: a learned placer's job per seed, and as many of its learning-off self (HTF-MPR's: random
    screening); its cell is the mean; a section pairs each seed's step with the same seed's off step."""
    args = ["bench", *QUICK[:-2], "--tables", "htf-mpr", "--graph", "toy-mlp", "-o", str(tmp_path), "--json"]
    assert main([*args, "--seeds", "3,5"]) == 0
    table = json.loads(capsys.readouterr().out)["tables"][0]
    assert table["sections"][0]["columns"] == ["setting", "single-gpu", "htf-mpr", "htf-mpr-off", "auto"]
    steps, timed = {}, {}
    for line in (tmp_path / "jobs.jsonl").read_text().splitlines():
        key, result = json.loads(json.loads(line)["job"]), json.loads(line)["result"]
        if "same_wall_as" in key:                     # run for the wall time of the learned search it names
            learned = json.loads(key["same_wall_as"])
            assert learned["method"] == "htf-mpr" and learned["seed"] == key["seed"] and "config" not in learned
            timed[(key["method"], key.get("config") is not None, key["seed"])] = result
            continue
        if key.get("method") == "htf-mpr":
            steps[("off" if key.get("config") == [["model", "random"]] else "on", key["seed"])] = result["step_s"]
        else:
            assert key.get("seed", 0) == 0                       # the other placers: --seed alone
    assert sorted(steps) == [("off", 3), ("off", 5), ("on", 3), ("on", 5)]
    # per seed: the learning-off search and auto, each run for that seed's learned search's wall time
    assert sorted(timed) == [("auto", False, 3), ("auto", False, 5), ("htf-mpr", True, 3), ("htf-mpr", True, 5)]
    learned_s = {}
    for line in (tmp_path / "jobs.jsonl").read_text().splitlines():
        key, result = json.loads(json.loads(line)["job"]), json.loads(line)["result"]
        if key.get("method") == "htf-mpr" and "config" not in key and "same_wall_as" not in key:
            learned_s[key["seed"]] = result["search_s"]
    assert all(r["equal_wall_s"] == max(learned_s[seed], 1e-3) for (_, _, seed), r in timed.items())
    every = {r[1]: r for r in next(s for s in table["sections"] if s["title"] == "Every cell")["rows"]}
    mean = (steps[("on", 3)] + steps[("on", 5)]) / 2
    assert every["htf-mpr"][2].startswith(f"{mean:.4g} ± ")
    seeds = next(s for s in table["sections"] if s["title"].startswith("Learned placers over seeds 3, 5"))
    ratios = [steps[("off", k)] / steps[("on", k)] for k in (3, 5)]
    assert seeds["rows"][0][6] == (f"{(ratios[0] * ratios[1]) ** 0.5:.3f} "
                                   f"({min(ratios):.3f}–{max(ratios):.3f})")
    assert "--seeds 3,5" in (tmp_path / "README.md").read_text()


@pytest.mark.parametrize("extra, culprit", [
    (["--set", "nope.x=1"], "'nope'"), (["--set", "rl.no_such=1"], "'no_such'"), (["--set", "rl"], "NAME.KEY=VALUE"),
    (["--set", "auto.x=1"], "takes no settings"), (["--variant", "rl=rl"], "'rl'"),
    (["--variant", "fast=auto"], "takes no settings"), (["--variant", "x"], "LABEL=PLACER"),
    (["--variant", "x=rl", "--variant", "x=gdp"], "given twice"), (["--variant", "a.b=rl"], "'a.b'"),
    (["--versus", "rl"], "A:B"), (["--variant", "rl-off=rl"], "'rl-off'"),
    (["--set", "rl.learning_rate=-1"], "learning_rate")])
def test_bad_settings_and_variants_are_one_line_and_exit_2(tmp_path, capsys, extra, culprit):
    assert main(["bench", *QUICK, "--tables", "htf-mpr", "-o", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert culprit in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "jobs.jsonl").exists()


@pytest.mark.parametrize("seeds, culprit", [("1,1", "distinct"), ("x", "'x'"), ("-1", "'-1'")])
def test_bad_seeds_are_one_line_and_exit_2(tmp_path, capsys, seeds, culprit):
    with pytest.raises(SystemExit) as e:
        main(["bench", *QUICK[:-2], "--tables", "htf-mpr", "-o", str(tmp_path), "--seeds", seeds])
    err = capsys.readouterr().err
    assert e.value.code == 2 and culprit in err and len(err.strip().splitlines()) == 1, err


def test_enumeration_counts_every_mapping(tmp_path):
    """The enumerate job on mnist-softmax coarsened to 3^4 mappings: its counts agree with simulating
    every mapping here, and HTF-MPR's rank is one more than the mappings strictly faster than it."""
    import itertools

    from autoplace.bench.jobs import enumerate_job
    from autoplace.placers.learned.htf_mpr import HTFMPRConfig, htf_mpr_nodes
    from autoplace.sim import Simulator

    s = Setting("mnist-softmax", "gtx1050tix2")
    e = enumerate_job(s, 0.2, 0, max_mappings=3 ** 4)
    assert e["coarsened"] and e["mappings"] == e["devices"] ** e["nodes"] <= 81
    graph, cluster = s.problem()
    nodes = htf_mpr_nodes(graph, cluster, HTFMPRConfig(groups=e["nodes"]), 0)
    assert nodes.n_groups == e["nodes"]
    maps = np.array(list(itertools.product(range(e["devices"]), repeat=e["nodes"])))
    b = Simulator(graph, cluster).run_batch(nodes.expand_many(maps))
    steps = np.where(b.oom, np.inf, b.step_time)
    assert e["failed"] == int(np.isinf(steps).sum())
    assert e["better_than_default"] == int((steps < e["default_step_s"] * (1 - 1e-12)).sum())
    assert e["best_step_s"] == pytest.approx(steps.min())
    assert e["htf_mpr_rank"] == 1 + int((steps < e["htf_mpr_step_s"] * (1 - 1e-12)).sum())


def test_published_figures():
    assert published.mirhoseini_seconds("nmt-2", 2, "single-gpu") is None          # OOM in the paper
    assert published.mirhoseini_seconds("inception-v3", 4, "rl") == 3.85
    assert published.gdp_table1_seconds("gnmt-8", 8, "expert") == 0.610
    assert published.gdp_table1_seconds("gnmt-2", 2, "metis") is None
    with pytest.raises(KeyError):
        published.mirhoseini_seconds("toy-mlp", 2, "rl")


def test_against_compares_two_folders_results_leaving_out_measured_seconds(tmp_path, capsys):
    import json

    def folder(name: str, rows: list[tuple[str, dict]]):
        d = tmp_path / name
        d.mkdir()
        (d / "jobs.jsonl").write_text("".join(json.dumps({"job": Job.of("place", x=k).key, "result": r}) + "\n"
                                              for k, r in rows)
                                      + '{"job": "cut short')       # a line a kill cut: not compared
        return str(d)

    base = {"step_s": 1.5, "ok": True, "oom": [], "error": None, "peak_gib": [1.0, 0.0], "search_s": 0.2, "wall_s": 0.3,
            "best_at_s": 1.0, "frozen_wall": {"step_s": 1.0, "wall_s": 1.0},
            "models": {"svr": {"mean": 0.1, "std": 0.0, "failed_runs": 0, "fit_wall_s": 2.0}}}
    before = folder("before", [("a", base), ("b", {**base, "step_s": 2.0}), ("gone", base)])
    same = folder("same", [("a", {**base, "search_s": 9.0, "wall_s": 9.0,     # a search run for a measured time
                                  "frozen_wall": {"step_s": 1.2, "wall_s": 1.0},
                                  "models": {"svr": {"mean": 0.1, "std": 0.0, "failed_runs": 0, "fit_wall_s": 7.0}}}),
                           ("b", {**base, "step_s": 2.0}), ("new", base)])
    assert main(["bench", "-o", same, "--against", before]) == 0
    assert "2 jobs in both folders (1 only in" in capsys.readouterr().out
    newer = folder("newer", [("a", {**base, "search": {"samples": 8}}),
                             ("b", {**base, "step_s": 2.0, "best_at_s": 5.0})])
    assert main(["bench", "-o", newer, "--against", before]) == 0             # a field only the later one records
    assert "every result the same" in capsys.readouterr().out
    moved = folder("moved", [("a", {**base, "peak_gib": [1.0, 0.5]}), ("b", {**base, "step_s": 2.5})])
    assert main(["bench", "-o", moved, "--against", before, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    a, b = Job.of("place", x="a").key, Job.of("place", x="b").key
    assert out["differ"] == {a: ["peak_gib[1]"], b: ["step_s"]} and not out["same"]
    assert out["changes"][b] == {"step_s": [2.0, 2.5]}
    assert main(["bench", "-o", moved, "--against", before]) == 1
    assert "step_s 2 -> 2.5" in capsys.readouterr().out
    close = folder("close", [("b", {**base, "step_s": 2.0000001})])
    assert main(["bench", "-o", close, "--against", before]) == 1
    assert "step_s 2 -> 2.0000001" in capsys.readouterr().out                  # as many digits as tell them apart
    disjoint = folder("disjoint", [("other", base)])
    assert main(["bench", "-o", disjoint, "--against", before]) == 1          # nothing in common: not "the same"
    assert "no job in common" in capsys.readouterr().out
    assert main(["bench", "-o", moved, "--against", str(tmp_path / "nothing")]) == 2
    assert "not a bench results folder" in capsys.readouterr().err
    assert (tmp_path / "before" / "jobs.jsonl").read_text().endswith('"cut short')    # read only
    # a job run for another's wall time finds what the machine's speed allows: left out, and said so
    timed = Job.of("place", x="t", same_wall_as=a).key
    for name, step in (("t0", 1.0), ("t1", 3.0)):
        d = tmp_path / name
        d.mkdir()
        d.joinpath("jobs.jsonl").write_text("".join(json.dumps({"job": k, "result": r}) + "\n" for k, r in (
            (a, base), (timed, {**base, "step_s": step}))))
    assert main(["bench", "-o", str(tmp_path / "t1"), "--against", str(tmp_path / "t0"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["same"] and out["common"] == 1 and out["timed"] == 1 and not out["only_before"]
    assert main(["bench", "-o", str(tmp_path / "t1"), "--against", str(tmp_path / "t0")]) == 0
    assert "and 1 jobs run for another's wall time" in capsys.readouterr().out


def test_a_job_timed_by_one_not_run_yet_is_one_clear_error():
    from autoplace.bench.jobs import run_job
    from autoplace.errors import AutoplaceError

    s = Setting("toy-mlp", "k80x2")
    learned = Job.of("place", setting=s, method="rl", budget=0.5, seed=0)
    timed = Job.of("place", setting=s, method="auto", seed=0, same_wall_as=learned.key)
    with pytest.raises(AutoplaceError, match="a job not run yet"):
        run_job(timed, {})


def test_variants_and_refined_placements_are_paired_with_their_learning_off_selves(monkeypatch):
    """Over seeds, every learned row has a learning-off self: a variant's (its settings and learning off; a
    paper mode that fixes the predictor spelled out without ``paper``), a refined one's (refined alike);
    its equal-wall runs: the learning-off search for the learned search's time then refined alike, and auto
    for the search's time and its refine's. A variant that learns nothing has none."""
    from autoplace.bench import jobs
    from autoplace.bench.plan import QUICK, Run, Variant
    from autoplace.placers.learned.htf_mpr import HTFMPRConfig

    run = Run(QUICK, seeds=(0, 1), variants=(Variant("rl-paper", "rl", (("paper", True),)),
                                            Variant("htf-paper", "htf-mpr", (("paper", True),)),
                                            Variant("frozen", "rl", (("learn", False),))))
    assert run.off("rl-paper").config == (("learn", False), ("paper", True))
    htf = dict(run.off("htf-paper").config)
    assert "paper" not in htf and htf == {**HTFMPRConfig.PAPER, "model": "random"}
    HTFMPRConfig.from_dict(htf)
    assert run.off("frozen") is None and run.off_label("frozen") is None
    assert run.methods(("single-gpu", "rl", "rl+refine", "htf-mpr")) == (
        "single-gpu", "rl", "rl-off", "rl+refine", "rl-off+refine", "rl-paper", "rl-paper-off", "frozen",
        "htf-mpr", "htf-mpr-off", "htf-paper", "htf-paper-off")
    assert run.resolve("rl-paper-off") == ("rl", (("learn", False), ("paper", True)), False)
    assert run.resolve("rl-off+refine") == ("rl", (("learn", False),), True)
    s = Setting("toy-mlp", "k80x2")
    wall = run.equal_wall_jobs(s, "rl+refine")
    learned = run.place(s, "rl+refine", 1)
    frozen, auto = dict(wall["frozen"][1].args), dict(wall["auto"][1].args)
    assert frozen["same_wall_as"] == auto["same_wall_as"] == learned.key
    assert frozen["refine_budget"] == QUICK.search and "refine_budget" not in auto
    assert frozen["config"] == (("learn", False),) and frozen["seed"] == 1
    assert run.equal_wall_jobs(s, "frozen") == {}
    given = []
    monkeypatch.setitem(jobs.JOBS, "place", lambda **a: given.append(a["time_s"]) or {})
    results = {learned.key: {"search_s": 3.0, "refine_s": 1.5}}
    jobs.run_job(wall["frozen"][1], results)
    jobs.run_job(wall["auto"][1], results)
    assert given == [3.0, 4.5]


def test_job_keys_of_earlier_results_are_unchanged():
    """A results folder from before a job argument existed is still found: defaults leave the key as it
    was (these are keys an earlier version wrote)."""
    s = Setting("rnnlm-2", "k80x2")
    assert Job.of("place", setting=s, method="rl", budget=2.0, seed=0, config=(), refine_budget=None).key == (
        '{"budget": 2.0, "kind": "place", "method": "rl", "seed": 0, "setting": "rnnlm-2 on k80x2"}')
    assert Job.of("predictor", setting=s, budget=2.0, seed=0, runs=2, config=()).key == (
        '{"budget": 2.0, "kind": "predictor", "runs": 2, "seed": 0, "setting": "rnnlm-2 on k80x2"}')


def test_a_placement_under_uncertainty_is_its_worst_scenario():
    """place_job's worst-case speedup is the least over the scenarios of one GPU's step over the
    placement's, its range the least and largest step."""
    from autoplace.bench.jobs import place_job
    from autoplace.placers import place
    from autoplace.placers.auto import robust_simulator

    s = Setting("toy-mlp", "k80x2")
    r = place_job(s, "auto", 0.5, 0)
    graph, cluster = s.problem()
    rs = robust_simulator(graph, cluster)
    p = place(graph, cluster, "auto", seed=0, budget=0.5)
    one = place(graph, cluster, "single-gpu").to_array(graph, cluster)
    steps = rs.steps(np.stack([one, p.to_array(graph, cluster)]))
    assert r["worst_case_speedup"] == pytest.approx((steps[:, 0] / steps[:, 1]).min())
    assert r["step_range_s"] == pytest.approx([steps[:, 1].min(), steps[:, 1].max()])
    assert r["worst_case_speedup"] < (steps[:, 0] / steps[:, 1]).max()          # the scenarios disagree here
    assert place_job(s, "single-gpu", 0.5, 0)["worst_case_speedup"] == 1.0


def test_gdp_batch_table_from_its_results(tmp_path):
    """GDP-batch's gain over GDP-one and the batch policy's zero-shot section, from made-up results; a graph
    file's results are found by its content whatever its path."""
    from autoplace.bench import QUICK, make_run
    from autoplace.bench.gdp_tables import _batch_job, build_gdp_batch

    run, spec = make_run(quick=True, budgets=QUICK), TABLES["gdp-table2"]
    settings = tuple(Setting(f"/data/{n}.json", "p100x2", digest=f"sha256:{n}") for n in ("a", "b"))
    store = Store(tmp_path)
    big = spec.zero_shot_quick[0]
    store.add(_batch_job(spec, settings, run), {
        "steps_s": {settings[0].identity: 0.9, settings[1].identity: 2.0}, "updates": 3, "samples": 96,
        "wall_s": 1.0, "zero_shot": {big.identity: {"step_s": 0.3, "greedy_step_s": 0.31, "prior_step_s": 0.3,
                                                    "prior": "heft", "policy_s": 1.0, "prior_s": 2.0, "wall_s": 3.0}}})
    for s in settings:
        for m in ("gdp", "expert", "auto"):
            store.add(run.place(s, m), {"step_s": 1.0, "ok": True, "oom": [], "error": None, "search_s": 0,
                                        "wall_s": 0})
    for m in ("expert", "auto"):
        store.add(run.place(big, m), {"step_s": 0.4 if m == "auto" else 0.5, "ok": True, "oom": [], "error": None,
                                      "search_s": 0, "wall_s": 0})
    moved = tuple(Setting(f"/elsewhere/{n}.json", "p100x2", digest=f"sha256:{n}") for n in ("a", "b"))
    t = build_gdp_batch(spec, moved, run, store)                          # the same files under other paths
    rows = t.sections[0].rows
    assert rows[0][5] == "+10.0%" and rows[1][5] == "-100.0%"            # 1 - 0.9 / 1; 1 - 2 / 1
    assert rows[-1][5] == f"{1 - (0.9 * 2.0) ** 0.5:+.1%}"
    zs = t.sections[1].rows[0]
    assert zs[0] == big.key and zs[1] == "0.3" and zs[-1] == "-25%"          # 0.3 / 0.4 - 1


def _section(t, start: str):
    return next(x for x in t.sections if x.title.startswith(start))


def test_gdp_batch_over_seeds_against_its_three_baselines(tmp_path, monkeypatch):
    """A paired run: per seed, GDP-batch beside its learning-off self at equal samples and for its training's
    wall time, and auto on each setting for an equal share of that time; ratios by nominal and robust step
    from made-up results, each setting's wall time the batch's over its settings."""
    from autoplace.bench import QUICK, make_run
    from autoplace.bench import jobs as bench_jobs
    from autoplace.bench.gdp_tables import _batch_baselines, _batch_job, build_gdp_batch, gdp_batch_jobs

    run, spec = make_run(quick=True, budgets=QUICK, seeds=(0, 1)), TABLES["gdp-table2"]
    a, b = settings = (Setting("rnnlm-2", "p100x2"), Setting("wavenet-2x18", "p100x2"))
    jobs = gdp_batch_jobs(spec, settings, run)
    learned = {seed: _batch_job(spec, settings, run, seed) for seed in (0, 1)}
    base = {seed: _batch_baselines(spec, settings, run, seed) for seed in (0, 1)}
    for seed in (0, 1):
        off, wall, autos = base[seed]["off"][0], base[seed]["off-wall"][0], base[seed]["auto"]
        assert {learned[seed], off, wall, *autos} <= set(jobs)
        assert dict(off.args)["config"] == (("learn", False),) and "zero_shot" not in dict(off.args)
        assert dict(wall.args)["same_wall_as"] == learned[seed].key
        assert [dict(j.args)["setting"] for j in autos] == [a, b]
        assert all(dict(j.args)["same_wall_as"] == learned[seed].key and dict(j.args)["wall_parts"] == 2
                   for j in autos)
    got = {}
    monkeypatch.setitem(bench_jobs.JOBS, "place", lambda **kw: got.setdefault("time_s", kw["time_s"]))
    bench_jobs.run_job(base[0]["auto"][0], {learned[0].key: {"search_s": 9.0}})
    assert got["time_s"] == 4.5                                       # the batch's 9 s over its two settings
    monkeypatch.setitem(bench_jobs.JOBS, "gdp-batch", lambda **kw: got.update(batch_s=kw["time_s"]))
    bench_jobs.run_job(base[0]["off-wall"][0], {learned[0].key: {"search_s": 9.0}})
    assert got["batch_s"] == 9.0                                      # its learning-off self: the whole time
    fine = Job.of("place", setting=a, method="auto", seed=0, same_wall_as=learned[0].key, wall_of="fine_tune_wall_s")
    got.clear()
    bench_jobs.run_job(fine, {learned[0].key: {"search_s": 9.0, "fine_tune_wall_s": 2.5}})
    assert got["time_s"] == 2.5                                       # the field it names

    store = Store(tmp_path)
    ok = {"ok": True, "oom": [], "error": None, "wall_s": 0}

    def batch(steps, robust, search_s):
        return {"steps_s": {a.identity: steps[0], b.identity: steps[1]}, "updates": 4, "samples": 64,
                "robust_steps_s": {a.identity: robust[0], b.identity: robust[1]}, "search_s": search_s,
                "wall_s": search_s + 1, "zero_shot": {}}
    for seed, k in ((0, 1.0), (1, 2.0)):
        store.add(learned[seed], batch((k, 2 * k), (2 * k, 4 * k), 10.0))
        store.add(base[seed]["off"][0], batch((1.1 * k, 2.2 * k), (3 * k, 4 * k), 4.0))
        store.add(base[seed]["off-wall"][0], batch((1.2 * k, 2 * k), (2 * k, 4 * k), 10.0))
        for s, step in zip(settings, (0.5 * k, 4 * k)):
            store.add(base[seed]["auto"][settings.index(s)], {**ok, "step_s": step, "robust_step_s": step,
                                                                 "search_s": 5.0})
    for s in (*settings, *spec.zero_shot_quick):
        for m in ("gdp", "expert", "auto"):
            for j in run.place_all(s, m):
                store.add(j, {**ok, "step_s": 1.0, "search_s": 0})
    t = build_gdp_batch(spec, settings, run, store)
    assert _section(t, "GDP-batch against GDP-one").rows[0][2] == "1.5"               # the seeds' mean
    nominal = _section(t, "GDP-batch over seeds 0, 1, nominal").rows
    assert nominal[0][:3] == [a.key, "gdp-batch", "1.5 ± 0.71 (1)"]
    assert nominal[0][6:] == ["1.100 (1.100–1.100)", "1.200 (1.200–1.200)", "0.500 (0.500–0.500)", "5.0 / 5.0 / 5.0"]
    assert nominal[1][6:9] == ["1.100 (1.100–1.100)", "1.000 (1.000–1.000)", "2.000 (2.000–2.000)"]
    robust = _section(t, "GDP-batch over seeds 0, 1, robust").rows
    assert robust[0][6:9] == ["1.500 (1.500–1.500)", "1.000 (1.000–1.000)", "0.250 (0.250–0.250)"]
    assert robust[-1][:2] == ["geometric mean", "gdp-batch"]


def test_held_out_placements_over_seeds_against_their_baselines(tmp_path):
    """A paired leave-one-out run: the zero-shot placement against the untrained policy's (no equal-wall run:
    its samples are fixed) and auto for its wall time; the fine-tune against the pre-trained policy sampling
    without updates for its samples and its wall time, and auto for its wall time."""
    from autoplace.bench import QUICK, make_run
    from autoplace.bench.gdp_tables import _holdout_auto, _holdout_job, build_holdout, holdout_jobs

    run, spec = make_run(quick=True, budgets=QUICK, seeds=(0, 1)), TABLES["gdp-generalisation"]
    settings = (Setting("rnnlm-2", "p100x2"), Setting("wavenet-2x18", "p100x2"))
    jobs = holdout_jobs(spec, settings, run)
    store, ok = Store(tmp_path), {"ok": True, "oom": [], "error": None, "wall_s": 0, "search_s": 0}

    def search(step, wall):
        return {"step_s": step, "robust_step_s": 2 * step, "samples": 32, "updates": 2, "wall_s": wall}
    shot = {"greedy_step_s": 1.0, "policy_s": 0.1, "prior_s": 0.1, "prior_step_s": 1.0}
    for held in settings:
        for m in ("gdp", "hdp", "expert", "auto"):
            for j in run.place_all(held, m):
                store.add(j, {**ok, "step_s": 1.0})
        for seed in (0, 1):
            job = _holdout_job(held, settings, run, seed)[0]
            assert job in jobs and dict(job.args)["baselines"] is True
            autos = _holdout_auto(held, settings, run, seed)
            assert {dict(j.args)["wall_of"] for j in autos.values()} == {"zero_shot_wall_s", "fine_tune_wall_s"}
            assert all(j in jobs and dict(j.args)["same_wall_as"] == job.key for j in autos.values())
            k = 1 + seed                                          # each seed's steps its own
            store.add(job, {"zero_shot_s": 0.8 * k, "fine_tune_s": 0.5 * k, "scratch_s": 0.9, "pretrain_wall_s": 9.0,
                            "zero_shot_wall_s": 1.0, "fine_tune_wall_s": 3.0, "fine_tune_updates": 2,
                            "scratch_wall_s": 3.0, "scratch_updates": 2,
                            "zero_shot": {**shot, "step_s": 0.8 * k, "robust_step_s": 1.6 * k, "wall_s": 1.0},
                            "untrained_zero_shot": {**shot, "step_s": 1.0 * k, "robust_step_s": 1.6 * k,
                                                    "wall_s": 1.0},
                            "fine_tune": search(0.5 * k, 3.0), "scratch": search(0.9, 3.0),
                            "frozen": search(0.6 * k, 2.0), "frozen_wall": search(0.55 * k, 3.0)})
            store.add(autos["zero-shot"], {**ok, "step_s": 0.4 * k, "robust_step_s": 0.4 * k})
            store.add(autos["fine-tune"], {**ok, "step_s": 0.25 * k, "robust_step_s": 0.5 * k})
    t = build_holdout(spec, settings, run, store)
    assert _section(t, "Held-out graphs").rows[0][1:3] == ["1.2", "0.75"]            # the seeds' means
    assert _section(t, "Against the controls (seed 0)").rows[0][2:6] == ["1", "0.8", "0.10", "0.5"]
    rows = _section(t, "Zero-shot and fine-tuned placements over seeds 0, 1, nominal").rows
    zero, tune = rows[0], rows[1]
    assert zero[1] == "zero-shot" and zero[2] == "1.2 ± 0.57 (0.8)" and zero[4] == "–" and zero[6:] == [
        "1.250 (1.250–1.250)", "–", "0.500 (0.500–0.500)", "1.0 / – / 0.0"]
    assert tune[1] == "fine-tune" and tune[6:9] == ["1.200 (1.200–1.200)", "1.100 (1.100–1.100)", "0.500 (0.500–0.500)"]
    robust = _section(t, "Zero-shot and fine-tuned placements over seeds 0, 1, robust").rows
    assert robust[0][6] == "1.000 (1.000–1.000)" and robust[1][8] == "0.500 (0.500–0.500)"


def test_paired_gdp_jobs_need_their_baselines_fields():
    """A paired GDP-batch line without its robust steps, or a paired leave-one-out line without the
    fine-tune's learning-off runs, is set aside (its job runs again)."""
    from autoplace.bench.store import check_result

    key = Job.of("gdp-batch", settings=(Setting("a", "b"),), budget=1.0, seed=0, robust=True).key
    line = {"steps_s": {"a on b": 1.0}, "updates": 1, "samples": 8, "wall_s": 1.0, "search_s": 1.0}
    assert check_result(key, line) == "field 'robust_steps_s' is missing"
    assert check_result(key, {**line, "robust_steps_s": {"a on b": None}}) is None
    assert check_result(key, {**line, "robust_steps_s": {"a on b": -1.0}}) is not None
    key = Job.of("gdp-holdout", held_out=Setting("a", "b"), others=(), budget=1.0, fine_tune_updates=1, seed=0,
                 baselines=True).key
    shot = {"step_s": 1.0, "greedy_step_s": 1.0, "policy_s": 0.1, "prior_s": 0.1, "wall_s": 0.2}
    run = {"step_s": 1.0, "wall_s": 1.0}
    line = {"zero_shot_s": 1.0, "fine_tune_s": 1.0, "scratch_s": 1.0, "zero_shot": shot, "pretrain_wall_s": 1.0,
            "zero_shot_wall_s": 1.0, "fine_tune_wall_s": 1.0, "fine_tune_updates": 1, "scratch_wall_s": 1.0,
            "scratch_updates": 1, "fine_tune": run, "scratch": run, "frozen": run}
    assert check_result(key, line) == "field 'frozen_wall' is missing"
    assert check_result(key, {**line, "frozen_wall": run, "untrained_zero_shot": None}) == (
        "field 'untrained_zero_shot' must be an object")
    line["untrained_zero_shot"] = shot
    assert check_result(key, {**line, "frozen_wall": run}) is None
    assert check_result(key, {**line, "frozen_wall": {"step_s": 1.0}}) == (
        "field 'frozen_wall' lacks one of step_s, wall_s")


def _quick_tables(folder):
    """Every quick table built (Markdown) from ``folder``'s store, no job run: ``None`` where a job is missing."""
    from autoplace.bench import make_run, table_settings

    run, store = make_run(quick=True, seeds=(0, 1, 2)), Store(folder)      # as the committed folder was run
    for name, spec in TABLES.items():
        settings = table_settings(spec, True)
        if any(j not in store for j in spec.jobs(spec, settings, run)):
            return None
        spec.build(spec, settings, run, store).markdown()
    return True


def test_tables_build_from_any_store_line_that_passes_the_check(tmp_path):
    """Fields a job may leave out (or a damaged line may lack) never crash a table: for a seeded sample of the
    committed quick results with one optional field deleted or set to an edge value, a line that still passes
    check_result builds every table; one that does not is set aside (its job would run again). More of them:
    AUTOPLACE_PERTURBATIONS=3000 AUTOPLACE_PERTURB_SEED=N."""
    import os
    import random
    from pathlib import Path

    from autoplace.bench.store import check_result

    lines = (Path(__file__).parent.parent / "docs/results/bench/quick/jobs.jsonl").read_text().splitlines()
    rng = random.Random(int(os.environ.get("AUTOPLACE_PERTURB_SEED", "0")))
    built = rejected = 0
    for _ in range(int(os.environ.get("AUTOPLACE_PERTURBATIONS", "60"))):
        i = rng.randrange(len(lines))
        rec = json.loads(lines[i])
        target = rec["result"]                             # a field at any depth: search.*, models.*.*, ...
        while True:
            key = rng.choice(sorted(target))
            if isinstance(target[key], dict) and target[key] and rng.random() < 0.6:
                target = target[key]
                continue
            break
        if rng.random() < 0.4:
            target.pop(key)
        else:
            target[key] = rng.choice([None, 0, -1, [], {}, "", True, 10**400])
        folder = tmp_path / str(_)
        folder.mkdir()
        (folder / "jobs.jsonl").write_text("\n".join([*lines[:i], json.dumps(rec), *lines[i + 1:]]) + "\n")
        if check_result(rec["job"], rec["result"]) is None:
            assert _quick_tables(folder), f"line {i + 1}: {key} changed"
            built += 1
        else:
            assert _quick_tables(folder) is None
            rejected += 1
    assert built and rejected


@pytest.mark.parametrize("seeds", [(0,), (0, 1)])
def test_seeded_tables_from_made_up_steps_one_seed_or_a_failing_one(tmp_path, seeds):
    """One seed still pairs each learned placer with its learning-off self; a seed that fails makes the
    method's cell that failure (its own fields, not the first seed's), and a failed method never wins a
    section."""
    from autoplace.bench import QUICK, make_run
    from autoplace.bench.builders import build_placer_table

    run = make_run(budgets=QUICK, seeds=seeds)
    spec = TABLES["htf-mpr"]
    s = Setting("alexnet", "gtx1050tix2")
    store = Store(tmp_path)
    store.add(Job.of("bounds", setting=s), {"critical_path_s": 0.5, "load_s": 0.25, "ops": 10})
    for m in run.methods(spec.methods):
        for job in run.place_all(s, m):
            seed = dict(job.args)["seed"]
            fail = m == "htf-mpr" and seed == 1
            store.add(job, {"step_s": None if fail else 1.0 + 0.1 * seed, "ok": not fail,
                            "oom": ["gpu:0"] if fail else [], "error": None, "search_s": 0.5, "wall_s": 0.6,
                            **({} if fail else {"worst_case_speedup": 9.0 if m == "htf-mpr" else 1.1,
                                                "one_gpu_s": 2.0})})
    t = build_placer_table(spec, (s,), run, store)
    every = {r[1]: r for r in next(x for x in t.sections if x.title == "Every cell").rows}
    paired = next(x for x in t.sections if x.title.startswith("Learned placers over seeds")).rows
    if seeds == (0,):
        assert every["htf-mpr"][2] == "1 ± 0 (1)" and paired[0][6] == "1.000 (1.000–1.000)"
        assert paired[0][4:6] == ["not run", "not run"]                     # no equal-wall jobs in this store
    else:
        assert every["htf-mpr"][2] == "OOM (gpu:0)" and paired[0][6] == "–"
        robust = next(x for x in t.sections if x.title.startswith("Under the cost model"))
        assert "htf-mpr (" not in robust.rows[0][3]


def test_strategies_table_says_where_auto_picks_a_winning_hybrid_and_why_it_trails_data_parallelism(tmp_path):
    """Made-up steps on two four-GPU settings. On the first, auto picks a hybrid (2 replicas) 20 % faster than
    data parallelism and than the best pure placement (the pipeline's, below auto's own placement): a winning
    hybrid, picked. On the second, auto keeps its placement, nominally behind data parallelism: the row says
    so with the two regrets, and a hybrid of 4 replicas (as many as GPUs) is no hybrid."""
    from autoplace.bench import QUICK, make_run
    from autoplace.bench.builders import build_strategies_table

    run = make_run(budgets=QUICK)
    spec = TABLES["flexflow"]
    s1, s2 = Setting("inception-v3", "flexflow-p100x4"), Setting("alexnet", "flexflow-p100x4")
    store = Store(tmp_path)
    base = {"ok": True, "oom": [], "error": None, "search_s": 0.1, "wall_s": 0.1}
    for s, steps, pick in (
            (s1, {"single-gpu": 4.0, "expert": 3.0, "data-parallel": 1.0, "towers": 1.5, "hybrid": 0.8,
                  "pipelined": 1.0, "auto": 0.8}, "hybrid"),
            (s2, {"single-gpu": 4.0, "expert": 3.0, "data-parallel": 1.0, "towers": 1.5, "hybrid": 1.1,
                  "pipelined": 2.0, "auto": 1.02}, None)):
        store.add(Job.of("bounds", setting=s), {"critical_path_s": 0.5, "load_s": 0.25, "ops": 10})
        for m in spec.methods:
            r = {**base, "step_s": steps[m]}
            replicas = {"data-parallel": 4, "towers": 4, "hybrid": 2 if pick else 4, "pipelined": 1}.get(m)
            if replicas:
                r["strategy"] = {"kind": "replicas", "replicas": replicas, "per_replica": None}
            if m == "auto":
                rows = [{"method": "placement", "from": "m-topo", "step_time_s": 1.02 if not pick else 1.1,
                         "robust_step_s": 1.2, "fits": True, "replicas": 1, "regret": 1.05},
                        {"method": "data-parallel", "step_time_s": 1.0, "robust_step_s": 1.5, "fits": True,
                         "replicas": 4, "regret": 1.25},
                        {"method": "hybrid", "step_time_s": steps["hybrid"], "robust_step_s": 1.0, "fits": True,
                         "replicas": replicas or 2, "regret": 1.0 if pick else 1.3}]
                r.update({"from": pick or "m-topo", "strategies": rows})
                if pick:
                    r["strategy"] = {"kind": "replicas", "replicas": 2, "per_replica": "m-topo"}
            store.add(run.place(s, m), r)
    t = build_strategies_table(spec, (s1, s2), run, store)
    sec = t.sections[-1]
    assert "(1 setting(s)); whether auto's pick is such a hybrid (1 setting(s))" in sec.title
    rows = {r[0]: dict(zip(sec.columns, r)) for r in sec.rows}
    one, two = rows[s1.key], rows[s2.key]
    assert one["auto's pick"] == "hybrid (2 replicas, each by m-topo)" and one["pure placement (s)"] == "1"
    assert one["auto <= data-parallel"] == "yes"
    assert one["hybrid wins by 10 %"] == "yes" and one["auto picks a winning hybrid"] == "yes"
    assert two["auto <= data-parallel"] == "no (regret 1.050 against 1.250)"
    assert two["hybrid wins by 10 %"] == "–" and two["auto picks a winning hybrid"] == "no"
