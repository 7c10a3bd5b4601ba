"""Cluster model: devices, directed links, and the papers' machines as presets.

A :class:`Cluster` is immutable and compiles to arrays the simulator reads: ``bandwidth[s, d]`` and
``latency[s, d]`` for every ordered pair of devices (a :class:`Link` entry is one direction; the
cluster's ``default_link`` covers every pair without one). Presets cite their vendor figures in
``docs/formats.md#cluster-presets``; ``localhost`` is detected from this machine. The data model is in
:mod:`autoplace.cluster.model`, the presets in :mod:`autoplace.cluster.presets`.
"""

from autoplace.cluster.model import (
    ASYNCHRONOUS_TYPES,
    DEFAULT_ENGINES,
    DEFAULT_LAUNCH_QUEUE_DEPTH,
    Cluster,
    Device,
    Link,
    LinkSpec,
    Segment,
)
from autoplace.cluster.presets import CLUSTER_PRESETS, get_cluster

__all__ = ["Device", "Link", "LinkSpec", "Segment", "Cluster", "DEFAULT_ENGINES", "DEFAULT_LAUNCH_QUEUE_DEPTH",
           "ASYNCHRONOUS_TYPES", "CLUSTER_PRESETS", "get_cluster"]
