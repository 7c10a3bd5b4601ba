"""Built-in graphs by name (``autoplace zoo list``): every CLI verb accepts one wherever it takes GRAPH.

Models register a factory with :func:`register_model`; :func:`build_graph` calls it with the paper's
defaults overridden by keyword parameters. Issue #3 adds the papers' captured PyTorch models here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoplace.errors import UnknownNameError
from autoplace.graph import Graph

__all__ = ["ModelInfo", "register_model", "get_model", "zoo_names", "build_graph"]


@dataclass(frozen=True)
class ModelInfo:
    """A built-in graph: factory, one-line description, paper and default parameters."""

    name: str
    factory: Callable[..., Graph]
    description: str
    paper: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)


_MODELS: dict[str, ModelInfo] = {}


def register_model(name: str, *, description: str, paper: str = "", **defaults: Any):
    """Decorator registering ``factory(**params) -> Graph`` as built-in graph ``name``."""

    def deco(factory: Callable[..., Graph]) -> Callable[..., Graph]:
        if name in _MODELS:
            raise ValueError(f"model {name!r} is registered twice")
        _MODELS[name] = ModelInfo(name, factory, description, paper, dict(defaults))
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
    """Build built-in graph ``name``; ``params`` override its defaults (unknown ones are an error)."""
    info = get_model(name)
    unknown = set(params) - set(info.defaults)
    if unknown:
        raise UnknownNameError(f"model {name!r} has no parameter {sorted(unknown)[0]!r} "
                               f"(it takes: {', '.join(info.defaults) or 'none'})")
    return info.factory(**{**info.defaults, **params})


from autoplace.zoo import papers, synthetic  # noqa: E402,F401  (register the built-in graphs)
