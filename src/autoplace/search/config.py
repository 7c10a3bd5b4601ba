"""What the learned placers' config dataclasses share: their grouping rules, building one from a dict of
settings (``--set KEY=VALUE``), and one clear error for a bad value.

Every setting's range is declared once, beside the config (``CONSTRAINTS``: name -> :class:`Interval`,
:class:`Options` or :class:`TorchDevice`, as scikit-learn's ``_parameter_constraints``), checked when the
config is built — before any work — and listed by ``autoplace settings METHOD`` and docs/algorithms.md.
The upper bounds keep a search inside this machine's memory and time (HDP's ``groups=1e6`` would ask for
tebibytes; ``samples_per_update=1e8`` for one update of hours), not what a value means; a network wide and
deep in several settings at once is refused by its parameter count (:func:`check_network_size`).
"""

from __future__ import annotations

import ast
import inspect
import numbers
import textwrap
from dataclasses import dataclass, fields

import numpy as np

from autoplace.errors import AutoplaceError
from autoplace.grouping import RULES
from autoplace.search.engine import policy_device
from autoplace.validation import is_finite

__all__ = ["SearchConfig", "Interval", "Options", "TorchDevice", "check_network_size", "MAX_PARAMETERS"]


@dataclass(frozen=True)
class Interval:
    """A number of ``kind`` (``"int"`` or ``"float"``) in ``[lo, hi]`` (``lo_open``/``hi_open``: an open end);
    ``none``: ``None`` is allowed too (the setting is off)."""

    kind: str
    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False
    none: bool = False

    def ok(self, v) -> bool:
        if v is None:
            return self.none
        if _is_bool(v) or not _TYPES[self.kind](v) or not is_finite(v):
            return False
        return (v > self.lo if self.lo_open else v >= self.lo) and (v < self.hi if self.hi_open else v <= self.hi)

    def __str__(self) -> str:
        fmt = (lambda x: f"{int(x):,}") if self.kind == "int" else (lambda x: f"{x:g}")
        what = "an integer" if self.kind == "int" else "a number"
        return (f"{what} in {'(' if self.lo_open else '['}{fmt(self.lo)}, {fmt(self.hi)}{')' if self.hi_open else ']'}"
                + (" or none" if self.none else ""))


@dataclass(frozen=True)
class Options:
    """One of ``values``."""

    values: tuple

    def ok(self, v) -> bool:
        return v in self.values

    def __str__(self) -> str:
        return "one of " + ", ".join("none" if v is None else str(v) for v in self.values)


@dataclass(frozen=True)
class TorchDevice:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N`` of a GPU this machine has (the devices the policies run on;
    another torch device type — ``mps``, ``xpu`` — is refused before any search). In an error it lists what
    this torch build and machine offer; :attr:`doc` is the range as the docs state it."""

    doc = "auto, cpu, cuda or cuda:N (a GPU this machine has)"

    def ok(self, v) -> bool:
        if v in ("auto", "cpu"):
            return True

        try:
            policy_device(v)
        except AutoplaceError:
            return False
        return True

    def __str__(self) -> str:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not n:
            return "auto or cpu (this torch has no CUDA device)"
        return f"auto, cpu, cuda or cuda:N with N < {n}"


#: the most parameters a learned placer's networks may have together: 256 MiB of float32, four times that
#: with the gradients and Adam's two moments — what a search on this class of machine can hold beside
#: the simulator (each setting's range alone allows more: a wide and deep network is refused here)
MAX_PARAMETERS = 2**26


def check_network_size(make, label: str) -> None:
    """:class:`AutoplaceError` where the modules ``make()`` builds would have more than
    :data:`MAX_PARAMETERS` parameters, counted on PyTorch's meta device (no memory is allocated)."""
    import torch

    with torch.device("meta"):
        modules = make()
    n = sum(p.numel() for m in (modules if isinstance(modules, (list, tuple)) else [modules]) for p in m.parameters())
    if n > MAX_PARAMETERS:
        raise AutoplaceError(f"{label}: these settings make a network of {n:,} parameters, more than "
                             f"{MAX_PARAMETERS:,}: choose smaller widths or fewer layers")


def field_docs(cls) -> dict[str, str]:
    """Each field's docstring (the string literal after it in the class body), first sentence."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body, out = tree.body[0].body, {}
    for a, b in zip(body, body[1:]):
        if (isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str)):
            out[a.target.id] = " ".join(b.value.value.split())
    return out

def _short(value) -> str:
    """A value as an error shows it: at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _is_bool(v) -> bool:

    return isinstance(v, (bool, np.bool_))                                 # Python's or NumPy's


