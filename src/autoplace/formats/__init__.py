"""Versioned JSON formats: ``autoplace.graph/v1``, ``autoplace.cluster/v1``, ``autoplace.placement/v1``.

Readers accept exactly the fields documented in ``docs/formats.md`` (extra fields are kept as ``meta``
and written back); ``.json.gz`` is accepted everywhere. Writers are atomic. I/O never computes: these
functions only convert between files, dicts and the typed objects.
"""

from __future__ import annotations

import os
from typing import Any

from autoplace.cluster import DEFAULT_LAUNCH_QUEUE_DEPTH, Cluster, Device, Link, LinkSpec, Segment
from autoplace.errors import AutoplaceError, FormatError
from autoplace.formats.files import Fields, check_format, read_json, write_json
from autoplace.graph import Graph, Op, TensorSpec
from autoplace.placement import Placement

__all__ = [
    "GRAPH_FORMAT", "CLUSTER_FORMAT", "PLACEMENT_FORMAT",
    "graph_from_dict", "graph_to_dict", "load_graph", "save_graph",
    "cluster_from_dict", "cluster_to_dict", "load_cluster", "save_cluster",
    "placement_from_dict", "placement_to_dict", "load_placement", "save_placement",
    "read_json", "write_json",
]

GRAPH_FORMAT = "autoplace.graph/v1"
CLUSTER_FORMAT = "autoplace.cluster/v1"
PLACEMENT_FORMAT = "autoplace.placement/v1"


# ---------------------------------------------------------------------- graph
def _op_from_dict(obj: Any, i: int, where: str) -> Op:
    name = obj.get("name") if isinstance(obj, dict) else None
    f = Fields(obj, f"{where}: op #{i}" + (f" ({name!r})" if isinstance(name, str) else ""))
    outputs = f.list("outputs", None)
    specs = None
    if outputs is not None:
        specs = []
        for k, o in enumerate(outputs):
            of = Fields(o, f"{f.where}: output {k}")
            shape = of.list("shape")
            if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
                raise FormatError(f"{of.where}: shape must be a list of non-negative integers, got {shape}")
            specs.append(TensorSpec(tuple(shape), of.str("dtype", "float32")))
        specs = tuple(specs)
    output_bytes = f.list("output_bytes", None)
    if output_bytes is not None:
        for b in output_bytes:
            if (isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 <= b < float("inf")
                    or (isinstance(b, float) and not b.is_integer())):
                raise FormatError(f"{f.where}: field 'output_bytes' must list whole numbers of bytes >= 0, "
                                  f"got {b!r}")
        output_bytes = tuple(int(b) for b in output_bytes)
    cost = f.dict("cost", {})
    for key, sec in cost.items():
        if isinstance(sec, bool) or not isinstance(sec, (int, float)):
            raise FormatError(f"{f.where}: cost[{key!r}] must be a number of seconds, got {sec!r}")
    device_types = f.str_list("device_types", None)
    op = Op(
        name=f.str("name"),
        type=f.str("type"),
        inputs=tuple(f.str_list("inputs", [])),
        control_inputs=tuple(f.str_list("control_inputs", [])),
        outputs=specs,
        output_bytes=output_bytes,
        flops=float(f.number("flops", 0.0)),
        param_bytes=f.int("param_bytes", 0),
        cost={k: float(v) for k, v in cost.items()},
        device_types=tuple(device_types) if device_types is not None else None,
        colocation_group=f.str("colocation_group", None),
        scope=f.str("scope", None),
        phase=f.str("phase", None),
        meta=f.extra(),
    )
    return op


def graph_from_dict(obj: Any, where: str = "graph") -> Graph:
    """Build a :class:`Graph` from a parsed ``autoplace.graph/v1`` object."""
    check_format(obj, GRAPH_FORMAT, where)
    f = Fields(obj, where)
    f.known.add("format")
    name = f.str("name")
    ops_raw = f.list("ops")
    ops = [_op_from_dict(o, i, where) for i, o in enumerate(ops_raw)]
    try:
        return Graph(ops, name=name, meta=f.extra())
    except AutoplaceError as e:
        raise type(e)(f"{where}: {e}") from None


