"""An all-reduce through memory the ranks share, for ranks of one machine whose MPI has no progress thread.

Between ranks on one machine MPI's all-reduce copies each message through the
library's shared-memory queues in chunks, a handshake per chunk, and its
reduce-scatter and all-gather phases copy every byte in and out of them again.
Ranks that can map each other's memory (MPI_Win_allocate_shared, every rank of
the group on one node) need none of that:

1. each rank's operand is already in its slot of a shared segment (the
   channel's start copies it there, as it copied it into a private buffer);
2. a barrier; then rank r reduces part r of the vector over every rank's slot,
   in rank order, straight into its own output and into its part of a shared
   result (dividing for a mean);
3. a second barrier; then each rank copies the other parts from the shared
   result into its output.

Every rank ends with the same bits (each part is reduced once, by one rank).
The next call's first barrier keeps a rank from overwriting its slot or its
part while another still reads them. The bytes move at the wait, as they do
between ranks of one thread without a progress thread; with a progress thread
the channel keeps MPI's nonblocking all-reduce instead.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DistributedError

REDUCE_UFUNCS = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def ranks_share_memory(comm: Any, mpi: Any) -> bool:
    """Whether every rank of `comm` runs on this node (MPI_Comm_split_type SHARED keeps them all)."""
    node = comm.Split_type(mpi.COMM_TYPE_SHARED)
    try:
        return node.Get_size() == comm.Get_size()
    finally:
        node.Free()


class SharedAllReduce:
    """One all-reduce call site's shared segment: `slot` (this rank's operand, to be filled before
    `run`), then `run(output)` writes the reduction of every rank's slot into `output`."""

    def __init__(self, comm: Any, mpi: Any, count: int, dtype: np.dtype, reduction: str):
        self.comm, self.mpi = comm, mpi
        self.size, self.rank = comm.Get_size(), comm.Get_rank()
        self.reduction = reduction
        self.ufunc = REDUCE_UFUNCS[reduction]
        self.dtype = np.dtype(dtype)
        counts = comm.allgather((count, self.dtype.str))  # once per call site: the segments must match
        if len(set(counts)) != 1:
            raise DistributedError(f"all_reduce through shared memory: the ranks' operands differ: "
                                   + ", ".join(f"rank {r}: {n} x {d}" for r, (n, d) in enumerate(counts)))
        self.bounds = [count * r // self.size for r in range(self.size + 1)]
        itemsize = self.dtype.itemsize
        mine = self.bounds[self.rank + 1] - self.bounds[self.rank]
        # one allocation per rank: its slot (the whole vector) and its part of the result
        self.window = mpi.Win.Allocate_shared((count + mine) * itemsize, itemsize, comm=comm)
        self.window.Lock_all()  # a passive epoch for the whole life, so that Sync orders the memory
        self.slots, self.parts = [], []
        for r in range(self.size):
            memory, _ = self.window.Shared_query(r)
            part = self.bounds[r + 1] - self.bounds[r]
            values = np.frombuffer(memory, self.dtype, count + part)
            self.slots.append(values[:count])
            self.parts.append(values[count:])
        self.slot = self.slots[self.rank]

    def run(self, output: np.ndarray) -> None:
        """The reduction of every rank's slot into `output` (a flat array of the vector's length)."""
        lo, hi = self.bounds[self.rank], self.bounds[self.rank + 1]
        self._synchronize()  # every slot written
        mine = output[lo:hi]
        self.ufunc(self.slots[0][lo:hi], self.slots[1][lo:hi], out=mine)
        for r in range(2, self.size):
            self.ufunc(mine, self.slots[r][lo:hi], out=mine)
        if self.reduction == "mean":
            np.divide(mine, self.size, out=mine)
        self.parts[self.rank][:] = mine
        self._synchronize()  # every part reduced
        for r in range(self.size):
            if r != self.rank:
                output[self.bounds[r]:self.bounds[r + 1]] = self.parts[r]

    def _synchronize(self) -> None:
        self.window.Sync()
        self.comm.Barrier()
        self.window.Sync()
