"""Tracing with fake tensors, and what the user is told when it fails: one line naming the cause and the
line of their code it failed at."""

from __future__ import annotations

import logging
import os
import re
import sysconfig
import traceback
from collections.abc import Callable

from autoplace.errors import AutoplaceError, CaptureError

__all__ = ["trace_fake", "first_sentence", "user_line"]


class _Held(logging.Filter):
    """Holds back the records of torch's fake-tensor logger while a step is traced: a meta kernel that
    fails (a shape the model's code does not accept) logs its traceback before raising, and the error it
    raises is what the user is told, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


_FAKE_TENSOR_LOGGER = "torch._subclasses.fake_tensor"


def trace_fake(fn: Callable, args: tuple, what: str):
    import torch.fx.traceback as fxt
    from torch.fx.experimental.proxy_tensor import make_fx

    held, log = _Held(), logging.getLogger(_FAKE_TENSOR_LOGGER)
    log.addFilter(held)
    try:
        with fxt.preserve_node_meta():
            return make_fx(fn, tracing_mode="fake")(*args)
    except AutoplaceError:
        raise
    except Exception as e:  # noqa: BLE001 - torch raises many kinds; all mean "cannot trace"
        text = " ".join(str(e).split())
        if ("data-dependent" in text or "DataDependent" in type(e).__name__
                or "GuardOnDataDependent" in type(e).__name__):
            why = "data-dependent Python control flow or output shape"
        elif "convert all Tensors to FakeTensors" in text:
            why = ("the model or loss_fn uses a tensor from outside it (a closure, a loss's class weights): "
                   "register it as a buffer of the model, or pass it among the targets")
        else:
            why = type(e).__name__
        where = user_line(e)
        raise CaptureError(f"cannot trace {what}: {why}" + (f" at {where}" if where else "")
                           + f": {first_sentence(text)}") from None
    finally:
        log.removeFilter(held)


def first_sentence(text: str) -> str:
    """The first sentence of an exception's message, whole (torch's run on with advice after it)."""

    m = re.match(r"(.+?[.!?])(?=\s|$)", text)
    return m.group(1) if m else text


def user_line(e: BaseException) -> str | None:
    """``file:line in function `source``` of the innermost frame of ``e``'s traceback in the user's code —
    neither torch's, nor autoplace's, nor the Python library's — or None."""

    import torch

    skip = tuple(os.path.dirname(p) + os.sep for p in (torch.__file__, os.path.dirname(__file__))) + \
        tuple(sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "purelib", "platlib"))
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(skip) and not f.filename.startswith("<")]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}" + (f" `{f.line.strip()}`" if f.line else "")
