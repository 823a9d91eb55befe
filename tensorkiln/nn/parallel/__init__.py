"""Parallel training: DistributedDataParallel (data parallelism over MPI ranks)."""
from ...distributed.sampler import DistributedSampler
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel", "DistributedSampler"]
