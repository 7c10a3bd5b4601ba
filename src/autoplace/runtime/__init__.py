"""Real execution of placed graphs: executor, measured env, profiling, export.

- :mod:`~autoplace.runtime.program` decodes a captured graph's aten program and cuts it per device;
- :mod:`~autoplace.runtime.pool` runs a placement on one worker process per device
  (:mod:`~autoplace.runtime.device`) and measures it, over one of two back-ends: :mod:`~autoplace.runtime.shm`
  exchanges tensors through shared memory, :mod:`~autoplace.runtime.dist` over ``torch.distributed`` (ranks on
  one host or many); :mod:`~autoplace.runtime.backends` chooses;
- :mod:`~autoplace.runtime.profile` measures op costs, :mod:`~autoplace.runtime.detect` the devices and the links
  between them;
- :mod:`~autoplace.runtime.export` writes a placement as runnable Python and an Accelerate device map.
"""

from autoplace.runtime.backends import RUNTIMES, make_pool, measure, runtime_for
from autoplace.runtime.dist.pool import DistributedPool
from autoplace.runtime.plan import plan_all
from autoplace.runtime.pool import MeasuredResult
from autoplace.runtime.program import ExecutionError, Program, run_reference, torch_device
from autoplace.runtime.shm.pool import WorkerPool

__all__ = [
    "ExecutionError", "Program", "plan_all", "run_reference", "torch_device",
    "MeasuredResult", "WorkerPool", "measure", "DistributedPool", "make_pool", "runtime_for", "RUNTIMES",
]
