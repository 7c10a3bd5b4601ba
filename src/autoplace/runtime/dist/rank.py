"""A rank of the ``torch.distributed`` runtime: one process per placed device, exchanging tensors as
point-to-point messages (see :mod:`autoplace.runtime.dist.pool`, the driver's side).

A rank runs its part of the placed program exactly as a shared-memory worker does (the same ready queue,
memory accounting and counters, :class:`~autoplace.runtime.device.DeviceRuntime`); only the exchange
differs:

- **Backends.** Tensors between two GPUs travel over NCCL (peer to peer over NVLink or PCIe, or across
  hosts); a tensor to or from a CPU rank over gloo (TCP). A GPU rank stages what it sends to a CPU rank
  in pinned host memory (an asynchronous device-to-host copy, posted to gloo once it lands) and copies
  what a CPU rank sends it in asynchronously from pinned memory.
- **Order.** The tensors one rank sends another go in one fixed order, the order of their producing ops
  in the program (a topological order; under a schedule, in one run of the whole schedule:
  :func:`autoplace.schedule.linearize`), and the receiver takes them in that order: a message never waits
  for one that depends on it, so no order of execution can deadlock. Between two GPUs both directions
  share one NCCL stream, so both ranks post sends and receives in one merged order.
- **Asynchrony.** Sends are posted and left to complete while the rank computes (the sender packs a copy,
  so an in-place update of the source cannot race the send); gloo receives are posted when the step
  starts and a thread per peer waits for them in order and wakes the rank; NCCL receives are polled.
- **Layout.** A message is a 64-byte header (the permutation of a permuted dense tensor: a transposed
  weight arrives with the strides it left with, as in the shared-memory exchange) and the tensor's bytes.
  Between GPUs a tensor goes contiguous, header-less (reading a header would wait for the GPU).
- **Time.** A step starts at a barrier; its start and end are read on the rank's own clock and reported
  as the step's duration from that barrier (ranks on different hosts share no clock).

Ranks are started two ways: by the driver on this machine (processes that end with it: a rendezvous
store the driver hosts, control messages over pipes), or by ``torchrun`` on every host of a cluster that
names hosts (:func:`autoplace.runtime.dist.serve.serve`; ``autoplace ranks``), where rank 0 hosts the rendezvous the driver connects to
and control messages are keys of that store (:mod:`~autoplace.runtime.dist.control`), encoded as state files (no pickle: a message cannot run code).
"""

from __future__ import annotations

import datetime
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from typing import Any

from autoplace.runtime.device import DeviceRuntime, die_with_parent, driver_gone, serve_messages
from autoplace.runtime.program import COLLECTIVE_GROUPS, TRef
from autoplace.collectives import groups
from autoplace.runtime.program import ExecutionError

__all__ = ["RankRuntime", "message_order", "backend_of", "participants", "rank_main"]


BARRIER_TAG = 2**30 + 1  #: the tag of a step's barrier messages (a transfer's tag is its index)


HEADER = 64  #: bytes before a message's data: 8 int64 (the permutation of a permuted tensor, else -1)


NCCL, GLOO = "nccl", "gloo"


def message_order(transfers: list[tuple], sequence=None) -> list[int]:
    """The order in which every pair of ranks exchanges its messages (transfer ids; ``transfers`` as
    ``transfer_layout`` lists them): by producing op in the program, or under a schedule in one run of the whole
    schedule (``sequence``: :func:`autoplace.schedule.linearize`'s places) — a message is then never behind
    one whose producer needs it, whichever rank waits and whichever way it goes."""
    first = (lambda op: op) if sequence is None else (lambda op: int(sequence[op]))  # noqa: E731
    return sorted(range(len(transfers)), key=lambda t: (first(transfers[t][0].op), transfers[t][0].k or 0,
                                                        transfers[t][1], transfers[t][2]))


def backend_of(device: str) -> str:
    """The process-group backend of a rank on ``device`` (a torch device): gloo for CPU tensors on every
    rank (one gloo group, its rendezvous under the same prefix everywhere), and NCCL for CUDA tensors on a
    GPU rank only — a CPU rank sends CPU tensors alone, so its torch needs no NCCL, and NCCL's
    communicators are made per pair of GPU ranks, among them alone."""
    return "cpu:gloo,cuda:nccl" if device.startswith("cuda") else "cpu:gloo"


