"""Capture PyTorch programs as autoplace graphs.

* :func:`capture_training_step` — one whole training step (forward, backward, optimizer update) of an
  ``nn.Module`` at aten-op granularity, traced with fake tensors (nothing is computed, no memory is
  allocated for the model's real sizes);
* :func:`capture_inference` — the forward pass only.

Torch is imported lazily: the rest of autoplace works without it.
"""

from __future__ import annotations

from autoplace.capture._torch import (
                                      CaptureError,
                                      capture_from_factory,
                                      capture_inference,
                                      capture_training_step,
                                      load_factory,
                                      tag,
)

__all__ = [
    "CaptureError", "capture_training_step", "capture_inference", "capture_from_factory", "load_factory", "tag",
]
