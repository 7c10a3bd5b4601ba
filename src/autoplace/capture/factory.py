"""User factories: ``module:function`` or ``file.py:function`` returning a model and its step, captured."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

from autoplace.capture.step import capture_inference, capture_training_step
from autoplace.capture.trace import first_sentence, user_line
from autoplace.errors import CaptureError
from autoplace.graph import Graph

__all__ = ["load_factory", "capture_from_factory"]


def load_factory(spec: str) -> Callable[[], Any]:
    """``"package.module:function"`` or ``"path/to/file.py:function"`` -> the callable."""

    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise CaptureError(f"factory {spec!r}: expected MODULE:FUNCTION or FILE.py:FUNCTION")
    try:
        if target.endswith(".py") or os.sep in target:
            if not os.path.exists(target):
                raise CaptureError(f"factory {spec!r}: no such file {target!r}")
            mod_spec = importlib.util.spec_from_file_location(f"_autoplace_factory_{abs(hash(target))}", target)
            module = importlib.util.module_from_spec(mod_spec)
            folder = os.path.dirname(os.path.abspath(target))      # its sibling modules import, as python FILE
            added = folder not in sys.path
            if added:
                sys.path.insert(0, folder)
            try:
                mod_spec.loader.exec_module(module)
            finally:
                if added:
                    sys.path.remove(folder)
        else:
            here = os.getcwd()                     # a module in the current directory, as ``python -m`` finds it
            added = here not in sys.path
            if added:
                sys.path.insert(0, here)
            try:
                module = importlib.import_module(target)
            finally:
                if added:
                    sys.path.remove(here)
    except CaptureError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the user's module raises on import
        raise CaptureError(f"factory {spec!r}: importing {target!r} raised {type(e).__name__}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise CaptureError(f"factory {spec!r}: {target!r} has no callable {attr!r}")
    return fn


def capture_from_factory(spec: str, *, inference: bool = False, name: str | None = None,
                         micro_batches: int = 1) -> Graph:
    """Call a user factory and capture what it returns.

    The factory returns ``(model, example_inputs, loss_fn, optimizer[, targets])`` for a training step
    (``loss_fn(outputs, *targets)`` a scalar; ``example_inputs`` a tensor, a tuple, a dict of keyword
    arguments or ``(args, kwargs)``; ``model`` an ``nn.Module`` or a ``torch.export`` ``ExportedProgram``),
    or ``(model, example_inputs)`` (or the training tuple) with ``inference=True``; a dict with those keys
    (``model``, ``inputs``, ``loss_fn``, ``optimizer``, ``targets``) works too.
    """
    fn = load_factory(spec)
    try:
        made = fn()
    except Exception as e:  # noqa: BLE001 - report the user's error in one line
        where = user_line(e)
        raise CaptureError(f"factory {spec!r} raised {type(e).__name__}" + (f" at {where}" if where else "")
                           + f": {first_sentence(' '.join(str(e).split()))}") from None
    keys = ("model", "inputs", "loss_fn", "optimizer", "targets")
    if isinstance(made, dict):
        parts = {k: made.get(k) for k in keys}
    elif isinstance(made, (tuple, list)) and 2 <= len(made) <= 5:
        parts = dict(zip(keys, made))
    else:
        raise CaptureError(f"factory {spec!r} must return (model, inputs, loss_fn, optimizer[, targets])")
    if parts.get("model") is None:
        raise CaptureError(f"factory {spec!r} returned no model")
    # the model's class names the graph (a factory is usually "make_step"); a bare container, the factory
    kind = type(parts["model"]).__name__
    default = name or (spec.rpartition(":")[2] if kind in ("Sequential", "ModuleList", "ModuleDict",
                                                           "ExportedProgram", "GraphModule") else kind)
    if inference:
        return capture_inference(parts["model"], parts["inputs"], name=default)
    if parts.get("loss_fn") is None or parts.get("optimizer") is None:
        raise CaptureError(f"factory {spec!r} returned no loss_fn/optimizer (use --inference for forward only)")
    return capture_training_step(parts["model"], parts["inputs"], parts["loss_fn"], parts["optimizer"],
                                 targets=parts.get("targets"), name=default, micro_batches=micro_batches)
