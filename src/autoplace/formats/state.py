"""State files (search checkpoints, GDP policies) in a format that cannot run code.

A state file is one `safetensors <https://huggingface.co/docs/safetensors>`_ file: the tensors (and NumPy
arrays) of a nested Python state by reference, and the rest of the state as JSON in its ``__metadata__``
under the key ``autoplace``. Reading parses a length-prefixed JSON header and raw little-endian tensor
bytes — no pickle, no ``torch.load`` — so a crafted file can be wrong, never executed. The JSON tree keeps
what JSON cannot say directly as tagged objects: ``{"$tensor": "t3"}``, ``{"$ndarray": "t4"}``,
``{"$tuple": [...]}``, ``{"$bytes": "<base64>"}``, ``{"$float": "inf"}``, and ``{"$dict": [[key, value], ...]}``
for a dict whose keys are not all plain strings.

Every state carries ``format`` (a versioned name such as ``autoplace.rl/v2``) and the identity of what it
belongs to (:func:`graph_hash`, :func:`cluster_hash`, the placer's config, the seed); its reader checks
those first (:func:`check_identity`) and then every field it uses (:class:`StateFields`), so that a file of
another search or a damaged one is one line naming the file and the field.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from autoplace.errors import FormatError
from autoplace.formats import cluster_to_dict, graph_to_dict
from autoplace.formats.files import atomic_write_bytes, input_file
from autoplace.validation import is_finite, with_article

__all__ = ["write_state", "read_state", "encode_state", "decode_state", "graph_hash", "cluster_hash",
           "canonical", "shown", "check_identity", "StateFields", "MAX_STATE_BYTES", "digest"]

_KEY = "autoplace"
MAX_STATE_BYTES = 2**34       #: a state file larger than 16 GiB is refused before it is read
_HEADER_MAX = 2**30           #: a safetensors header larger than 1 GiB is refused
_PICKLE_HINT = ("a pickle or torch.save file is never loaded (it could run code); "
                "write it again with this version of autoplace")


# ------------------------------------------------------------------------------------------------ encoding
def encode_state(state: Any) -> bytes:
    """``state`` as the bytes of a state file."""
    import safetensors.torch

    tensors: dict[str, Any] = {}
    tree = _encode(state, tensors)
    text = json.dumps(tree, allow_nan=False, separators=(",", ":"))
    return safetensors.torch.save(tensors, metadata={_KEY: text})


def _encode(x: Any, tensors: dict) -> Any:
    import torch

    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else {"$float": repr(x)}
    if isinstance(x, torch.Tensor):
        name = f"t{len(tensors)}"
        tensors[name] = x.detach().cpu().contiguous().clone()
        return {"$tensor": name}
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            raise TypeError("an object array cannot be saved in a state file")
        name = f"t{len(tensors)}"
        tensors[name] = torch.from_numpy(np.ascontiguousarray(x).copy())
        return {"$ndarray": name}
    if isinstance(x, bytes):
        return {"$bytes": base64.b64encode(x).decode("ascii")}
    if isinstance(x, tuple):
        return {"$tuple": [_encode(v, tensors) for v in x]}
    if isinstance(x, list):
        return [_encode(v, tensors) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in x):
            return {k: _encode(v, tensors) for k, v in x.items()}
        return {"$dict": [[_encode(k, tensors), _encode(v, tensors)] for k, v in x.items()]}
    raise TypeError(f"a {type(x).__name__} cannot be saved in a state file")


def write_state(path: str | os.PathLike, state: Any) -> None:
    """Write ``state`` to ``path`` atomically (:func:`~autoplace.formats.files.atomic_write_bytes`)."""

    atomic_write_bytes(Path(path), encode_state(state))


# ------------------------------------------------------------------------------------------------ decoding
def read_state(path: str | os.PathLike, what: str = "state file") -> Any:
    """The state in ``path``; :class:`FormatError` naming the path for a missing, foreign or damaged file."""

    p = input_file(path, what)
    try:
        if p.stat().st_size > MAX_STATE_BYTES:
            raise FormatError(f"{p}: larger than {MAX_STATE_BYTES >> 30} GiB: not a {what}")
        data = p.read_bytes()
    except FileNotFoundError:
        raise FormatError(f"{p}: no such {what}") from None
    except OSError as e:
        raise FormatError(f"{p}: cannot read ({e.strerror or e})") from None
    return decode_state(data, str(p), what)


def decode_state(data: bytes, where: str, what: str = "state file") -> Any:
    """The state in the bytes of a state file (``where`` names it in errors)."""
    import safetensors.torch

    tree = _header_state(data)
    if tree is None:
        if data[:2] == b"PK" or data[:1] == b"\x80":          # a torch.save zip or a raw pickle
            raise FormatError(f"{where}: not a {what}: {_PICKLE_HINT}")
        raise FormatError(f"{where}: not a {what} (no safetensors header with an autoplace state)")
    try:
        tensors = safetensors.torch.load(data)
    except Exception as e:                                    # the Rust parser's errors: one line
        raise FormatError(f"{where}: damaged tensors ({' '.join(str(e).split())[:120]})") from None
    try:
        return _decode(tree, tensors, where)
    except RecursionError:
        raise FormatError(f"{where}: state nested too deeply") from None


def _header_state(data: bytes) -> Any:
    """The JSON state in a safetensors header, or None where ``data`` has none."""
    if len(data) < 8:
        return None
    n = int.from_bytes(data[:8], "little")
    if not 2 <= n <= min(_HEADER_MAX, len(data) - 8):
        return None
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
        text = header["__metadata__"][_KEY]
        return json.loads(text) if isinstance(text, str) else None
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError):
        return None


_TAGS = ("$tensor", "$ndarray", "$tuple", "$bytes", "$float", "$dict")


def _decode(x: Any, tensors: dict, where: str) -> Any:
    if isinstance(x, list):
        return [_decode(v, tensors, where) for v in x]
    if not isinstance(x, dict):
        return x
    tags = [k for k in x if k.startswith("$")]
    if not tags:
        return {k: _decode(v, tensors, where) for k, v in x.items()}
    tag, value = tags[0], x[tags[0]]
    if len(x) != 1 or tag not in _TAGS:
        raise FormatError(f"{where}: unknown tagged value {json.dumps(x)[:60]}")
    if tag in ("$tensor", "$ndarray"):
        if not isinstance(value, str) or value not in tensors:
            raise FormatError(f"{where}: refers to a tensor {json.dumps(value)[:40]} the file does not hold")
        t = tensors[value]
        if tag == "$tensor":
            return t
        try:
            return t.numpy()
        except TypeError:                                     # bfloat16, float8: no NumPy dtype
            raise FormatError(f"{where}: array {value!r} has a dtype NumPy cannot hold ({t.dtype})") from None
    if tag == "$tuple" and isinstance(value, list):
        return tuple(_decode(v, tensors, where) for v in value)
    if tag == "$bytes" and isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            pass
    if tag == "$float" and value in ("inf", "-inf", "nan"):
        return float(value)
    if tag == "$dict" and isinstance(value, list) and all(isinstance(kv, list) and len(kv) == 2 for kv in value):
        out = {}
        for k, v in value:
            k = _decode(k, tensors, where)
            try:
                out[k] = _decode(v, tensors, where)
            except TypeError:                                 # an unhashable key
                raise FormatError(f"{where}: a dict key {json.dumps(k)[:40]} is not a key") from None
        return out
    raise FormatError(f"{where}: malformed {tag} value {json.dumps(value)[:60]}")


# ------------------------------------------------------------------------------------------------ identity
def digest(obj: Any) -> str:
    """The SHA-256 of ``obj`` as compact JSON, keys sorted: what identifies content in state files and caches."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def graph_hash(graph) -> str:
    """A SHA-256 of ``graph``'s content (its ``autoplace.graph/v1`` object, keys sorted): two graphs with the
    same name but other ops, sizes or FLOPs hash differently."""

    cached = graph.__dict__.get("_content_hash")
    if cached is None:
        cached = digest(graph_to_dict(graph))
        graph.__dict__["_content_hash"] = cached
    return cached


