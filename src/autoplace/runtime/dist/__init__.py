"""The ``torch.distributed`` back-end: a rank per device, on one host or many, tensors as point-to-point
messages (:mod:`~autoplace.runtime.dist.rank`, the ranks; :mod:`~autoplace.runtime.dist.pool`, the driver's
side; :mod:`~autoplace.runtime.dist.serve`, ranks torchrun started; :mod:`~autoplace.runtime.dist.control`
and :mod:`~autoplace.runtime.dist.rendezvous`, their control store and its guards)."""

from autoplace.runtime.dist.pool import DistributedPool
from autoplace.runtime.dist.rank import RankRuntime

__all__ = ["DistributedPool", "RankRuntime"]


