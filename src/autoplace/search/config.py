"""What the learned placers' config dataclasses share: their grouping rules, building one from a dict of
settings (``--set KEY=VALUE``), and one clear error for a bad value."""

from __future__ import annotations

import numbers
from dataclasses import fields

from autoplace.errors import AutoplaceError

__all__ = ["SearchConfig"]

def _is_bool(v) -> bool:
    import numpy as np

    return isinstance(v, (bool, np.bool_))                                 # Python's or NumPy's


#: annotation -> does a value fit it (NumPy scalars count as numbers; a bool is no number here)
_TYPES = {"int": lambda v: isinstance(v, numbers.Integral) and not _is_bool(v),
          "float": lambda v: isinstance(v, numbers.Real) and not _is_bool(v),
          "str": lambda v: isinstance(v, str), "bool": _is_bool}


class SearchConfig:
    """A mixin for a frozen dataclass of a learned placer's settings with a ``group_rules`` field; ``LABEL``
    names the placer in errors (``"RL"``, ``"GDP"`` …)."""

    LABEL = ""
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
        return cls(**values)

    def check(self, *, at_least_one: tuple[str, ...] = (), positive: tuple[str, ...] = ()) -> None:
        """One clear error unless the fields ``at_least_one`` are >= 1, the fields ``positive`` > 0, and
        every grouping rule is known."""
        from autoplace.grouping import RULES

        name = type(self).__name__
        self._check_types()
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
                raise AutoplaceError(f"{type(self).__name__}.{f.name} must be {' or '.join(parts)}, got {value!r}")
