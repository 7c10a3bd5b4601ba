"""Re-simulate a saved fidelity run's placements under another cluster file, against the same measurements.

    .venv/bin/python benchmarks/fidelity_resimulate.py --saved DIR --json RUN.json --cluster CLUSTER.json

``DIR`` is what ``benchmarks/fidelity.py --save DIR`` wrote (the measured cluster, each profiled graph and
its placements), ``RUN.json`` that run's ``--json``. Each model is re-anchored as fidelity.py does (the
geometric mean of the single-device placements' measured over simulated steps) and summarised the same
way: this tells how much of a run's error its ``cluster detect`` accounts for.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from autoplace.bench import fidelity


def main(argv=None) -> int:
    from autoplace.formats import load_cluster, load_graph, load_placement
    from autoplace.sim import Simulator

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--saved", required=True, help="the run's --save folder")
    ap.add_argument("--json", required=True, help="the run's --json file (the measurements)")
    ap.add_argument("--cluster", required=True, help="the cluster file to simulate with")
    args = ap.parse_args(argv)
    saved = json.loads(Path(args.json).read_text())
    cluster = load_cluster(args.cluster)
    for model in saved["summary"]:
        graph = load_graph(Path(args.saved) / f"{model}.graph.json")
        by_method = {p.method: p for p in map(load_placement, sorted(Path(args.saved).glob(f"{model}.p*.json")))}
        rows = [r for r in saved["rows"] if r["model"] == model]
        sim = Simulator(graph, cluster)
        singles = [r for r in rows if r["anchor"]]
        anchor = fidelity.anchor_of([r["measured_s"] for r in singles],
                                    [sim.run(by_method[r["method"]]).step_time for r in singles])
        sim = Simulator(fidelity.scaled(graph, anchor), cluster)
        s = fidelity.summarise([{**r, "simulated_s": sim.run(by_method[r["method"]]).step_time} for r in rows])
        print(f"{model}: anchor {anchor:.3f}, MAPE {100 * s['mape']:.1f} %, Kendall tau {s['kendall_tau']:.3f}, "
              f"split-half tau {s['split_half_tau']:.3f}, pairwise order {100 * s['pairwise_order_accuracy']:.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
