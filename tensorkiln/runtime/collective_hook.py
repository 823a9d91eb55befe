"""The runtime-call handlers of the collectives: compiled graphs reach MPI through here.

The description the generated code passes (ir/ops/collective.py's `describe`)
reads `all_reduce seq=3 dtype=float32 in=4,8 out=4,8 group=world
reduction=mean phase=start`: the op, its number in the program, the storage
dtype and shapes of its operand and result, its attributes, and which half of
the call this is. `phase=start` copies the operand (so its buffer may be
reused at once) and starts the collective without blocking (MPI_Iallreduce,
MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Ibcast); `phase=wait` finishes it and stores the result
(kernels/overlap.py puts the two as far apart as the graph allows). The
collectives whose bytes travel unchanged take the cheaper path of a
preallocated channel per description (collective_channel.py).
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from .. import dtypes as dt
from . import communicator, hooks, native_all_reduce
from .collective_channel import Channel, serves

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv")


# the collectives started and not yet waited for, by description
_started: dict[str, communicator.PendingCollective] = {}
_channels: dict[str, Channel | None] = {}  # description -> its channel, or None: the general path


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(",")) if text else ()


def _group(text: str) -> tuple[int, ...]:
    return communicator.WORLD if text == "world" else _shape(text)


@lru_cache(maxsize=None)
def parse(what: str) -> tuple[str, str, dict[str, str]]:
    """(op, the description without its phase, fields) of a description."""
    op, *fields = what.split(" ")
    values = dict(field.split("=", 1) for field in fields)
    return op, what.rsplit(" phase=", 1)[0], values


def _view(address: int, dtype: dt.DType, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.empty(shape, dtype.storage)
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(buffer, dtype.storage, count).reshape(shape)


def _start(op: str, x: np.ndarray, f: dict[str, str]) -> communicator.PendingCollective:
    group = _group(f["group"])
    if op == "all_reduce":
        return communicator.start_all_reduce(x, f["reduction"], group)
    if op == "all_gather":
        return communicator.start_all_gather(x, int(f["axis"]), group)
    if op == "reduce_scatter":
        return communicator.start_reduce_scatter(x, f["reduction"], int(f["axis"]), group)
    if op == "broadcast":
        return communicator.start_broadcast(x, int(f["root"]), group)
    if op == "send":  # its result is the message's token (0)
        return _Message(communicator.start_send(x, int(f["peer"]), int(f["tag"]), group), np.zeros((), np.int32))
    if op == "recv":  # the operand is the previous message's token; the result arrives in a new array
        out = np.empty(_shape(f["out"]), dt.as_dtype(f["dtype"]).storage)
        return _Message(communicator.start_recv(out, int(f["peer"]), int(f["tag"]), group), out)
    raise RuntimeError(f"unknown collective {op!r}")


class _Message:
    """A started send or receive, finished like a collective: wait() returns its result."""

    def __init__(self, pending: communicator.Pending, result: np.ndarray):
        self._pending, self._result = pending, result

    def wait(self) -> np.ndarray:
        self._pending.wait()
        return self._result


class _Deferred:
    """A collective whose start waits for its wait (no kernel runs between the two)."""

    def __init__(self, op: str, x: np.ndarray, fields: dict[str, str]):
        self._op, self._x, self._fields = op, x, fields

    def wait(self) -> np.ndarray:
        return _start(self._op, self._x, self._fields).wait()


def run(what: str, out_address: int, in_address: int) -> None:
    """Start (phase=start) or finish (phase=wait) the collective `what` describes."""
    op, key, f = parse(what)
    if key not in _channels:
        _channels[key] = Channel(op, f) if serves(op, f) else None
    channel = _channels[key]
    if channel is not None:
        start = f["phase"] == "start"
        channel.start(in_address) if start else channel.wait(out_address)
        if channel.runs_natively:  # this call site's next calls run in C, without entering Python
            native_all_reduce.register(hooks.calling_address(), channel.shared,
                                       native_all_reduce.START if start else native_all_reduce.WAIT)
        return
    dtype = dt.as_dtype(f["dtype"])
    if f["phase"] == "start":
        # a copy (see above); recv's operand is only its place in the order of messages: not read
        x = None if op == "recv" else np.array(dt.to_compute(_view(in_address, dtype, _shape(f["in"])), dtype))
        # overlap=none: nothing runs before the wait, so the collective runs there, start and finish
        _started[key] = _Deferred(op, x, f) if f.get("overlap") == "none" else _start(op, x, f)
        return
    result = _started.pop(key).wait()
    out = _view(out_address, dt.int32 if op == "send" else dtype, _shape(f["out"]))
    out[...] = dt.to_storage(np.asarray(result), dtype)


for _name in COLLECTIVES:
    hooks.register_handler(_name, run)
