"""The shared-memory back-end's pool: one worker process per device of one machine, each pinned to its own
core(s) with its own intra-op threads (``cpu:i``) or driving ``cuda:i``; every cross-device tensor has a
slot (one per destination device) in one shared-memory buffer the pool lays out."""

from __future__ import annotations

from autoplace.runtime.pool import ProcessPool, Runtime, cores_of
from autoplace.runtime.shm.worker import worker_main

__all__ = ["WorkerPool"]


class WorkerPool(ProcessPool):
    """One worker process per device of ``cluster``, exchanging tensors through shared memory (see the
    module docstring)."""

    runtime = Runtime.SHM

    def _process(self, k: int, conn) -> tuple:
        """``(target, args)`` of device ``k``'s worker process, talking to the pool over ``conn``."""
        dev = self.cluster.devices[k]
        return worker_main, (conn, dev.name, self.devices[k], cores_of(dev, k))

    def _exchange_buffers(self, transfers: list[tuple], total: int, used: list[int]) -> tuple:
        """What the workers exchange tensors through, sent with each one's set-up: one shared-memory buffer
        of ``total`` bytes (a slot per transfer), a flag per transfer (the step that last filled it) and
        its layout and send time (``used``: the devices taking part)."""
        import torch

        shm = torch.empty(total, dtype=torch.uint8).share_memory_()
        flags = torch.full((len(transfers) + 1,), -1, dtype=torch.int64).share_memory_()
        layouts = torch.full((len(transfers) + 1, 9), -1, dtype=torch.int64).share_memory_()
        return shm, flags, layouts
