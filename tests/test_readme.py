"""The README's tour quotes what its commands print (``bash benchmarks/tour.sh`` runs them all and prints
every figure). The op counts and the captured step's summary are checked here against what the code gives
now, so a change to capture or the zoo cannot leave them stale; the simulated steps, which take minutes to
recompute, are tour.sh's to refresh."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


@pytest.mark.slow
def test_the_tours_capture_line_is_what_capture_prints(tmp_path, capsys):
    pytest.importorskip("torch")
    from autoplace.cli import main

    quoted = re.search(r"`(\w+: \d+ ops .*? per step)`", README)
    assert quoted, "the README's tour no longer quotes the capture line"
    assert main(["capture", f"{ROOT / 'examples' / 'tiny_lm.py'}:make_step", "-o", str(tmp_path / "t.json.gz")]) == 0
    printed = capsys.readouterr().out
    assert quoted.group(1) in " ".join(printed.split()), printed


@pytest.mark.slow
def test_the_tours_inception_op_count_is_the_zoos():
    pytest.importorskip("torch")
    from autoplace import build_graph

    quoted = re.search(r"Inception-V3 \(([\d,]+) ops[,)]", README)
    assert quoted, "the README's tour no longer quotes Inception-V3's op count"
    assert f"{build_graph('inception-v3').n_ops:,}" == quoted.group(1)
