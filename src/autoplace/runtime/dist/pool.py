"""The ``torch.distributed`` runtime, driver's side: one rank per device, tensors as point-to-point
messages (NCCL between GPUs, gloo where a CPU takes part; the ranks' side is :mod:`autoplace.runtime.dist.rank`).

:class:`DistributedPool` runs placed steps exactly as :class:`~autoplace.runtime.shm.pool.WorkerPool` does
(the same ``prepare`` / ``step`` / ``assign`` / ``fetch`` / ``run``, the same failing results) with its
ranks started one of two ways:

- **On this machine** (a cluster whose devices name at most one host and no rendezvous): the driver hosts
  a rendezvous store on the loopback interface and starts a rank per device as the workers start; the ranks
  end with it, and
  control messages go over pipes.
- **On many machines** (a cluster whose ``meta["rendezvous"]`` is ``"ADDRESS:PORT"``): ``torchrun`` has
  started a rank per device on every host (``autoplace ranks``); rank 0 hosts the rendezvous store, and the
  driver joins it, checks that every rank runs this cluster, opens a session and sends control messages
  as keys of that store (encoded as state files: a message cannot run code). A rank that stops counting
  its heartbeat is dead or hung; a failing step ends the ranks (their process group is unusable) and
  ``torchrun --max-restarts`` starts fresh ones.
"""

from __future__ import annotations

import json
import threading
import time

from autoplace.cluster import Cluster
from autoplace.runtime.dist.control import (
    StoreChannel,
    control_store,
    host_of,
    hosts_of,
    rank_order,
    read_nonce,
    rendezvous_of,
    wait_key,
)
from autoplace.runtime.dist.rank import participants, rank_main
from autoplace.runtime.dist.rendezvous import read_secret, secret_path, sign, verify
from autoplace.runtime.dist.serve import DRIVER_QUIET_S
from autoplace.runtime.pool import DEFAULT_TIMEOUT_S, ProcessPool, Runtime, WorkerFailed, cores_of
from autoplace.runtime.program import ExecutionError
from autoplace.formats import graph_to_dict
from autoplace.formats.state import cluster_hash

__all__ = ["DistributedPool", "HEARTBEAT_S"]


HEARTBEAT_S = 3.0  #: a torchrun-started rank whose heartbeat stalls this long is dead or hung


class _RemoteRank:
    """A torchrun-started rank as the driver sees it: its registration and its heartbeat."""

    def __init__(self, control, rank: int, info: dict):
        self.control, self.rank, self.pid = control, rank, int(info.get("pid", 0))
        self._beat, self._seen = -1, time.monotonic()

    def is_alive(self) -> bool:
        try:
            beat = int(self.control.add(f"beat{self.rank}", 0))
        except Exception:  # noqa: BLE001 - the rendezvous itself is gone
            return False
        now = time.monotonic()
        if beat != self._beat:
            self._beat, self._seen = beat, now
        return now - self._seen < HEARTBEAT_S


