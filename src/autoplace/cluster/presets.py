"""The papers' machines as cluster presets, and ``localhost`` detected from this machine.

Every figure is a vendor specification or a published measurement; docs/formats.md#cluster-presets gives
each source.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import replace

from autoplace.cluster.model import GB, Cluster, Device, GiB, Link, LinkSpec, Segment
from autoplace.errors import UnknownNameError

__all__ = ["CLUSTER_PRESETS", "get_cluster"]

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


#: NCCL's per-step latency of its ring (simple protocol) over NVLink, PCIe and the network: 3.4, 5.7 and 9.6 us
#: (NVIDIA/nccl src/graph/tuning.cc, ``hwLat``): what the multi-node presets take as their links' latencies
NCCL_STEP_LATENCY = {"nvlink": 3.4e-6, "pcie": 5.7e-6, "net": 9.6e-6}


def _ib(gbit: float) -> float:
    """An InfiniBand link's data rate in bytes/s: the signalling rate less its 64b/66b encoding."""
    return gbit / 8 * 1e9 * 64 / 66


def _nodes(name: str, hosts: int, cpu: Device, gpus: list[Device], intra: Callable[[Device, Device], LinkSpec],
           nic: float, nic_of: Callable[[Device], str], paper: str, segments: list[Segment]) -> Cluster:
    """``hosts`` nodes, each a copy of ``cpu`` (named ``cpu:K``) and of ``gpus`` (``gpu:I``, numbered on across
    nodes), ``meta["host"]`` ``nodeK``. Devices of one node are linked by ``intra`` (given the devices with
    their node-local names: ``cpu:0``, ``gpu:0`` ..); of two nodes over the network: the source's NIC out
    and the destination's NIC in (``nic_of(device)``, one segment each way at ``nic`` bytes/s), NCCL's
    network step latency."""
    devs: list[Device] = []
    local: dict[str, Device] = {}
    for h in range(hosts):
        for d in [cpu, *gpus]:
            k = f"cpu:{h}" if d.kind == "cpu" else f"gpu:{h * len(gpus) + int(d.name[4:])}"
            devs.append(replace(d, name=k, meta={**d.meta, "host": f"node{h}"}))
            local[k] = d

    def spec(a: Device, b: Device) -> LinkSpec:
        if a.meta["host"] == b.meta["host"]:
            s = intra(local[a.name], local[b.name])
            return LinkSpec(s.bandwidth, s.latency_s, s.overhead_s,
                            tuple(f"{a.meta['host']}.{seg}" for seg in s.segments))
        return LinkSpec(nic, NCCL_STEP_LATENCY["net"], PCIE_COPY_OVERHEAD, (f"{nic_of(a)}.out", f"{nic_of(b)}.in"))

    nics = dict.fromkeys(nic_of(d) for d in devs)
    segs = [Segment(f"node{h}.{seg.name}", seg.bandwidth) for h in range(hosts) for seg in segments]
    segs += [Segment(f"{n}.{d}", nic) for n in nics for d in ("out", "in")]
    return Cluster(name, devs, _links(devs, spec), meta={"paper": paper}, segments=segs)


