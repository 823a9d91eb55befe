"""The cheap path of a compiled collective: one preallocated buffer per call site, raw memory copies.

A compiled program calls the same collective (one description, collective_hook.py)
once per run, with the same shapes every time; a tensor-parallel decode makes 26
of them per token, each on the critical path. So the first call of a
description makes a `Channel`: the parsed facts, the communicator, the MPI
operation and a buffer of the message's size, kept for the life of the
process. `start` copies the operand into that buffer with one memmove and
starts the nonblocking collective on it in place (MPI_IN_PLACE, no second
buffer); `wait` finishes it and copies (or, for a mean, divides) the result
straight into the output's memory. A collective that overlaps no kernel
(`overlap=none`, kernels/overlap.py) makes one blocking call at its wait,
and an all-reduce among them reads its operand where it lies, unchanged
until the wait, and writes the output's memory directly (no copy into the
buffer). Where MPI moves a started collective's bytes only inside its own
calls (no progress thread: communicator.progresses_in_background), a large
message would not move before the wait anyway, so the start copies the
operand and the wait makes one blocking call (`Channel.defer_without_progress`).
There, too, an all-reduce among
ranks that are all on this node uses a buffer in memory they share and
reduces through it (shared_all_reduce.py; `Channel.share_memory_without_progress`),
the start copying the operand into it. Measured on one rank (the Python and
numpy work alone), a start and wait of a 24 KB all-reduce cost about 9 us
through a channel and about 40 us through the general path, which parses,
views, converts and allocates on every call.

Channels serve the collectives whose bytes travel unchanged: an all_reduce,
and an all_gather or broadcast whose gathered axis has only size-1 axes in
front of it (so the concatenation is of whole contiguous blocks), on dtypes
that compute in their storage type. The rest (bool, bfloat16, float16, a
gather along an inner axis) take the general path.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..errors import DistributedError
from . import communicator, native_all_reduce, shared_flags
from .communicator import progresses_in_background
from .shared_all_reduce import SharedAllReduce, ranks_share_memory


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(",")) if text else ()


def _group(text: str) -> tuple[int, ...]:
    return communicator.WORLD if text == "world" else _shape(text)


def _leading_ones(shape: tuple[int, ...], axis: int) -> bool:
    return all(d == 1 for d in shape[:axis])


def serves(op: str, fields: dict[str, str]) -> bool:
    """Whether a channel can carry this collective (else the general path does)."""
    dtype = dt.as_dtype(fields["dtype"])
    if dtype.is_bool or dtype in (dt.bfloat16, dt.float16) or np.dtype(dtype.storage).kind not in "fiu":
        return False
    if op == "all_reduce":
        return fields["reduction"] != "mean" or dtype.is_floating
    if op == "all_gather":
        return _leading_ones(_shape(fields["in"]), int(fields["axis"]))
    return op == "broadcast"


class _Switches(type):
    """Channel's class-wide switch of the shared-memory path: setting it also tells the native hook
    (native_all_reduce.py), whose registered call sites would otherwise go on through shared memory."""

    _share_memory = True

    @property
    def share_memory_without_progress(cls) -> bool:
        # Without a progress thread, an all-reduce among ranks of one node goes through memory they share
        # (shared_all_reduce.py) instead of MPI's queues; False keeps MPI's all-reduce (to compare them).
        return _Switches._share_memory

    @share_memory_without_progress.setter
    def share_memory_without_progress(cls, on: bool) -> None:
        _Switches._share_memory = bool(on)
        native_all_reduce.set_sharing(on)


class Channel(metaclass=_Switches):
    """One compiled collective's preallocated state; `start(in_address)`, then `wait(out_address)`."""

    def __init__(self, op: str, fields: dict[str, str]):
        self.op = op
        self.group = _group(fields["group"])
        self.dtype = dt.as_dtype(fields["dtype"])
        self.in_shape, self.out_shape = _shape(fields["in"]), _shape(fields["out"])
        self.fields = fields
        self.size = communicator.group_size(self.group)
        storage = self.dtype.storage
        # all_reduce and broadcast work in place on one buffer; all_gather receives every rank's block
        self.send = np.empty(self.in_shape, storage)
        self.receive = self.send if op != "all_gather" else np.empty(self.out_shape, storage)
        self.send_address, self.receive_address = self.send.ctypes.data, self.receive.ctypes.data
        self.in_bytes, self.out_bytes = self.send.nbytes, self.receive.nbytes
        self.facts = self._facts()
        self._request: Any = None
        self._comm: Any = None  # the communicator, MPI_IN_PLACE and the MPI reduction, at the first start
        self._in_place: Any = None
        self._reduction: Any = None
        self._root = 0  # a broadcast's root, as a rank of the group
        self.blocking = fields.get("overlap") == "none"  # kernels/overlap.py: nothing runs between the halves
        self._operand = 0  # (blocking) the operand's address, read at the wait
        self._shared: SharedAllReduce | None = None  # an all-reduce through shared memory (_share_memory)
        self._deferred = False  # (nonblocking) started as a copy only: the collective runs at the wait
        self._outputs: dict[int, np.ndarray] = {}  # output address -> a view of it (for the mean's divide)

    def _facts(self) -> tuple:
        """What the ranks must agree on: the same facts as the general path's check."""
        base = (self.in_shape, str(np.dtype(self.dtype.storage)))
        if self.op == "all_reduce":
            return base + (self.fields["reduction"],)
        if self.op == "all_gather":
            return base + (int(self.fields["axis"]),)
        return base + (int(self.fields["root"]),)

    # Without a progress thread a started collective's bytes move only inside MPI calls, so a nonblocking
    # start buys nothing but its latency terms; False restores the nonblocking start (to compare them).
    defer_without_progress = True

    def start(self, in_address: int) -> None:
        communicator.agree(self.op, self.facts, self.group)  # before _connect, whose setup is collective
        comm = self._comm or self._connect()
        shared = self._shared is not None and Channel.share_memory_without_progress
        if self.blocking and self.op == "all_reduce" and not shared:
            self._operand = in_address  # no kernel runs before the wait: MPI reads the operand there
            return
        if shared:
            self._shared.prepare()  # no rank still reads the slot from the previous call
        ctypes.memmove(self.send_address, in_address, self.in_bytes)
        if self.blocking:  # nothing runs before the wait: one blocking call there
            return
        self._deferred = (self.defer_without_progress or shared) and not self._background
        if self._deferred:
            return
        if self.op == "all_reduce":
            self._request = comm.Iallreduce(self._in_place, self.send, op=self._reduction)
        elif self.op == "all_gather":
            self._request = comm.Iallgather(self.send, self.receive)
        else:
            self._request = comm.Ibcast(self.send, root=self._root)

    def _run_blocking(self) -> None:
        comm = self._comm
        if self.op == "all_reduce":
            comm.Allreduce(self._in_place, self.send, op=self._reduction)
        elif self.op == "all_gather":
            comm.Allgather(self.send, self.receive)
        else:
            comm.Bcast(self.send, root=self._root)

    def _connect(self):
        self._comm = communicator.communicator(self.group)
        self._background = progresses_in_background()
        self._in_place = communicator.world().mpi.IN_PLACE
        if self.op == "all_reduce":
            self._reduction = communicator.mpi_op(self.fields["reduction"])
            self._share_memory()
        if self.op == "broadcast":
            ranks, root = communicator.group_ranks(self.group), int(self.fields["root"])
            if root not in ranks:
                raise DistributedError(f"{communicator.where()}: broadcast root {root} is not in group {list(ranks)}")
            self._root = ranks.index(root)
        return self._comm

    def _share_memory(self) -> None:
        """Put the buffer in memory the group's ranks share, where they are all on this node and MPI
        progresses only inside its calls (the shared path is blocking at the wait, as MPI's is then)."""
        mpi = communicator.world().mpi
        if self.size == 1 or self.send.size == 0 or self._background or not ranks_share_memory(self._comm, mpi):
            return
        if not all(self._comm.allgather(shared_flags.available())):  # every rank decides alike
            return
        self._shared = SharedAllReduce(self._comm, mpi, self.send.size, self.send.dtype, self.fields["reduction"],
                                       communicator.where())
        self.send = self.receive = self._shared.slot.reshape(self.in_shape)
        self.send_address = self.receive_address = self.send.ctypes.data

    @property
    def runs_natively(self) -> bool:
        """Whether its calls may run in C from now on (native_all_reduce.py): through shared memory,
        with no agreement check per call (a round of MPI messages in Python)."""
        return (self._shared is not None and Channel.share_memory_without_progress
                and not communicator.world().check_agreement)

    @property
    def shared(self) -> SharedAllReduce | None:
        """The shared-memory all-reduce (known after the first start), or None."""
        return self._shared

    @property
    def shares_memory(self) -> bool:
        """Whether this all-reduce can go through memory the ranks share (known after the first start)."""
        return self._shared is not None

    def wait(self, out_address: int) -> None:
        if self._shared is not None and Channel.share_memory_without_progress and (self.blocking or self._deferred):
            self._shared.run(self._output(out_address).reshape(-1))
            return
        if self.blocking and self.op == "all_reduce":
            self._all_reduce_into(self._operand, out_address)
            return
        if self.blocking or self._deferred:
            self._run_blocking()
        else:
            request, self._request = self._request, None
            request.Wait()
        if self.out_bytes == 0:
            return
        if self.op == "all_reduce" and self.fields["reduction"] == "mean":
            np.divide(self.receive, self.size, out=self._output(out_address))
        else:
            ctypes.memmove(out_address, self.receive_address, self.out_bytes)

    def _all_reduce_into(self, in_address: int, out_address: int) -> None:
        """One blocking all-reduce from the operand's memory straight into the output's (in place when the
        memory planner gave them the same bytes; through the channel's buffer if they partly overlap)."""
        output = self._output(out_address) if self.out_bytes else self.receive
        if in_address == out_address or self.out_bytes == 0:
            self._comm.Allreduce(self._in_place, output, op=self._reduction)
        elif abs(in_address - out_address) < self.in_bytes:  # partly overlapping: copy the operand first
            ctypes.memmove(self.send_address, in_address, self.in_bytes)
            self._comm.Allreduce(self._in_place, self.send, op=self._reduction)
            ctypes.memmove(out_address, self.send_address, self.out_bytes)
        else:
            self._comm.Allreduce(self._view(in_address), output, op=self._reduction)
        if self.fields["reduction"] == "mean" and self.out_bytes:
            np.divide(output, self.size, out=output)

    def _view(self, address: int) -> np.ndarray:
        """The operand's memory as an array (read only by MPI)."""
        memory = (ctypes.c_char * self.in_bytes).from_address(address)
        return np.frombuffer(memory, self.dtype.storage, self.send.size).reshape(self.in_shape)

    def _output(self, address: int) -> np.ndarray:
        view = self._outputs.get(address)
        if view is None:
            if len(self._outputs) > 8:  # outputs move rarely (a new arena); keep the map small
                self._outputs.clear()
            count = int(np.prod(self.out_shape, dtype=np.int64))
            memory = (ctypes.c_char * (count * self.dtype.itemsize)).from_address(address)
            view = self._outputs[address] = np.frombuffer(memory, self.dtype.storage, count).reshape(self.out_shape)
        return view