def cluster_hash(cluster) -> str:
    """A SHA-256 of ``cluster``'s content (its ``autoplace.cluster/v1`` object, keys sorted)."""

    return digest(cluster_to_dict(cluster))


class Settings(dict):
    """A config's settings as a dict, with ``defaults`` (name -> default) for :func:`check_identity`: a stored
    config that lacks a setting (written before the setting existed) holds it at its default."""

    defaults: dict = {}


def canonical(x: Any) -> Any:
    """``x`` in a form that compares by content and type class, never elementwise: numbers (``1 == 1.0``)
    apart from booleans, strings, ``None``, sequences (a list and a tuple alike), dicts; an array or a tensor
    (any shape, 0-d too) becomes a marker equal only to an array of the same kind, dtype, shape and bytes —
    never to a scalar. Identity checks compare these, so a stored value of the wrong shape is a difference,
    not an error."""
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, (bool, np.bool_)):
        return ("bool", bool(x))
    if isinstance(x, (int, float)):
        return ("number", x)
    if isinstance(x, (list, tuple)):
        return ("sequence", tuple(canonical(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple(sorted(((repr(canonical(k)), canonical(v)) for k, v in x.items()), key=lambda kv: kv[0])))
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, np.generic):
        return ("numpy scalar", x.dtype.str, x.tobytes())
    try:
        import torch
    except ImportError:                                       # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), tuple(x.shape), x.detach().cpu().contiguous().view(-1).view(torch.uint8)
                .numpy().tobytes() if x.numel() else b"")
    return ("object", type(x).__name__, repr(x)[:200])


