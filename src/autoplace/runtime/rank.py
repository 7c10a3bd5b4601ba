"""A rank of the ``torch.distributed`` runtime: one process per placed device, exchanging tensors as
point-to-point messages (see :mod:`autoplace.runtime.distributed`, the driver's side).

A rank runs its part of the placed program exactly as a shared-memory worker does (the same ready queue,
memory accounting and counters, :class:`~autoplace.runtime.worker._DeviceRuntime`); only the exchange
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
names hosts (:func:`serve`; ``autoplace ranks``), where rank 0 hosts the rendezvous the driver connects to
and control messages are keys of that store, encoded as state files (no pickle: a message cannot run code).
"""

from __future__ import annotations

import datetime
import json
import os
import queue
import re
import secrets
import signal
import sys
import threading
import time
from collections import deque
from typing import Any

from autoplace.runtime.program import COLLECTIVE_GROUPS, TRef
from autoplace.runtime.rendezvous import (
    SECRET_ENV,
    RendezvousError,
    env_int,
    group_nonce,
    native_stderr_held,
    read_secret,
    sign,
    summary,
    tcp_store,
    verify,
)
from autoplace.runtime.worker import _DeviceRuntime, _die_with_parent, _serve_messages, driver_gone

BARRIER_TAG = 2**30 + 1  #: the tag of a step's barrier messages (a transfer's tag is its index)
HEADER = 64  #: bytes before a message's data: 8 int64 (the permutation of a permuted tensor, else -1)
NCCL, GLOO = "nccl", "gloo"


def message_order(transfers: list[tuple], sequence=None) -> list[int]:
    """The order in which every pair of ranks exchanges its messages (transfer ids; ``transfers`` as
    ``_layout`` lists them): by producing op in the program, or under a schedule in one run of the whole
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


class RankRuntime(_DeviceRuntime):
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

    # -------------------------------------------------------------- set-up
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

    # -------------------------------------------------------------- messages
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

    # -------------------------------------------------------------- one step
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
    from autoplace.collectives import groups
    from autoplace.runtime.program import ExecutionError

    out = {}
    for name, ops in groups(graph).items():
        devs = [int(assignment[i]) for i in ops]
        if len(set(devs)) < len(devs):
            raise ExecutionError(f"collective {name!r} has two participants on one device: the distributed "
                                 "runtime runs a collective among distinct devices (one rank each)")
        out[name] = devs
    return out


# ---------------------------------------------------------------------- started by the driver (one host)
def _rank_main(conn, name: str, device: str, cores: list[int] | None, rank: int, devices: list[str],
               address: tuple[str, int, str], timeout: float) -> None:
    """A rank the driver started: joins the driver's rendezvous store, then serves its pipe."""
    _die_with_parent()
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
        _serve_messages(conn, rt, name)
    finally:
        rt.close()


# ---------------------------------------------------------------------- started by torchrun (many hosts)
CONTROL_PREFIX = "autoplace/"


def host_of(cluster, k: int) -> str:
    """The host of device ``k``: its ``meta["host"]``, else the first host any device names (else ``""``:
    a cluster naming no host is one machine)."""
    named = [str(d.meta["host"]) for d in cluster.devices if d.meta.get("host")]
    return str(cluster.devices[k].meta.get("host") or (named[0] if named else ""))


def hosts_of(cluster) -> list[str]:
    """The cluster's hosts in order of first appearance (:func:`host_of`)."""
    return list(dict.fromkeys(host_of(cluster, k) for k in range(cluster.n_devices)))


def rank_order(cluster) -> list[int]:
    """Device indices in rank order: host by host (as :func:`hosts_of`), each host's devices in cluster
    order — torchrun numbers the ranks of node ``n`` after those of nodes ``0 .. n-1``."""
    hosts = hosts_of(cluster)
    return sorted(range(cluster.n_devices), key=lambda k: (hosts.index(host_of(cluster, k)), k))


def rendezvous_of(cluster, override: str | None = None) -> tuple[str, int]:
    """``(address, port)`` of the cluster's rendezvous (``meta["rendezvous"]``, ``"host:port"``)."""
    from autoplace.runtime.program import ExecutionError

    text = override or cluster.meta.get("rendezvous")
    if not text:
        raise ExecutionError(f"cluster {cluster.name!r} names no rendezvous: add \"rendezvous\": "
                             "\"ADDRESS:PORT\" to its meta (or pass --rendezvous)")
    host, _, port = str(text).rpartition(":")
    if not host or not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65535:
        raise ExecutionError(f"cluster {cluster.name!r}: rendezvous {str(text)[:60]!r} is not ADDRESS:PORT (a port "
                             "of ASCII digits, 1 to 65534)")
    return host, int(port)