def graph_to_dict(graph: Graph) -> dict[str, Any]:
    """The ``autoplace.graph/v1`` object of ``graph`` (defaults omitted, extra fields kept)."""
    ops = []
    for op in graph.ops:
        d: dict[str, Any] = {"name": op.name, "type": op.type}
        if op.inputs:
            d["inputs"] = list(op.inputs)
        if op.control_inputs:
            d["control_inputs"] = list(op.control_inputs)
        if op.outputs is not None:
            d["outputs"] = [{"shape": list(t.shape), "dtype": t.dtype} for t in op.outputs]
        if op.output_bytes is not None:
            d["output_bytes"] = list(op.output_bytes)
        if op.flops:
            d["flops"] = op.flops
        if op.param_bytes:
            d["param_bytes"] = op.param_bytes
        if op.cost:
            d["cost"] = dict(op.cost)
        if op.device_types is not None:
            d["device_types"] = list(op.device_types)
        for key in ("colocation_group", "scope", "phase"):
            if getattr(op, key) is not None:
                d[key] = getattr(op, key)
        d.update(op.meta)
        ops.append(d)
    return {"format": GRAPH_FORMAT, "name": graph.name, **graph.meta, "ops": ops}


def load_graph(path: str | os.PathLike) -> Graph:
    return graph_from_dict(read_json(path), str(path))


def save_graph(graph: Graph, path: str | os.PathLike) -> None:
    write_json(path, graph_to_dict(graph))


# ---------------------------------------------------------------------- cluster
def _link_fields(f: Fields) -> dict[str, Any]:
    """The fields a link and the default link share (and no others: links keep no metadata)."""
    out = {"bandwidth": float(f.number("bandwidth", positive=True)), "latency_s": float(f.number("latency_s", 0.0)),
           "overhead_s": float(f.number("overhead_s", 0.0)), "segments": tuple(f.str_list("segments", []))}
    f.no_extra()
    return out


def _link_dict(link: Link | LinkSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"bandwidth": link.bandwidth, "latency_s": link.latency_s}
    if link.overhead_s:
        out["overhead_s"] = link.overhead_s
    if link.segments:
        out["segments"] = list(link.segments)
    return out


def cluster_from_dict(obj: Any, where: str = "cluster") -> Cluster:
    """Build a :class:`Cluster` from a parsed ``autoplace.cluster/v1`` object."""
    check_format(obj, CLUSTER_FORMAT, where)
    f = Fields(obj, where)
    f.known.add("format")
    name = f.str("name")
    devices = []
    for i, raw in enumerate(f.list("devices")):
        dname = raw.get("name") if isinstance(raw, dict) else None
        df = Fields(raw, f"{where}: device #{i}" + (f" ({dname!r})" if isinstance(dname, str) else ""))
        devices.append(Device(
            name=df.str("name"), type=df.str("type"), memory_bytes=df.int("memory_bytes", minimum=1),
            peak_flops=float(df.number("peak_flops", positive=True)),
            memory_bandwidth=float(df.number("memory_bandwidth", positive=True)),
            op_overhead_s=float(df.number("op_overhead_s", 0.0)), concurrency=df.int("concurrency", 1, minimum=1),
            send_cost_s_per_byte=float(df.number("send_cost_s_per_byte", 0.0)),
            send_overhead_s=float(df.number("send_overhead_s", 0.0)),
            recv_overhead_s=float(df.number("recv_overhead_s", 0.0)),
            send_engines=df.int("send_engines", None), recv_engines=df.int("recv_engines", None),
            achievable_flops=_optional_float(df.number("achievable_flops", None, positive=True)),
            achievable_bandwidth=_optional_float(df.number("achievable_bandwidth", None, positive=True)),
            asynchronous=df.bool("asynchronous", None), launcher=df.str("launcher", None),
            launch_queue_depth=df.int("launch_queue_depth", DEFAULT_LAUNCH_QUEUE_DEPTH, minimum=1),
            meta=df.extra()))
    segments = []
    for i, raw in enumerate(f.list("segments", [])):
        sf = Fields(raw, f"{where}: segment #{i}")
        segments.append(Segment(sf.str("name"), float(sf.number("bandwidth", positive=True))))
        sf.no_extra()
    links = []
    for i, raw in enumerate(f.list("links", [])):
        lf = Fields(raw, f"{where}: link #{i}")
        links.append(Link(lf.str("src"), lf.str("dst"), **_link_fields(lf)))
    default = f.dict("default_link", None)
    default_link = LinkSpec(**_link_fields(Fields(default, f"{where}: default_link"))) if default is not None else None
    try:
        return Cluster(name, devices, links, default_link, meta=f.extra(), segments=segments)
    except AutoplaceError as e:
        raise type(e)(f"{where}: {e}") from None


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    """The ``autoplace.cluster/v1`` object of ``cluster``."""
    devices = []
    for d in cluster.devices:
        devices.append({"name": d.name, "type": d.type, "memory_bytes": int(d.memory_bytes),
                        "peak_flops": d.peak_flops, "memory_bandwidth": d.memory_bandwidth,
                        "op_overhead_s": d.op_overhead_s, "concurrency": d.concurrency,
                        **{k: getattr(d, k) for k in ("send_cost_s_per_byte", "send_overhead_s", "recv_overhead_s")
                           if getattr(d, k)},
                        **{k: getattr(d, k) for k in ("send_engines", "recv_engines", "achievable_flops",
                                                      "achievable_bandwidth", "asynchronous", "launcher")
                           if getattr(d, k) is not None},
                        **({"launch_queue_depth": d.launch_queue_depth}
                           if d.launch_queue_depth != DEFAULT_LAUNCH_QUEUE_DEPTH else {}),
                        **d.meta})
    out: dict[str, Any] = {"format": CLUSTER_FORMAT, "name": cluster.name, **cluster.meta, "devices": devices}
    if cluster.segments:
        out["segments"] = [{"name": seg.name, "bandwidth": seg.bandwidth} for seg in cluster.segments]
    out["links"] = [{"src": ln.src, "dst": ln.dst, **_link_dict(ln)} for ln in cluster.links]
    if cluster.default_link is not None:
        out["default_link"] = _link_dict(cluster.default_link)
    return out