class RankRuntime(DeviceRuntime):
    """A device's worker whose exchange is ``torch.distributed`` point-to-point messages."""

    def __init__(self, name: str, device: str, cores: list[int] | None, rank: int, devices: list[str],
                 store, timeout: float, order: list[int] | None = None):
        """Rank ``rank`` of ranks on ``devices`` (torch devices, in rank order; ``order[r]``: rank ``r``'s
        device in the cluster, by default rank ``r`` is device ``r``)."""
        super().__init__(name, device, cores)
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.devices = rank, list(devices)
        self.rank_of = {k: r for r, k in enumerate(order if order is not None else range(len(devices)))}
        self.world = len(self.devices)
        # NCCL communicators are made lazily, per pair of GPU ranks, at their first message (an eager one
        # for the whole group would wait for CPU ranks that never join it)
        dist.init_process_group(backend_of(device), store=store, rank=rank, world_size=self.world,
                                timeout=datetime.timedelta(seconds=timeout))
        self._groups: dict[tuple[int, ...], Any] = {}   # process groups of collectives, by their ranks
        self._wake = threading.Event()
        self._inbox: deque = deque()
        self._waiters: dict[int, tuple[threading.Thread, queue.Queue]] = {}
        sys.setswitchinterval(5e-4)  # a receiving thread gets the interpreter soon after its message lands

    def _link(self, peer: int) -> str:
        """The backend carrying tensors between this rank and ``peer``."""
        both = self.device.startswith("cuda") and self.devices[peer].startswith("cuda")
        return NCCL if both else GLOO

    

    def _exchange_setup(self, transfers, ranks: list[int], participants: dict[str, list[int]] | None = None) -> None:
        torch = self.torch
        me = self.plan.device
        self.taking_part = sorted(ranks)  # the ranks running this placement (a step starts at their barrier)
        self._collective_setup(participants or {})
        self.specs = {tid: (tuple(shape), getattr(torch, dtype)) for tid, (_r, _s, _d, _o, shape, dtype)
                      in enumerate(transfers)}
        order = message_order(transfers, self.plan.sequence)
        # per peer: what goes out (gloo), what comes in (gloo), both in one order (NCCL)
        self.out_seq: dict[int, list[int]] = {}
        self.in_seq: dict[int, list[int]] = {}
        self.pair_seq: dict[int, list[int]] = {}
        self.peer_of: dict[int, int] = {}
        self.link_of: dict[int, str] = {}  # NCCL or GLOO, per transfer
        for tid in order:
            ref, src, dst = transfers[tid][:3]
            if me not in (src, dst):
                continue
            peer = self.rank_of[dst if src == me else src]
            self.peer_of[tid] = peer
            self.link_of[tid] = self._link(peer)
            if self.link_of[tid] == NCCL:
                self.pair_seq.setdefault(peer, []).append(tid)
            else:
                (self.out_seq if src == me else self.in_seq).setdefault(peer, []).append(tid)
        self.recv_ref = {tid: ref for tid, ref in self.recv_tid}

    def _collective_setup(self, participants: dict[str, list[int]]) -> None:
        """A process group per set of ranks that runs collectives together (``participants``: each collective's
        devices), made once and kept for later set-ups; :data:`~autoplace.runtime.program.COLLECTIVE_GROUPS`
        then names this rank's. Members alone make a group (``use_local_synchronization``), every rank in one
        order (sorted rank sets), so no two ranks wait for each other in two groups' making."""
        sets = {name: tuple(sorted(self.rank_of[d] for d in devs)) for name, devs in participants.items()}
        for ranks in sorted(set(sets.values())):
            if self.rank in ranks and ranks not in self._groups:
                self._groups[ranks] = self.dist.new_group(list(ranks), use_local_synchronization=True)
        COLLECTIVE_GROUPS.clear()
        COLLECTIVE_GROUPS.update({name: self._groups[r] for name, r in sets.items() if self.rank in r})

    

    def _pack(self, v, *, pinned: bool = False):
        """``v`` as one message: the header and its bytes in memory order (on ``v``'s device, or in pinned
        host memory for a GPU tensor bound for gloo — copied asynchronously)."""
        torch = self.torch
        order = None
        if not v.is_contiguous() and v.dim() <= 8:
            o = sorted(range(v.dim()), key=lambda d: (-v.stride(d), d))
            if v.permute(o).is_contiguous():
                order = o
        n = v.numel() * v.element_size()
        buf = torch.empty(HEADER + n, dtype=torch.uint8, pin_memory=pinned,
                          device="cpu" if pinned else v.device)
        header = (order or []) + [-1] * (8 - len(order or []))
        buf[:HEADER].view(torch.int64).copy_(torch.tensor(header, dtype=torch.int64))
        data = buf[HEADER:].view(v.dtype)
        if order is None:
            data.view(v.shape).copy_(v, non_blocking=pinned)
        else:
            data.copy_(v.permute(order).reshape(-1), non_blocking=pinned)
        return buf

    def _unpack(self, tid: int, buf):
        shape, dt = self.specs[tid]
        data = buf[HEADER:].view(dt)
        header = buf[:HEADER].view(self.torch.int64).tolist()
        if header[0] < 0:
            return data.view(shape)
        order = header[:len(shape)]
        inverse = [order.index(d) for d in range(len(shape))]
        return data.view([shape[o] for o in order]).permute(inverse)

    

    def _begin_step(self, step_id: int) -> float:
        torch = self.torch
        dist = self.dist
        self._barrier()
        self._inbox.clear()
        self._wake.clear()
        self._ready_out: dict[int, Any] = {}     # tid -> packed message (and its staging event), not yet posted
        self._out_next = {p: 0 for p in self.out_seq}
        self._pair_next = {p: 0 for p in self.pair_seq}
        self._posted: list = []                  # (work, buffer) of posted sends, kept until the step ends
        self._nccl_recvs: list = []              # (tid, work, buffer) posted, not yet seen complete
        self._staged: list = []                  # (tid, event) GPU -> pinned copies in flight
        self._pending = False
        self._error: str | None = None
        for peer, tids in self.in_seq.items():   # every gloo receive posted now; a thread per peer waits
            works = []
            for tid in tids:
                shape, dt = self.specs[tid]
                n = HEADER + int(torch.Size(shape).numel()) * dt.itemsize
                buf = torch.empty(n, dtype=torch.uint8, pin_memory=self.device.startswith("cuda"))
                works.append((tid, dist.irecv(buf, peer, tag=tid), buf))
            self._waiter(peer).put(works)
        for peer in self.pair_seq:
            self._pump_pair(peer)
        return time.perf_counter()

    def _barrier(self) -> None:
        """Wait until every rank taking part has reached this point: each tells the first of them, which
        answers each once all have (gloo messages; a process-group barrier would need every rank)."""
        torch, dist = self.torch, self.dist
        ranks = self.taking_part
        if len(ranks) < 2:
            return
        token = torch.zeros(1, dtype=torch.uint8)
        if self.rank == ranks[0]:
            for r in ranks[1:]:
                dist.recv(token, r, tag=BARRIER_TAG)
            for r in ranks[1:]:
                dist.send(token, r, tag=BARRIER_TAG)
        else:
            dist.send(token, ranks[0], tag=BARRIER_TAG)
            dist.recv(token, ranks[0], tag=BARRIER_TAG)

    def _waiter(self, peer: int) -> queue.Queue:
        """The thread that waits for ``peer``'s gloo messages in order and hands them to the rank."""
        if peer not in self._waiters:
            q: queue.Queue = queue.Queue()
            th = threading.Thread(target=self._wait_loop, args=(peer, q), daemon=True, name=f"recv-{peer}")
            th.start()
            self._waiters[peer] = (th, q)
        return self._waiters[peer][1]

    def _wait_loop(self, peer: int, q: queue.Queue) -> None:
        while True:
            works = q.get()
            for tid, work, buf in works:
                try:
                    work.wait()
                except Exception as e:  # noqa: BLE001 - a peer gone or timed out: the step fails
                    self._inbox.append(("error", f"receiving from rank {peer} ({self.devices[peer]}): "
                                                 f"{type(e).__name__}: "
                                                 f"{' '.join(str(e).split())[:200]}"))
                    self._wake.set()
                    break
                self._inbox.append((tid, buf))
                self._wake.set()

    def _send(self, sends: list[tuple[TRef, list[int]]], get, step_id: int) -> None:
        """Pack an op's outputs for their peers and post what may go now (copies to pinned memory still in
        flight are posted when they land: at a later send, when the rank waits, or at the step's end)."""
        xc = self._counters
        for ref, tids in sends:
            v = get(ref)
            nb = v.numel() * v.element_size()
            packed = {}
            for tid in tids:
                link = self.link_of[tid]
                if link not in packed:
                    if link == NCCL:  # a contiguous copy: a later in-place update cannot race the send
                        packed[link] = v.clone(memory_format=self.torch.contiguous_format)
                    else:
                        packed[link] = self._pack(v, pinned=v.is_cuda)
                self._ready_out[tid] = packed[link]
                if v.is_cuda and link == GLOO:  # staged in pinned memory: posted once the copy lands
                    ev = self.torch.cuda.Event()
                    ev.record()
                    self._staged.append((tid, ev))
                xc[0] += 1
                xc[1] += nb
        self._pump()

    def _pump(self) -> None:
        """Post every send whose turn has come (in each peer's order) and whose message is ready."""
        if self._staged:
            self._staged = [(tid, ev) for tid, ev in self._staged if not ev.query()]
        self._pending = bool(self._staged)
        staging = {tid for tid, _ in self._staged}
        dist = self.dist
        for peer, tids in self.out_seq.items():
            k = self._out_next[peer]
            while k < len(tids) and tids[k] in self._ready_out and tids[k] not in staging:
                tid = tids[k]
                buf = self._ready_out.pop(tid)
                self._posted.append((dist.isend(buf, peer, tag=tid), buf))
                k += 1
            self._out_next[peer] = k
        for peer in self.pair_seq:
            self._pump_pair(peer)

    def _pump_pair(self, peer: int) -> None:  # pragma: no cover - needs two GPUs
        """Post the next NCCL operations with ``peer`` in the pair's order: a receive at once, a send once
        its tensor is ready."""
        torch, dist = self.torch, self.dist
        tids, k = self.pair_seq[peer], self._pair_next[peer]
        while k < len(tids):
            tid = tids[k]
            if tid in self.recv_ref:
                shape, dt = self.specs[tid]
                buf = torch.empty(shape, dtype=dt, device=self.device)
                self._nccl_recvs.append((tid, dist.irecv(buf, peer), buf))
            elif tid in self._ready_out:
                buf = self._ready_out.pop(tid)
                self._posted.append((dist.isend(buf, peer), buf))
            else:
                break
            k += 1
        self._pair_next[peer] = k

    def _arrivals(self, step_id: int, idle_since: float) -> list:
        if self._staged or self._ready_out:
            self._pump()
        out = []
        self._seen_at = time.perf_counter()
        while self._inbox:
            item = self._inbox.popleft()
            if item[0] == "error":
                raise RuntimeError(item[1])
            tid, buf = item
            v = self._unpack(tid, buf)
            if self.device.startswith("cuda"):  # pragma: no cover - from pinned memory, asynchronously
                v = v.to(self.device, non_blocking=True)
            out.append((self.recv_ref[tid], v))
        if self._nccl_recvs:  # pragma: no cover - needs two GPUs
            still = []
            for tid, work, buf in self._nccl_recvs:
                if work.is_completed():
                    work.wait()  # orders this stream after the receive (it has completed)
                    out.append((self.recv_ref[tid], buf))
                else:
                    still.append((tid, work, buf))
            self._nccl_recvs = still
        return out

    def _idle(self, spins: int) -> None:
        """Wait for a message (or a staged copy or NCCL receive to poll): the receiving threads need this
        core and the interpreter."""
        self._wake.wait(1e-4 if (self._staged or self._nccl_recvs) else 2e-3)
        self._wake.clear()
        if spins % 500 == 0 and self._spawned and driver_gone():
            os._exit(1)

    def _end_step(self) -> float:
        # every op has run, so every message is ready or being staged: post the rest in their order
        while self._ready_out:
            for _tid, ev in self._staged:
                ev.synchronize()
            before = len(self._ready_out)
            self._pump()
            if len(self._ready_out) == before:
                raise RuntimeError(f"{self.name}: {before} messages cannot be sent in their order (a bug)")
        for work, _buf in self._posted:
            work.wait()
        self._posted = []
        if self.device.startswith("cuda"):  # pragma: no cover
            self.torch.cuda.synchronize()
        return time.perf_counter()

    def step(self, step_id: int, profile: bool = False) -> tuple:
        """One step; its start is 0 and its end the seconds since the barrier that started it."""
        t0, t1, *rest = super().step(step_id, profile)
        return (0.0, t1 - t0, *rest)

    _spawned = True
    _pumps = True

    def close(self) -> None:
        try:
            self.dist.destroy_process_group()
        except Exception:  # noqa: BLE001, S110 - already broken
            pass


