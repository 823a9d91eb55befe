"""Random numbers that compiled code draws: the `philox` op and the generator state behind it.

`philox(key, offset, shape)` is the op itself (ir/ops/random.py): numbers that
are a pure function of a 0-d int64 key, a 0-d int64 offset and the element
index. The default generator is such a (key, offset) pair of mutable tensors:
`draw` reads them and advances the offset by the count drawn, so inside
tk.jit each call of the compiled function reads the current pair and writes
the advanced one back: every call draws new numbers, and `tk.manual_seed`
makes a run reproducible. The streams are not PyTorch's or numpy's.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as dt
from .tensor import Tensor, apply, as_tensor
from .trace import mark_mutable

_state: list[Tensor] = []  # [key, offset] of the default generator, made on first use


def philox(key: Tensor | int, offset: Tensor | int, shape, dtype=dt.float32, distribution: str = "uniform",
           stream: int = 0) -> Tensor:
    """Random numbers of `shape` (uniform in [0, 1) or standard normal) at counters offset, offset + 1, ...
    under `key`; `stream` separates draws that share a key and offset."""
    key, offset = (v if isinstance(v, Tensor) else as_tensor(np.int64(v), dt.int64) for v in (key, offset))
    return apply("philox", [key.to(dt.int64), offset.to(dt.int64)], shape=tuple(int(d) for d in shape),
                 dtype=dt.as_dtype(dtype), distribution=distribution, stream=int(stream))


def reseed(seed: int) -> None:
    """Start the default generator's stream at key `seed`, offset 0 (tk.manual_seed calls this)."""
    key, offset = _generator_state()
    key.data = as_tensor(np.int64(seed), dt.int64)
    offset.data = as_tensor(np.int64(0), dt.int64)


def draw(shape, dtype=dt.float32, distribution: str = "uniform") -> Tensor:
    """Numbers from the default generator, which then moves past them."""
    key, offset = _generator_state()
    values = philox(key, offset, shape, dtype, distribution)
    offset.add_(math.prod(int(d) for d in shape))
    return values


def _generator_state() -> list[Tensor]:
    if not _state:
        _state.extend(as_tensor(np.int64(0), dt.int64) for _ in range(2))
        for t in _state:
            mark_mutable(t)  # read per call by compiled code, never baked in
    return _state
