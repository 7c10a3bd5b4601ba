"""Measure before committing: a searched placement is kept only if it beats one device on this machine.

The simulator chooses among placements, but what a user compares ``autoplace.compile`` with is eager
PyTorch on one device. So before a placement over several devices is kept, :func:`race` runs both on the
real batch — the placed step on its runtime and the whole step on one device as eager PyTorch
(:class:`~autoplace.runtime.eager.EagerRunner`) — in interleaved rounds of a few warm steps each (so a
machine that slows down or speeds up mid-way weighs on both alike), and :class:`Verdict` keeps the
placement only where its fastest round is at least :data:`MARGIN` faster than one device's fastest;
otherwise the step runs on one device. The fastest round, as ``timeit`` advises: what else runs on the
machine only adds time, so one slow round (a burst of other work) cannot decide, as it could a median of
three. A step here is what the caller's ``step(inputs, targets)`` costs, feeding the batch and reading the
loss included.
"""

from __future__ import annotations

import dataclasses
import platform
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Verdict", "race", "MARGIN", "ROUNDS", "STEPS"]

#: the placement is kept where its fastest measured round is below ``(1 - MARGIN)`` times one device's: a
#: smaller gain is within the rounds' spread on a shared 2-core machine (docs/benchmarks.md)
MARGIN = 0.05
ROUNDS = 3        #: interleaved rounds
STEPS = 3         #: timed steps per contender and round, after one untimed warm step


def race(contenders: dict[str, Callable[[], Any]], *, rounds: int = ROUNDS, steps: int = STEPS,
         progress: Callable[[str], None] | None = None) -> dict[str, list[float]]:
    """Each contender's mean seconds per call in each of ``rounds`` interleaved rounds (a warm call, then
    ``steps`` timed ones, contender after contender, the order alternating round by round)."""
    names = list(contenders)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            if progress is not None:
                progress(f"measuring {n}, round {r + 1} of {rounds}")
            contenders[n]()
            t = time.perf_counter()
            for _ in range(steps):
                contenders[n]()
            out[n].append((time.perf_counter() - t) / steps)
    return out


@dataclasses.dataclass
class Verdict:
    """Compile's choice between a searched placement and one device, with what it rests on (seconds)."""

    kept: str                   #: ``"placement"`` or ``"one device"``
    method: str                 #: the placer that searched the placement
    device: str                 #: the one device it was measured against
    placed: list[float]         #: the placed step, per round (measured)
    one_device: list[float]     #: the whole step on ``device`` as eager PyTorch, per round (measured)
    simulated: float            #: the simulator's step of the placement
    simulated_one_device: float  #: and of the whole step on ``device``
    machine: str = ""           #: where it was measured (a cached verdict holds on that machine only)

    @classmethod
    def decide(cls, method: str, device: str, times: dict[str, list[float]], simulated: float,
               simulated_one: float, machine: str) -> Verdict:
        placed, one = times["placed"], times["one device"]
        kept = "placement" if min(placed) < (1 - MARGIN) * min(one) else "one device"
        return cls(kept, method, device, placed, one, simulated, simulated_one, machine)

    @property
    def speedup(self) -> float:
        """The measured gain of the placement over one device (fastest rounds)."""
        return min(self.one_device) / min(self.placed)

    def lines(self) -> list[str]:
        def ms(xs: list[float]) -> str:
            return f"{min(xs) * 1e3:.2f} ms (its fastest of {len(xs)} rounds; slowest {max(xs) * 1e3:.2f})"

        kept = (f"kept the {self.method} placement: {self.speedup:.2f}x one device, measured"
                if self.kept == "placement" else
                f"runs on {self.device}: the {self.method} placement did not beat it by {MARGIN:.0%} measured "
                f"({self.speedup:.2f}x)")
        return [kept,
                f"  measured: placement {ms(self.placed)}, one device {ms(self.one_device)}",
                f"  simulated: placement {self.simulated * 1e3:.2f} ms, "
                f"one device {self.simulated_one_device * 1e3:.2f} ms"]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, obj: Any) -> Verdict | None:
        """A verdict read back from the placement cache, or None where it is not one (damaged, foreign)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(obj, dict) or set(obj) != fields or obj.get("kept") not in ("placement", "one device"):
            return None
        try:
            v = cls(**obj)
            floats = [*v.placed, *v.one_device, v.simulated, v.simulated_one_device]
            if not v.placed or not v.one_device or not all(isinstance(x, (int, float)) and x >= 0 for x in floats):
                return None
        except TypeError:
            return None
        return v


def this_machine() -> str:
    """What a measured verdict is valid for: this host and its torch."""

    import torch

    return f"{platform.node()} torch {torch.__version__} {torch.get_num_threads()} threads"
