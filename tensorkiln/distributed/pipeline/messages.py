"""What travels between neighbouring pipeline stages: a header, then activations forward and gradients back.

Before the first microbatch of each step a stage sends the next one a small
header: the activation's shape and dtype (so the receiver can allocate its
buffers and name a mismatch), or an error that every later stage raises too
(a batch that the microbatch count does not divide is seen by the first
stage only, and the others would otherwise wait for it forever). Activations
and gradients go with `isend` (a stage may send while its neighbour sends to
it: 1F1B does, and two blocking sends of large messages would deadlock) and
are received with a blocking `recv`, as the schedule needs them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..point_to_point import Work, isend, recv, send

HEADER_TAG, ACTIVATION_TAG, GRADIENT_TAG = 7301, 7302, 7303
MAX_DIMS = 8
DTYPES = ("float32", "float64", "float16", "int64", "int32", "bool")
OK, BAD_MICROBATCH_COUNT = 0, 1


@dataclass(frozen=True)
class Header:
    """The shape and dtype of one microbatch's activation, or an error status with its numbers."""

    status: int
    shape: tuple[int, ...] = ()
    dtype: str = "float32"

    def encode(self) -> np.ndarray:
        if len(self.shape) > MAX_DIMS:
            raise ValueError(f"pipeline activations have at most {MAX_DIMS} dimensions, got shape {list(self.shape)}")
        if self.dtype not in DTYPES:
            raise TypeError(f"pipeline activations are one of {', '.join(DTYPES)}; got {self.dtype}")
        words = np.zeros(3 + MAX_DIMS, np.int64)
        words[:3] = self.status, DTYPES.index(self.dtype), len(self.shape)
        words[3:3 + len(self.shape)] = self.shape
        return words

    @classmethod
    def decode(cls, words: np.ndarray) -> "Header":
        status, dtype, ndim = (int(w) for w in words[:3])
        return cls(status, tuple(int(d) for d in words[3:3 + ndim]), DTYPES[dtype])


def send_header(header: Header, dst: int) -> None:
    send(header.encode(), dst, tag=HEADER_TAG)  # a few words: MPI buffers it, so this returns at once


def recv_header(src: int) -> Header:
    words = np.zeros(3 + MAX_DIMS, np.int64)
    recv(words, src, tag=HEADER_TAG)
    return Header.decode(words)


class Outbox:
    """Started sends and their buffers, kept alive until `wait_all`."""

    def __init__(self):
        self._pending: list[tuple[Work, np.ndarray]] = []

    def send(self, array: np.ndarray, dst: int, tag: int) -> None:
        array = np.ascontiguousarray(array)
        self._pending.append((isend(array, dst, tag=tag), array))

    def wait_all(self) -> None:
        for work, _ in self._pending:
            work.wait()
        self._pending.clear()


def receive(shape: tuple[int, ...], dtype: str, src: int, tag: int) -> np.ndarray:
    buffer = np.empty(shape, np.dtype(dtype))
    recv(buffer, src, tag=tag)
    return buffer