def encode_message(msg: Any) -> bytes:
    from autoplace.formats.state import encode_state

    return encode_state({"m": msg})


def decode_message(data: bytes, where: str) -> Any:
    from autoplace.formats.state import decode_state

    obj = decode_state(data, where, "message")
    if not isinstance(obj, dict) or "m" not in obj:
        raise ValueError(f"{where}: not a message")
    return obj["m"]


class Unsigned(ValueError):
    """A control message not signed with the ranks' secret."""


class StoreChannel:
    """One direction-pair of control messages through a rendezvous store: messages ``n = 0, 1, ...`` to
    and from rank ``rank`` of session ``session`` are keys ``<session>/to<rank>/<n>`` and
    ``<session>/from<rank>/<n>``, read once and deleted; each signed with ``secret`` over the ranks'
    ``nonce`` and its key (:func:`autoplace.runtime.rendezvous.sign`), and refused unsigned."""

    def __init__(self, store, session: int, rank: int, *, driver: bool, secret: bytes, nonce: str):
        self.store, self.session, self.rank = store, session, rank
        self.secret, self.nonce = secret, nonce
        mine, theirs = (f"to{rank}", f"from{rank}") if driver else (f"from{rank}", f"to{rank}")
        self._out, self._in = f"s{session}/{mine}/", f"s{session}/{theirs}/"
        self.n_out = self.n_in = 0

    def send(self, msg: Any) -> None:
        key, data = f"{self._out}{self.n_out}", encode_message(msg)
        self.store.set(key, sign(self.secret, self.nonce, key, data) + data)
        self.n_out += 1

    def poll(self) -> bool:
        return self.store.check([f"{self._in}{self.n_in}"])

    def recv(self) -> Any:
        key = f"{self._in}{self.n_in}"
        signed = bytes(self.store.get(key))
        self.store.delete_key(key)
        self.n_in += 1
        data = verify(self.secret, self.nonce, key, signed)
        if data is None:
            raise Unsigned(f"message {key} is not signed with the ranks' secret")
        return decode_message(data, f"message {key}")


def _control_store(host: str, port: int, *, master: bool, timeout: float):
    """The control rendezvous at ``host:port`` (hosted here where ``master``), joined within twice
    ``timeout`` (:func:`~autoplace.runtime.rendezvous.tcp_store`)."""
    import torch.distributed as dist

    what = f"{'hosting' if master else 'joining'} the rendezvous at {host}:{port}"
    return dist.PrefixStore(CONTROL_PREFIX, tcp_store(host, port, master=master, timeout=timeout, what=what))


def read_nonce(control, world: int, timeout: float, mine: tuple[int, str] | None = None) -> str | int:
    """The group's nonce (:func:`~autoplace.runtime.rendezvous.group_nonce`) from every rank's token in
    ``control`` — ``mine``: this rank's index and its own copy of its token, used in place of the store's —
    or the index of the first rank whose token has not come within ``timeout``."""
    tokens = []
    for r in range(world):
        if mine is not None and r == mine[0]:
            tokens.append(mine[1])
            continue
        token = wait_key(control, f"token{r}", timeout)
        if token is None:
            return r
        tokens.append(token.decode("ascii", "replace"))
    return group_nonce(tokens)


def wait_key(store, key: str, timeout: float) -> bytes | None:
    """The value of ``key`` once it is set, polling for at most ``timeout`` seconds (None after)."""
    end = time.monotonic() + timeout
    while not store.check([key]):
        if time.monotonic() > end:
            return None
        time.sleep(0.02)
    return bytes(store.get(key))


#: functions a driver may run in a rank started by torchrun (``call`` by name)
CALLABLE = ("autoplace.runtime.profile._device_speed", "autoplace.runtime.profile._copy_engines",
            "autoplace.runtime.profile._dist_link")


def resolve_callable(name: str):
    import importlib

    if name not in CALLABLE:
        raise ValueError(f"{name!r} is not a function a rank runs")
    module, _, fn = name.rpartition(".")
    return getattr(importlib.import_module(module), fn)


