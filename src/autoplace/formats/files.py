"""JSON (and ``.json.gz``) reading with one-line errors, atomic writing, and typed field access."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import socket
import stat
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from autoplace.errors import FormatError

__all__ = ["read_json", "input_file", "write_json", "atomic_write_text", "Fields", "check_format",
           "check_output_path", "check_output_folder"]

_MISSING = object()


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def input_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` as a :class:`Path` if it names a regular file (a link to one too); else :class:`FormatError`
    saying what it is: no such ``what``, a folder, a FIFO, a device or a socket (a FIFO or a device would
    block or never end when read)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise FormatError(f"{p}: no such {what}" + (" (a link to nothing)" if p.is_symlink() else "")) from None
    except OSError as e:
        raise FormatError(f"{p}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise FormatError(f"{p}: {kind}, not a {what}")
    return p


def read_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file (gzip-compressed if it ends in ``.gz`` or starts with the gzip magic)."""
    p = input_file(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise FormatError(f"{p}: no such file") from None
    except OSError as e:
        raise FormatError(f"{p}: cannot read ({e.strerror or e})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise FormatError(f"{p}: corrupt gzip data ({e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"{p}: not UTF-8 text (byte {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(f"{p}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise FormatError(f"{p}: JSON nested too deeply") from None
    except ValueError as e:                      # an integer of more digits than Python converts (4,300)
        raise FormatError(f"{p}: a number too long to read ({' '.join(str(e).split())[:80]})") from None


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 1) -> None:
    """Write ``obj`` as JSON atomically (temp file + rename): a failure never leaves a partial file.

    A path ending in ``.gz`` is gzip-compressed (deterministically: no timestamp in the header).
    """
    p = Path(path)
    data = (json.dumps(obj, indent=indent, allow_nan=False) + "\n").encode("utf-8")
    if p.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6, mtime=0)
    atomic_write_bytes(p, data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) atomically."""
    atomic_write_bytes(Path(path), text.encode("utf-8"))


def atomic_write_bytes(p: Path, data: bytes) -> None:
    """Write ``data`` to ``p`` the way careful command-line tools do.

    * ``-`` is standard output;
    * a symbolic link is written through: its target is replaced, the link stays;
    * an existing file that is not a regular file (``/dev/null``, a FIFO) is written to in place, never
      replaced;
    * otherwise the data goes to an unnamed temporary file in the same folder (Linux ``O_TMPFILE``; a
      named ``.NAME.TAG-PID.*.tmp``, TAG a hash of the host name and PID namespace, where linking an
      unnamed file fails, as on some overlay and network filesystems) that is given its name only when
      complete and then renamed over ``p``: readers see the old file or the whole new one, and a process
      killed mid-write leaves no partial file behind. A named temporary file a killed process left is
      removed by the next write of the same path on the same host and PID namespace (:func:`_sweep`:
      those whose process is gone);
    * a new file gets the permissions the umask allows (``0666 & ~umask``); a replaced one keeps its own.
    """
    if str(p) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    p = Path(os.path.realpath(p)) if p.is_symlink() else p
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(p, "wb") as f:
            f.write(data)
        return
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    parent = p.parent if str(p.parent) else Path(".")
    _sweep(parent, p.name)
    fd = _unnamed_file(parent, mode)
    if fd is not None:
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                tmp = parent / f".{p.name}.{_HOST}-{os.getpid()}.{time.monotonic_ns()}.tmp"
                os.link(f"/proc/self/fd/{f.fileno()}", tmp)
            try:
                os.replace(tmp, p)
            except BaseException:
                _unlink(tmp)
                raise
            return
        except OSError:
            pass  # /proc or linkat unavailable: fall back to a named temporary file
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.{_HOST}-{os.getpid()}.", suffix=".tmp", dir=parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException:
        _unlink(tmp)
        raise


def check_output_path(path: str | os.PathLike | None, what: str = "output") -> None:
    """Fail before any work where ``path`` cannot be written: empty, a folder, in a folder that does not
    exist or cannot be written to. ``-`` (standard output) and ``None`` (no output) are fine."""
    if path is None or str(path) == "-":
        return
    if not str(path):
        raise FormatError(f"the {what} path is empty")
    p = Path(path)
    if p.is_dir():
        raise FormatError(f"{path}: is a folder, not a file to write the {what} to")
    parent = Path(os.path.realpath(p)).parent if p.is_symlink() else (p.parent if str(p.parent) else Path("."))
    if not parent.is_dir():
        raise FormatError(f"{path}: folder {str(parent)!r} does not exist")
    if not p.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise FormatError(f"{path}: folder {str(parent)!r} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise FormatError(f"{path}: is not writable")


def check_output_folder(path: str | os.PathLike | None, what: str) -> None:
    """Fail before any work where ``path`` cannot be (or become) a folder to write into: empty, ``-``, an
    existing file, or under a file or an unwritable folder."""
    if path is None:
        return
    if str(path) in ("", "-") or not str(path).strip():
        raise FormatError(f"the {what} folder {str(path)!r} is not a folder name")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise FormatError(f"{path}: is a file, not a folder for the {what}")
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise FormatError(f"{path}: {str(existing)!r} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise FormatError(f"{path}: folder {str(existing)!r} is not writable")


def _writer_tag() -> str:
    """This host and PID namespace, as a temporary file's name carries them: only a writer of the same tag
    can tell whether the process that made a file is gone."""

    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    return hashlib.sha256(f"{socket.gethostname()}/{ns}".encode()).hexdigest()[:12]


_HOST = _writer_tag()


def _sweep(folder: Path, name: str) -> None:
    """Remove ``folder``'s temporary files of ``name`` left by processes of this host and PID namespace that
    are gone (killed mid-write); files of live processes, other hosts and other PID namespaces (containers)
    are left alone."""
    prefix = f".{name}.{_HOST}-"
    try:
        entries = [e for e in os.listdir(folder) if e.startswith(prefix) and e.endswith(".tmp")]
    except OSError:
        return
    for entry in entries:
        pid = entry[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            _unlink(folder / entry)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def _unnamed_file(folder: Path, mode: int) -> int | None:
    """A file descriptor of an unnamed file in ``folder`` (``O_TMPFILE``), or None where unsupported."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:
        return None
    try:
        return os.open(folder, flag | os.O_WRONLY, mode)
    except OSError:
        return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def check_format(obj: Any, expected: str, where: str) -> dict:
    """The top-level object must be a dict whose ``format`` is ``expected``."""
    if not isinstance(obj, dict):
        raise FormatError(f"{where}: expected a JSON object with format {expected!r}, got {type(obj).__name__}")
    fmt = obj.get("format", _MISSING)
    if fmt is _MISSING:
        raise FormatError(f"{where}: missing field 'format' (expected {expected!r})")
    if fmt != expected:
        raise FormatError(f"{where}: unknown format {fmt!r} (expected {expected!r})")
    return obj


class Fields:
    """Typed access to one JSON object's fields; errors name ``where`` and the field.

    ``known`` collects the names read, so :meth:`extra` can return the fields kept as metadata.
    """

    def __init__(self, obj: Any, where: str):
        if not isinstance(obj, dict):
            raise FormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        self.obj = obj
        self.where = where
        self.known: set[str] = set()

    def _fail(self, key: str, expected: str, value: Any) -> FormatError:
        return FormatError(f"{self.where}: field {key!r} must be {expected}, got {json.dumps(value)[:60]}")

    def _raw(self, key: str, default: Any) -> Any:
        self.known.add(key)
        value = self.obj.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise FormatError(f"{self.where}: missing field {key!r}")
            return _MISSING
        return value

    def str(self, key: str, default: Any = _MISSING) -> Any:
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if not isinstance(v, str):
            raise self._fail(key, "a string", v)
        return v

    def number(self, key: str, default: Any = _MISSING, *, positive: bool = False) -> Any:
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise self._fail(key, "a finite non-negative number", v)
        if positive and v <= 0:
            raise self._fail(key, "a positive number", v)
        return v

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 0) -> Any:
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self._fail(key, f"an integer >= {minimum}", v)
        return v

    def bool(self, key: str, default: Any = _MISSING) -> Any:
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if not isinstance(v, bool):
            raise self._fail(key, "true or false", v)
        return v

    def list(self, key: str, default: Any = _MISSING) -> Any:
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if not isinstance(v, list):
            raise self._fail(key, "a list", v)
        return v

    def str_list(self, key: str, default: Any = _MISSING) -> Any:
        v = self.list(key, default)
        if v is default:
            return v
        for x in v:
            if not isinstance(x, str):
                raise self._fail(key, "a list of strings", v)
        return v

    def dict(self, key: str, default: Any = _MISSING) -> Any:
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if not isinstance(v, dict):
            raise self._fail(key, "an object", v)
        return v

    def extra(self) -> dict[str, Any]:
        """Fields not read through this object (kept as ``meta``)."""
        return {k: v for k, v in self.obj.items() if k not in self.known}

    def no_extra(self) -> None:
        """Refuse fields not read through this object, for objects that keep no metadata (a misspelt
        optional field would otherwise be dropped without a word)."""
        extra = sorted(self.extra())
        if extra:
            raise FormatError(f"{self.where}: unknown field {extra[0]!r}")
