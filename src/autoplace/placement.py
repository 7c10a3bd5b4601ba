"""Placements: op -> device assignments, validated against a graph and a cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoplace.cluster import Cluster
from autoplace.cost import check_device_types
from autoplace.errors import PlacementError
from autoplace.graph import Graph
from autoplace.schedule import NO_SCHEDULE

__all__ = ["Placement"]


@dataclass(frozen=True)
class Placement:
    """An assignment of every op of graph ``graph`` to a device of cluster ``cluster``.

    ``meta`` carries what the placer reports (search time, seed, bound ...) and survives a file round
    trip; the simulated result is added by writers, not stored here. ``schedule`` (optional) gives the ops of
    the devices it orders a priority: each such device runs its ops strictly in (priority, topological rank)
    order (:mod:`autoplace.schedule`); the others run their ops as they become ready.
    """

    assignment: Mapping[str, str]
    graph: str
    cluster: str
    method: str = "manual"
    meta: Mapping[str, Any] = field(default_factory=dict)
    schedule: Mapping[str, int] | None = None

    @classmethod
    def from_array(cls, graph: Graph, cluster: Cluster, devices: np.ndarray | list[int], method: str,
                   priorities: np.ndarray | None = None, **meta: Any) -> Placement:
        """Build from a device index per op (the form placers and the simulator work in), and optionally a
        priority per op (its schedule)."""
        devices = np.asarray(devices)
        if devices.shape != (graph.n_ops,):
            raise PlacementError(f"placement array has shape {devices.shape}, expected ({graph.n_ops},)")
        names = cluster.device_names
        assignment = {op.name: names[int(d)] for op, d in zip(graph.ops, devices)}
        schedule = None
        if priorities is not None:

            priorities = np.asarray(priorities)
            if priorities.shape != (graph.n_ops,):
                raise PlacementError(f"schedule array has shape {priorities.shape}, expected ({graph.n_ops},)")
            schedule = {op.name: int(p) for op, p in zip(graph.ops, priorities) if p != NO_SCHEDULE} or None
        return cls(assignment, graph.name, cluster.name, method, meta, schedule)

    def priorities(self, graph: Graph) -> np.ndarray | None:
        """The schedule's priority per op (None: no schedule; :data:`~autoplace.schedule.NO_SCHEDULE` for an
        op it does not order); raises :class:`PlacementError` naming the first op at fault."""

        if self.schedule is None:
            return None
        extra = [name for name in self.schedule if name not in graph]
        if extra:
            raise PlacementError(f"schedule names op {extra[0]!r} which is not in graph {graph.name!r}")
        out = np.full(graph.n_ops, NO_SCHEDULE, np.int64)
        for i, op in enumerate(graph.ops):
            p = self.schedule.get(op.name)
            if p is None:
                continue
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not -2**62 < p < 2**62:
                raise PlacementError(f"schedule gives op {op.name!r} priority {p!r}: expected an integer")
            out[i] = p
        return out

    def to_array(self, graph: Graph, cluster: Cluster) -> np.ndarray:
        """Device index per op; raises :class:`PlacementError` naming the first op or device at fault."""
        extra = [name for name in self.assignment if name not in graph]
        if extra:
            raise PlacementError(f"placement names op {extra[0]!r} which is not in graph {graph.name!r}"
                                 + (f" ({len(extra)} such ops)" if len(extra) > 1 else ""))
        missing = [op.name for op in graph.ops if op.name not in self.assignment]
        if missing:
            raise PlacementError(f"placement has no device for op {missing[0]!r}"
                                 + (f" ({len(missing)} ops missing)" if len(missing) > 1 else ""))
        index: dict[str, int] = {}
        out = np.empty(graph.n_ops, dtype=np.int64)
        for i, op in enumerate(graph.ops):
            dname = self.assignment[op.name]
            d = index.get(dname)
            if d is None:
                try:
                    d = index[dname] = cluster.index(dname)
                except Exception:
                    raise PlacementError(
                        f"placement puts op {op.name!r} on unknown device {dname!r} "
                        f"(cluster {cluster.name!r} has: {', '.join(cluster.device_names)})") from None
            out[i] = d
        check_device_types(graph, cluster, out)
        groups = graph.colocation_groups()
        if groups:
            member = np.concatenate(list(groups.values()))
            gid = np.repeat(np.arange(len(groups)), [len(m) for m in groups.values()])
            lo, hi = np.full(len(groups), np.iinfo(np.int64).max), np.full(len(groups), -1)
            np.minimum.at(lo, gid, out[member])
            np.maximum.at(hi, gid, out[member])
            split = np.flatnonzero(lo != hi)
            if len(split):
                group, members = list(groups.items())[int(split[0])]
                names = ", ".join(cluster.device_names[int(d)] for d in np.unique(out[members]))
                raise PlacementError(f"placement splits co-location group {group!r} over devices {names} "
                                     f"(op {graph.ops[int(members[0])].name!r} and others)")
        return out

    def counts(self) -> dict[str, int]:
        """Number of ops per device."""
        out: dict[str, int] = {}
        for d in self.assignment.values():
            out[d] = out.get(d, 0) + 1
        return out
