"""Point-to-point messages between two ranks: send, recv, isend, irecv, sendrecv.

Eagerly they run at once on tensors or numpy arrays; the receiver names the
shape and dtype by the buffer it passes, as with MPI and torch.distributed.
Inside tk.jit, `send` and `recv` become graph ops (ir/ops/collective.py)
chained by effect tokens (frontend/trace.py), so the compiled code sends and
receives every call, in the order the function does; `recv` writes the
received value into its tensor as an in-place update would. The nonblocking
forms and sendrecv run eagerly only. `sendrecv` exchanges with two
neighbours in one call without deadlock (a halo exchange). Ranks are world
ranks; `tag` tells apart messages between the same two ranks.
"""
from __future__ import annotations

import numpy as np

from ..errors import DistributedError
from ..frontend.tensor import Tensor, apply, as_tensor
from ..frontend.trace import current_trace
from ..ir.graph import constant_node
from ..ir.ops.collective import TOKEN, next_message
from ..runtime import communicator
from .process import ProcessGroup, _group


def _array(value, verb: str) -> np.ndarray:
    """The storage array of an eager tensor or a numpy array."""
    if isinstance(value, Tensor):
        if value.is_traced:
            raise DistributedError(f"{communicator.where()}: {verb} runs eagerly; it cannot take a tensor traced "
                                   "by tk.jit (use the collectives inside compiled functions)")
        return value._value
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(f"{verb} takes a Tensor or a numpy array, got {type(value).__name__}")


def _writable(value, verb: str) -> np.ndarray:
    array = _array(value, verb)
    if not (array.flags.c_contiguous and array.flags.writeable):
        raise DistributedError(f"{communicator.where()}: {verb} needs a contiguous, writable buffer to receive into")
    return array


class Work:
    """A started isend/irecv; wait() blocks until it is done and returns the received buffer (or None)."""

    def __init__(self, pending: communicator.Pending, result=None):
        self._pending, self._result = pending, result

    def wait(self):
        self._pending.wait()
        return self._result

    def is_completed(self) -> bool:
        return self._pending.done()


def _token(trace) -> Tensor:
    """The traced token the next message comes after."""
    node = trace.effect_token(lambda: constant_node(np.zeros((), np.int32), TOKEN.dtype))
    return Tensor._from_node(node, trace)


def send(tensor, dst: int, tag: int = 0, group: ProcessGroup | None = None) -> None:
    """Send to world rank `dst`; returns when the buffer may be changed again."""
    trace = current_trace()
    if trace is not None:  # a graph op after the previous message, before the next
        token = apply("send", [as_tensor(tensor), _token(trace)], peer=int(dst), tag=int(tag), group=_group(group),
                      sequence=next_message())
        trace.record_effect(token._node)
        return None
    communicator.send(_array(tensor, "send"), dst, tag, _group(group))


def recv(tensor, src: int, tag: int = 0, group: ProcessGroup | None = None):
    """Receive from world rank `src` into `tensor` (a Tensor or array, overwritten); returns it."""
    trace = current_trace()
    if trace is not None and isinstance(tensor, Tensor):
        received = apply("recv", [_token(trace)], peer=int(src), tag=int(tag), group=_group(group),
                         shape=tuple(tensor.shape), dtype=tensor.dtype.name, sequence=next_message())
        # a token that depends on the received value: the next message comes after this one
        trace.record_effect(apply("cast", [received.reshape(-1)[:1].sum()], dtype=TOKEN.dtype)._node)
        tensor.copy_(received)
        return tensor
    communicator.recv(_writable(tensor, "recv"), src, tag, _group(group))
    return tensor


def isend(tensor, dst: int, tag: int = 0, group: ProcessGroup | None = None) -> Work:
    """Start sending; the buffer must not change until wait()."""
    return Work(communicator.start_send(_array(tensor, "isend"), dst, tag, _group(group)))


def irecv(tensor, src: int, tag: int = 0, group: ProcessGroup | None = None) -> Work:
    """Start receiving into `tensor`; wait() returns it."""
    return Work(communicator.start_recv(_writable(tensor, "irecv"), src, tag, _group(group)), tensor)


def sendrecv(send_tensor, dst: int, recv_tensor, src: int, tag: int = 0, group: ProcessGroup | None = None):
    """Send to `dst` and receive from `src` into `recv_tensor` at once; returns `recv_tensor`."""
    communicator.send_recv(_array(send_tensor, "sendrecv"), dst, _writable(recv_tensor, "sendrecv"), src, tag,
                           _group(group))
    return recv_tensor
