"""The shared-memory back-end: a worker process per device of one machine, tensors exchanged through one
shared-memory buffer (:mod:`~autoplace.runtime.shm.worker`, the workers; :mod:`~autoplace.runtime.shm.pool`,
the driver's side)."""

from autoplace.runtime.shm.pool import WorkerPool
from autoplace.runtime.shm.worker import ShmRuntime, standalone

__all__ = ["WorkerPool", "ShmRuntime", "standalone"]


