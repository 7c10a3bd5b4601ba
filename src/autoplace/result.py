"""What one training step of a placement costs — simulated (:class:`~autoplace.sim.SimResult`) or measured
(:class:`~autoplace.runtime.MeasuredResult`): one interface and one JSON schema for both."""

from __future__ import annotations

import math

__all__ = ["StepResult"]


class StepResult:
    """The interface both results share (each a frozen dataclass with these fields): ``step_time``
    (seconds; ``inf`` where a run failed), ``device_names``, ``busy_time`` (per device, or None where not
    known), ``peak_memory`` and ``memory_capacity`` (bytes per device), ``n_transfers``; ``error`` (why a
    run failed, None where it ran). ``ENV`` names where the figures come from."""

    ENV = ""
    error: str | None = None

    @property
    def oom_devices(self) -> tuple[str, ...]:
        """Devices whose peak memory exceeds their capacity (a failing placement if non-empty)."""
        return tuple(n for n, p, c in zip(self.device_names, self.peak_memory, self.memory_capacity) if p > c)

    @property
    def ok(self) -> bool:
        """The step ran (or would run): no error, no device out of memory."""
        return self.error is None and not self.oom_devices

    @property
    def step_times(self) -> tuple[float, ...]:
        """Every step's time (a simulation has one)."""
        return (float(self.step_time),)

    def _links(self) -> list[dict]:
        return []

    def to_dict(self) -> dict:
        """Plain JSON, the same keys for both envs (non-finite numbers become null): ``env``, ``step_time_s``
        (null for a failing placement), ``ok``, ``error``, ``oom_devices``, ``step_times_s``, ``devices``
        (``name``, ``busy_s``, ``peak_memory_bytes``, ``memory_bytes``, ``oom``, ``host_s``: its launcher's
        time, simulated only), ``links`` (``src``,
        ``dst``, ``bytes``, ``busy_s``: simulated only), ``transfers``, ``transfer_bytes``."""
        def finite(x):
            return float(x) if x is not None and math.isfinite(x) else None

        busy = self.busy_time if self.busy_time is not None else [None] * len(self.device_names)
        host = getattr(self, "host_time", None)
        host = host if host is not None and len(host) else [None] * len(self.device_names)
        return {
            "env": self.ENV,
            "step_time_s": finite(self.step_time) if self.ok else None,
            "ok": self.ok,
            "error": self.error,
            "oom_devices": list(self.oom_devices),
            "step_times_s": [finite(t) for t in self.step_times],
            "devices": [{"name": n, "busy_s": finite(b), "peak_memory_bytes": int(p), "memory_bytes": int(c),
                         "oom": bool(p > c), "host_s": finite(h)}
                        for n, b, p, c, h in zip(self.device_names, busy, self.peak_memory, self.memory_capacity,
                                                 host)],
            "links": self._links(),
            "transfers": int(self.n_transfers),
            "transfer_bytes": int(self.transfer_bytes),
        }
