"""What a captured training step depends on, as a cache key, so that :func:`autoplace.compile` can take the
graph of a model it captured before (in any process) from disk instead of tracing it again.

Tracing follows the Python code the step runs, so the key holds that code and everything it reads:

* the source files defining the model's module classes and their base classes, the loss function, the
  functions and classes its attributes and closures hold, and the optimizer class (each file's SHA-256:
  an edit anywhere in them, a helper function included, is another key), except torch's own, which the
  torch version stands for;
* every module's class, path, ``training`` flag, hooks, and its attributes (numbers, strings, dtypes,
  containers of them, functions by name, dataclasses and other objects by their fields: the
  configuration a ``forward`` branches on); an attribute nothing describes (an object whose state is not
  in its fields, an unregistered tensor) gives no key;
* every parameter's and buffer's name, shape, dtype, device and ``requires_grad`` (tied names included);
* the batch's structure and every tensor's shape and dtype; the optimizer's class and hyper-parameters
  (those the step takes as inputs left out: a numeric learning rate, Adam's betas) and which parameters
  each group holds;
* the capture's version, torch's and Python's, the default dtype.

What it cannot see: code outside those files that a ``forward`` calls (a helper in another module of
yours), or global state it reads. A model whose classes have no source file (typed into an interactive
interpreter) gets no key and is traced every time; after changing such outside code, compile with
``cache=False``.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import sys
from pathlib import Path
from typing import Any

from autoplace.capture.optimizer import BETAS_AS_INPUTS, scheduled_value

__all__ = ["capture_key"]

_PLAIN = (bool, int, float, str, type(None))


def _file_digest(obj: Any, files: dict[str, str]) -> bool:
    """Add the SHA-256 of the source file defining ``obj`` (a class or function) to ``files``; False where
    there is none to read (then no key can be trusted). torch's own code is left to the torch version."""
    target = obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj)
    for t in (target.__mro__ if inspect.isclass(target) else (target,)):   # a base class's forward too
        module = getattr(t, "__module__", "") or ""
        if module == "torch" or module.startswith(("torch.", "builtins", "typing", "abc")) or t is object:
            continue
        try:
            path = inspect.getsourcefile(t)
        except TypeError:
            return False
        if not path or not Path(path).is_file():
            return False
        if path not in files:
            files[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return True


_UNKNOWN = object()  #: a value nothing in a key can describe (the step is then traced every time)


def _describe(value: Any, files: dict[str, str], depth: int = 0) -> Any:
    """``value`` as JSON that changes whenever it does, for a key: configuration as it is (numbers, strings,
    None, dtypes, containers of them), code by its name and source file, modules by name, enums and other
    objects by their ``repr`` where that shows their state; :data:`_UNKNOWN` where nothing does (an
    object with a default ``repr``, an unregistered tensor)."""

    import torch

    if depth > 4:
        return _UNKNOWN
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, (tuple, list)):
        out = [_describe(v, files, depth + 1) for v in value]
        return _UNKNOWN if any(v is _UNKNOWN for v in out) else out
    if isinstance(value, dict):
        out = {str(k): _describe(v, files, depth + 1) for k, v in value.items()}
        return _UNKNOWN if any(v is _UNKNOWN for v in out.values()) else out
    if inspect.ismodule(value):
        return f"module {value.__name__}"
    if inspect.isfunction(value) or inspect.isclass(value) or inspect.ismethod(value) or inspect.isbuiltin(value):
        if (inspect.isfunction(value) or inspect.isclass(value)) and not _file_digest(value, files):
            return _UNKNOWN
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"
    if isinstance(value, torch.Tensor):
        return _UNKNOWN                             # its values are not described (nor can a trace read it)
    if isinstance(value, torch.nn.Module):
        return f"module of class {type(value).__qualname__}"   # its own state is keyed where it is registered
    if isinstance(value, enum.Enum):
        return repr(value)
    if hasattr(value, "__dataclass_fields__") or hasattr(value, "__dict__"):
        if not _file_digest(type(value), files):
            return _UNKNOWN
        inner = _describe(dict(vars(value)), files, depth + 1)
        return _UNKNOWN if inner is _UNKNOWN else [f"{type(value).__module__}.{type(value).__qualname__}", inner]
    text = repr(value)
    return _UNKNOWN if " at 0x" in text or len(text) > 2000 else text