def _optional_float(x: Any) -> float | None:
    return None if x is None else float(x)


def load_cluster(path: str | os.PathLike) -> Cluster:
    return cluster_from_dict(read_json(path), str(path))


def save_cluster(cluster: Cluster, path: str | os.PathLike) -> None:
    write_json(path, cluster_to_dict(cluster))


# ---------------------------------------------------------------------- placement
def placement_from_dict(obj: Any, where: str = "placement") -> Placement:
    """Build a :class:`Placement` from a parsed ``autoplace.placement/v1`` object."""
    check_format(obj, PLACEMENT_FORMAT, where)
    f = Fields(obj, where)
    f.known.update({"format", "result"})
    assignment = f.dict("assignment")
    for op, dev in assignment.items():
        if not isinstance(dev, str):
            raise FormatError(f"{where}: assignment[{op!r}] must be a device name, got {dev!r}")
    schedule = f.dict("schedule", None)
    for op, prio in (schedule or {}).items():
        if isinstance(prio, bool) or not isinstance(prio, int) or not -2**62 < prio < 2**62:
            raise FormatError(f"{where}: schedule[{op!r}] must be an integer priority, got {prio!r}")
    return Placement(dict(assignment), f.str("graph"), f.str("cluster"), f.str("method", "manual"), f.extra(),
                     None if schedule is None else dict(schedule))


def placement_to_dict(placement: Placement, result: Any = None) -> dict[str, Any]:
    """The ``autoplace.placement/v1`` object; ``result`` (a SimResult) is added as ``"result"``."""
    out: dict[str, Any] = {"format": PLACEMENT_FORMAT, "graph": placement.graph, "cluster": placement.cluster,
                           "method": placement.method, **placement.meta}
    if result is not None:
        out["result"] = result.to_dict()
    out["assignment"] = dict(placement.assignment)
    if placement.schedule is not None:
        out["schedule"] = {k: int(v) for k, v in placement.schedule.items()}
    return out


def load_placement(path: str | os.PathLike) -> Placement:
    return placement_from_dict(read_json(path), str(path))


def save_placement(placement: Placement, path: str | os.PathLike, result: Any = None) -> None:
    write_json(path, placement_to_dict(placement, result))
