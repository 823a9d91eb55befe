"""Distributed training and inference over MPI (`pip install 'tensorkiln[mpi]'`).

    import tensorkiln.distributed as dist
    dist.init()
    total = dist.all_reduce(x)                 # eager or inside tk.jit, with gradients
    model = tk.nn.parallel.DistributedDataParallel(model)

Run with `tensorkiln launch -n 2 train.py` (or mpiexec). See docs/distributed.md.
"""
from . import pipeline
from .collectives import ReduceOp, all_gather, all_reduce, broadcast, reduce_scatter
from .point_to_point import Work, irecv, isend, recv, send, sendrecv
from .process import (WORLD, ProcessGroup, barrier, group_ranks, init, is_initialized, new_group, rank,
                      world_size)
from .sampler import DistributedSampler
from ..errors import DistributedError

__all__ = ["DistributedError", "DistributedSampler", "ProcessGroup", "ReduceOp", "WORLD", "Work", "all_gather",
           "all_reduce", "barrier", "broadcast", "group_ranks", "init", "irecv", "is_initialized", "isend",
           "new_group", "pipeline", "rank", "recv", "reduce_scatter", "send", "sendrecv", "world_size"]
