"""Measuring the machine: each device's speed and copy engines, each directed pair's link, the executor's
per-transfer costs (``autoplace cluster detect``: :func:`detect_cluster`), kept once per machine
(:func:`detected_cluster`).

:func:`detect_cluster` measures each device (matrix-multiply FLOP/s, copy bandwidth, per-op overhead, how
many copies it sends at once) and each directed pair's transfer time over sizes from 64 B to 16 MiB, then
the executor's per-transfer costs on placed programs like the ones measured.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from autoplace.cache import cached, entry_path
from autoplace.capture import capture_training_step
from autoplace.cluster import Cluster, Device, Link, get_cluster
from autoplace.errors import AutoplaceError
from autoplace.formats import cluster_from_dict, cluster_to_dict
from autoplace.formats.state import cluster_hash
from autoplace.graph import Graph
from autoplace.grouping import group_ops
from autoplace.placement import Placement
from autoplace.runtime.backends import make_pool, runtime_for
from autoplace.runtime.pool import DEFAULT_TIMEOUT_S, Runtime
from autoplace.runtime.shm.pool import WorkerPool
from autoplace.zoo import build_graph

__all__ = ["detect_cluster", "detected_cluster", "speed_warnings", "LinkFit", "fit_send_costs", "host_mates",
           "timed_run", "LINK_SIZES", "CALIBRATE_REPEATS", "CALIBRATE_STEPS", "CALIBRATE_ROUNDS"]


LINK_SIZES = tuple(64 * 4**k for k in range(10))  # 64 B .. 16 MiB


#: Shared-memory exchange between CPU workers: the copy is the sender's work (``send_cost_s_per_byte``);
#: what remains on the link is its latency (the flag's visibility and the receiver's polling).
EXCHANGE_BANDWIDTH = 1e13


def host_mates(cluster: Cluster, k: int) -> list[int]:
    """The other CPU devices on device ``k``'s host (every other CPU device where devices name no
    ``host``); none unless ``k`` is a CPU."""
    dev = cluster.devices[k]
    if dev.kind != "cpu":
        return []
    host = dev.meta.get("host")
    return [j for j, d in enumerate(cluster.devices)
            if j != k and d.kind == "cpu" and (host is None or d.meta.get("host") == host)]


def timed_run(pool: WorkerPool, graph: Graph, placement: Placement, steps: int,
               k: int) -> tuple[np.ndarray, float, float]:
    """One profiled run of ``placement``: each op's time (less its sends) in each step after the first,
    wherever it ran; the op time of a run right after it without per-op timers — its step time on one
    device; on several, their busy time less the time they spent sending and receiving; and the share of
    that run's step device ``k``'s host-mates were busy (``u_p`` of :func:`loaded_costs`)."""
    steps = max(2, steps)
    result = pool.run(graph, placement, steps=steps, profile=True)
    if not result.ok:
        raise AutoplaceError(f"profiling ({placement.method}) failed: {result.error}")
    plain = pool.run(graph, placement, steps=steps)
    dicts = result.outputs["op_times"]  # one per (step, device that runs ops), step by step
    used = len(dicts) // steps
    t = np.zeros((steps - 1, graph.n_ops))
    for s in range(1, steps):  # drop the first (warm-up) step
        for d in dicts[s * used:(s + 1) * used]:
            for i, v in d.items():
                t[s - 1, i] = v
    if not plain.ok:
        return t, float("nan"), float("nan")
    if used == 1:
        return t, plain.step_time, 0.0
    mates = host_mates(pool.cluster, k)
    return (t, float((plain.busy_time - plain.exchange[:, 2] - plain.exchange[:, 4]).sum()),
            float(min(1.0, plain.busy_time[mates].sum() / plain.step_time)))


def _device_speed(rt, repeats: int = 5) -> tuple[float, float, float]:
    """(FLOP/s of a 512^2 fp32 matmul, copy bandwidth bytes/s over 64 MiB, seconds per tiny aten op)."""
    torch = rt.torch
    dev = rt.device
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    n = 512
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    best_mm = best_cp = best_op = float("inf")
    src = torch.empty(16 * 2**20, device=dev)  # 64 MiB
    dst = torch.empty_like(src)
    x = torch.ones(1, device=dev)
    add = torch.ops.aten.add.Tensor
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync()
        best_mm = min(best_mm, time.perf_counter() - t0)
        t0 = time.perf_counter()
        dst.copy_(src)
        sync()
        best_cp = min(best_cp, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(200):
            add(x, x)
        sync()
        best_op = min(best_op, (time.perf_counter() - t0) / 200)
    return 2 * n**3 / best_mm, 2 * src.numel() * 4 / best_cp, best_op


def _copy_engines(rt, nbytes: int = 8 * 2**20, most: int = 4, repeats: int = 3) -> int:
    """How many copies out of this device run at once at full speed (its send engines): the largest ``k``
    of 1, 2, 4 whose ``k`` concurrent copies of ``nbytes`` (threads on a CPU worker, CUDA streams into
    pinned host memory on a GPU) move at least ``0.8 k`` times the bytes per second of one.

    A CPU worker's copies are its own threads, so it sends no more copies at once than it has cores to run
    them on: a worker pinned to one core has one send engine, without a timing (which a busy machine
    could skew). The one-copy and ``k``-copy runs alternate, best of ``repeats`` each."""
    torch = rt.torch
    cuda = rt.device.startswith("cuda")
    if not cuda:
        most = min(most, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        if most <= 1:
            return 1
    src = torch.ones(nbytes // 4, device=rt.device)
    dsts = [torch.empty(nbytes // 4, pin_memory=cuda) for _ in range(most)]
    streams = [torch.cuda.Stream() for _ in range(most)] if cuda else []  # pragma: no cover - no GPU in CI

    def copy(j: int) -> None:
        if cuda:  # pragma: no cover
            with torch.cuda.stream(streams[j]):
                dsts[j].copy_(src, non_blocking=True)
        else:
            dsts[j].copy_(src)

    def once(k: int) -> float:
        return _concurrent_copies(copy, k, torch.cuda.synchronize if cuda else None)

    engines = 1
    for k in (2, 4):
        if k > most:
            break
        one = many = float("inf")
        for _ in range(repeats):
            one, many = min(one, once(1)), min(many, once(k))
        if many > one / 0.8:  # k copies at once move less than 0.8 k times one copy's bytes per second
            break
        engines = k
    return engines


def _concurrent_copies(copy: Callable[[int], None], k: int, sync: Callable[[], None] | None) -> float:
    """Seconds for ``copy(0) .. copy(k-1)`` run at once, one thread each (``sync`` waits for a GPU)."""

    threads = [threading.Thread(target=copy, args=(j,)) for j in range(k)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if sync is not None:  # pragma: no cover - no GPU in CI
        sync()
    return time.perf_counter() - t0


def _link_send(rt, buf, flags, sizes, repeats):
    """Sender side of a link test: copy ``size`` bytes into the shared slot, raise the flag, await ack."""
    torch = rt.torch
    src = torch.ones(max(sizes), dtype=torch.uint8, device=rt.device)
    f = flags.numpy()
    starts = []
    token = 0
    for _ in range(repeats):
        for n in sizes:
            token += 1
            t0 = time.perf_counter()
            buf[:n].copy_(src[:n])
            f[0] = token
            starts.append((t0, time.perf_counter()))
            _await(f, 1, token, "no acknowledgement")
    return starts


def _await(flags, slot: int, token: int, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while flags[slot] != token:
        if time.monotonic() > deadline:
            raise TimeoutError(f"link test: {what}")


def _link_recv(rt, buf, flags, sizes, repeats):
    """Receiver side: wait for each flag, note the time (as the executor does), acknowledge."""
    f = flags.numpy()
    ends = []
    token = 0
    for _ in range(repeats):
        for n in sizes:
            token += 1
            _await(f, 0, token, "nothing arrived")
            t = time.perf_counter()
            if rt.device.startswith("cuda"):  # pragma: no cover - no GPU in CI
                buf[:n].to(rt.device)
                rt.torch.cuda.synchronize()
                t = time.perf_counter()
            ends.append(t)
            f[1] = token
    return ends


_LINK_TAG = 2**30  # a tag no step's message uses


def _dist_link(rt, peer: int, sizes: list[int], repeats: int, first: bool) -> list[float]:
    """A link test between two ranks of the distributed runtime (both run it, ``first`` on one): ``first``
    sends each size and waits for an 8-byte answer, the other answers; returns ``first``'s round-trip
    times (``repeats`` x ``sizes``, in order), from which :func:`detect_cluster` takes one-way times (a
    round trip less half an 8-byte one: the hosts share no clock)."""
    torch, dist = rt.torch, rt.dist
    on_gpu = rt.device.startswith("cuda") and rt.devices[peer].startswith("cuda")
    where = rt.device if on_gpu else "cpu"
    buf = torch.ones(max(sizes), dtype=torch.uint8, device=where)
    ack = torch.zeros(8, dtype=torch.uint8, device=where)
    kw = {} if on_gpu else {"tag": _LINK_TAG}
    times = []
    for _ in range(repeats):
        for n in sizes:
            t0 = time.perf_counter()
            if first:
                dist.isend(buf[:n], peer, **kw).wait()
                dist.irecv(ack, peer, **kw).wait()
                if on_gpu:  # pragma: no cover - needs two GPUs
                    torch.cuda.synchronize()
            else:
                dist.irecv(buf[:n], peer, **kw).wait()
                dist.isend(ack, peer, **kw).wait()
            times.append(time.perf_counter() - t0)
    return times


def _exchange_programs(cluster: Cluster) -> list[tuple[Graph, np.ndarray]]:
    """Placed programs for measuring the executor's per-transfer costs, like the placements one measures:
    a chain of 16 small linear layers (32 wide, batch 4) and one of 8 wide ones (512 wide, batch 64:
    tensors of 128 KiB to 1 MiB) dealt round-robin to the devices, and a small LSTM language model (the
    zoo's ``rnnlm-2``, two layers of 64 over 6 steps) whose co-location groups are dealt to the devices at
    random (seed 0) — tensors of every kind (activations, views, transposed weights, gradients) and of
    sizes from bytes to a MiB crossing devices."""
    import torch


    D = cluster.n_devices
    out = []
    for layers, width, batch in ((16, 32, 4), (8, 512, 64)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh())
                                      for _ in range(layers)])
        x, y = torch.randn(batch, width), torch.randn(batch, width)
        mlp = capture_training_step(model, x, torch.nn.functional.mse_loss,
                                    torch.optim.SGD(model.parameters(), lr=0.1), targets=y,
                                    name=f"exchange-calibration-{width}")
        out.append((mlp, _deal_layers(mlp, D)))
    lstm = build_graph("rnnlm-2", vocab=500, hidden=64, steps=6, batch=8)
    groups = group_ops(lstm, rules=("colocation",))
    rng = np.random.default_rng(0)
    out.append((lstm, groups.expand(rng.integers(0, D, groups.n_groups))))
    return out


def _deal_layers(graph: Graph, n_devices: int) -> np.ndarray:
    """Each op of a ``nn.Sequential`` step on device ``layer % n_devices``, the layer read from the op's
    module scope (``"3.0"``) or, where a capture leaves an op unscoped (a parameter, its update), from its
    name (``"3.0.weight"``); a co-location group goes whole to the device of its first op with a layer."""

    def layer(op) -> int | None:
        for text in (op.scope or "", op.name):
            head = text.split(".")[0]
            if head.isdigit():
                return int(head)
        return None

    groups = group_ops(graph, rules=("colocation",))
    device = np.zeros(groups.n_groups, dtype=np.int64)
    known = np.zeros(groups.n_groups, dtype=bool)
    for i, op in enumerate(graph.ops):
        g, k = groups.group[i], layer(op)
        if k is not None and not known[g]:
            device[g], known[g] = k % n_devices, True
    return groups.expand(device)


def fit_send_costs(n_sent: np.ndarray, sent_bytes: np.ndarray, send_t: np.ndarray,
                   per_byte: float) -> tuple[float, float]:
    """``(send_overhead_s, send_cost_s_per_byte)`` with ``send_t ~ n_sent * overhead + bytes * per_byte``
    over a device's observations (one per placed program), by least squares. Where the observations do
    not tell the two apart (fewer than two programs sent anything, or the fit gives a negative term), the
    per-byte cost stays ``per_byte`` (the link test's) and the overhead is what remains per tensor."""
    seen = n_sent > 0
    if seen.sum() >= 2:
        A = np.stack([n_sent[seen], sent_bytes[seen]], axis=1).astype(float)
        (over, byte), *_ = np.linalg.lstsq(A, send_t[seen], rcond=None)
        if over >= 0 and byte > 0:
            return float(over), float(byte)
    n = n_sent.sum()
    return (float(max((send_t.sum() - sent_bytes.sum() * per_byte) / n, 0.0)) if n else 0.0), per_byte


def _exchange_overheads(pool: WorkerPool, cluster: Cluster, progress, rounds: int = 3
                        ) -> tuple[list[Device], dict[str, float]]:
    """Fit each device's send costs (``send_overhead_s`` and ``send_cost_s_per_byte``, by
    :func:`fit_send_costs`) and per-tensor receive cost (``recv_overhead_s``) on placed runs of
    :func:`_exchange_programs`, instrumented by the executor: the copies a run makes into the exchange
    buffer are of the tensors a training step really sends, whose sources are not in cache the way the
    link test's repeated buffer is. The executor's latency (a flag raised while its receiver was already
    waiting -> the receiver seeing it) is averaged per receiving device likewise.

    The programs run in ``rounds`` rounds and each device's figures come from its least disturbed round,
    the one whose sends and receives took least time in all: the bookkeeping measured is pure CPU work,
    which a busy moment of the machine only ever slows (one detect on this project's VM caught such a
    moment and measured twice the usual per-tensor costs)."""
    if progress is not None:
        progress("per-transfer costs")
    programs = _exchange_programs(cluster)
    rounds_ex = []  # per round: programs x devices x (n_sent, bytes, send_t, n_recv, recv_t, lat_sum, lat_n)
    for _ in range(rounds):
        runs = []
        for graph, assignment in programs:
            result = pool.run(graph, Placement.from_array(graph, cluster, assignment, "calibration"), steps=20)
            if not result.ok:
                raise AutoplaceError(f"measuring per-transfer costs failed on {graph.name!r}: {result.error}")
            runs.append(result.exchange)
        rounds_ex.append(np.stack(runs))
    out, latency = [], {}
    for k, d in enumerate(cluster.devices):
        ex = min(rounds_ex, key=lambda e: e[:, k, 2].sum() + e[:, k, 4].sum())[:, k]  # least disturbed round
        over, per_byte = fit_send_costs(ex[:, 0], ex[:, 1], ex[:, 2], d.send_cost_s_per_byte)
        n_recv, recv_t, lat_sum, lat_n = ex[:, 3:].sum(axis=0)
        out.append(replace(d, send_overhead_s=over, send_cost_s_per_byte=per_byte,
                           recv_overhead_s=float(recv_t / n_recv) if n_recv else 0.0))
        if lat_n:
            latency[d.name] = float(lat_sum / lat_n)
    return out, latency


class LinkFit:
    """``latency + bytes / bandwidth`` fitted to measured one-way transfer times: the bandwidth by least
    squares over the larger half of the sizes (where that slope is lost in the noise, the largest size's
    average rate), the latency from the smallest size."""

    def __init__(self, sizes: np.ndarray, times: np.ndarray):
        # the slope from the large sizes (where bytes dominate), the latency from the smallest one
        big = sizes >= np.sort(sizes)[len(sizes) // 2]
        A = np.stack([np.ones(big.sum()), sizes[big].astype(float)], axis=1)
        (_, inv_bw), *_ = np.linalg.lstsq(A, times[big], rcond=None)
        # a slope that moves the largest message by under 1 % is noise (a busy machine): the largest
        # message's average rate then stands in (a lower bound of the link's bandwidth)
        measurable = inv_bw * sizes.max() > 0.01 * times.max()
        self.bandwidth = float(1.0 / inv_bw) if measurable else float(sizes.max() / times.max())
        k = int(np.argmin(sizes))
        self.latency_s = float(max(times[k] - sizes[k] / self.bandwidth, 0.0))
        self.sizes, self.times = sizes, times


SPREAD_WARNING = 1.5  #: devices of one model measuring further apart than this are worth a warning


def speed_warnings(cluster: Cluster, spread: float = SPREAD_WARNING) -> list[str]:
    """A line for each group of devices of one kind and model whose measured matmul speeds differ by more
    than ``spread`` times: identical cores should measure alike, so the machine was busy or the cores are
    not alike (SMT siblings, frequency limits) — either way the figures should not be trusted as they are."""
    groups: dict[tuple, list] = {}
    for d in cluster.devices:
        groups.setdefault((d.kind, d.meta.get("model")), []).append(d)
    out = []
    for (kind, model), devs in groups.items():
        if len(devs) < 2:
            continue
        slow, fast = min(devs, key=lambda d: d.peak_flops), max(devs, key=lambda d: d.peak_flops)
        if fast.peak_flops > spread * slow.peak_flops:
            out.append(f"warning: {fast.name} and {slow.name} are both {model or kind} but measured "
                       f"{fast.peak_flops / slow.peak_flops:.1f}x apart in matmul speed: the machine was busy, or "
                       "the cores differ (SMT siblings, frequency); measure again on an idle machine (--repeats)")
    return out


def detect_cluster(base: Cluster | None = None, *, repeats: int = 20, sizes: Sequence[int] = LINK_SIZES,
                   progress: Callable[[str], None] | None = None, runtime: str = "auto") -> Cluster:
    """Measure ``base`` (default: the ``localhost`` preset) on ``runtime`` (its transfers: the shared-memory
    executor's, or the distributed runtime's messages) and return it with measured figures."""
    import torch


    base = base or get_cluster("localhost")
    sizes = tuple(int(s) for s in sizes)
    runtime = runtime_for(base, runtime)
    with make_pool(base, runtime=runtime) as pool:
        pool.start()
        devices = []
        for k, d in enumerate(base.devices):
            if progress is not None:
                progress(f"device {d.name}")
            flops, bw, overhead = pool.call(k, _device_speed)
            send_engines = pool.call(k, _copy_engines)
            meta = {key: v for key, v in d.meta.items() if key != "estimated"}
            # a CPU worker reads arrivals in place (no copy: nothing to limit); a GPU copies them in
            recv_engines = 0 if d.kind == "cpu" else send_engines
            devices.append(Device(d.name, d.type, d.memory_bytes, flops, bw, overhead, d.concurrency,
                                  {**meta, "measured": True}, send_engines=send_engines, recv_engines=recv_engines))
        links = []
        send_cost = np.zeros(len(devices))
        buf = torch.empty(max(sizes), dtype=torch.uint8).share_memory_()
        for s, a in enumerate(base.devices):
            for t, b in enumerate(base.devices):
                if s == t:
                    continue
                if runtime == Runtime.DISTRIBUTED:
                    if progress is not None:
                        progress(f"link {a.name} -> {b.name}")
                    links.append(_message_link(pool, s, t, sizes, repeats))
                    continue
                if progress is not None:
                    progress(f"link {a.name} -> {b.name}")
                flags = torch.zeros(2, dtype=torch.int64).share_memory_()
                pool.post(s, _link_send, buf, flags, sizes, repeats)
                pool.post(t, _link_recv, buf, flags, sizes, repeats)
                (ms, mt) = pool._gather(which=[s, t], timeout=DEFAULT_TIMEOUT_S)
                sent = np.array(ms[1]).reshape(repeats, len(sizes), 2)
                seen = np.array(mt[1]).reshape(repeats, len(sizes))
                keep = slice(1, None) if repeats > 1 else slice(None)
                # the sender copies into the exchange buffer (its compute: bytes / bandwidth; a GPU's copy
                # out to host memory is its worker's too, the executor copying synchronously); a CPU
                # receiver reads it in place, so its link only adds the time until the flag is seen; a GPU
                # receiver copies it in, which the link's bandwidth carries
                fit = LinkFit(np.array(sizes), np.median((sent[..., 1] - sent[..., 0])[keep], axis=0))
                send_cost[s] = max(send_cost[s], 1.0 / fit.bandwidth)
                arrive = (seen - sent[..., 1])[keep]
                if b.kind == "cpu":
                    links.append(Link(a.name, b.name, EXCHANGE_BANDWIDTH, max(float(np.median(arrive)), 0.0)))
                else:
                    copy_in = LinkFit(np.array(sizes), np.median(arrive, axis=0))
                    links.append(Link(a.name, b.name, copy_in.bandwidth, copy_in.latency_s))
        if runtime == Runtime.SHM:
            devices = [replace(d, send_cost_s_per_byte=float(c)) for d, c in zip(devices, send_cost)]
        devices, latency = _exchange_overheads(pool, Cluster(base.name, devices, links), progress)
        # the executor's latency (a flag raised -> its waiting receiver seeing it, polling with back-off)
        # where it measured one; the link test's tight spin otherwise
        links = [Link(ln.src, ln.dst, ln.bandwidth, latency.get(ln.dst, ln.latency_s)) for ln in links]
    return Cluster(base.name, devices, links, None,
                   meta={**{k: v for k, v in base.meta.items() if k != "detected"}, "measured": True,
                         "runtime": runtime, "link_sizes": list(sizes), "link_repeats": repeats})


def _message_link(pool: WorkerPool, s: int, t: int, sizes: Sequence[int], repeats: int) -> Link:
    """The distributed runtime's link ``s -> t``: ``latency + bytes / bandwidth`` fitted to one-way message
    times (round trips of each size less half an 8-byte round trip: :func:`_dist_link`; the lower quartile
    over the repeats). The message's
    packing is the sender's work, measured apart (``send_cost_s_per_byte``)."""
    a, b = pool.cluster.devices[s], pool.cluster.devices[t]
    sizes = [int(n) for n in sizes]
    probe = [8, *sizes]
    pool.post(s, _dist_link, pool.order.index(t), probe, repeats, True)
    pool.post(t, _dist_link, pool.order.index(s), probe, repeats, False)
    (ms, _) = pool._gather(which=[s, t], timeout=DEFAULT_TIMEOUT_S)
    rtt = np.array(ms[1]).reshape(repeats, len(probe))
    keep = slice(1, None) if repeats > 1 else slice(None)
    # the lower quartile over repeats: TCP's bursts (a small message after a large one, window growth) only
    # ever slow a round trip, and a training step's messages are not sent back to back like these
    rtt = np.percentile(rtt[keep], 25, axis=0)
    # a message of n >= 8 bytes takes at least the 8-byte answer's time one way, so at least half its round
    # trip: the floor where a slow 8-byte probe (a TCP burst) would leave nothing of a fast large one
    one_way = np.maximum(rtt[1:] - rtt[0] / 2, rtt[1:] / 2)
    fit = LinkFit(np.array(sizes), one_way)
    return Link(a.name, b.name, fit.bandwidth, fit.latency_s)


#: how hard compile's own calibration measures (fewer repeats and rounds than the CLI's defaults: it runs
#: before the first step, and compile measures the placement against one device anyway)
CALIBRATE_REPEATS, CALIBRATE_STEPS, CALIBRATE_ROUNDS = 5, 3, 2


def detected_cluster(base: Cluster, *, folder=None, machine: str, progress: Callable[[str], None] | None = None
                     ) -> Cluster:
    """``base`` measured on this machine (:func:`detect_cluster`), kept in the cache folder per machine and
    base cluster, so a machine is measured once (``folder=False``: not kept)."""

    if folder is False:
        return detect_cluster(base, repeats=CALIBRATE_REPEATS, progress=progress)
    key = {"machine": machine, "base": cluster_hash(base), "repeats": CALIBRATE_REPEATS}
    path = entry_path(None if folder is None else Path(folder) / "machines", "machines", "", key)
    cluster, _ = cached(path, key, lambda: detect_cluster(base, repeats=CALIBRATE_REPEATS, progress=progress),
                        encode=cluster_to_dict, decode=lambda obj: cluster_from_dict(obj, str(path)))
    return cluster
