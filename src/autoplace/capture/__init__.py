"""Capture PyTorch programs as autoplace graphs.

* :func:`capture_training_step` — one whole training step (forward, backward, optimizer update) of an
  ``nn.Module`` at aten-op granularity, traced with fake tensors (nothing is computed, no memory is
  allocated for the model's real sizes);
* :func:`capture_inference` — the forward pass only.

Modules: :mod:`~autoplace.capture.step` (the two captures), :mod:`~autoplace.capture.scopes` (module scopes and
tags), :mod:`~autoplace.capture.optimizer` (the update's kernels and scheduled inputs),
:mod:`~autoplace.capture.inputs` (models, example inputs, micro-batches), :mod:`~autoplace.capture.trace`
(fake-tensor tracing and its errors), :mod:`~autoplace.capture.fx_graph` (aten graph -> ops),
:mod:`~autoplace.capture.factory` (user factories), :mod:`~autoplace.capture.cache` (captured graphs on disk),
:mod:`~autoplace.capture.onnx_import` (ONNX files).

Torch is imported lazily: the rest of autoplace works without it.
"""

from __future__ import annotations

from autoplace.capture.factory import capture_from_factory, load_factory
from autoplace.capture.scopes import tag
from autoplace.capture.step import capture_inference, capture_training_step
from autoplace.errors import CaptureError

__all__ = [
    "CaptureError", "capture_training_step", "capture_inference", "capture_from_factory", "load_factory", "tag",
]
