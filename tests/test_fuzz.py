"""The fuzz corpus (tests/fuzz_corpus.py): every bad input exits 2 or 3 with one line naming the culprit,
no traceback, and nothing written."""

from __future__ import annotations

import re

import pytest
from fuzz_corpus import corpus

from autoplace.cli import main

CASES = [c for cases in corpus(0).values() for c in cases]
ERROR_LINE = re.compile(r"^autoplace( [a-z]+)*: error: \S.*$")


def test_the_corpus_is_large_and_reproducible():
    assert len(CASES) >= 500
    assert [c.name for c in CASES] == [c.name for cases in corpus(0).values() for c in cases]


@pytest.mark.parametrize("case", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_bad_input_is_one_clean_line(case, tmp_path, capsys):
    for name, content in case.files.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    argv = [a.replace("{dir}", str(tmp_path)) for a in case.argv]
    try:
        rc = main(argv)
    except SystemExit as e:                       # argparse: usage errors
        rc = e.code
    out, err = capsys.readouterr()
    assert rc in (2, 3), f"{case.name}: exit {rc}; stderr {err!r}; stdout {out[-300:]!r}"
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), f"{case.name}: stderr {err!r}"
    assert "Traceback" not in err
    for name in case.outputs:
        assert not (tmp_path / name).exists(), f"{case.name}: wrote {name}"
    after = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before, f"{case.name}: files changed: {sorted(set(after) ^ set(before)) or 'contents'}"
    assert not list(tmp_path.glob(".*.tmp")), f"{case.name}: temp file left behind"
