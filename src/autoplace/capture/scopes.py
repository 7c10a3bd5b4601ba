"""Module scopes and tags on traced ops.

Forward hooks keep the current module path in the traced nodes' ``custom`` meta (``scope``); autograd-node
hooks give each backward op the scope and tags of the forward op it differentiates; :func:`tag` lets
model code add its own (layer, time step, role).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

__all__ = ["tag", "Scopes", "grad_fn_tagger", "scope_backward"]


def tag(**meta: Any) -> contextlib.AbstractContextManager:
    """Context manager adding ``meta`` (layer, step, role ...) to every op traced inside it.

    In eager mode it only sets a dict; model code can use it unconditionally::

        with tag(layer=l, step=t, role="lstm"):
            h, c = cell(x, (h, c))
    """
    import torch.fx.traceback as fxt

    return fxt.annotate(meta)


class Scopes:
    """Forward hooks that keep the current module path in the traced nodes' ``custom`` meta."""

    def __init__(self, model):
        import torch.fx.traceback as fxt

        self._fxt = fxt
        self.names: list[str] = []
        self._ctx: list[Any] = []
        self._handles = []
        for name, module in model.named_modules():
            if not name:
                continue
            self._handles.append(module.register_forward_pre_hook(self._enter(name)))
            self._handles.append(module.register_forward_hook(self._leave))

    def _enter(self, name: str):
        def hook(module, args):
            ctx = self._fxt.annotate({"scope": name})
            ctx.__enter__()
            self._ctx.append(ctx)
            self.names.append(name)
        return hook

    def _leave(self, module, args, output):
        self.names.pop()
        self._ctx.pop().__exit__(None, None, None)

    @property
    def current(self) -> str | None:
        return self.names[-1] if self.names else None

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def grad_fn_tagger(scopes: Scopes):
    """A TorchFunctionMode recording, on each new autograd node, the scope and tags it was created under.

    Each top-level torch call of the forward pass gets a number, ``fwd``: its aten ops carry it, and so do
    the backward ops of the autograd nodes it created — the link between an op and its gradient that
    TensorFlow's ``colocate_gradients_with_ops`` uses (the ``gradient`` grouping rule)."""
    import torch
    import torch.fx.traceback as fxt
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    class TagGradFn(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            TagGradFn.calls += 1
            fwd = TagGradFn.calls
            with fxt.annotate({"fwd": fwd}):
                out = func(*args, **(kwargs or {}))
            custom = {k: v for k, v in (fxt.current_meta.get("custom") or {}).items() if k != "phase"}
            custom["fwd"] = fwd
            custom.setdefault("scope", scopes.current)
            if custom["scope"] is not None:
                for t in tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                        t.grad_fn.metadata.setdefault("autoplace_scope", custom)
            return out

    return TagGradFn()


def scope_backward(roots: Sequence[Any]) -> None:
    """Hook every autograd node reachable from ``roots`` so its backward ops carry its forward scope.

    Nodes created inside C++ composites (``log_softmax`` within ``cross_entropy``) were never seen by
    Python; they inherit the scope of the node whose gradient feeds them."""
    import torch.fx.traceback as fxt

    seen: set[int] = set()
    stack = [(r, None) for r in roots]
    while stack:
        node, inherited = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        scope = node.metadata.get("autoplace_scope", inherited) if hasattr(node, "metadata") else inherited
        if scope is not None:
            held: list[Any] = []

            def pre(grad_outputs, scope=scope, held=held):
                ctx = fxt.annotate(dict(scope))  # the forward op's scope and tags (step, layer, role)
                ctx.__enter__()
                held.append(ctx)

            def post(grad_inputs, grad_outputs, held=held):
                if held:
                    held.pop().__exit__(None, None, None)

            node.register_prehook(pre)
            node.register_hook(post)
        stack.extend((nxt, scope) for nxt, _ in node.next_functions)