def serve(cluster_path: str, *, timeout: float = 120.0, idle_s: float | None = None,
          secret_file: str | None = None) -> int:
    """Run as rank ``$RANK`` of a ``torchrun`` job over the cluster in ``cluster_path``: join the process
    group, host the control rendezvous on rank 0, and run the drivers' sessions one after another until
    a session fails (the process group is then unusable: the rank exits 1, and ``torchrun
    --max-restarts`` starts a fresh group) or, with ``idle_s``, nobody has driven the ranks for that long.
    A session whose driver does not sign with the ranks' secret (``secret_file``:
    :func:`~autoplace.runtime.rendezvous.secret_path`) is refused and logged; the rank serves the next.
    A bad environment, cluster or secret is an :class:`~autoplace.errors.AutoplaceError` (one line)."""
    import torch.distributed as dist

    from autoplace.formats import load_cluster
    from autoplace.formats.state import cluster_hash
    from autoplace.runtime.program import torch_device

    world = env_int("WORLD_SIZE", 1, 1 << 20)
    rank = env_int("RANK", 0, world - 1)
    master_port = env_int("MASTER_PORT", 1, 65535)
    master_addr = os.environ.get("MASTER_ADDR", "")
    if not master_addr or master_addr != master_addr.strip():
        raise RendezvousError(f"$MASTER_ADDR={master_addr[:40]!r} is not an address")
    secret = read_secret(secret_file)
    cluster = load_cluster(cluster_path)
    order = rank_order(cluster)
    if world != len(order):
        raise RendezvousError(f"torchrun started {world} ranks but cluster {cluster.name!r} has {len(order)} devices")
    k = order[rank]
    dev = cluster.devices[k]
    devices = [torch_device(cluster.devices[j].name) for j in order]
    host, port = rendezvous_of(cluster)
    control = _control_store(host, port, master=rank == 0, timeout=timeout)
    pg_store = dist.PrefixStore(f"pg{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/",
                                tcp_store(master_addr, master_port, master=False, timeout=timeout,
                                          what=f"joining torchrun's store at {master_addr}:{master_port}"))
    from autoplace.runtime.workers import _cores_of

    token = secrets.token_hex(16)
    control.set(f"token{rank}", token)
    nonce = read_nonce(control, world, timeout, mine=(rank, token))
    if isinstance(nonce, int):
        raise RendezvousError(f"rank {nonce} did not join the rendezvous at {host}:{port} within {timeout:g} s")
    with native_stderr_held() as caught:
        try:
            rt = RankRuntime(dev.name, devices[rank], _cores_of(dev, k), rank, devices, pg_store, timeout, order)
        except Exception as e:  # noqa: BLE001 - the process group could not be made
            raise RendezvousError(f"joining the process group: {type(e).__name__}: "
                                  f"{' '.join(str(e).split(chr(10), 1)[0].split())[:160]} {summary(caught)}") from None
    rt._spawned, rt.device_index = False, k
    seen = int(control.add("sessions", 0))  # before registering: a driver opens its session once all have
    info = json.dumps({"device": dev.name, "cluster_hash": cluster_hash(cluster), "pid": os.getpid()}).encode()
    control.set(f"rank{rank}", sign(secret, nonce, f"rank{rank}", info) + info)
    beat = threading.Thread(target=_heartbeat, args=(control, rank, world), daemon=True)
    beat.start()
    last = time.monotonic()
    while True:
        now = int(control.add("sessions", 0))
        if now > seen:  # a driver opened session ``now`` (it checked that no other driver is live)
            seen = now
            code = _session(control, now, rank, rt, secret, nonce, timeout)
            last = time.monotonic()
            if code is not None:  # the failure is replied; end now (a receiving thread may be stuck in gloo,
                sys.stdout.flush()  # and destroying the process group could wait on it)
                sys.stderr.flush()
                os._exit(code)
        elif idle_s is not None and time.monotonic() - last > idle_s:
            rt.close()
            return 0
        time.sleep(0.01)


PEER_TIMEOUT_S = 6.0  #: a rank whose heartbeat stalls this long is dead or hung: its peers end too (after the
#: driver, which gives up on it at half this, has named it)
DRIVER_QUIET_S = 5.0  #: a driver whose heartbeat stalls this long has stopped: the ranks abandon its session