def participants(graph, assignment) -> dict[str, list[int]]:
    """Each collective of ``graph`` and its participants' devices under ``assignment`` (by participant rank);
    an :class:`~autoplace.runtime.program.ExecutionError` where two share a device (a process group's ranks
    are distinct)."""

    out = {}
    for name, ops in groups(graph).items():
        devs = [int(assignment[i]) for i in ops]
        if len(set(devs)) < len(devs):
            raise ExecutionError(f"collective {name!r} has two participants on one device: the distributed "
                                 "runtime runs a collective among distinct devices (one rank each)")
        out[name] = devs
    return out


def rank_main(conn, name: str, device: str, cores: list[int] | None, rank: int, devices: list[str],
               address: tuple[str, int, str], timeout: float) -> None:
    """A rank the driver started: joins the driver's rendezvous store, then serves its pipe."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import torch.distributed as dist

        host, port, prefix = address
        store = dist.PrefixStore(prefix, dist.TCPStore(host, port, is_master=False,
                                                       timeout=datetime.timedelta(seconds=timeout)))
        rt = RankRuntime(name, device, cores, rank, devices, store, timeout)
        conn.send(("ready", os.getpid()))
    except Exception as e:  # noqa: BLE001
        conn.send(("error", f"{name}: cannot start: {type(e).__name__}: {' '.join(str(e).split())[:300]}"))
        return
    try:
        serve_messages(conn, rt, name)
    finally:
        rt.close()
