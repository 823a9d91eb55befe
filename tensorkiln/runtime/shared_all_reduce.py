"""An all-reduce through memory the ranks share, for ranks of one machine whose MPI has no progress thread.

Between ranks on one machine MPI's all-reduce copies each message through the
library's shared-memory queues in chunks, a handshake per chunk, and its
reduce-scatter and all-gather phases copy every byte in and out of them again.
Ranks that can map each other's memory (MPI_Win_allocate_shared, every rank of
the group on one node) need none of that, nor MPI's barriers: they wait for
each other on sequence flags in the same memory (shared_flags.py), one cache
line per rank and flag, and count their calls (call n publishes n).

1. `prepare` (before the operand is copied into this rank's slot): wait until
   every rank has finished reading the slots in the previous call (`done`).
2. `run`: publish `arrived`, wait for every rank's; then
   - a short vector (one phase): every rank reduces the whole vector over every
     rank's slot, in rank order, into its output; publish `done`;
   - a long one (two phases): rank r reduces part r, in rank order, into its
     output and its part of a shared result (dividing for a mean); publish
     `reduced` and wait for every rank's; copy the other ranks' parts into the
     output; publish `done`.

Every rank ends with the same bits: each element is reduced in rank order by
the same numpy operation, whichever rank does it. A short vector costs one
wait on the other ranks instead of two (a decode's all-reduces are of one
token's features, 3 KB); a long one splits the reduction's reads over the ranks.
A rank that waits past `wait_timeout_seconds` raises an error naming itself and
the rank it waited for instead of hanging (a rank that dies of an exception
ends them all through MPI_Abort before that).
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..errors import DistributedError
from .shared_flags import LINE_BYTES, Flags

REDUCE_UFUNCS = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
ARRIVED, REDUCED, DONE = 0, 1, 2  # the flags of a rank's allocation, a cache line each, in this order
HEADER_BYTES = 3 * LINE_BYTES


def ranks_share_memory(comm: Any, mpi: Any) -> bool:
    """Whether every rank of `comm` runs on this node (MPI_Comm_split_type SHARED keeps them all)."""
    node = comm.Split_type(mpi.COMM_TYPE_SHARED)
    try:
        return node.Get_size() == comm.Get_size()
    finally:
        node.Free()


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class SharedAllReduce:
    """One all-reduce call site's shared segment: `prepare()`, then fill `slot` (this rank's operand),
    then `run(output)` writes the reduction of every rank's slot into `output`."""

    # vectors up to this many bytes are reduced whole by every rank (one wait instead of two)
    one_phase_bytes = 32 * 1024
    # a rank waiting longer than this for another raises instead of hanging
    wait_timeout_seconds = 600.0

    def __init__(self, comm: Any, mpi: Any, count: int, dtype: np.dtype, reduction: str, where: str = ""):
        self.comm, self.mpi, self.where = comm, mpi, where
        self.size, self.rank = comm.Get_size(), comm.Get_rank()
        self.reduction = reduction
        self.ufunc = REDUCE_UFUNCS[reduction]
        self.dtype = np.dtype(dtype)
        counts = comm.allgather((count, self.dtype.str))  # once per call site: the segments must match
        if len(set(counts)) != 1:
            raise DistributedError(f"all_reduce through shared memory: the ranks' operands differ: "
                                   + ", ".join(f"rank {r}: {n} x {d}" for r, (n, d) in enumerate(counts)))
        self.count = count
        self.one_phase = count * self.dtype.itemsize <= self.one_phase_bytes
        self.bounds = [count * r // self.size for r in range(self.size + 1)]
        itemsize = self.dtype.itemsize
        slot_bytes = _round_up(count * itemsize, LINE_BYTES)
        part = self.bounds[self.rank + 1] - self.bounds[self.rank]
        # one allocation per rank: a line of slack (to start the flags on a line), the flags, the slot,
        # its part of the result, and a line of slack after it (the next rank's flags start a line of their own)
        self.window = mpi.Win.Allocate_shared(LINE_BYTES + HEADER_BYTES + slot_bytes + part * itemsize + LINE_BYTES,
                                              1, comm=comm)
        self.window.Lock_all()  # a passive epoch for the whole life: the shared memory is read and written directly
        self.slots, self.parts, flags = [], [], []
        for r in range(self.size):
            memory, _ = self.window.Shared_query(r)
            address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
            start = -address % LINE_BYTES  # the same in every process: shared pages map page-aligned
            flags.append([address + start + LINE_BYTES * k for k in (ARRIVED, REDUCED, DONE)])
            values = start + HEADER_BYTES
            r_part = self.bounds[r + 1] - self.bounds[r]
            self.slots.append(np.frombuffer(memory, self.dtype, count, values))
            self.parts.append(np.frombuffer(memory, self.dtype, r_part, values + slot_bytes))
        memory, _ = self.window.Shared_query(self.rank)
        np.frombuffer(memory, np.uint8)[:] = 0  # every flag starts at call 0: nothing to wait for
        self.arrived, self.reduced, self.done = (Flags([f[k] for f in flags], self.rank, self.wait_timeout_seconds)
                                                 for k in (ARRIVED, REDUCED, DONE))
        self._calls = np.zeros(1, np.int64)  # the call counter, in memory the native path shares
        self.comm.Barrier()  # every rank's flags zeroed before any rank publishes one
        self.slot = self.slots[self.rank]

    @property
    def calls(self) -> int:
        """How many calls this rank has made (the number its flags publish)."""
        return int(self._calls[0])

    @calls.setter
    def calls(self, value: int) -> None:
        self._calls[0] = value

    def native_arrays(self) -> dict[str, np.ndarray]:
        """What native_all_reduce.c reads: the call counter, each rank's `arrived` and `done` flag and
        operand slot (addresses, as arrays kept alive here)."""
        if not hasattr(self, "_native"):
            self._native = {"calls": self._calls,
                            "arrived": np.array(self.arrived.addresses, np.uint64),
                            "done": np.array(self.done.addresses, np.uint64),
                            "slots": np.array([slot.ctypes.data for slot in self.slots], np.uint64)}
        return self._native

    def prepare(self) -> None:
        """Wait until no rank still reads this rank's slot (the previous call); then the slot may be written."""
        self._wait(self.done, self.calls)

    def run(self, output: np.ndarray) -> None:
        """The reduction of every rank's slot into `output` (a flat array of the vector's length)."""
        self.calls += 1
        call = self.calls
        self.arrived.publish(call)
        self._wait(self.arrived, call)  # every slot written
        if self.one_phase:
            self._reduce(output, 0, self.count)
        else:
            lo, hi = self.bounds[self.rank], self.bounds[self.rank + 1]
            mine = output[lo:hi]
            self._reduce(mine, lo, hi)
            self.parts[self.rank][:] = mine
            self.reduced.publish(call)
            self._wait(self.reduced, call)  # every part reduced
            for r in range(self.size):
                if r != self.rank:
                    output[self.bounds[r]:self.bounds[r + 1]] = self.parts[r]
        self.done.publish(call)

    def _reduce(self, out: np.ndarray, lo: int, hi: int) -> None:
        """Elements lo:hi of the reduction over every slot, in rank order, into `out`."""
        if self.size == 1:
            out[:] = self.slots[0][lo:hi]
        else:
            self.ufunc(self.slots[0][lo:hi], self.slots[1][lo:hi], out=out)
        for r in range(2, self.size):
            self.ufunc(out, self.slots[r][lo:hi], out=out)
        if self.reduction == "mean":
            np.divide(out, self.size, out=out)

    def _wait(self, flags: Flags, call: int) -> None:
        late = flags.wait(call)
        if late >= 0:
            raise DistributedError(f"{self.where or f'rank {self.rank}'}: all_reduce through shared memory: rank "
                                   f"{late} of the group did not reach call {call} within {flags.timeout:g} s")
