"""A rank torchrun started (``python -m autoplace.runtime``; ``autoplace ranks`` prints and runs the command):
it joins the process group, hosts the control rendezvous on rank 0, and serves the drivers' sessions one
after another, each signed with the ranks' secret (:mod:`~autoplace.runtime.dist.rendezvous`)."""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import threading
import time

import numpy as np

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
from autoplace.runtime.dist.rank import RankRuntime, participants
from autoplace.runtime.dist.rendezvous import (
    SECRET_ENV,
    RendezvousError,
    env_int,
    native_stderr_held,
    read_secret,
    sign,
    summary,
    tcp_store,
    verify,
)
from autoplace.runtime.program import TRef
from autoplace.errors import AutoplaceError
from autoplace.formats import graph_from_dict
from autoplace.formats import load_cluster
from autoplace.formats.state import cluster_hash
from autoplace.runtime.plan import plan_all
from autoplace.runtime.pool import cores_of, transfer_layout
from autoplace.runtime.program import ExecutionError
from autoplace.runtime.program import torch_device
from autoplace.validation import MAX_BUDGET_S, check_number
import argparse
import importlib

__all__ = ["serve", "main", "torchrun_command", "PEER_TIMEOUT_S", "DRIVER_QUIET_S", "CALLABLE"]


#: functions a driver may run in a rank started by torchrun (``call`` by name)
CALLABLE = ("autoplace.runtime.detect._device_speed", "autoplace.runtime.detect._copy_engines",
            "autoplace.runtime.detect._dist_link")


def resolve_callable(name: str):

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
    :func:`~autoplace.runtime.dist.rendezvous.secret_path`) is refused and logged; the rank serves the next.
    A bad environment, cluster or secret is an :class:`~autoplace.errors.AutoplaceError` (one line)."""
    import torch.distributed as dist


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
    control = control_store(host, port, master=rank == 0, timeout=timeout)
    pg_store = dist.PrefixStore(f"pg{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/",
                                tcp_store(master_addr, master_port, master=False, timeout=timeout,
                                          what=f"joining torchrun's store at {master_addr}:{master_port}"))

    token = secrets.token_hex(16)
    control.set(f"token{rank}", token)
    nonce = read_nonce(control, world, timeout, mine=(rank, token))
    if isinstance(nonce, int):
        raise RendezvousError(f"rank {nonce} did not join the rendezvous at {host}:{port} within {timeout:g} s")
    with native_stderr_held() as caught:
        try:
            rt = RankRuntime(dev.name, devices[rank], cores_of(dev, k), rank, devices, pg_store, timeout, order)
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

    cmd = msg[0]
    try:
        if cmd == "exit":
            ch.send(("ok",))
        elif cmd == "load":
            rt.load(graph_from_dict(json.loads(msg[1]), "the driver's graph"))
            ch.send(("ok",))
        elif cmd == "setup":
            assignment, n_devices, seed, capacity, keep, values, ranks, priority = msg[1:]
            plans = plan_all(rt.program, np.asarray(assignment, dtype=np.int64), n_devices,
                             None if priority is None else np.asarray(priority, dtype=np.int64))
            transfers, _ = transfer_layout(rt.program, plans)
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
