"""The rendezvous of ranks torchrun started, guarded: what a rank reads from its environment, stores joined
within a deadline, torch's native log lines kept off the terminal, and the ranks' shared secret.

- **Environment.** ``RANK``, ``WORLD_SIZE`` and ``MASTER_PORT`` are whole numbers written in ASCII digits
  (``'²'.isdigit()`` is true in Python, ``int('²')`` is not) within their ranges; anything else is one
  line naming the variable (:func:`env_int`).
- **Deadlines.** A TCP store is joined in a thread the caller waits for at most twice the timeout it was
  given (:func:`join_store`): a port held by a listener that accepts and never answers is an error within
  that bound, not a hang (torch's own client timeout does not cover its handshake).
- **Native output.** torch's C++ code logs to file descriptor 2 (a client's connection retries: kilobytes
  of frames before our one line). :func:`native_stderr_held` points the descriptor at a file while a
  store is joined or a process group made; what it caught is dropped when the call succeeds but for lines
  that are no torch log, and summarised in one line when it fails.
- **The secret.** Anyone who reaches rank 0's store could drive the ranks (torchrun's store has no
  authentication). ``autoplace ranks`` creates a secret once (:func:`ranks_secret`: 32 random bytes, hex,
  in ``~/.config/autoplace/ranks.secret`` or the file ``$AUTOPLACE_RANKS_SECRET_FILE`` names, mode 0600),
  and every host and the driver's machine hold a copy (the user copies the file; it never travels over the
  rendezvous). Each rank draws a random token when the ranks start; the group's nonce is the hash of all
  tokens (:func:`group_nonce`), each rank computing it with its own token, so a nonce of an earlier group
  cannot be planted. Each rank signs its registration, the driver signs the session it opens, and both
  sides sign every control message (:func:`sign`: HMAC-SHA256 over the nonce, the store key and the
  bytes; session numbers never repeat within a group, so no signed key can be replayed). A rank refuses a
  session whose driver cannot sign and logs it, and leaves a live session only for a newer one that is
  signed; a driver refuses ranks that cannot sign.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import os
import re
import secrets
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from autoplace.errors import AutoplaceError
import sys

__all__ = ["RendezvousError", "env_int", "port_of", "join_store", "tcp_store", "native_stderr_held", "summary",
           "ranks_secret", "read_secret", "secret_path", "group_nonce", "sign", "verify", "SECRET_ENV",
           "MAC_BYTES"]

SECRET_ENV = "AUTOPLACE_RANKS_SECRET_FILE"   #: names the secret file (default: ~/.config/autoplace/ranks.secret)
MAC_BYTES = 32                               #: an HMAC-SHA256, before a signed value's bytes
_ASCII_WHOLE = re.compile(r"[0-9]{1,9}")
#: lines torch's native code writes: log lines (``[W1130 ...] ...``, ``W1130 12:00:00.1 ...``) and frames
_NATIVE = re.compile(r"^(\[?[WIEF]\d{4} |\[[WIEF] |frame #|#\d+ |<omitting python frames>|C\+\+ CapturedTraceback"
                     r"|Exception raised from|\s*$)")


class RendezvousError(AutoplaceError):
    """A rank's environment, its cluster's rendezvous or the secret is not as it must be."""


# ---------------------------------------------------------------------- environment
def env_int(name: str, lo: int, hi: int, environ: dict | None = None) -> int:
    """``$name`` as a whole number in ``[lo, hi]`` written in ASCII digits; else one line naming it."""
    env = os.environ if environ is None else environ
    if name not in env:
        raise RendezvousError(f"${name} is not set: start ranks with torchrun (see 'autoplace ranks --help')")
    text = env[name]
    if not _ASCII_WHOLE.fullmatch(text) or not lo <= int(text) <= hi:
        raise RendezvousError(f"${name}={text[:40]!r} is not a whole number in [{lo}, {hi}]")
    return int(text)


def port_of(text: str, what: str) -> int:
    """A TCP port written in ASCII digits, 1 to 65534 (the next port is torchrun's own store)."""
    if not _ASCII_WHOLE.fullmatch(text) or not 0 < int(text) < 65535:
        raise RendezvousError(f"{what}: port {text[:20]!r} is not a whole number in [1, 65534]")
    return int(text)


# ---------------------------------------------------------------------- native output and deadlines
@contextlib.contextmanager
def native_stderr_held() -> Iterator[list[str]]:
    """File descriptor 2 pointed at a temporary file for the block; yields a list that holds, once the block
    ends, the lines torch's native code wrote (its log lines and frames). Other lines are written back to
    standard error; a caller that fails reads the list for its one line."""

    caught: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield caught
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            other = []
            for line in text.splitlines():
                (caught if _NATIVE.match(line) else other).append(line)
            if other:
                sys.stderr.write("\n".join(other) + "\n")


def summary(caught: list[str]) -> str:
    """The first native log line worth showing (what torch said before failing), cut to one short line."""
    for line in caught:
        text = " ".join(line.split("]", 1)[-1].split())
        if text and not text.startswith(("frame #", "Exception raised from")):
            return text[:160]
    return ""


def join_store(make: Callable[[], Any], timeout: float, what: str) -> Any:
    """``make()`` (a TCP store's constructor), in a thread waited for at most ``2 × timeout`` seconds, with
    torch's native output held (:func:`native_stderr_held`); a failure or the deadline is one
    :class:`RendezvousError` naming ``what``."""
    done: dict[str, Any] = {}

    def run():
        try:
            done["store"] = make()
        except Exception as e:  # noqa: BLE001 - torch's store errors are RuntimeErrors, DistStoreErrors …
            done["error"] = e

    bound = 2.0 * timeout
    join_store.last_bound = bound                    # what a test reads: the wait is bounded, not timed
    with native_stderr_held() as caught:
        th = threading.Thread(target=run, daemon=True, name="join-store")
        th.start()
        th.join(bound)
    if th.is_alive():
        raise RendezvousError(f"{what}: no answer within {bound:g} s (something listens there that is no "
                              "autoplace rendezvous, or it hangs)")
    if "error" in done:
        e = done["error"]
        first = " ".join(str(e).split("\n", 1)[0].split())[:160]
        hint = summary(caught)
        raise RendezvousError(f"{what}: {first or type(e).__name__}" + (f" ({hint})" if hint and hint not in first
                                                                         else ""))
    return done["store"]


join_store.last_bound = 0.0


def tcp_store(host: str, port: int, *, master: bool, timeout: float, what: str):
    """A TCP store at ``host:port`` (hosted here where ``master``), joined within :func:`join_store`'s bound."""
    import torch.distributed as dist

    return join_store(lambda: dist.TCPStore(host, port, is_master=master, wait_for_workers=False,
                                            timeout=datetime.timedelta(seconds=timeout)), timeout, what)


# ---------------------------------------------------------------------- the secret
def secret_path(path: str | os.PathLike | None = None) -> Path:
    """The secret file: ``path``, else ``$AUTOPLACE_RANKS_SECRET_FILE``, else ``~/.config/autoplace/ranks.secret``."""
    if path is not None:
        return Path(path)
    if os.environ.get(SECRET_ENV):
        return Path(os.environ[SECRET_ENV])
    return Path.home() / ".config" / "autoplace" / "ranks.secret"


def read_secret(path: str | os.PathLike | None = None) -> bytes:
    """The secret in the file (:func:`secret_path`): 64 hex digits, a regular file only its owner reads;
    else one line saying what to do. The file is opened once, without blocking (a FIFO put in its place
    between a check and a read cannot hang the reader), and checked on the open descriptor."""
    p = secret_path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        if p.is_symlink():
            raise RendezvousError(f"{p}: the ranks secret is a link to nothing") from None
        raise RendezvousError(f"no ranks secret at {p}: 'autoplace ranks' creates one; copy it to every host "
                              f"and to the driver's machine (or name a copy with ${SECRET_ENV})") from None
    except OSError as e:
        raise RendezvousError(f"{p}: cannot read the ranks secret ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RendezvousError(f"{p}: the ranks secret must be a regular file")
        if st.st_mode & 0o077:
            raise RendezvousError(f"{p}: the ranks secret is readable by others (mode "
                                  f"{stat.S_IMODE(st.st_mode):o}): chmod 600 {p}")
        text = os.read(fd, 200).strip()
    except OSError as e:
        raise RendezvousError(f"{p}: cannot read the ranks secret ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if not re.fullmatch(rb"[0-9a-f]{64}", text):
        raise RendezvousError(f"{p}: not a ranks secret (64 hexadecimal digits)")
    return bytes.fromhex(text.decode("ascii"))


def ranks_secret(path: str | os.PathLike | None = None) -> tuple[bytes, Path, bool]:
    """The ranks secret, created if there is none (32 random bytes, mode 0600, written at once in full):
    ``(secret, its file, created)``."""
    p = secret_path(path)
    if p.exists() or p.is_symlink():          # a link to nothing is named as such, never written through
        return read_secret(p), p, False
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:                          # another 'autoplace ranks' made it this instant
        return read_secret(p), p, False
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return read_secret(p), p, True


def group_nonce(tokens: list[str]) -> str:
    """The nonce of a group of ranks: the SHA-256 of every rank's random token (each rank puts its own in
    the store and uses its own copy, so a token replaced in the store makes that rank's nonce differ —
    a refusal, never an old group's nonce)."""
    return hashlib.sha256("\0".join(tokens).encode()).hexdigest()


def sign(secret: bytes, nonce: str, key: str, data: bytes = b"") -> bytes:
    """The HMAC-SHA256 of ``data`` under ``secret``, bound to the ranks' ``nonce`` and the store ``key``."""
    return hmac.new(secret, b"\0".join((nonce.encode(), key.encode(), data)), hashlib.sha256).digest()


def verify(secret: bytes, nonce: str, key: str, signed: bytes) -> bytes | None:
    """The bytes of a value :func:`sign` signed (the MAC first), or None where the MAC is not the secret's."""
    mac, data = signed[:MAC_BYTES], signed[MAC_BYTES:]
    return data if len(mac) == MAC_BYTES and hmac.compare_digest(mac, sign(secret, nonce, key, data)) else None
