"""Cluster model: devices, directed links, shared segments (the presets are in :mod:`autoplace.cluster.presets`).

A :class:`Cluster` is immutable and compiles to arrays the simulator reads: ``bandwidth[s, d]`` and
``latency[s, d]`` for every ordered pair of devices (a :class:`Link` entry is one direction; the
cluster's ``default_link`` covers every pair without one). Presets cite their vendor figures in
``docs/formats.md#cluster-presets``; ``localhost`` is detected from this machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoplace.errors import ClusterError
from autoplace.validation import MAX_BYTES, MAX_CONCURRENCY, MAX_RATE, MAX_SECONDS, MIN_RATE, check_name, check_number

__all__ = ["Device", "Link", "LinkSpec", "Segment", "Cluster", "DEFAULT_ENGINES", "DEFAULT_LAUNCH_QUEUE_DEPTH",
           "ASYNCHRONOUS_TYPES", "GB"]

GB = 10**9
GiB = 2**30


@dataclass(frozen=True, slots=True)
class Device:
    """One compute device. Units: bytes, FLOP/s, bytes/s, seconds.

    ``peak_flops`` / ``memory_bandwidth`` are the vendor's peaks; ``achievable_flops`` /
    ``achievable_bandwidth`` what a large GEMM / a STREAM-style copy reach on it (``None``: the peak), which
    the roofline uses. ``concurrency`` is how many ops the device runs at once (TensorFlow's inter-op
    parallelism); ``op_overhead_s`` is added to every roofline-estimated op (kernel launch, dispatch) —
    on an *asynchronous* device it is the host's launch cost, paid by its ``launcher`` thread while the
    device runs earlier kernels (``asynchronous``: ``None`` is the type's default, :data:`ASYNCHRONOUS_TYPES`;
    ``launcher``: the host thread's name, ``None`` for one of its own; devices naming the same thread share
    it; ``launch_queue_depth``: launched kernels not yet finished before a launch blocks the thread);
    ``send_engines`` / ``recv_engines`` are its DMA copy engines for sending / receiving (``None``: the
    type's default, :data:`DEFAULT_ENGINES`; ``0``: none — a copy queues on the source's send engines,
    else the destination's receive engines, else the link);
    ``send_cost_s_per_byte`` is compute the device spends per byte it sends (a CPU worker's copy into the
    exchange buffer; 0 where a DMA engine moves the data), charged to the producing op;
    ``send_overhead_s`` / ``recv_overhead_s`` are its fixed compute per tensor sent / received (the
    executor's bookkeeping), charged to the producer / to the first consumer on the receiving device.
    """

    name: str
    type: str
    memory_bytes: int
    peak_flops: float
    memory_bandwidth: float
    op_overhead_s: float = 0.0
    concurrency: int = 1
    meta: Mapping[str, Any] = field(default_factory=dict)
    send_cost_s_per_byte: float = 0.0
    send_overhead_s: float = 0.0
    recv_overhead_s: float = 0.0
    send_engines: int | None = None
    recv_engines: int | None = None
    achievable_flops: float | None = None
    achievable_bandwidth: float | None = None
    asynchronous: bool | None = None
    launcher: str | None = None
    launch_queue_depth: int = 1024

    @property
    def kind(self) -> str:
        """Lower-case device type (``"cpu"``, ``"gpu"``): the key ``cost`` and ``device_types`` match."""
        return self.type.lower()

    @property
    def engines(self) -> tuple[int, int]:
        """(send, receive) copy engines, the type's default filled in; 0 means no limit."""
        default = DEFAULT_ENGINES.get(self.kind, (0, 0))
        return (default[0] if self.send_engines is None else self.send_engines,
                default[1] if self.recv_engines is None else self.recv_engines)


    @property
    def is_asynchronous(self) -> bool:
        """Is the device driven by a host thread that launches its ops ahead of it (a GPU)?"""
        return self.kind in ASYNCHRONOUS_TYPES if self.asynchronous is None else self.asynchronous


#: Device types driven by a launching host thread when a device does not say: a GPU runs kernels that a
#: host thread enqueued (CUDA C++ Programming Guide, "Asynchronous Concurrent Execution": kernel launches
#: return to the host before the kernel completes); a CPU worker runs its ops on its own thread.
ASYNCHRONOUS_TYPES = frozenset({"gpu"})
#: Launched kernels a GPU queues before the next launch blocks its host thread: about 1024 (measured on
#: NVIDIA GPUs: forums.developer.nvidia.com "Kernel launches blocking when 1024 kernels in a queue"; NVIDIA
#: documents no figure).
DEFAULT_LAUNCH_QUEUE_DEPTH = 1024

#: Copy engines of a device type when a device does not say: a GPU has one engine per direction (CUDA's
#: ``asyncEngineCount == 2``: one host-to-device and one device-to-host copy at a time, CUDA C++
#: Programming Guide, "Concurrent Data Transfers"); other types (a CPU, whose memory the GPUs' engines
#: read and write) have none.
DEFAULT_ENGINES: dict[str, tuple[int, int]] = {"gpu": (1, 1)}


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """A directed channel: bandwidth (bytes/s), per-transfer overhead and latency (s), and the shared
    segments its transfers cross (names of the cluster's :class:`Segment` s)."""

    bandwidth: float
    latency_s: float = 0.0
    overhead_s: float = 0.0
    segments: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Link:
    """A directed link ``src -> dst``. A copy over it is submitted for ``overhead_s`` of host time (a GPU's
    launcher, or a delay between CPUs), queues on the engines that do it (the source's send engines, else
    the destination's receive engines, else the link itself), moves at the least of ``bandwidth`` and its
    equal share of each segment it crosses, and lands ``latency_s`` after its last byte
    (docs/algorithms.md, Simulator step 3)."""

    src: str
    dst: str
    bandwidth: float
    latency_s: float = 0.0
    overhead_s: float = 0.0
    segments: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Segment:
    """Interconnect that several links share (a PCIe switch's uplink in one direction, a GPU's NVLink
    port, the host bridge): at most ``bandwidth`` bytes/s, shared equally by the transfers crossing it."""

    name: str
    bandwidth: float


def _check_link(where: str, link: Link | LinkSpec, segments: Mapping[str, int], ranges: bool = True) -> None:
    if ranges:
        check_number(link.bandwidth, f"{where} bandwidth", ClusterError, lo=MIN_RATE, hi=MAX_RATE)
        check_number(link.latency_s, f"{where} latency_s", ClusterError, hi=MAX_SECONDS)
        check_number(link.overhead_s, f"{where} overhead_s", ClusterError, hi=MAX_SECONDS)
    if isinstance(link.segments, str) or not all(isinstance(n, str) for n in link.segments):
        raise ClusterError(f"{where} segments must be a list of segment names")
    for n in link.segments:
        if n not in segments:
            raise ClusterError(f"{where} crosses an unknown segment {n!r}")
    if len(set(link.segments)) != len(link.segments):
        raise ClusterError(f"{where} names a segment twice")


def _check_device(where: str, d: Device, ranges: bool = True) -> None:
    check_name(d.type, f"{where} type", ClusterError)
    if ranges:
        _check_device_ranges(where, d)
    if d.asynchronous is not None and not isinstance(d.asynchronous, bool):
        raise ClusterError(f"{where} asynchronous must be true or false")
    if d.launcher is not None:
        check_name(d.launcher, f"{where} launcher", ClusterError)


def _check_device_ranges(where: str, d: Device) -> None:
    check_number(d.memory_bytes, f"{where} memory_bytes", ClusterError, lo=1, hi=MAX_BYTES, integer=True)
    for fld in ("peak_flops", "memory_bandwidth"):
        check_number(getattr(d, fld), f"{where} {fld}", ClusterError, lo=MIN_RATE, hi=MAX_RATE)
    for fld, peak in (("achievable_flops", "peak_flops"), ("achievable_bandwidth", "memory_bandwidth")):
        if getattr(d, fld) is not None:
            check_number(getattr(d, fld), f"{where} {fld}", ClusterError, lo=MIN_RATE, hi=MAX_RATE)
            if getattr(d, fld) > getattr(d, peak):
                raise ClusterError(f"{where} {fld} {getattr(d, fld):g} exceeds its {peak} {getattr(d, peak):g}")
    check_number(d.op_overhead_s, f"{where} op_overhead_s", ClusterError, hi=MAX_SECONDS)
    check_number(d.send_cost_s_per_byte, f"{where} send_cost_s_per_byte", ClusterError, hi=1.0 / MIN_RATE)
    for fld in ("send_overhead_s", "recv_overhead_s"):
        check_number(getattr(d, fld), f"{where} {fld}", ClusterError, hi=MAX_SECONDS)
    check_number(d.concurrency, f"{where} concurrency", ClusterError, lo=1, hi=MAX_CONCURRENCY, integer=True)
    for fld in ("send_engines", "recv_engines"):
        if getattr(d, fld) is not None:
            check_number(getattr(d, fld), f"{where} {fld}", ClusterError, lo=0, hi=MAX_CONCURRENCY, integer=True)
    check_number(d.launch_queue_depth, f"{where} launch_queue_depth", ClusterError, lo=1, hi=10**9, integer=True)


class Cluster:
    """Devices, a complete directed link matrix and the segments links share. Linted on construction.

    Arrays the simulator and placers read (``D`` devices, ``S`` segments): ``bandwidth``, ``latency``,
    ``overhead`` ``[D, D]`` per ordered pair (the link's own figures); ``transfer_bandwidth`` ``[D, D]``,
    the least of a pair's link and segment bandwidths (what a transfer runs at); ``route_ptr`` /
    ``route_seg``, the segments pair ``s * D + d`` crosses (CSR); ``segment_bandwidth`` ``[S]``;
    ``send_engines`` / ``recv_engines`` ``[D]`` (0: no limit); per device ``achievable_flops`` and
    ``achievable_bandwidth`` (the peaks where a device gives none) and the other device fields.

    ``derived=True`` marks a cluster computed from a checked one (an uncertainty scenario's scaled copy:
    :func:`autoplace.robust.scenario_cluster`): its structure is checked, the ranges a user's figures must
    lie in (docs/formats.md) are not, since a scaled figure at a documented limit may pass it.
    """

    def __init__(self, name: str, devices: Iterable[Device], links: Iterable[Link] = (),
                 default_link: LinkSpec | None = None, meta: Mapping[str, Any] | None = None,
                 segments: Iterable[Segment] = (), *, derived: bool = False):
        self.name = check_name(name, "the cluster's name", ClusterError)
        self.devices: tuple[Device, ...] = tuple(devices)
        self.links: tuple[Link, ...] = tuple(links)
        self.segments: tuple[Segment, ...] = tuple(segments)
        self.default_link = default_link
        self.meta: dict[str, Any] = dict(meta or {})
        self._index: dict[str, int] = {}
        if not self.devices:
            raise ClusterError(f"cluster {self.name!r} has no devices")
        for i, d in enumerate(self.devices):
            check_name(d.name, f"cluster {self.name!r}: a device's name", ClusterError)
            if d.name in self._index:
                raise ClusterError(f"cluster {self.name!r}: duplicate device name {d.name!r}")
            self._index[d.name] = i
            _check_device(f"cluster {self.name!r}: device {d.name!r}:", d, ranges=not derived)
        seg_index: dict[str, int] = {}
        for k, seg in enumerate(self.segments):
            check_name(seg.name, f"cluster {self.name!r}: a segment's name", ClusterError)
            if seg.name in seg_index:
                raise ClusterError(f"cluster {self.name!r}: duplicate segment name {seg.name!r}")
            seg_index[seg.name] = k
            if not derived:
                check_number(seg.bandwidth, f"cluster {self.name!r}: segment {seg.name!r}: bandwidth",
                             ClusterError, lo=MIN_RATE, hi=MAX_RATE)
        D = len(self.devices)
        self.bandwidth = np.full((D, D), np.nan)
        self.latency = np.full((D, D), np.nan)
        self.overhead = np.zeros((D, D))
        routes: list[tuple[str, ...]] = [()] * (D * D)
        if default_link is not None:
            _check_link(f"cluster {self.name!r}: default_link", default_link, seg_index, ranges=not derived)
            self.bandwidth[:] = default_link.bandwidth
            self.latency[:] = default_link.latency_s
            self.overhead[:] = default_link.overhead_s
            routes = [tuple(default_link.segments)] * (D * D)
        for link in self.links:
            where = f"cluster {self.name!r}: link {link.src!r} -> {link.dst!r}"
            for end in (link.src, link.dst):
                if end not in self._index:
                    raise ClusterError(f"{where} names an unknown device {end!r}")
            if link.src == link.dst:
                raise ClusterError(f"{where} connects a device to itself")
            _check_link(where, link, seg_index, ranges=not derived)
            s, d = self._index[link.src], self._index[link.dst]
            self.bandwidth[s, d] = link.bandwidth
            self.latency[s, d] = link.latency_s
            self.overhead[s, d] = link.overhead_s
            routes[s * D + d] = tuple(link.segments)
        np.fill_diagonal(self.bandwidth, np.inf)
        np.fill_diagonal(self.latency, 0.0)
        np.fill_diagonal(self.overhead, 0.0)
        missing = np.argwhere(np.isnan(self.bandwidth))
        if len(missing):
            s, d = missing[0]
            raise ClusterError(
                f"cluster {self.name!r}: no link from {self.devices[s].name!r} to {self.devices[d].name!r} "
                f"and no default_link")
        for s in range(D):
            routes[s * D + s] = ()
        self.segment_bandwidth = np.array([seg.bandwidth for seg in self.segments], dtype=np.float64)
        self.route_ptr = np.zeros(D * D + 1, dtype=np.int64)
        np.cumsum([len(r) for r in routes], out=self.route_ptr[1:])
        self.route_seg = np.array([seg_index[n] for r in routes for n in r], dtype=np.int64)
        self.transfer_bandwidth = self.bandwidth.copy()
        for sd, r in enumerate(routes):
            for n in r:
                s, d = divmod(sd, D)
                self.transfer_bandwidth[s, d] = min(self.transfer_bandwidth[s, d],
                                                    self.segments[seg_index[n]].bandwidth)
        self.memory_bytes = np.array([d.memory_bytes for d in self.devices], dtype=np.int64)
        self.peak_flops = np.array([d.peak_flops for d in self.devices], dtype=np.float64)
        self.memory_bandwidth = np.array([d.memory_bandwidth for d in self.devices], dtype=np.float64)
        self.achievable_flops = np.array([d.achievable_flops or d.peak_flops for d in self.devices], dtype=np.float64)
        self.achievable_bandwidth = np.array([d.achievable_bandwidth or d.memory_bandwidth for d in self.devices],
                                             dtype=np.float64)
        self.op_overhead = np.array([d.op_overhead_s for d in self.devices], dtype=np.float64)
        self.concurrency = np.array([d.concurrency for d in self.devices], dtype=np.int64)
        self.send_engines = np.array([d.engines[0] for d in self.devices], dtype=np.int64)
        self.recv_engines = np.array([d.engines[1] for d in self.devices], dtype=np.int64)
        self.send_cost = np.array([d.send_cost_s_per_byte for d in self.devices], dtype=np.float64)
        self.send_overhead = np.array([d.send_overhead_s for d in self.devices], dtype=np.float64)
        self.recv_overhead = np.array([d.recv_overhead_s for d in self.devices], dtype=np.float64)
        # host threads that launch the asynchronous devices' ops, in order of first use
        names: dict[str, int] = {}
        self.launcher = np.full(D, -1, dtype=np.int64)
        for i, d in enumerate(self.devices):
            if d.is_asynchronous:
                self.launcher[i] = names.setdefault(d.launcher or f"host thread of {d.name}", len(names))
        self.launcher_names: tuple[str, ...] = tuple(names)
        # the least a copy's submit overhead delays it: none between asynchronous devices (its launcher
        # submits it while the producer's kernel runs)
        peer = (self.launcher[:, None] >= 0) & (self.launcher[None, :] >= 0)
        self.submit_overhead = np.where(peer, 0.0, self.overhead)
        self.launch_queue_depth = np.array([d.launch_queue_depth for d in self.devices], dtype=np.int64)

    def transfer_time(self, nbytes: float | np.ndarray) -> np.ndarray:
        """Seconds from a tensor of ``nbytes`` being ready to its landing on each other device when nothing
        else is in flight: ``overhead + nbytes / transfer_bandwidth + latency`` per ordered pair (``[D, D]``,
        or ``[..., D, D]`` for an array of sizes); 0 on the diagonal. The least a transfer can take in the
        simulator, so estimates and bounds built on it never exceed a simulated delay: a copy between two
        asynchronous devices (a peer copy) is submitted right after its producer's launch, so its
        ``overhead`` can pass while the producer runs and is not counted. A control tensor takes only the
        latency."""
        b = np.asarray(nbytes, dtype=np.float64)[..., None, None]
        t = self.submit_overhead + b / self.transfer_bandwidth + self.latency
        return np.where(np.eye(self.n_devices, dtype=bool), 0.0, t)

    def mean_transfer_time(self, nbytes: float | np.ndarray) -> np.ndarray:
        """:meth:`transfer_time` averaged over the ordered pairs of distinct devices (HEFT's mean
        communication cost); 0 for a single device."""
        D = self.n_devices
        if D < 2:
            return np.zeros(np.shape(nbytes))
        off = ~np.eye(D, dtype=bool)
        b = np.asarray(nbytes, dtype=np.float64)
        return (self.submit_overhead[off] + self.latency[off]).mean() + b * (1.0 / self.transfer_bandwidth[off]).mean()

    # ------------------------------------------------------------------ queries
    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    def __repr__(self) -> str:
        return f"Cluster({self.name!r}, devices={[d.name for d in self.devices]})"

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            known = ", ".join(self.device_names)
            raise ClusterError(f"cluster {self.name!r} has no device {name!r} (it has: {known})") from None

    def device(self, name: str) -> Device:
        return self.devices[self.index(name)]

    @property
    def estimated(self) -> list[str]:
        """The devices whose figures are estimates (``meta["estimated"]``: ``localhost`` read from /proc and
        torch, not measured), in cluster order."""
        return [d.name for d in self.devices if d.meta.get("estimated")]

    def calibration_hint(self) -> str | None:
        """One line saying that this cluster's figures are estimates and which command measures them, or
        None when none of its devices is estimated."""
        est = self.estimated
        if not est:
            return None
        which = ", ".join(est[:4]) + (f" and {len(est) - 4} more" if len(est) > 4 else "")
        return (f"note: cluster {self.name!r}: the speeds of {which} are estimates, not measurements, so simulated "
                "steps may be far from measured ones; 'autoplace cluster detect -o cluster.json' measures this "
                "machine (then pass -c cluster.json), 'autoplace profile' measures a graph's op costs")

    def devices_of_kind(self, kind: str) -> list[int]:
        """Indices of the devices whose type is ``kind`` (case-insensitive), in cluster order."""
        return [i for i, d in enumerate(self.devices) if d.kind == kind.lower()]

    def link(self, src: str | int, dst: str | int) -> LinkSpec:
        """The figures of the ordered pair ``src -> dst`` (its link, or the default link)."""
        s = src if isinstance(src, int) else self.index(src)
        d = dst if isinstance(dst, int) else self.index(dst)
        k = s * self.n_devices + d
        route = tuple(self.segments[j].name for j in self.route_seg[self.route_ptr[k]:self.route_ptr[k + 1]])
        return LinkSpec(float(self.bandwidth[s, d]), float(self.latency[s, d]), float(self.overhead[s, d]), route)

    def without(self, names: Iterable[str], name: str | None = None) -> Cluster:
        """This cluster minus some devices (MinCut's "no CPU" target, say)."""
        drop = set(names)
        for n in drop:
            self.index(n)
        keep = [d for d in self.devices if d.name not in drop]
        links = [ln for ln in self.links if ln.src not in drop and ln.dst not in drop]
        return Cluster(name or f"{self.name}-without-{'-'.join(sorted(drop))}", keep, links,
                       self.default_link, self.meta, self.segments)
