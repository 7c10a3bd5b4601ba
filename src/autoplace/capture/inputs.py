"""A step's model and example inputs: what may be captured, the call as ``(args, kwargs)``, micro-batches."""

from __future__ import annotations

from typing import Any

from autoplace.errors import CaptureError

__all__ = ["as_tuple", "resolve_model", "split_inputs", "check_inputs", "check_micro_batches", "micro_batch"]


def as_tuple(x: Any) -> tuple:
    if x is None:
        return ()
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def resolve_model(model, example_inputs: Any = None) -> tuple[Any, Any]:
    """``(module, example_inputs)`` to capture: a ``torch.export`` ``ExportedProgram`` becomes its module
    (its own example inputs by default, as ``(args, kwargs)``); anything that is not an ``nn.Module``
    instance is one clear error."""
    import torch

    if isinstance(model, torch.export.ExportedProgram):
        if example_inputs is None and getattr(model, "example_inputs", None) is not None:
            example_inputs = tuple(model.example_inputs)
        model = model.module()
    if isinstance(model, type):
        raise CaptureError(f"model: got the class {model.__name__}, not a model: pass an instance "
                           f"({model.__name__}(...))")
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"model: expected a torch.nn.Module (or a torch.export ExportedProgram), got "
                           f"{type(model).__name__}")
    if example_inputs is None:
        raise CaptureError("no example inputs: give a batch of the shapes the model will see")
    return model, example_inputs


def split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    """The model's call as ``(args, kwargs)``: a dict is keyword arguments (``model(**inputs)``, as Hugging
    Face models take them), a tuple or list positional ones, a single value one argument, and an
    ``(args_tuple, kwargs_dict)`` pair both."""
    x = example_inputs
    if isinstance(x, dict):
        return (), dict(x)
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (tuple, list)) and isinstance(x[1], dict):
        return tuple(x[0]), dict(x[1])
    return as_tuple(x), {}


def check_inputs(model, args: tuple, kwargs: dict, targets: tuple) -> None:
    """Inputs and targets must be tensors (or None). A model and inputs all on the ``meta`` device capture
    (only shapes are needed: the zoo builds its large models so); some on ``meta`` and some not fail in the
    tracer with a confusing device error, so that is one clear error here, naming the first on ``meta``."""
    import torch
    from torch.utils._pytree import tree_leaves

    named = [(f"input {k}", v) for k, v in enumerate(tree_leaves(args))] + \
        [(f"input {k!r}", v) for k, val in kwargs.items() for v in tree_leaves(val)] + \
        [(f"target {k}", v) for k, v in enumerate(targets)]
    for what, v in named:
        if v is not None and not isinstance(v, torch.Tensor):
            raise CaptureError(f"{what} is a {type(v).__name__}, not a tensor: a step's inputs and targets are "
                               "tensors (make a setting like this a default argument or an attribute of the model)")
    named += [(f"parameter {n!r}", p) for n, p in model.named_parameters()]
    tensors = [(what, t) for what, t in named if isinstance(t, torch.Tensor)]
    meta = [what for what, t in tensors if t.is_meta]
    if meta and len(meta) < len(tensors):
        real = next(what for what, t in tensors if not t.is_meta)
        raise CaptureError(f"{meta[0]} is on the meta device but {real} is not: put the model and its example "
                           "inputs on one kind of device (meta for shapes only, or the CPU)")


def check_micro_batches(inputs, kwargs, targets, m: int, dim: int = 0) -> None:
    """Every input and target tensor has one size along dimension ``dim``, which ``m`` divides (one clear
    error else)."""
    import torch
    from torch.utils._pytree import tree_flatten

    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
        raise CaptureError(f"batch_dim must be a non-negative integer, got {dim!r}")
    leaves = [t for t in tree_flatten((inputs, kwargs, targets))[0] if isinstance(t, torch.Tensor)]
    sizes = {int(t.shape[dim]) if t.dim() > dim else None for t in leaves}
    which = "first dimension" if dim == 0 else f"dimension {dim}"
    if len(sizes) != 1 or None in sizes:
        raise CaptureError(f"micro_batches={m}: every input and target must be a tensor batched along its {which}, "
                           f"of one size (got sizes {sorted(map(str, sizes))})")
    (n,) = sizes
    if n % m:
        raise CaptureError(f"micro_batches={m} does not divide the batch of {n}")


def micro_batch(batch, m: int, count: int, dim: int = 0):
    """Micro-batch ``m`` of ``count`` of a batch: each tensor's ``m``-th equal slice along dimension ``dim``."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.chunk(count, dim)[m] if isinstance(t, torch.Tensor) else t, batch)
