"""Granularity: what a placement may split. ``op`` (every op on its own, within its co-location group) or
``module`` (every module that owns parameters kept whole on one device, as Accelerate's ``dispatch_model``
runs a device map): :func:`with_granularity` turns a captured graph into the co-location groups of its
granularity, which every placer honours.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from autoplace.errors import AutoplaceError, UnknownNameError
from autoplace.graph import STATE_ROLES, Graph, OpRole
from autoplace.grouping import UnionFind, hashable

__all__ = ["GRANULARITIES", "with_granularity", "nearest_module", "module_path"]


GRANULARITIES = ("op", "module")


def nearest_module(path: str | None, table: dict[str, Any]) -> Any:
    """``table``'s entry for the deepest module at or above ``path`` (a module path; ``""``: the root), or
    None where no module on the way up is in it."""
    while path is not None:
        if path in table:
            return table[path]
        path = path.rpartition(".")[0] if path else None
    return None


def module_path(op) -> str | None:
    """The module an op belongs to: a parameter's or buffer's owner, else the module whose forward ran it
    (its ``scope``, a ``.tN`` time-step suffix left out); None for an op outside any."""
    if op.type in (OpRole.PARAMETER, OpRole.BUFFER):
        return op.name.rpartition(".")[0]
    return re.sub(r"\.t\d+$", "", op.scope) if op.scope else None


def _within(path: str | None, module: str) -> bool:
    """Whether ``path`` (a module path, or an op's scope with a ``.tN`` time-step suffix) is ``module`` or
    under it."""
    return path is not None and (not module or path == module or path.startswith(module + "."))


def with_granularity(graph: Graph, granularity: str = "op", keep_whole: Iterable[str] = ()) -> Graph:
    """``graph`` to be placed at ``granularity``: ``op``, as it is; ``module``, every module that owns
    parameters or buffers kept whole on one device — with everything under it, its parameters, buffers,
    optimizer state and the ops run in it (its ``scope``, forward and backward) in one co-location group —
    and a module that reads a tied parameter (``graph.meta["tied"]``, recorded by capture) in the group of
    the module that owns it. Ops no such module owns go where ``dispatch_model`` runs them: the batch's
    inputs and the loss together (the input device, where the model's outputs return), any other op with
    the op producing its first input, its backward with it. Every placer honours co-location groups, so its
    placement exports as a ``device_map`` whose keys are modules covering every parameter once, which
    Accelerate's ``dispatch_model`` applies as placed and runs as scored. ``keep_whole``: module classes
    kept on one device with everything run in them, parameters or not (Accelerate's
    ``no_split_module_classes``: a residual block whose add is split from its branches would not run
    eagerly); the classes are read from ``graph.meta["modules"]``, which capture records. A graph without
    parameters is returned as it is."""
    if granularity not in GRANULARITIES:
        raise UnknownNameError(f"unknown granularity {granularity!r} (choose from: {', '.join(GRANULARITIES)})")
    keep_whole = tuple(keep_whole)
    if granularity == "op":
        if keep_whole:
            raise AutoplaceError("keep_whole applies to the module granularity only")
        return graph
    classes = dict(graph.meta.get("modules", {}))
    unknown = sorted(set(keep_whole) - set(classes.values()))
    if unknown:
        raise AutoplaceError(f"keep_whole: graph {graph.name!r} has no module of class {unknown[0]!r}"
                             + (f" (its classes: {', '.join(sorted(set(classes.values()))[:12])})" if classes
                                else " (only graphs captured by this version record their modules' classes)"))
    uf = UnionFind(graph.n_ops)
    index = {op.name: i for i, op in enumerate(graph.ops)}
    by_group: dict[str, int] = {}
    for i, op in enumerate(graph.ops):
        if op.colocation_group is not None:
            uf.union(by_group.setdefault(op.colocation_group, i), i)
    owner, root_own = _owners(graph, uf, index)
    if not owner and not root_own:
        return graph
    io = _join_strays(graph, uf, index, owner, root_own)
    _join_whole(graph, uf, index, owner, root_own, [p for p, c in classes.items() if c in keep_whole])
    roots = [uf.find(i) for i in range(graph.n_ops)]
    size = np.bincount(roots, minlength=graph.n_ops)
    names: dict[int, str] = {}
    for module, i in owner.items():
        names.setdefault(uf.find(i), f"module:{module}" if module else "module:(root)")
    for i in root_own:
        names.setdefault(uf.find(i), f"module:(root).{graph.ops[i].name}")
    units = {uf.find(i) for i in owner.values()} | {uf.find(i) for i in root_own}
    if len(units) == 1 and len(owner) + len(root_own) > 1:
        why = (f"module {min(owner, key=lambda m: (m.count('.'), m))!r} owns parameters and holds, reads or ties "
               "every other one" if owner else "the root module's own tensors are read by every op")
        warnings.warn(f"granularity='module': graph {graph.name!r} is one unit ({why}): every placement puts the "
                      "whole model on one device; granularity='op' can split it", stacklevel=2)
    if io:
        names.setdefault(uf.find(io[0]), "module:(inputs and loss)")
    ops = [replace(op, colocation_group=names.get(r, op.colocation_group) if size[r] > 1 else op.colocation_group)
           for op, r in zip(graph.ops, roots)]
    return Graph(ops, name=graph.name, meta={**graph.meta, "granularity": "module"})


def _owners(graph: Graph, uf: UnionFind, index: dict[str, int]) -> tuple[dict[str, int], list[int]]:
    """Join each module that owns parameters or buffers with them (and with a tied parameter it reads):
    ``(module path -> an op of its group, the root module's own parameters and buffers)``."""
    owner: dict[str, int] = {}                               # module path -> an op of its group
    root_own: list[int] = []                                 # the root module's own parameters and buffers
    for i, op in enumerate(graph.ops):
        if op.type in (OpRole.PARAMETER, OpRole.BUFFER):
            module = op.name.rpartition(".")[0]
            if not module:                                   # owning the root would make the model one unit
                root_own.append(i)
                continue
            uf.union(owner.setdefault(module, i), i)
    for alias, name in dict(graph.meta.get("tied", {})).items():
        module = alias.rpartition(".")[0]
        if name in index and module:
            uf.union(owner.setdefault(module, index[name]), index[name])
    return owner, root_own


def _join_strays(graph: Graph, uf: UnionFind, index: dict[str, int], owner: dict[str, int],
                 root_own: list[int]) -> list[int]:
    """Join each op with the nearest module owning parameters above its scope; what none owns runs as
    ``dispatch_model`` runs it. Returns the batch's inputs and the loss (joined, on the input device)."""
    def nearest_owner(path: str | None) -> int | None:
        """An op of the group of the deepest module owning parameters at or above ``path``."""
        return nearest_module(path, owner)

    for module, i in owner.items():                          # a module with parameters: its subtree with it
        above = nearest_owner(module.rpartition(".")[0]) if module else None
        if above is not None:
            uf.union(above, i)
    state = STATE_ROLES
    stray = []
    # a root tensor's gradient and update stay with it (its gradient's producer may carry the scope of the
    # module whose backward ran before it)
    root_names = {graph.ops[i].name for i in root_own}
    for i, op in enumerate(graph.ops):                       # an op: with the nearest module owning parameters
        if op.colocation_group in root_names:
            continue
        j = nearest_owner(op.scope) if op.type not in state else None
        if j is not None:
            uf.union(j, i)
        elif op.type not in state:
            stray.append(i)
    # What no module with parameters owns runs as dispatch_model runs it. The batch and the loss are on the
    # input device (the model's outputs return there); any other op runs where its first input is, its
    # backward where it ran (ops of one torch call share ``fwd``).
    io = [i for i in stray if graph.ops[i].type == OpRole.INPUT or (graph.ops[i].scope or "").split(".")[0] == "loss"]
    for i in io[1:]:
        uf.union(io[0], i)
    first_of_call: dict[object, int] = {}
    for i in stray:
        op = graph.ops[i]
        if io and uf.find(i) == uf.find(io[0]):    # the batch and the loss, already together
            continue
        call = hashable(op.meta.get("fwd"))
        if call is not None and call in first_of_call:
            uf.union(first_of_call[call], i)
            continue
        producer = next((index[r.split(":")[0]] for r in op.inputs if r.split(":")[0] in index), None)
        target = producer if producer is not None else (io[0] if io else None)
        if target is not None:
            uf.union(target, i)
        if call is not None:
            first_of_call[call] = i
    return io


def _join_whole(graph: Graph, uf: UnionFind, index: dict[str, int], owner: dict[str, int], root_own: list[int],
                whole: list[str]) -> None:
    """Keep each instance of ``whole`` (module paths) on one device with everything run in it, and each of the
    root module's own tensors with its first user."""
    state = STATE_ROLES
    for path in sorted(whole):                               # each instance, whole
        under = [i for i, op in enumerate(graph.ops)
                 if _within(module_path(op), path)]
        for i in under[1:]:
            uf.union(under[0], i)
        if under and path not in owner:
            owner[path] = under[0]
    # a tensor of the root module's own (a class token, rotary tables) goes with its first user
    first_user: dict[int, int] = {}
    for i in graph.topological_order:
        for r in graph.ops[i].inputs:
            j = index.get(r.split(":")[0])
            if j is not None and graph.ops[i].type not in state:
                first_user.setdefault(j, i)
    for i in root_own:
        if i in first_user:
            uf.union(i, first_user[i])
