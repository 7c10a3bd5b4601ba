"""Errors raised at autoplace's boundaries.

Every error a user can cause by bad input is an :class:`AutoplaceError`: its message is one line that
names the culprit (file, op, device or field), and the CLI turns it into ``autoplace: error: <msg>`` and
exit code :attr:`AutoplaceError.exit_code` without a traceback.
"""

from __future__ import annotations

__all__ = [
    "AutoplaceError",
    "FormatError",
    "GraphError",
    "ClusterError",
    "PlacementError",
    "UnknownNameError",
    "CaptureError",
    "InfeasibleError", "UnavailableError",
]


class AutoplaceError(Exception):
    """Base class of all user-facing errors (bad input, impossible requests)."""

    exit_code: int = 2

    def __init__(self, message: str) -> None:
        # One line, always: multi-line causes (e.g. JSON decoder messages) are folded.
        super().__init__(" ".join(str(message).split()))


class FormatError(AutoplaceError, ValueError):
    """A file is not valid JSON, has an unknown format version, or a field has the wrong type."""


class GraphError(AutoplaceError, ValueError):
    """The dataflow graph breaks an invariant (cycle, unknown input, duplicate name, bad size)."""


class ClusterError(AutoplaceError, ValueError):
    """The cluster description is inconsistent (duplicate device, bad link, missing link)."""


class PlacementError(AutoplaceError, ValueError):
    """A placement does not fit its graph and cluster (unknown op/device, missing op, wrong type)."""


class UnknownNameError(AutoplaceError, KeyError):
    """A name (built-in graph, cluster preset, placer) is not known."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0] if self.args else ""


class CaptureError(AutoplaceError):
    """The model could not be traced (data-dependent control flow, an op fake tensors cannot run ...)."""


class InfeasibleError(AutoplaceError):
    """No feasible placement exists (or a placer found none). CLI exit code 3."""

    exit_code = 3


class UnavailableError(AutoplaceError):
    """A placer cannot run on this machine: a tool it needs is not installed (Scotch's command-line tools)."""