#: what every nn.Module keeps in its __dict__ (parameters, buffers, submodules and hooks are keyed apart)
@functools.cache
def _module_internals() -> frozenset[str]:
    import torch

    return frozenset(vars(torch.nn.Module()))


def _tensor(t: Any) -> Any:
    """A tensor's shape, dtype and device; anything else as :func:`_describe` gives it (or its type)."""
    if hasattr(t, "shape"):
        return [list(t.shape), str(t.dtype), t.device.type]
    d = _describe(t, {})
    return repr(type(t)) if d is _UNKNOWN else d


def capture_key(model, example_inputs: Any, loss_fn, optimizer, targets: Any) -> dict[str, Any] | None:
    """The key of the training step :func:`~autoplace.capture.capture_training_step` would capture from
    these arguments (see the module docstring), or None where some code has no source file to hash."""
    import torch
    from torch.utils._pytree import tree_flatten

    files: dict[str, str] = {}
    modules = []
    for path, m in model.named_modules():
        if not _file_digest(type(m), files):
            return None
        hooks = [h for d in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks) for h in d.values()]
        if not all(_file_digest(h, files) for h in hooks):
            return None
        attrs = _describe({k: v for k, v in sorted(vars(m).items()) if k not in _module_internals()}, files)
        if attrs is _UNKNOWN:
            return None
        modules.append([path, f"{type(m).__module__}.{type(m).__qualname__}", m.training,
                        [getattr(h, "__qualname__", repr(type(h))) for h in hooks], attrs])
    if not _file_digest(loss_fn, files) or not _file_digest(type(optimizer), files):
        return None
    if inspect.isfunction(loss_fn):                 # what it closes over and its defaults
        loss_state = _describe([c.cell_contents for c in (loss_fn.__closure__ or ())]
                               + list(loss_fn.__defaults__ or ()), files)
    elif isinstance(loss_fn, torch.nn.Module):
        loss_state = _describe({k: v for k, v in sorted(vars(loss_fn).items()) if k not in _module_internals()},
                               files)
    else:
        loss_state = _describe(loss_fn, files)    # functools.partial and the like: their arguments
    if loss_state is _UNKNOWN:
        return None

    betas_in = type(optimizer).__name__ in BETAS_AS_INPUTS
    names = {id(p): n for n, p in model.named_parameters()}
    groups = []
    for g in optimizer.param_groups:            # the inputs of the step (numbers it reads every call) left out
        inputs = {"params", "initial_lr"} | ({"lr"} if scheduled_value(g, "lr") is not None else set()) | \
            ({"betas"} if betas_in and scheduled_value(g, "beta1") is not None else set())
        hyper = _describe({k: v for k, v in sorted(g.items()) if k not in inputs}, files)
        if hyper is _UNKNOWN:
            return None
        groups.append([[names.get(id(p)) for p in g["params"]], hyper])
    leaves, spec = tree_flatten((example_inputs, targets))
    return {
        "python": list(sys.version_info[:2]), "default_dtype": str(torch.get_default_dtype()),
        "files": dict(sorted(files.items())), "modules": modules,
        "parameters": [[n, *_tensor(p), p.requires_grad] for n, p in model.named_parameters(remove_duplicate=False)],
        "buffers": [[n, *_tensor(b)] for n, b in model.named_buffers(remove_duplicate=False)],
        "batch": [str(spec), [_tensor(t) for t in leaves]],
        "loss": [getattr(loss_fn, "__module__", None), getattr(loss_fn, "__qualname__", repr(type(loss_fn))),
                 loss_state],
        "optimizer": [f"{type(optimizer).__module__}.{type(optimizer).__qualname__}", groups],
    }
