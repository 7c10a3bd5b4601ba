"""Export a simulated timeline as a Chrome trace (open in https://ui.perfetto.dev or chrome://tracing).

One track per device (its ops, named by op and coloured by phase) and one per directed link (its
transfers, named by tensor). Times are microseconds, as the trace format requires.
"""

from __future__ import annotations

from typing import Any

from autoplace.cluster import Cluster
from autoplace.graph import Graph

__all__ = ["chrome_trace"]

_PHASE_COLOR = {"forward": "thread_state_running", "backward": "thread_state_iowait",
                "update": "thread_state_runnable"}


def chrome_trace(graph: Graph, cluster: Cluster, result: Any) -> dict[str, Any]:
    """The Chrome trace-event object of ``result`` (a SimResult simulated with ``trace=True``)."""
    tl = result.timeline
    if tl is None:
        raise ValueError("the result has no timeline: simulate with trace=True")
    names = cluster.device_names
    D = len(names)
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"{graph.name} on {cluster.name}"}},
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "links"}},
    ]
    for d, name in enumerate(names):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": d, "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": d, "args": {"sort_index": d}})
    for i in graph.topological_order:
        op = graph.ops[int(i)]
        ev = {"name": op.name, "cat": op.phase or op.type, "ph": "X", "pid": 0, "tid": int(tl.device[i]),
              "ts": float(tl.start[i]) * 1e6, "dur": float(tl.finish[i] - tl.start[i]) * 1e6,
              "args": {"type": op.type, "flops": op.flops, "scope": op.scope}}
        if op.phase in _PHASE_COLOR:
            ev["cname"] = _PHASE_COLOR[op.phase]
        events.append(ev)
    seen_links: set[int] = set()
    for x in range(tl.n_transfers):
        s, d = int(tl.transfer_src[x]), int(tl.transfer_dst[x])
        tid = s * D + d
        if tid not in seen_links:
            seen_links.add(tid)
            events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                           "args": {"name": f"{names[s]} -> {names[d]}"}})
        t = int(tl.transfer_tensor[x])
        producer = graph.ops[int(graph.tensor_src[t])].name
        k = int(graph.tensor_out[t])
        events.append({"name": f"{producer}:{k}" if k >= 0 else f"^{producer}", "cat": "transfer", "ph": "X",
                       "pid": 1, "tid": tid, "ts": float(tl.transfer_start[x]) * 1e6,
                       "dur": float(tl.transfer_end[x] - tl.transfer_start[x]) * 1e6,
                       "args": {"bytes": int(graph.tensor_bytes[t])}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"graph": graph.name, "cluster": cluster.name, "step_time_s": result.step_time}}
