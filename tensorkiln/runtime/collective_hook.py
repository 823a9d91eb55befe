"""The runtime-call handlers of the collectives: compiled graphs reach MPI through here.

The description the generated code passes (ir/ops/collective.py's `describe`)
reads `all_reduce dtype=float32 in=4,8 out=4,8 group=world reduction=mean`:
the op, the storage dtype and shapes of the two buffers, and the op's
attributes. The handler views the buffers as numpy arrays (no copy), runs the
same collective the reference interpreter runs, and stores the result.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from .. import dtypes as dt
from . import communicator, hooks

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(",")) if text else ()


def _group(text: str) -> tuple[int, ...]:
    return communicator.WORLD if text == "world" else _shape(text)


@lru_cache(maxsize=None)
def parse(what: str) -> tuple[str, dict[str, str]]:
    """(op, fields) of a description."""
    op, *fields = what.split(" ")
    return op, dict(field.split("=", 1) for field in fields)


def _view(address: int, dtype: dt.DType, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.empty(shape, dtype.storage)
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(buffer, dtype.storage, count).reshape(shape)


def run(what: str, out_address: int, in_address: int) -> None:
    """Run the collective `what` describes from the input buffer into the output buffer."""
    op, f = parse(what)
    dtype = dt.as_dtype(f["dtype"])
    x = dt.to_compute(_view(in_address, dtype, _shape(f["in"])), dtype)
    group = _group(f["group"])
    if op == "all_reduce":
        result = communicator.all_reduce(x, f["reduction"], group)
    elif op == "all_gather":
        result = communicator.all_gather(x, int(f["axis"]), group)
    elif op == "reduce_scatter":
        result = communicator.reduce_scatter(x, f["reduction"], int(f["axis"]), group)
    elif op == "broadcast":
        result = communicator.broadcast(x, int(f["root"]), group)
    else:
        raise RuntimeError(f"unknown collective {op!r}")
    out = _view(out_address, dtype, _shape(f["out"]))
    out[...] = dt.to_storage(np.asarray(result), dtype)


for _name in COLLECTIVES:
    hooks.register_handler(_name, run)