def _heartbeat(control, rank: int, world: int) -> None:
    """Count up ``beat<rank>`` twice a second (a driver that sees it stall knows the rank is stopped) and
    watch the other ranks' counts: once a peer's stalls, or the rendezvous is gone, the process group can
    never run a step again, so this rank ends (exit 1) as torchrun expects of a failed worker (it then ends
    or, with ``--max-restarts``, restarts the job on every host)."""
    seen: dict[int, tuple[int, float]] = {}
    while True:
        try:
            control.add(f"beat{rank}", 1)
            beats = {r: int(control.add(f"beat{r}", 0)) for r in range(world) if r != rank}
        except Exception:  # noqa: BLE001 - the rendezvous (rank 0) is gone
            print(f"autoplace rank {rank}: the rendezvous is gone; ending", file=sys.stderr, flush=True)
            os._exit(1)
        now = time.monotonic()
        for r, b in beats.items():
            if b and (r not in seen or seen[r][0] != b):
                seen[r] = (b, now)
            elif r in seen and now - seen[r][1] > PEER_TIMEOUT_S:
                print(f"autoplace rank {rank}: rank {r} stopped answering; ending", file=sys.stderr, flush=True)
                os._exit(1)
        time.sleep(0.5)


def _refuse(control, session: int, rank: int, why: str) -> None:
    """Refuse session ``session``: say so in the store (its driver reads it) and in this rank's log."""
    control.set(f"s{session}/refused", why)
    print(f"autoplace rank {rank}: refused session {session}: {why}", file=sys.stderr, flush=True)


def _session(control, session: int, rank: int, rt: RankRuntime, secret: bytes, nonce: str,
             timeout: float) -> int | None:
    """Serve session ``session`` until the driver closes it (None: serve the next) or a failure leaves
    the process group unusable (the exit code). A driver that does not sign the session's opening, or a
    message, with the ranks' secret is refused (None: the next session is served)."""
    opened = wait_key(control, f"s{session}/open", min(timeout, 10.0))
    if opened is None or verify(secret, nonce, f"s{session}/open", opened) is None:
        _refuse(control, session, rank, "its driver did not sign it with the ranks' secret")
        return None
    control.set(f"s{session}/accepted{rank}", "1")
    ch = StoreChannel(control, session, rank, driver=False, secret=secret, nonce=nonce)
    quiet_since = time.monotonic()
    driver_beat = None
    ignored = session
    while True:
        newer = int(control.add("sessions", 0))
        if newer > ignored:           # another driver opened a session: this one is over if that one is signed
            opened = control.get(f"s{newer}/open") if control.check([f"s{newer}/open"]) else None
            if opened is not None and verify(secret, nonce, f"s{newer}/open", bytes(opened)) is not None:
                control.set(f"s{session}/abandoned", "1")   # which its driver reads as a failing result
                return None
            if opened is not None:    # signed wrong: logged, and this session goes on
                _refuse(control, newer, rank, "its driver did not sign it with the ranks' secret")
                ignored = newer
        if not ch.poll():
            drv = control.add(f"s{session}/driver", 0)
            if time.monotonic() - quiet_since > DRIVER_QUIET_S:
                if drv == driver_beat:  # the driver stopped beating: abandon its session, and say so
                    control.set(f"s{session}/abandoned", "1")
                    return None
                driver_beat, quiet_since = drv, time.monotonic()
            time.sleep(2e-4 if time.monotonic() - quiet_since < 0.2 else 5e-3)
            continue
        quiet_since = time.monotonic()
        try:
            msg = ch.recv()
        except Unsigned as e:
            _refuse(control, session, rank, str(e))
            return None
        failed = _handle(ch, rt, msg, rank)
        if failed is not None:
            return failed
        if msg[0] == "exit":
            return None


