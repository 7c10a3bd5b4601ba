"""Cluster model: devices, directed links, and the papers' machines as presets.

A :class:`Cluster` is immutable and compiles to arrays the simulator reads: ``bandwidth[s, d]`` and
``latency[s, d]`` for every ordered pair of devices (a :class:`Link` entry is one direction; the
cluster's ``default_link`` covers every pair without one). Presets cite their vendor figures in
``docs/formats.md#cluster-presets``; ``localhost`` is detected from this machine.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoplace.errors import ClusterError, UnknownNameError
from autoplace.validation import MAX_BYTES, MAX_CONCURRENCY, MAX_RATE, MAX_SECONDS, MIN_RATE, check_name, check_number

__all__ = ["Device", "Link", "LinkSpec", "Segment", "Cluster", "DEFAULT_ENGINES", "DEFAULT_LAUNCH_QUEUE_DEPTH",
           "ASYNCHRONOUS_TYPES", "CLUSTER_PRESETS", "get_cluster"]

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


def _check_link(where: str, link: Link | LinkSpec, segments: Mapping[str, int]) -> None:
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


def _check_device(where: str, d: Device) -> None:
    check_name(d.type, f"{where} type", ClusterError)
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
    if d.asynchronous is not None and not isinstance(d.asynchronous, bool):
        raise ClusterError(f"{where} asynchronous must be true or false")
    if d.launcher is not None:
        check_name(d.launcher, f"{where} launcher", ClusterError)
    check_number(d.launch_queue_depth, f"{where} launch_queue_depth", ClusterError, lo=1, hi=10**9, integer=True)


class Cluster:
    """Devices, a complete directed link matrix and the segments links share. Linted on construction.

    Arrays the simulator and placers read (``D`` devices, ``S`` segments): ``bandwidth``, ``latency``,
    ``overhead`` ``[D, D]`` per ordered pair (the link's own figures); ``transfer_bandwidth`` ``[D, D]``,
    the least of a pair's link and segment bandwidths (what a transfer runs at); ``route_ptr`` /
    ``route_seg``, the segments pair ``s * D + d`` crosses (CSR); ``segment_bandwidth`` ``[S]``;
    ``send_engines`` / ``recv_engines`` ``[D]`` (0: no limit); per device ``achievable_flops`` and
    ``achievable_bandwidth`` (the peaks where a device gives none) and the other device fields.
    """

    def __init__(self, name: str, devices: Iterable[Device], links: Iterable[Link] = (),
                 default_link: LinkSpec | None = None, meta: Mapping[str, Any] | None = None,
                 segments: Iterable[Segment] = ()):
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
            _check_device(f"cluster {self.name!r}: device {d.name!r}:", d)
        seg_index: dict[str, int] = {}
        for k, seg in enumerate(self.segments):
            check_name(seg.name, f"cluster {self.name!r}: a segment's name", ClusterError)
            if seg.name in seg_index:
                raise ClusterError(f"cluster {self.name!r}: duplicate segment name {seg.name!r}")
            seg_index[seg.name] = k
            check_number(seg.bandwidth, f"cluster {self.name!r}: segment {seg.name!r}: bandwidth", ClusterError,
                         lo=MIN_RATE, hi=MAX_RATE)
        D = len(self.devices)
        self.bandwidth = np.full((D, D), np.nan)
        self.latency = np.full((D, D), np.nan)
        self.overhead = np.zeros((D, D))
        routes: list[tuple[str, ...]] = [()] * (D * D)
        if default_link is not None:
            _check_link(f"cluster {self.name!r}: default_link", default_link, seg_index)
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
            _check_link(where, link, seg_index)
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


# ---------------------------------------------------------------------- presets
# Every figure is a vendor specification or a published measurement; docs/formats.md#cluster-presets
# gives each source. Peaks: cores x clock x FLOP/cycle (CPUs), the vendor's figure (GPUs). Achievable
# rates: a large SGEMM's FLOP/s and a STREAM/bandwidthTest copy's bytes/s measured on that device (or,
# where none was published, on the nearest one, said so beside it). Transfer rates: bandwidthTest /
# nvbandwidth copies with pinned memory. The per-op overheads (5 us CPU, 10 us GPU, 5 us H100) are
# assumptions, not measurements.

#: CPU efficiency of AVX2 FMA code: MKL LINPACK on a Core i7-4770K (Haswell), 177 of 224 GFLOP/s
#: (Puget Systems, "Haswell Floating Point Performance"), applied to the AVX2 CPUs below.
AVX2_LINPACK_EFFICIENCY = 177 / 224
#: CPU memory efficiency: STREAM triad on 2x Xeon E5-2697 v3 (Haswell-EP, DDR4-2133), 102 of 136.5 GB/s
#: (Puget Systems, "Memory Performance for Intel Xeon Haswell-EP DDR4"), applied to the DDR4 CPUs below.
DDR4_STREAM_EFFICIENCY = 102 / 136.5
#: Time a GPU copy engine spends per copy over PCIe: cudaMemcpyAsync costs 5-7 us per submitted copy
#: (Wu et al. 2026, "DualPath", arXiv:2602.21548, sec. 5.2).
PCIE_COPY_OVERHEAD = 6e-6
#: A copy between GPUs without peer access, staged through host memory: 14.1-19.2 us per copy
#: (CUDA p2pBandwidthLatencyTest, P2P disabled, HGX H100; median 16.5 us).
STAGED_COPY_OVERHEAD = 16.5e-6
#: PCIe 3.0 x16, pinned copies to / from a Tesla P100 PCIe on its own socket (gearshifft PR #82).
PCIE3_X16_H2D, PCIE3_X16_D2H = 12.15 * GB, 12.89 * GB


def _cpu(name: str, model: str, cores: int, ghz: float, flop_per_cycle: int, mem: int, bw: float,
         overhead: float = 5e-6, *, flops_efficiency: float | None = None,
         achievable_bandwidth: float | None = None) -> Device:
    peak = cores * ghz * 1e9 * flop_per_cycle
    return Device(name, "cpu", mem, peak, bw, overhead, 1, {"model": model, "cores": cores},
                  achievable_flops=peak * flops_efficiency if flops_efficiency else None,
                  achievable_bandwidth=achievable_bandwidth)


def _gpus(n: int, model: str, mem: int, flops: float, bw: float, overhead: float = 10e-6, *,
          achievable_flops: float, achievable_bandwidth: float, engines: tuple[int, int] | None = None) -> list[Device]:
    send, recv = engines if engines is not None else (None, None)
    return [Device(f"gpu:{i}", "gpu", mem, flops, bw, overhead, 1, {"model": model}, send_engines=send,
                   recv_engines=recv, achievable_flops=achievable_flops, achievable_bandwidth=achievable_bandwidth)
            for i in range(n)]


def _links(devices: list[Device], spec: Callable[[Device, Device], LinkSpec]) -> list[Link]:
    """A link for every ordered pair of distinct devices, its figures from ``spec(src, dst)``."""
    links = []
    for a in devices:
        for b in devices:
            if a.name != b.name:
                s = spec(a, b)
                links.append(Link(a.name, b.name, s.bandwidth, s.latency_s, s.overhead_s, s.segments))
    return links


def _k80(n: int) -> Cluster:
    """Tesla K80 boards of two GK210 dies each behind the board's PCIe switch (one x16 host link per
    board); dies of one board copy peer to peer through it, dies of different boards through host memory
    (simpleP2P: peer access within a board only)."""
    # Haswell E5-2699 v3: 18 cores, 2.3 GHz, AVX2 2xFMA = 32 FP32 FLOP/cycle; DDR4-2133 x4 = 68 GB/s.
    # Mirhoseini et al. 2017 sec. 4.1: "We allow 50 GB of RAM for all models".
    cpu = _cpu("cpu:0", "Intel Xeon E5-2699 v3", 18, 2.3, 32, 50 * GB, 68 * GB,
               flops_efficiency=AVX2_LINPACK_EFFICIENCY, achievable_bandwidth=68 * GB * DDR4_STREAM_EFFICIENCY)
    # per die: 12 GB GDDR5, 240 GB/s, 4.37 TFLOPS FP32 at the 875 MHz boost; SGEMM (gpu-burn) 2.09-2.27
    # TFLOPS, bandwidthTest device-to-device 141.5 and 157.1 GB/s; deviceQuery: 2 copy engines (the default)
    gpus = _gpus(n, "Tesla K80 (one GK210 die)", 12 * GiB, 4.37e12, 240 * GB,
                 achievable_flops=2.18e12, achievable_bandwidth=149.3 * GB)
    # one die's pinned copies: 7.77 / 7.76 GB/s (POWER8 S822LC) and 7.9 / 10.7 GB/s (GCP), to / from it
    h2d, d2h = (7.77 + 7.9) / 2 * GB, (7.76 + 10.7) / 2 * GB

    def spec(a: Device, b: Device) -> LinkSpec:
        if a.kind == "cpu":
            return LinkSpec(h2d, 0.0, PCIE_COPY_OVERHEAD, (f"board{int(b.name[4:]) // 2}.down",))
        if b.kind == "cpu":
            return LinkSpec(d2h, 0.0, PCIE_COPY_OVERHEAD, (f"board{int(a.name[4:]) // 2}.up",))
        ba, bb = int(a.name[4:]) // 2, int(b.name[4:]) // 2
        if ba == bb:  # peer to peer through the board's switch (no published rate: a die's slower direction)
            return LinkSpec(min(h2d, d2h), 0.0, PCIE_COPY_OVERHEAD)
        return LinkSpec(min(h2d, d2h), 0.0, STAGED_COPY_OVERHEAD, (f"board{ba}.up", f"board{bb}.down"))

    devs = [cpu, *gpus]
    boards = (n + 1) // 2
    segments = [Segment(f"board{k}.{d}", bw) for k in range(boards)
                for d, bw in (("up", PCIE3_X16_D2H), ("down", PCIE3_X16_H2D))]
    return Cluster(f"k80x{n}", devs, _links(devs, spec), meta={"paper": "Mirhoseini et al. 2017, sec. 4.1"},
                   segments=segments)


def _p100(n: int) -> Cluster:
    """P100 PCIe cards on one CPU root complex through PCIe switches, four cards per switch and one x16
    uplink per switch (Supermicro's single-root 8-GPU design); p100x2/x4 are the first cards of it.
    Peer copies under one switch stay below it; others cross both switches' uplinks."""
    # Broadwell E5-2698 v4: 20 cores, 2.2 GHz, AVX2 2xFMA; DDR4-2400 x4 = 76.8 GB/s.
    cpu = _cpu("cpu:0", "Intel Xeon E5-2698 v4", 20, 2.2, 32, 256 * GB, 76.8 * GB,
               flops_efficiency=AVX2_LINPACK_EFFICIENCY, achievable_bandwidth=76.8 * GB * DDR4_STREAM_EFFICIENCY)
    # Tesla P100 PCIe 16 GB: 9.3 TFLOPS FP32, 732 GB/s HBM2; SGEMM 8.12-8.63 TFLOPS (PyTorch matmul),
    # bandwidthTest device-to-device 443.8 GB/s; deviceQuery: 2 copy engines (the default)
    gpus = _gpus(n, "Tesla P100 PCIe 16GB", 16 * GiB, 9.3e12, 732 * GB,
                 achievable_flops=8.375e12, achievable_bandwidth=443.8 * GB)
    switch = {g.name: int(g.name[4:]) // 4 for g in gpus}

    def spec(a: Device, b: Device) -> LinkSpec:
        if a.kind == "cpu":
            return LinkSpec(PCIE3_X16_H2D, 0.0, PCIE_COPY_OVERHEAD, (f"switch{switch[b.name]}.down",))
        if b.kind == "cpu":
            return LinkSpec(PCIE3_X16_D2H, 0.0, PCIE_COPY_OVERHEAD, (f"switch{switch[a.name]}.up",))
        sa, sb = switch[a.name], switch[b.name]
        route = () if sa == sb else (f"switch{sa}.up", f"switch{sb}.down")
        return LinkSpec(min(PCIE3_X16_H2D, PCIE3_X16_D2H), 0.0, PCIE_COPY_OVERHEAD, route)

    devs = [cpu, *gpus]
    segments = [Segment(f"switch{k}.{d}", bw) for k in range((n + 3) // 4)
                for d, bw in (("up", PCIE3_X16_D2H), ("down", PCIE3_X16_H2D))]
    return Cluster(f"p100x{n}", devs, _links(devs, spec),
                   meta={"paper": "GDP sec. 4: one Intel Broadwell CPU and up to eight Nvidia P100 GPUs"},
                   segments=segments)


def _gtx1050ti() -> Cluster:
    """Two GeForce cards on the CPU's 16 lanes, x8 each; GeForce cards have no peer access, so a copy
    between them goes through host memory over both cards' links."""
    # i7-7700: 4 cores, 3.6 GHz, AVX2 2xFMA; DDR4-2400 x2 = 38.4 GB/s.
    cpu = _cpu("cpu:0", "Intel Core i7-7700", 4, 3.6, 32, 16 * GB, 38.4 * GB,
               flops_efficiency=AVX2_LINPACK_EFFICIENCY, achievable_bandwidth=38.4 * GB * DDR4_STREAM_EFFICIENCY)
    # GTX 1050 Ti: 768 CUDA cores x 1392 MHz boost x 2 = 2.138 TFLOPS, 4 GB GDDR5 at 112 GB/s; bandwidthTest
    # device-to-device 95.5 GB/s; no published SGEMM: the P100 PCIe's 90 % of peak (same Pascal SM, cuBLAS)
    gpus = _gpus(2, "GeForce GTX 1050 Ti", 4 * GiB, 2.138e12, 112 * GB,
                 achievable_flops=2.138e12 * 8.375 / 9.3, achievable_bandwidth=95.5 * GB)
    # pinned copies measured on x16, 9.72 / 9.22 GB/s to / from the card: half of that on x8
    h2d, d2h = 9.72 / 2 * GB, 9.22 / 2 * GB

    def spec(a: Device, b: Device) -> LinkSpec:
        if a.kind == "cpu":
            return LinkSpec(h2d, 0.0, PCIE_COPY_OVERHEAD, (f"{b.name}.pcie.down",))
        if b.kind == "cpu":
            return LinkSpec(d2h, 0.0, PCIE_COPY_OVERHEAD, (f"{a.name}.pcie.up",))
        return LinkSpec(min(h2d, d2h), 0.0, STAGED_COPY_OVERHEAD, (f"{a.name}.pcie.up", f"{b.name}.pcie.down"))

    devs = [cpu, *gpus]
    segments = [Segment(f"{g.name}.pcie.{d}", bw) for g in gpus for d, bw in (("up", d2h), ("down", h2d))]
    return Cluster("gtx1050tix2", devs, _links(devs, spec), meta={"paper": "HTF-MPR: i7-7700 and 2x GTX 1050 Ti"},
                   segments=segments)


def _h100x8() -> Cluster:
    """DGX H100: eight H100 SXM5 on four NVSwitch chips (all-to-all NVLink 4, 450 GB/s per direction per
    GPU), each GPU on its own PCIe Gen5 x16 host link; two Xeon 8480C modelled as one CPU device."""
    # 2x Xeon Platinum 8480C (56 cores each, 2.0 GHz, AVX-512 2xFMA = 64 FP32 FLOP/cycle), 2 TB DDR5-4800,
    # 8 channels per socket = 614 GB/s; STREAM triad 151.3 + 173.4 GB/s on a Sapphire Rapids pair (8462Y+)
    cpu = _cpu("cpu:0", "2x Intel Xeon Platinum 8480C", 112, 2.0, 64, 2 * 10**12, 614 * GB,
               achievable_bandwidth=(151.3 + 173.4) * GB)
    # H100 SXM5 80 GB: 67 TFLOPS FP32 (non-tensor), 3.35 TB/s HBM3; FP32 SGEMM 51.9 TFLOPS (PyTorch matmul),
    # a copy within the GPU 2.84-2.90 TB/s; deviceQuery: 3 copy engines, which the driver gives to
    # host-to-device, device-to-host and peer copies: two to send (to the host, to a peer), two to receive
    gpus = _gpus(8, "H100 SXM5 80GB", 80 * GB, 67e12, 3350 * GB, overhead=5e-6, achievable_flops=51.9e12,
                 achievable_bandwidth=2870 * GB, engines=(2, 2))
    # peer copies: 365-393 GB/s one way (P2P writes), 2.0-3.3 us per copy of which 0.83 us is the NVLink
    # latency (nvbandwidth device_to_device_latency_sm); host copies 55.4 / 55.2 GB/s to / from a GPU
    nv_latency, nv_copy = 0.83e-6, 2.78e-6
    h2d, d2h = 55.4 * GB, 55.2 * GB

    def spec(a: Device, b: Device) -> LinkSpec:
        if a.kind == "cpu":
            return LinkSpec(h2d, 0.0, PCIE_COPY_OVERHEAD, (f"{b.name}.pcie.down",))
        if b.kind == "cpu":
            return LinkSpec(d2h, 0.0, PCIE_COPY_OVERHEAD, (f"{a.name}.pcie.up",))
        return LinkSpec(376 * GB, nv_latency, nv_copy - nv_latency, (f"{a.name}.nvlink.out", f"{b.name}.nvlink.in"))

    devs = [cpu, *gpus]
    segments = [Segment(f"{g.name}.{port}", bw) for g in gpus
                for port, bw in (("nvlink.out", 450 * GB), ("nvlink.in", 450 * GB), ("pcie.up", d2h),
                                 ("pcie.down", h2d))]
    return Cluster("h100x8", devs, _links(devs, spec), meta={"paper": "none: a current 8-GPU machine (DGX H100)"},
                   segments=segments)


def _meminfo_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * GiB


def _cpu_flop_per_cycle_and_ghz() -> tuple[int, float]:
    flags: set[str] = set()
    mhz = 0.0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("cpu MHz") and not mhz:
                    mhz = float(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    if "avx512f" in flags:
        fpc = 64
    elif "fma" in flags and "avx2" in flags:
        fpc = 32
    elif "avx" in flags:
        fpc = 16
    else:
        fpc = 8
    return fpc, (mhz / 1000.0 if mhz else 2.5)


def _localhost() -> Cluster:
    """This machine: one CPU device per core (the runtime's worker processes), GPUs through torch if any.

    Figures are estimates from /proc (cores x clock x SIMD width); ``autoplace cluster detect``
    replaces them with measurements.
    """
    cores = os.cpu_count() or 1
    fpc, ghz = _cpu_flop_per_cycle_and_ghz()
    mem = _meminfo_bytes()
    model = platform.processor() or platform.machine()
    devs = [Device(f"cpu:{i}", "cpu", mem // cores, ghz * 1e9 * fpc, 10 * GB, 5e-6, 1,
                   {"model": model, "cores": 1, "host": platform.node() or "localhost", "estimated": True})
            for i in range(cores)]
    try:  # pragma: no cover - no GPU in CI
        import torch

        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                devs.append(Device(f"cuda:{i}", "gpu", int(p.total_memory),
                                   float(p.multi_processor_count) * 128 * 2 * 1.5e9, 1000 * GB, 10e-6, 1,
                                   {"model": p.name, "estimated": True}))
    except ImportError:
        pass
    # Shared-memory exchange between worker processes; PCIe for GPUs (estimates).
    return Cluster("localhost", devs, default_link=LinkSpec(5 * GB, 20e-6),
                   meta={"detected": True})


CLUSTER_PRESETS: dict[str, Callable[[], Cluster]] = {
    "k80x2": lambda: _k80(2),
    "k80x4": lambda: _k80(4),
    "p100x2": lambda: _p100(2),
    "p100x4": lambda: _p100(4),
    "p100x8": lambda: _p100(8),
    "gtx1050tix2": _gtx1050ti,
    "h100x8": _h100x8,
    "localhost": _localhost,
}


def get_cluster(name: str) -> Cluster:
    """A preset cluster by name (``autoplace clusters`` lists them)."""
    try:
        factory = CLUSTER_PRESETS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown cluster {name!r}: not a file and not a preset ({', '.join(CLUSTER_PRESETS)})") from None
    return factory()