class DistributedPool(ProcessPool):
    """A rank per device of ``cluster`` on ``torch.distributed`` (see the module docstring)."""

    runtime = Runtime.DISTRIBUTED

    def __init__(self, cluster: Cluster, *, timeout: float = DEFAULT_TIMEOUT_S, rendezvous: str | None = None,
                 secret_file: str | None = None):
        self._beating = threading.Event()              # first: close() reads it, even after a failed __init__
        self._session = None
        super().__init__(cluster, timeout=timeout)
        self.secret_file = secret_file
        self.remote = bool(rendezvous or cluster.meta.get("rendezvous"))
        if not self.remote and len(hosts_of(cluster)) > 1:
            rendezvous_of(cluster)  # a cluster spanning hosts needs one: say so now
        self.address = rendezvous_of(cluster, rendezvous) if self.remote else None
        self.order = rank_order(cluster) if self.remote else list(range(cluster.n_devices))
        self._store = None
        self._launches = 0

    

    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

    def launch(self) -> None:
        if self.alive:
            return
        self.close()
        if self.remote:
            self._join()
            return
        import torch.distributed as dist

        if self._store is None:
            self._store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        self._launches += 1  # each launch's ranks rendezvous under a prefix of their own
        super().launch()

    def _process(self, k: int, conn) -> tuple:
        dev = self.cluster.devices[k]
        address = ("127.0.0.1", self._store.port, f"launch{self._launches}/")
        return rank_main, (conn, dev.name, self.devices[k], cores_of(dev, k), k, self.devices, address,
                            self.timeout)

    def _join(self) -> None:
        """Join the ranks torchrun started: each registered with this cluster, then a session of our own."""

        host, port = self.address
        secret = read_secret(self.secret_file)
        try:
            control = control_store(host, port, master=False, timeout=self.timeout)
        except Exception as e:  # noqa: BLE001 - nobody listening, or a listener that never answers
            raise ExecutionError(f"no ranks answer at {host}:{port} ({' '.join(str(e).split())[:160]}): start "
                                 f"them on every host with 'autoplace ranks CLUSTER --host NAME'") from None
        want = cluster_hash(self.cluster)
        hosts = [host_of(self.cluster, k) for k in range(self.cluster.n_devices)]
        nonce = read_nonce(control, len(self.order), self.timeout)
        if isinstance(nonce, int):
            raise ExecutionError(f"rank {nonce} has not joined {host}:{port} within {self.timeout:g} s: start "
                                 "'autoplace ranks' on its host")
        deadline = time.monotonic() + self.timeout
        infos = {}
        for r, k in enumerate(self.order):
            name = self.cluster.devices[k].name
            registered = wait_key(control, f"rank{r}", max(0.0, deadline - time.monotonic()))
            if registered is None:
                raise ExecutionError(f"rank {r} ({name} on host {hosts[k]!r}) has not joined {host}:{port} "
                                     f"within {self.timeout:g} s: start 'autoplace ranks' on that host")
            signed = verify(secret, nonce, f"rank{r}", registered)
            if signed is None:
                raise ExecutionError(f"rank {r} at {host}:{port} does not hold this machine's ranks secret "
                                     f"({secret_path(self.secret_file)}): copy the file the ranks use here")
            info = json.loads(signed)
            if info.get("device") != name or info.get("cluster_hash") != want:
                raise ExecutionError(f"rank {r} at {host}:{port} runs device {info.get('device')!r} of another "
                                     f"cluster file: start every host's ranks with this cluster file")
            infos[k] = info
        live = int(control.add("sessions", 0))
        if live and not control.check([f"s{live}/closed"]) and not control.check([f"s{live}/abandoned"]):
            beat = int(control.add(f"s{live}/driver", 0))
            time.sleep(1.2)                       # a live driver counts its heartbeat up twice a second
            if int(control.add(f"s{live}/driver", 0)) != beat:
                raise ExecutionError(f"another driver is using the ranks at {host}:{port} (session {live}): "
                                     "they serve one driver at a time; try again when it is done")
        session = int(control.add("sessions", 1))
        if session != live + 1:  # another driver opened one since we looked: the ranks follow the newer
            control.set(f"s{session}/closed", "1")
            raise ExecutionError(f"another driver opened a session at {host}:{port} at the same moment: "
                                 "the ranks serve one driver at a time; try again when it is done")
        control.set(f"s{session}/open", sign(secret, nonce, f"s{session}/open"))
        self._session = (control, session)
        self._beating.set()
        threading.Thread(target=self._heartbeat, args=(control, session), daemon=True).start()
        for r in range(len(self.order)):                # every rank checks the signature, or refuses
            while not control.check([f"s{session}/accepted{r}"]):
                if control.check([f"s{session}/refused"]):
                    why = bytes(control.get(f"s{session}/refused")).decode("utf-8", "replace")[:120]
                    self.close()
                    raise ExecutionError(f"the ranks at {host}:{port} refused this driver: {why} (their secret "
                                         f"differs from {secret_path(self.secret_file)})")
                if time.monotonic() > deadline:
                    self.close()
                    raise ExecutionError(f"rank {r} at {host}:{port} did not open this driver's session within "
                                         f"{self.timeout:g} s")
                time.sleep(0.02)
        ranks = {k: r for r, k in enumerate(self.order)}
        self._procs = [_RemoteRank(control, ranks[k], infos[k]) for k in range(self.cluster.n_devices)]
        self._conns = [StoreChannel(control, session, ranks[k], driver=True, secret=secret, nonce=nonce)
                       for k in range(self.cluster.n_devices)]
        self._booting = False
        self._loaded = False

    def _heartbeat(self, control, session: int) -> None:
        while self._beating.is_set() and self._session == (control, session):
            try:
                control.add(f"s{session}/driver", 1)
            except Exception:  # noqa: BLE001 - the rendezvous is gone; the next message will say so
                return
            time.sleep(0.5)

    def start(self) -> None:
        if self.remote:
            if not self._procs:
                self.launch()
            return
        super().start()

    def close(self, now: bool = False) -> None:
        if not getattr(self, "remote", False):
            if hasattr(self, "remote"):
                super().close(now)
            return
        self._beating.clear()
        for c in self._conns:
            try:
                c.send(("exit",))
            except Exception:  # noqa: BLE001, S110 - a rank or the rendezvous already gone
                pass
        if self._session is not None:
            control, session = self._session
            try:
                control.set(f"s{session}/closed", "1")
            except Exception:  # noqa: BLE001, S110 - the rendezvous already gone
                pass
        self._procs, self._conns, self._loaded, self._prepared, self._booting = [], [], False, None, False
        self._session = None

    

    def _send(self, k: int, msg) -> None:
        if not self.remote:
            super()._send(k, msg)
            return
        try:
            self._conns[k].send(self._remote_message(msg))
        except Exception as e:  # noqa: BLE001
            raise WorkerFailed(f"rank of {self.cluster.devices[k].name}: the rendezvous is gone "
                                f"({' '.join(str(e).split())[:100]})") from None

    def _remote_message(self, msg) -> tuple:
        """A control message in the form a torchrun-started rank reads (state-file encodable)."""

        cmd = msg[0]
        if cmd == "load":
            return ("load", json.dumps(graph_to_dict(msg[1])))
        if cmd == "setup":
            _plan, _transfers, seed, capacity, keep, values, ranks = msg[1:8]   # the rank finds the collectives
            return ("setup", [int(x) for x in self._assignment], self.cluster.n_devices, int(seed), float(capacity),
                    sorted(int(x) for x in keep), dict(values), list(ranks), self._priority)
        if cmd == "fetch":
            return ("fetch", [[r.op, r.k] for r in msg[1]])
        if cmd == "call":
            fn = msg[1]
            return ("call", f"{fn.__module__}.{fn.__qualname__}", *msg[2:])
        return tuple(msg)

    def prepare(self, graph, placement, *, seed: int = 0, values=None) -> None:
        self._graph, self._assignment = graph, placement.to_array(graph, self.cluster)
        prio = placement.priorities(graph)
        self._priority = None if prio is None else [int(x) for x in prio]
        super().prepare(graph, placement, seed=seed, values=values)

    def _exchange_buffers(self, transfers: list[tuple], total: int, used: list[int]) -> tuple:
        # messages, not shared memory: the ranks taking part, and the devices of each collective
        return [self.order.index(k) for k in used], participants(self._graph, self._assignment)

    def _gather(self, *, timeout: float | None = None, which: list[int] | None = None) -> list:
        try:
            if self.remote:
                return self._gather_remote(timeout=timeout, which=which)
            return super()._gather(timeout=timeout, which=which)
        except WorkerFailed as e:
            if str(e).startswith("out of memory"):
                raise
            # a rank whose peer died fails first, with the peer's name in a socket error: name the dead rank
            dead = self._dead(grace=1.0)
            if dead is not None and dead not in str(e):
                raise WorkerFailed(f"{dead} (and then: {e})") from None
            raise

    def _dead(self, grace: float) -> str | None:
        """Within ``grace`` seconds, the first rank found dead, as an error's opening words."""
        end = time.monotonic() + grace
        while True:
            for k, p in enumerate(self._procs):
                if not p.is_alive():
                    if self.remote:
                        return f"rank of {self.cluster.devices[k].name} died or hung (no heartbeat for " \
                               f"{HEARTBEAT_S:g} s)"
                    return self._died(k)
            if time.monotonic() >= end:
                return None
            time.sleep(0.05)

    def _gather_remote(self, *, timeout: float | None, which: list[int] | None) -> list:
        which = list(range(len(self._conns))) if which is None else which
        replies: dict[int, tuple] = {}
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        next_check = time.monotonic() + 0.5
        while len(replies) < len(which):
            got = False
            for k in which:
                if k in replies:
                    continue
                try:
                    ready = self._conns[k].poll()
                    msg = self._conns[k].recv() if ready else None
                except Exception as e:  # noqa: BLE001 - the rendezvous (rank 0) is gone
                    raise WorkerFailed(f"lost the rendezvous at {self.address[0]}:{self.address[1]} "
                                        f"({' '.join(str(e).split())[:100]})") from None
                if msg is None:
                    continue
                got = True
                if msg[0] == "oom":
                    raise WorkerFailed(f"out of memory: {msg[1]}")
                if msg[0] == "error":
                    raise WorkerFailed(msg[1])
                replies[k] = tuple(msg)
            if got:
                continue
            now = time.monotonic()
            if now > deadline:
                slow = [self.cluster.devices[k].name for k in which if k not in replies]
                raise WorkerFailed(f"timeout: {', '.join(slow)} did not finish within {limit:g} s")
            if now > next_check:
                next_check = now + 0.5
                control, session = self._session
                if control.check([f"s{session}/abandoned"]):
                    raise WorkerFailed("the ranks gave up on this driver's session: its heartbeat stalled "
                                        f"for over {DRIVER_QUIET_S:g} s (a busy or stopped driver process)")
                for k in which:
                    if k not in replies and not self._procs[k].is_alive():
                        raise WorkerFailed(f"rank of {self.cluster.devices[k].name} died or hung "
                                            f"(no heartbeat for {HEARTBEAT_S:g} s)")
            time.sleep(2e-4)
        return [replies[k] for k in which]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]
