"""Built-in graphs by name (``autoplace zoo list``): every CLI verb accepts one wherever it takes GRAPH.

Models register a factory with :func:`register_model`; :func:`build_graph` calls it with the paper's
defaults overridden by keyword parameters, each checked against its range first: a size or count is an
integer in ``[1, MAX_SIZE]``, a ``seed`` an integer in ``[0, 2**32 - 1]``, a fraction (a float default) a
finite number in ``[0, 1]``; a model may declare other ranges. The papers' captured PyTorch models live in
:mod:`autoplace.zoo.papers`, the hand-built graphs in :mod:`autoplace.zoo.synthetic`.
"""

from __future__ import annotations

from autoplace.zoo.registry import MAX_SIZE, ModelInfo, build_graph, get_model, register_model, zoo_names

__all__ = ["ModelInfo", "register_model", "get_model", "zoo_names", "build_graph", "MAX_SIZE"]

# the built-in graphs register themselves on import
from autoplace.zoo import papers, synthetic  # noqa: E402,F401,I001
