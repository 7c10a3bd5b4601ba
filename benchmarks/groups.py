"""Co-location group counts beside Mirhoseini et al. 2017 Table 1.

    .venv/bin/python benchmarks/groups.py
"""

from __future__ import annotations

import sys

from autoplace.bench.published import MIRHOSEINI_TABLE1 as TABLE1

RULESETS = [("colocation",), ("colocation", "gradient"), ("colocation", "structure"),
            ("colocation", "single-consumer"), ("colocation", "gradient", "single-consumer", "structure"),
            ("colocation", "gradient", "single-consumer", "structure", "structure-first")]


def main() -> int:
    from _common import TableOut

    from autoplace.grouping import group_ops
    from autoplace.zoo import build_graph

    out = TableOut(["model", "ops (ours / paper)", "colocation", "+ gradient", "+ structure", "+ single-consumer",
                    "four rules", "all five (RL paper mode)", "paper's groups"])
    for name, (paper_ops, paper_groups) in TABLE1.items():
        g = build_graph(name)
        counts = [group_ops(g, rules).n_groups for rules in RULESETS]
        out.row(name, f"{g.n_ops:,} / {paper_ops:,}", *(f"{c:,}" for c in counts), paper_groups)
    return 0


if __name__ == "__main__":
    sys.exit(main())