def _handle(ch: StoreChannel, rt: RankRuntime, msg, rank: int) -> int | None:
    """Run one control message of a torchrun-started rank; a failure is replied and ends the rank (1)."""
    from autoplace.formats import graph_from_dict

    cmd = msg[0]
    try:
        if cmd == "exit":
            ch.send(("ok",))
        elif cmd == "load":
            rt.load(graph_from_dict(json.loads(msg[1]), "the driver's graph"))
            ch.send(("ok",))
        elif cmd == "setup":
            from autoplace.runtime.program import plan_all
            from autoplace.runtime.workers import _layout

            assignment, n_devices, seed, capacity, keep, values, ranks, priority = msg[1:]
            import numpy as np

            plans = plan_all(rt.program, np.asarray(assignment, dtype=np.int64), n_devices,
                             None if priority is None else np.asarray(priority, dtype=np.int64))
            transfers, _ = _layout(rt.program, plans)
            resident = rt.setup(plans[rt.device_index], transfers, seed, capacity, set(keep), values, ranks,
                                participants(rt.program.graph, np.asarray(assignment, dtype=np.int64)))
            rt.finish_setup()
            ch.send(("ok", resident))
        elif cmd == "step":
            ch.send(("done",) + rt.step(msg[1], profile=msg[2]))
        elif cmd == "fetch":
            ch.send(("values", rt.fetch([TRef(op, k) for op, k in msg[1]])))
        elif cmd == "assign":
            rt.assign(msg[1])
            ch.send(("ok",))
        elif cmd == "draws":
            rt.set_draws(msg[1])
            ch.send(("ok",))
        elif cmd == "call":
            ch.send(("ok", resolve_callable(msg[1])(rt, *msg[2:])))
        else:
            ch.send(("error", f"{rt.name}: unknown command {cmd!r}"))
    except MemoryError as e:
        ch.send(("oom", str(e)))
    except Exception as e:  # noqa: BLE001
        text = " ".join(str(e).split())[:300]
        kind = "oom" if "out of memory" in text.lower() else "error"
        ch.send((kind, f"{rt.name}: {type(e).__name__}: {text}" if kind == "error" else f"{rt.name}: {text}"))
    else:
        return None
    # a step that failed here (out of memory too) leaves peers waiting on messages that will not come: the
    # process group cannot run another step, so the rank ends (torchrun ends or restarts the job)
    return 1 if cmd == "step" else None


def main(argv: list[str] | None = None) -> int:
    """``python -m autoplace.runtime CLUSTER.json [--timeout S] [--idle S] [--secret-file F]`` under torchrun:
    0 when idle, 1 when a session failed, 2 with one line on standard error for a bad environment, cluster,
    rendezvous or secret."""
    import argparse

    from autoplace.errors import AutoplaceError
    from autoplace.validation import MAX_BUDGET_S, check_number

    p = argparse.ArgumentParser(prog="python -m autoplace.runtime",
                                description="a rank of autoplace's torch.distributed runtime (start with torchrun)")
    p.add_argument("cluster")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--idle", type=float, default=None, help="exit after this many seconds without a driver")
    p.add_argument("--secret-file", default=None, help=f"the ranks' secret (default ${SECRET_ENV} or "
                                                        "~/.config/autoplace/ranks.secret)")
    a = p.parse_args(argv)
    text = os.environ.get("RANK", "")
    who = f"autoplace rank {text}" if re.fullmatch(r"[0-9]{1,9}", text) else "autoplace rank"
    try:
        for what, value in (("--timeout", a.timeout), ("--idle", a.idle)):
            if value is not None:
                check_number(value, what, RendezvousError, lo=0, hi=MAX_BUDGET_S, lo_open=True)
        return serve(a.cluster, timeout=a.timeout, idle_s=a.idle, secret_file=a.secret_file)
    except AutoplaceError as e:
        print(f"{who}: error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        return 2


def torchrun_command(cluster, cluster_path: str, host: str, *, timeout: float = 120.0, max_restarts: int = 0,
                     idle: float | None = None, python: str | None = None,
                     secret_file: str | None = None) -> list[str]:
    """The ``torchrun`` command that starts ``host``'s ranks of ``cluster`` (read from ``cluster_path`` on
    every host): node ``hosts_of(cluster).index(host)`` of ``len(hosts_of(cluster))``, a rank per device of
    that host; torchrun's own rendezvous on the port after the cluster's (``meta["rendezvous"]``), which
    rank 0 hosts for the driver."""
    from autoplace.runtime.program import ExecutionError

    hosts = hosts_of(cluster)
    if host not in hosts:
        raise ExecutionError(f"cluster {cluster.name!r} has no host {host!r} (its hosts: "
                             f"{', '.join(repr(h) for h in hosts)}; a device names its host in \"host\")")
    address, port = rendezvous_of(cluster)
    local = sum(host_of(cluster, k) == host for k in range(cluster.n_devices))
    cmd = [python or sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)),
           "--node-rank", str(hosts.index(host)), "--nproc-per-node", str(local), "--master-addr", address,
           "--master-port", str(port + 1), "--max-restarts", str(max_restarts),
           "-m", "autoplace.runtime", cluster_path, "--timeout", f"{timeout:g}"]
    return cmd + (["--idle", f"{idle:g}"] if idle is not None else []) + (
        ["--secret-file", secret_file] if secret_file is not None else [])
