"""How much of a cut-heavy placement's step is communication, on Mirhoseini et al.'s K80 settings.

    .venv/bin/python benchmarks/cut_costs.py

For Mirhoseini et al.'s Table 2 models (rnnlm-2, nmt-2, inception-v3) on k80x2 and k80x4, the Scotch,
MinCut and expert placements: simulated step beside single-GPU, how many transfers and bytes a step moves,
how long all links together and the busiest link and segment are busy, and the busy time of the CPU and
each GPU.
"""

from __future__ import annotations

import sys

from _common import TableOut

from autoplace.bench.published import MIRHOSEINI_TABLE2


def main() -> int:
    from autoplace.cluster import get_cluster
    from autoplace.placers import place
    from autoplace.sim import Simulator
    from autoplace.zoo import build_graph

    out = TableOut(["setting", "method", "step (s)", "single-GPU (s)", "transfers", "GB moved", "links busy, all (s)",
                    "busiest link (s)", "busiest segment (s)", "CPU busy (s)", "GPUs busy (s)"], "llrrrrrrrrl")
    for model in MIRHOSEINI_TABLE2:
        g = build_graph(model)
        for cname in ("k80x2", "k80x4"):
            c = get_cluster(cname)
            sim = Simulator(g, c)
            single = sim.run(place(g, c, "single-gpu")).step_time
            for method in ("scotch", "mincut", "expert"):
                r = sim.run(place(g, c, method, seed=0))
                out.row(f"{model}, {cname}", method, f"{r.step_time:.3f}", f"{single:.3f}", r.n_transfers,
                        f"{r.transfer_bytes / 1e9:.2f}", f"{r.link_time.sum():.3f}", f"{r.link_time.max():.3f}",
                        f"{r.segment_time.max(initial=0.0):.3f}", f"{r.busy_time[0]:.3f}",
                        " ".join(f"{b:.3f}" for b in r.busy_time[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