def shown(x: Any, width: int = 40) -> str:
    """``x`` as an error message shows a stored value: a scalar or a string as itself (cut to ``width``), an
    array or a tensor by its kind and shape, anything else by its type."""
    if isinstance(x, str):
        return repr(x[:width])
    if x is None or isinstance(x, (bool, int, float)):
        return str(x)[:width]
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{with_article(type(x).__name__)} of shape {tuple(x.shape)}"
    if isinstance(x, (list, tuple, dict)):
        return f"{with_article(type(x).__name__)} of {len(x)}"
    return with_article(type(x).__name__)


def check_identity(state: Any, fmt: str, mine: dict, where: str, what: str = "checkpoint") -> dict:
    """``state`` if it is a dict of format ``fmt`` whose entries equal ``mine`` (name -> value: graph hash,
    cluster hash, config, seed …); else :class:`FormatError` naming ``where`` and the entries that differ
    (a config: the settings that differ; a content hash: "graph content"). Values compare as
    :func:`canonical` forms: a stored value of another type or shape (an array where a seed was) differs.
    A :class:`Settings` entry's defaults stand in for the settings a stored one lacks."""
    if not isinstance(state, dict):
        raise FormatError(f"{where}: not a {what} (a {type(state).__name__})")
    stored = state.get("format")
    if not (isinstance(stored, str) and stored == fmt):
        raise FormatError(f"{where}: a {what} of another kind (format {shown(stored, 60)}, expected {fmt!r})")
    diff = []
    for k, v in mine.items():
        theirs = state.get(k)
        if isinstance(v, Settings) and isinstance(theirs, dict):
            theirs = {**{k2: d for k2, d in v.defaults.items() if k2 not in theirs}, **theirs}
        if canonical(theirs) == canonical(v):
            continue
        if k.endswith("_hash") or k.endswith("_hashes"):
            diff.append(k.replace("_hashes", "").replace("_hash", "") + " content")
        elif isinstance(v, dict) and isinstance(theirs, dict):
            keys = sorted(str(k2) for k2 in set(v) | set(theirs)
                          if canonical(v.get(k2)) != canonical(theirs.get(k2)))
            diff.append(f"{k} ({', '.join(keys[:3])})")
        else:
            diff.append(f"{k} ({shown(theirs)} there, {shown(v)} here)")
    if diff:
        raise FormatError(f"{where}: a {what} of another search; different: {'; '.join(diff)}")
    return state


