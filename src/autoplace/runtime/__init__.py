"""Real execution of placed graphs: executor, measured env, profiling, export.

- :mod:`~autoplace.runtime.program` decodes a captured graph's aten program and cuts it per device;
- :mod:`~autoplace.runtime.workers` runs a placement on one worker process per device and measures it,
  tensors exchanged through shared memory; :mod:`~autoplace.runtime.distributed` does the same on
  ``torch.distributed`` (ranks on one host or many, :mod:`~autoplace.runtime.rank`);
- :mod:`~autoplace.runtime.profile` measures op costs and the links between devices;
- :mod:`~autoplace.runtime.export` writes a placement as runnable Python and an Accelerate device map.
"""

from autoplace.runtime.distributed import RUNTIMES, DistributedPool, make_pool, measure, runtime_for
from autoplace.runtime.program import ExecutionError, Program, plan_all, run_reference, torch_device
from autoplace.runtime.workers import MeasuredResult, WorkerPool

__all__ = [
    "ExecutionError", "Program", "plan_all", "run_reference", "torch_device",
    "MeasuredResult", "WorkerPool", "measure", "DistributedPool", "make_pool", "runtime_for", "RUNTIMES",
]
