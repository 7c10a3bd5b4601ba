"""Control of ranks torchrun started, through the rendezvous store rank 0 hosts: where the ranks are (hosts,
rank order, the rendezvous), and the driver's messages to them as signed keys of that store, encoded as
state files (no pickle: a message cannot run code)."""

from __future__ import annotations

import re
import time
from typing import Any

from autoplace.runtime.dist.rendezvous import group_nonce, sign, tcp_store, verify
from autoplace.formats.state import decode_state
from autoplace.formats.state import encode_state
from autoplace.runtime.program import ExecutionError

__all__ = ["StoreChannel", "Unsigned", "control_store", "read_nonce", "wait_key", "host_of", "hosts_of", "rank_order", "rendezvous_of", "encode_message", "decode_message", "CONTROL_PREFIX"]


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

    return encode_state({"m": msg})


def decode_message(data: bytes, where: str) -> Any:

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
    ``nonce`` and its key (:func:`autoplace.runtime.dist.rendezvous.sign`), and refused unsigned."""

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


def control_store(host: str, port: int, *, master: bool, timeout: float):
    """The control rendezvous at ``host:port`` (hosted here where ``master``), joined within twice
    ``timeout`` (:func:`~autoplace.runtime.dist.rendezvous.tcp_store`)."""
    import torch.distributed as dist

    what = f"{'hosting' if master else 'joining'} the rendezvous at {host}:{port}"
    return dist.PrefixStore(CONTROL_PREFIX, tcp_store(host, port, master=master, timeout=timeout, what=what))


def read_nonce(control, world: int, timeout: float, mine: tuple[int, str] | None = None) -> str | int:
    """The group's nonce (:func:`~autoplace.runtime.dist.rendezvous.group_nonce`) from every rank's token in
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
