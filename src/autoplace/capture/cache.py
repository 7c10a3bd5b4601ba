"""What a captured training step depends on, as a cache key, so that :func:`autoplace.compile` can take the
graph of a model it captured before (in any process) from disk instead of tracing it again.

Tracing follows the Python code the step runs, so the key holds that code and everything it reads:

* the source files defining the model's module classes, the loss function and the optimizer class (each
  file's SHA-256: an edit anywhere in them, a helper function included, is another key), except torch's
  own, which the torch version stands for;
* every module's class, path, ``training`` flag, hooks, and its plain attributes (numbers, strings,
  dtypes ...: the configuration a ``forward`` branches on);
* every parameter's and buffer's name, shape, dtype, device and ``requires_grad`` (tied names included);
* the batch's structure and every tensor's shape and dtype; the optimizer's class and hyper-parameters
  (the learning rate left out: it is an input) and which parameters each group holds;
* the capture's version, torch's and Python's, the default dtype.

What it cannot see: code outside those files that a ``forward`` calls (a helper in another module of
yours), or global state it reads. A model whose classes have no source file (typed into an interactive
interpreter) gets no key and is traced every time; after changing such outside code, compile with
``cache=False``.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from pathlib import Path
from typing import Any

__all__ = ["capture_key"]

_PLAIN = (bool, int, float, str, type(None))


def _file_digest(obj: Any, files: dict[str, str]) -> bool:
    """Add the SHA-256 of the source file defining ``obj`` (a class or function) to ``files``; False where
    there is none to read (then no key can be trusted). torch's own code is left to the torch version."""
    target = obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj)
    module = getattr(target, "__module__", "") or ""
    if module == "torch" or module.startswith(("torch.", "builtins")):
        return True
    try:
        path = inspect.getsourcefile(target)
    except TypeError:
        return False
    if not path or not Path(path).is_file():
        return False
    if path not in files:
        files[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return True


def _plain(value: Any) -> Any:
    """``value`` as JSON if it is configuration (numbers, strings, dtypes, tuples of them), else None."""
    import torch

    if isinstance(value, _PLAIN):
        return value if not isinstance(value, float) or value == value else repr(value)
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, _PLAIN) for v in value):
        return list(value)
    return None


def _tensor(t: Any) -> Any:
    return [list(t.shape), str(t.dtype), t.device.type] if hasattr(t, "shape") else _plain(t) or repr(type(t))


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
        attrs = {k: p for k, v in sorted(vars(m).items()) if not k.startswith("_") and (p := _plain(v)) is not None}
        modules.append([path, f"{type(m).__module__}.{type(m).__qualname__}", m.training,
                        [getattr(h, "__qualname__", repr(type(h))) for h in hooks], attrs])
    if not _file_digest(loss_fn, files) or not _file_digest(type(optimizer), files):
        return None
    if inspect.isfunction(loss_fn):
        held = [c.cell_contents for c in (loss_fn.__closure__ or ())] + list(loss_fn.__defaults__ or ())
        loss_state = []
        for v in held:                              # modules by name, code by its file, configuration as is
            if inspect.ismodule(v):
                loss_state.append(f"module {v.__name__}")
            elif inspect.isfunction(v) or inspect.isclass(v):
                if not _file_digest(v, files):
                    return None
                loss_state.append(f"{v.__module__}.{v.__qualname__}")
            elif (p := _plain(v)) is not None or v is None:
                loss_state.append(p)
            else:
                return None                         # a closure over an object: nothing says what it holds
    elif isinstance(loss_fn, torch.nn.Module):
        loss_state = {k: p for k, v in sorted(vars(loss_fn).items()) if (p := _plain(v)) is not None}
    else:
        loss_state = repr(loss_fn)                  # functools.partial and the like: their arguments
        if len(loss_state) > 1000 or " at 0x" in loss_state:
            return None
    from autoplace.capture._torch import BETAS_AS_INPUTS

    betas_in = type(optimizer).__name__ in BETAS_AS_INPUTS      # inputs of the step, not part of its trace
    names = {id(p): n for n, p in model.named_parameters()}
    groups = [[[names.get(id(p)) for p in g["params"]],
               {k: _plain(v) for k, v in sorted(g.items())
                if k not in ("params", "lr", "initial_lr", *(("betas",) if betas_in else ()))}]
              for g in optimizer.param_groups]
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
