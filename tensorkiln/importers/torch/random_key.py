"""The key that a converted graph's random ops draw under, one per call.

A graph with random ATen ops (`torch.Tag.nondeterministic_seeded`) takes one
more input, a 0-d int64 key, which its caller draws from PyTorch's default
generator before every call (as Inductor draws its seeds): every call gets new
numbers and `torch.manual_seed` makes a run reproducible. While the graph is
converted, each random node takes the next `stream` of that key, so two nodes
never draw the same numbers. The numbers are tensorkiln's Philox streams,
not the values eager PyTorch's generator gives.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from ...errors import UnsupportedOpError

_active: list = []  # [key tensor, next stream] while a graph with random ops is converted


def is_random(target) -> bool:
    """True for an ATen op that draws random numbers."""
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


@contextlib.contextmanager
def drawing_under(key) -> Iterator[None]:
    """Random lowerings called inside draw under `key` (a 0-d int64 tk Tensor), streams 0, 1, 2 ...;
    None: they refuse (a graph called without a key)."""
    _active.append([key, 0])
    try:
        yield
    finally:
        _active.pop()


def next_stream():
    """(key, stream) for the random node being lowered now."""
    if not _active or _active[-1][0] is None:
        raise UnsupportedOpError("the graph draws random numbers (a training-mode dropout?) where no key is "
                                 "passed per call: torch.export's models are inference graphs; call module.eval()")
    state = _active[-1]
    state[1] += 1
    return state[0], state[1] - 1


def new_key() -> int:
    """A key drawn from PyTorch's default generator (so torch.manual_seed decides it)."""
    return int(torch.empty((), dtype=torch.int64).random_())