#: annotation -> does a value fit it (NumPy scalars count as numbers; a bool is no number here)
_TYPES = {"int": lambda v: isinstance(v, numbers.Integral) and not _is_bool(v),
          "float": lambda v: isinstance(v, numbers.Real) and not _is_bool(v),
          "str": lambda v: isinstance(v, str), "bool": _is_bool}


class SearchConfig:
    """A mixin for a frozen dataclass of a learned placer's settings with a ``group_rules`` field; ``LABEL``
    names the placer in errors (``"RL"``, ``"GDP"`` …)."""

    LABEL = ""
    #: setting name -> its range (:class:`Interval`, :class:`Options`, :class:`TorchDevice`)
    CONSTRAINTS: dict = {}
    #: the settings ``paper=True`` fixes: the published algorithm's values, and off for every addition of ours
    PAPER: dict = {}
    group_rules: str

    @property
    def rules(self) -> tuple[str, ...]:
        """``group_rules`` as a tuple of rule names."""
        return tuple(r.strip() for r in self.group_rules.split(",") if r.strip())

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, values: dict):
        """The default config with ``values`` (field name -> value) set; an unknown name is one clear error."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise AutoplaceError(f"unknown {cls.LABEL} setting {unknown[0]!r} (known: {', '.join(cls.field_names())})")
        if values.get("paper") is True:
            for k, v in values.items():
                if k in cls.PAPER and v != cls.PAPER[k]:
                    raise AutoplaceError(f"{cls.LABEL}: paper=true fixes {k} to {cls.PAPER[k]!r}: leave {k} out "
                                         f"(or set paper=false)")
        return cls(**values)

    def apply_paper(self) -> None:
        """With ``paper`` set, the fields :attr:`PAPER` fixes take the paper's values (call first in
        ``__post_init__``)."""
        if getattr(self, "paper", False) is True:
            for k, v in self.PAPER.items():
                object.__setattr__(self, k, v)

    def check(self, *, at_least_one: tuple[str, ...] = (), positive: tuple[str, ...] = ()) -> None:
        """One clear error unless the fields ``at_least_one`` are >= 1, the fields ``positive`` > 0, and
        every grouping rule is known."""

        name = type(self).__name__
        self._check_types()
        for f, rule in self.CONSTRAINTS.items():
            value = getattr(self, f)
            if not rule.ok(value):
                raise AutoplaceError(f"{name}.{f} must be {rule}, got {_short(value)}")
        for f in at_least_one:
            if int(getattr(self, f)) < 1:
                raise AutoplaceError(f"{name}.{f} must be at least 1, got {getattr(self, f)!r}")
        for f in positive:
            if not getattr(self, f) > 0:
                raise AutoplaceError(f"{name}.{f} must be > 0, got {getattr(self, f)!r}")
        bad = [r for r in self.rules if r not in RULES]
        if bad or not self.rules:
            raise AutoplaceError(f"{name}.group_rules: unknown rule {bad[0] if bad else self.group_rules!r} "
                                 f"(choose from: {', '.join(RULES)})")

    @classmethod
    def describe(cls) -> list[tuple[str, object, str, str]]:
        """``(name, default, range, doc)`` of every setting, in field order."""
        docs = field_docs(cls)
        rules = dict(cls.CONSTRAINTS)
        if "group_rules" not in rules:

            rules["group_rules"] = "comma-separated rules of: " + ", ".join(RULES)
        return [(f.name, f.default, str(getattr(rules.get(f.name), "doc", rules.get(f.name, f.type))),
                 docs.get(f.name, "")) for f in fields(cls)]

    def _check_types(self) -> None:
        """One clear error for a value of the wrong type (``--set top_x=2.5``, ``groups=abc``): every field
        annotated ``int``, ``float``, ``str`` or ``bool`` (or one of them ``| None``) must hold one; a bool is
        no number here."""
        for f in fields(self):
            ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            parts = [p.strip() for p in ann.replace("NoneType", "None").split("|")]
            if any(p not in _TYPES and p != "None" for p in parts):
                continue                                          # an annotation this check does not know
            value = getattr(self, f.name)
            if value is None and "None" in parts:
                continue
            if not any(_TYPES[p](value) for p in parts if p != "None"):
                raise AutoplaceError(f"{type(self).__name__}.{f.name} must be {' or '.join(parts)}, got "
                                     f"{_short(value)}")