# ------------------------------------------------------------------------------------------------ fields
class StateFields:
    """Typed, range-checked access to a state's fields; every error names ``where`` and the field.

    It remembers the fields read (and the objects opened with :meth:`sub` or :meth:`items`): :meth:`finish`
    refuses a field no reader asked for, so a state file carries nothing its reader does not check."""

    def __init__(self, state: Any, where: str, prefix: str = ""):
        self.where, self.prefix = where, prefix
        if not isinstance(state, dict):
            raise FormatError(f"{where}: field {prefix.rstrip('.') or 'state'!r} must be an object, "
                              f"got {type(state).__name__}")
        self.state = state
        self.seen: set = set()
        self.children: list[StateFields] = []

    def name(self, key: str) -> str:
        """The field's full name in errors (``cache.step``)."""
        return f"{self.prefix}{key}"

    def sub(self, key: str) -> StateFields:
        """The fields of the object under ``key``."""
        child = StateFields(self.get(key), self.where, f"{self.name(key)}.")
        self.children.append(child)
        return child

    def items(self, key: str, n: int | None = None) -> list[StateFields]:
        """The fields of each object in the list under ``key`` (of ``n`` entries where given)."""
        children = [StateFields(v, self.where, f"{self.name(key)}[{i}].") for i, v in enumerate(self.list(key, n))]
        self.children.extend(children)
        return children

    def mark(self, *keys: str) -> None:
        """Count ``keys`` as read (fields a caller checked itself, such as the identity)."""
        self.seen.update(keys)

    def finish(self) -> None:
        """:class:`FormatError` naming the first field (here or in an object opened from here) that no reader
        asked for."""
        unknown = sorted(str(k) for k in self.state if k not in self.seen)
        if unknown:
            raise FormatError(f"{self.where}: unknown field {self.name(unknown[0])[:80]!r}")
        for child in self.children:
            child.finish()

    def fail(self, key: str, expected: str) -> FormatError:
        return FormatError(f"{self.where}: field {self.name(key)!r} must be {expected}, "
                           f"got {shown(self.state.get(key, None), 60)}")

    def get(self, key: str) -> Any:
        if key not in self.state:
            raise FormatError(f"{self.where}: missing field {self.name(key)!r}")
        self.seen.add(key)
        return self.state[key]

    def int(self, key: str, lo: int = 0, hi: int = 2**62) -> int:
        v = self.get(key)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise self.fail(key, f"an integer in [{lo}, {hi}]")
        return int(v)

    def float(self, key: str, lo: float = 0.0, hi: float = math.inf, *, inf: bool = False,
              nan: bool = False) -> float:
        """A real number in ``[lo, hi]``; ``inf`` allows +infinity (no value yet), ``nan`` allows NaN."""
        v = self.get(key)
        ok = not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, float, np.integer, np.floating))
        if ok and isinstance(v, (int, np.integer)) and not is_finite(v):
            ok = False                                            # an integer too large for a float
        elif ok:
            v = float(v)
            ok = (nan and math.isnan(v)) or (lo <= v <= hi and (math.isfinite(v) or (inf and v == math.inf)))
        if not ok:
            raise self.fail(key, f"a number in [{lo:g}, {hi:g}]" + (" or inf" if inf else ""))
        return v

    def bool(self, key: str) -> bool:
        v = self.get(key)
        if not isinstance(v, (bool, np.bool_)):
            raise self.fail(key, "true or false")
        return bool(v)

    def list(self, key: str, n: int | None = None) -> list:
        v = self.get(key)
        if type(v) is not list or (n is not None and len(v) != n):
            raise self.fail(key, "a list" + (f" of {n}" if n is not None else ""))
        return v

    def dict(self, key: str) -> dict:
        v = self.get(key)
        if not isinstance(v, dict):
            raise self.fail(key, "an object")
        return v

    def groups(self, key: str, n: int, n_devices: int, *, optional: bool = True) -> np.ndarray | None:
        """An integer array of ``n`` device indices in ``[0, n_devices)`` (``None`` where ``optional``)."""
        v = self.get(key)
        if v is None and optional:
            return None
        if (not isinstance(v, np.ndarray) or v.shape != (n,) or v.dtype.kind not in "iu"
                or (n and (v.min() < 0 or v.max() >= n_devices))):
            raise self.fail(key, f"{n} device indices in [0, {n_devices})")
        return v.astype(np.int64)

    def array(self, key: str, shape: tuple, kind: str) -> np.ndarray:
        """A NumPy array of ``shape`` (``-1``: any length) whose dtype kind is in ``kind`` (``"iu"``, ``"f"``)."""
        v = self.get(key)
        if (not isinstance(v, np.ndarray) or v.ndim != len(shape) or v.dtype.kind not in kind
                or any(s != -1 and s != d for s, d in zip(shape, v.shape))):
            raise self.fail(key, f"an array of shape {shape}")
        return v

    def tensor(self, key: str, dtype=None):
        import torch

        v = self.get(key)
        if not isinstance(v, torch.Tensor) or (dtype is not None and v.dtype != dtype):
            raise self.fail(key, "a tensor" + (f" of {dtype}" if dtype is not None else ""))
        return v

    def apply(self, key: str, load) -> None:
        """``load(value)`` (a ``load_state_dict``, an RNG's ``set_state``); any error it raises becomes one
        line naming the field."""
        v = self.get(key)
        try:
            load(v)
        except Exception as e:
            raise FormatError(f"{self.where}: field {self.name(key)!r} does not fit "
                              f"({' '.join(str(e).split())[:100]})") from None
