"""Point-to-point messages between two ranks: send, recv, isend, irecv, sendrecv.

They run eagerly (a message is an effect, not a value of the graph) on
tensors or numpy arrays; the receiver names the shape and dtype by the buffer
it passes, as with MPI and torch.distributed. `sendrecv` exchanges with two
neighbours in one call without deadlock (a halo exchange). Ranks are world
ranks; `tag` tells apart messages between the same two ranks.
"""
from __future__ import annotations

import numpy as np

from ..errors import DistributedError
from ..frontend.tensor import Tensor
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


def send(tensor, dst: int, tag: int = 0, group: ProcessGroup | None = None) -> None:
    """Send to world rank `dst`; returns when the buffer may be changed again."""
    communicator.send(_array(tensor, "send"), dst, tag, _group(group))


def recv(tensor, src: int, tag: int = 0, group: ProcessGroup | None = None):
    """Receive from world rank `src` into `tensor` (a Tensor or array, overwritten); returns it."""
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
