"""The model registry: :func:`register_model` adds a built-in graph's factory, :func:`build_graph` builds one.

Model modules import this module (not the package), so the package can import them all to fill the
registry without an import cycle.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoplace.errors import AutoplaceError, UnknownNameError
from autoplace.graph import Graph
from autoplace.validation import as_scalar, shown_value

__all__ = ["ModelInfo", "register_model", "get_model", "zoo_names", "build_graph"]


@dataclass(frozen=True)
class ModelInfo:
    """A built-in graph: factory, one-line description, paper and default parameters."""

    name: str
    factory: Callable[..., Graph]
    description: str
    paper: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)

    def check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with every value checked against its range (module docstring); one-line error naming
        the model, the parameter and the value otherwise."""
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise UnknownNameError(f"model {self.name!r} has no parameter {sorted(unknown)[0]!r} "
                                   f"(it takes: {', '.join(self.defaults) or 'none'})")
        out = {}
        for key, given in params.items():
            value = as_scalar(given, f"model {self.name!r}: parameter {key!r}")   # a NumPy or torch scalar
            if isinstance(value, np.bool_):
                value = bool(value)
            default = self.defaults[key]
            lo, hi = self.ranges.get(key, (0, 2**32 - 1) if key == "seed" else
                                     (1, MAX_SIZE) if isinstance(default, int) else (0.0, 1.0))
            integral = isinstance(default, int)
            if integral and isinstance(value, float) and value.is_integer():
                value = int(value)
            ok = (not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
                  and lo <= value <= hi and (not integral or isinstance(value, numbers.Integral)))
            if not ok:
                kind = f"an integer in [{lo:,}, {hi:,}]" if integral else f"a number in [{lo:g}, {hi:g}]"
                raise AutoplaceError(f"model {self.name!r}: parameter {key!r} must be {kind}, got {shown_value(value)}")
            out[key] = value
        return out


_MODELS: dict[str, ModelInfo] = {}

MAX_SIZE = 2**20  #: the largest size or count parameter a built-in model accepts


def register_model(name: str, *, description: str, paper: str = "",
                   ranges: dict[str, tuple[float, float]] | None = None, **defaults: Any):
    """Decorator registering ``factory(**params) -> Graph`` as built-in graph ``name``, with its default
    parameters and, where the module docstring's ranges do not fit, its own ``ranges``."""

    def deco(factory: Callable[..., Graph]) -> Callable[..., Graph]:
        if name in _MODELS:
            raise ValueError(f"model {name!r} is registered twice")
        _MODELS[name] = ModelInfo(name, factory, description, paper, dict(defaults), dict(ranges or {}))
        return factory

    return deco


def get_model(name: str) -> ModelInfo:
    try:
        return _MODELS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown graph {name!r}: not a file and not a built-in model ({', '.join(_MODELS)})") from None


def zoo_names() -> list[str]:
    return list(_MODELS)


def build_graph(name: str, **params: Any) -> Graph:
    """Build built-in graph ``name``; ``params`` override its defaults (unknown or out-of-range ones are an
    error).

    Arguments:

    - ``name``: a built-in graph (:func:`zoo_names`; ``autoplace zoo list``).
    - ``params``: the model's parameters by name (``batch=32``), each within its range (:func:`get_model`
      lists them with their defaults).

    A combination the model cannot be built with (e.g. sizes whose tensors exceed what torch or the
    graph format can hold) is an :class:`AutoplaceError` naming the model and its parameters."""
    info = get_model(name)
    params = info.check_params(params)
    try:
        return info.factory(**{**info.defaults, **params})
    except AutoplaceError:
        raise
    except (RuntimeError, ValueError, OverflowError, MemoryError, IndexError) as e:
        given = ", ".join(f"{k}={v}" for k, v in params.items()) or "its defaults"
        raise AutoplaceError(f"model {name!r} cannot be built with {given}: "
                             f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]) from None