def _flexflow_p100(n: int) -> Cluster:
    """FlexFlow's P100 cluster (Jia et al. 2019, sec. 8): nodes of four P100 GPUs on NVLink and two 10-core
    Xeon E5-2600 CPUs, 256 GB, on 100 Gb/s EDR InfiniBand; ``n`` GPUs on ``n / 4`` nodes (at least one)."""
    # "two Intel 10-core E5-2600": the E5-2640 v4 (Broadwell, 10 cores, 2.4 GHz, AVX2 2xFMA) taken, both as one
    # device; 2 x 4 channels of DDR4-2133 = 136.5 GB/s
    cpu = _cpu("cpu:0", "2x Intel Xeon E5-2640 v4", 20, 2.4, 32, 256 * GB, 136.5 * GB,
               flops_efficiency=AVX2_LINPACK_EFFICIENCY, achievable_bandwidth=136.5 * GB * DDR4_STREAM_EFFICIENCY)
    # Tesla P100 SXM2 16 GB: 10.6 TFLOPS FP32, 732 GB/s HBM2; achievable as the P100 PCIe's (the same GP100 and
    # HBM2): 90 % of the peak FLOP/s, 443.8 GB/s
    gpus = _gpus(min(n, 4), "Tesla P100 SXM2 16GB", 16 * GiB, 10.6e12, 732 * GB,
                 achievable_flops=10.6e12 * 8.375 / 9.3, achievable_bandwidth=443.8 * GB)
    # NVLink 1.0: 20 GB/s per link and direction, one link between two GPUs of a node (a P100 has four: three to
    # its peers); host links PCIe 3.0 x16 as the P100 PCIe's

    def intra(a: Device, b: Device) -> LinkSpec:
        if a.kind == "cpu":
            return LinkSpec(PCIE3_X16_H2D, 0.0, PCIE_COPY_OVERHEAD, (f"{b.name}.pcie.down",))
        if b.kind == "cpu":
            return LinkSpec(PCIE3_X16_D2H, 0.0, PCIE_COPY_OVERHEAD, (f"{a.name}.pcie.up",))
        return LinkSpec(20 * GB, NCCL_STEP_LATENCY["nvlink"], PCIE_COPY_OVERHEAD)

    segs = [Segment(f"{g.name}.pcie.{d}", bw) for g in gpus
            for d, bw in (("up", PCIE3_X16_D2H), ("down", PCIE3_X16_H2D))]
    return _nodes(f"flexflow-p100x{n}", max(1, n // 4), cpu, gpus, intra, _ib(100), lambda d: f"{d.meta['host']}.nic",
                  "FlexFlow (Jia et al. 2019) sec. 8: the P100 cluster", segs)


def _flexflow_k80(n: int) -> Cluster:
    """FlexFlow's K80 cluster (Jia et al. 2019, sec. 8): nodes of four K80 GPUs (dies of two boards, each board
    behind its PCIe switch, as ``k80x4``) and two 10-core Xeon E5-2680 CPUs, 256 GB, on 56 Gb/s FDR
    InfiniBand; ``n`` GPUs on ``n / 4`` nodes (at least one)."""
    one = _k80(min(n, 4))
    # "two Intel 10-core E5-2680": the E5-2680 v2 (Ivy Bridge, 10 cores, 2.8 GHz, AVX without FMA = 16 FP32
    # FLOP/cycle), both as one device; 2 x 4 channels of DDR3-1866 = 119.4 GB/s
    cpu = _cpu("cpu:0", "2x Intel Xeon E5-2680 v2", 20, 2.8, 16, 256 * GB, 119.4 * GB,
               flops_efficiency=AVX2_LINPACK_EFFICIENCY, achievable_bandwidth=119.4 * GB * DDR4_STREAM_EFFICIENCY)
    gpus = [d for d in one.devices if d.kind == "gpu"]
    return _nodes(f"flexflow-k80x{n}", max(1, n // 4), cpu, gpus, lambda a, b: one.link(a.name, b.name), _ib(56),
                  lambda d: f"{d.meta['host']}.nic", "FlexFlow (Jia et al. 2019) sec. 8: the K80 cluster",
                  list(one.segments))


def _h100_pod(nodes: int) -> Cluster:
    """``nodes`` DGX H100 (each as ``h100x8``) on NDR InfiniBand, one 400 Gb/s ConnectX-7 per GPU (a rail per
    local GPU index, as DGX BasePOD wires them): a GPU's traffic to another node leaves through its own NIC,
    the CPU's through the first GPU's."""
    one = _h100x8()
    gpus = [d for d in one.devices if d.kind == "gpu"]

    def nic(d: Device) -> str:
        first = int(d.meta["host"][4:]) * 8
        return f"{d.meta['host']}.{d.name if d.kind == 'gpu' else f'gpu:{first}'}.nic"

    return _nodes(f"h100x8x{nodes}", nodes, one.device("cpu:0"), gpus, lambda a, b: one.link(a.name, b.name),
                  _ib(400), nic, "none: a current cluster (DGX H100 nodes, NDR InfiniBand, a NIC per GPU)",
                  list(one.segments))


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
    **{f"flexflow-p100x{n}": (lambda n=n: _flexflow_p100(n)) for n in (2, 4, 8, 16)},
    **{f"flexflow-k80x{n}": (lambda n=n: _flexflow_k80(n)) for n in (2, 4, 8, 16)},
    "h100x8x4": lambda: _h100_pod(4),
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
