"""The fuzz corpus (tests/fuzz_corpus.py): every bad input exits with its expected code (an error: 2 or 3,
with one line naming the culprit), no traceback, and nothing written; every bad Python API call raises an
AutoplaceError with a one-line message."""

from __future__ import annotations

import re

import pytest
from fuzz_corpus import Special, api_cases, corpus, listening, make_special, rank_cases

from autoplace.cli import main

#: classes whose every case builds a learned search (most of the corpus's time): in `make test-slow`, which CI
#: runs beside the default suite
SLOW_CLASSES = ("--set", "checkpoints", "policies")
CASES = [c for cases in corpus(0).values() for c in cases]
PARAMS = [pytest.param(c, marks=pytest.mark.slow) if name in SLOW_CLASSES else c
          for name, cases in corpus(0).items() for c in cases]
API = api_cases()
ERROR_LINE = re.compile(r"^autoplace( [a-z]+)*: error: \S.*$")
PROGRESS_LINE = re.compile(r"^\[autoplace \+\d+\.\d s\] \S")


def test_the_corpus_is_large_and_reproducible():
    assert len(CASES) + len(API) >= 1500
    assert [c.name for c in CASES] == [c.name for cases in corpus(0).values() for c in cases]


def _files(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("case", PARAMS, ids=[f"{i}" for i in range(len(CASES))])
def test_bad_input_is_one_clean_line(case, tmp_path, capfd):
    with listening(case.listener) as port:
        _run_case(case, tmp_path, capfd, port)


def _run_case(case, tmp_path, capfd, port) -> None:
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        content = content() if callable(content) else content
        if port is not None and isinstance(content, str):
            content = content.replace("{port}", str(port))
        if isinstance(content, Special):
            make_special(path, content)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
    before = _files(tmp_path)
    argv = [a.replace("{dir}", str(tmp_path)) for a in case.argv]
    try:
        rc = main(argv)
    except SystemExit as e:                       # argparse: usage errors
        rc = e.code
    out, err = capfd.readouterr()
    assert rc in case.exit_codes, f"{case.name}: exit {rc}; stderr {err!r}; stdout {out[-300:]!r}"
    assert "Traceback" not in err and "this file ran code" not in out + err
    assert case.stdout_has in out, f"{case.name}: stdout {out[-300:]!r}"
    if rc != 0:
        # a search that started before the culprit was found has reported progress (plain lines, stderr
        # being no terminal here): the error is the one line besides them
        lines = [ln for ln in err.strip("\n").split("\n") if not PROGRESS_LINE.match(ln)]
        assert len(lines) == 1 and ERROR_LINE.match(lines[0]), f"{case.name}: stderr {err!r}"
    for name in case.outputs:
        assert not (tmp_path / name).exists(), f"{case.name}: wrote {name}"
    after = _files(tmp_path)
    assert after == before, f"{case.name}: files changed: {sorted(set(after) ^ set(before)) or 'contents'}"
    assert not list(tmp_path.rglob(".*.tmp")), f"{case.name}: temp file left behind"


@pytest.mark.parametrize("name,call,error", API, ids=[f"api{i}" for i in range(len(API))])
def test_a_bad_api_call_is_one_autoplace_error(name, call, error, capfd):
    with pytest.raises(error) as e:
        call()
    assert "\n" not in str(e.value) and str(e.value), name
    assert "Traceback" not in capfd.readouterr().err, f"{name}: a traceback printed beside the error"


RANKS = rank_cases()


@pytest.mark.parametrize("case", RANKS, ids=[f"rank{i}" for i in range(len(RANKS))])
def test_a_bad_rank_environment_is_one_clean_line(case, tmp_path, monkeypatch, capsys):
    from autoplace.runtime.dist.rendezvous import SECRET_ENV, ranks_secret
    from autoplace.runtime.dist.serve import main as rank_main

    ranks_secret(tmp_path / "ranks.secret")
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29401",
           SECRET_ENV: str(tmp_path / "ranks.secret"), **case.env}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)
    before = _files(tmp_path)
    try:
        rc = rank_main([a.replace("{dir}", str(tmp_path)) for a in case.argv])
    except SystemExit as e:                       # argparse: a flag's value of the wrong type
        rc = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "Traceback" not in "\n".join(err), f"{case.name}: exit {rc}; {err}"
    assert len(err) == 1 and re.match(r"^autoplace rank( \d+)?: error: \S", err[0]), f"{case.name}: {err}"
    assert _files(tmp_path) == before
