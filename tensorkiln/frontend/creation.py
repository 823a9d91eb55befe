"""Tensor creation: tensor, zeros, ones, full, arange, linspace, eye, rand, randn, randint.

Random tensors come from one numpy Generator that `manual_seed` resets, or
from a fresh one when `seed=` is given, so results are reproducible. Inside a
trace (tk.jit), `rand` and `randn` without `seed=` draw in the compiled code
instead (frontend/random.py: Philox, new numbers every call; `manual_seed`
seeds it too).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..shapes import is_symbolic
from . import random
from .tensor import Tensor, apply, as_tensor
from .trace import current_trace

_generator = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reset the default random generators (numpy's for eager tensors, Philox's for compiled code)."""
    global _generator
    _generator = np.random.default_rng(seed)
    random.reseed(seed)


def _rng(seed: int | None) -> np.random.Generator:
    return _generator if seed is None else np.random.default_rng(seed)


def _shape(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(s if is_symbolic(s) else int(s) for s in size)


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """A tensor from data (nested lists, numpy arrays, scalars); Python floats give float32."""
    if isinstance(data, Tensor):
        t = Tensor._from_value(data._value.copy(), data.dtype).to(dtype or data.dtype) \
            if not data.is_traced else data.to(dtype or data.dtype)
    else:
        t = as_tensor(np.array(data) if isinstance(data, np.ndarray) else data, dtype)
    return t.requires_grad_() if requires_grad else t


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with a numpy array."""
    return as_tensor(array)


def full(size, fill_value, dtype=None) -> Tensor:
    """A tensor of `size` filled with `fill_value` (dtype inferred from the value when not given)."""
    shape = _shape((size,) if isinstance(size, (int, np.integer)) else (size,))
    dtype = dt.as_dtype(dtype) if dtype is not None else as_tensor(fill_value).dtype
    # Convert the one fill value, then allocate the result in its storage dtype: converting a
    # filled array would hold an int64 (or float64) copy of the whole tensor as well.
    fill = dt.to_storage(np.asarray(fill_value), dtype)
    trace = current_trace()
    if trace is not None and any(is_symbolic(d) for d in shape):  # a size symbol: the value broadcast
        value = Tensor._from_node(trace.constant_for(Tensor._from_value(np.array(fill), dtype)), trace)
        return value.expand(*shape)
    return Tensor._from_value(np.full(shape, fill, dtype=fill.dtype), dtype)


def zeros(*size, dtype=dt.float32, requires_grad: bool = False) -> Tensor:
    return full(_shape(size), 0, dtype).requires_grad_(requires_grad)


def ones(*size, dtype=dt.float32, requires_grad: bool = False) -> Tensor:
    return full(_shape(size), 1, dtype).requires_grad_(requires_grad)


def empty(*size, dtype=dt.float32) -> Tensor:
    return zeros(*size, dtype=dtype)


def zeros_like(x, dtype=None) -> Tensor:
    return full(tuple(x.shape), 0, dtype or x.dtype)


def ones_like(x, dtype=None) -> Tensor:
    return full(tuple(x.shape), 1, dtype or x.dtype)


def full_like(x, fill_value, dtype=None) -> Tensor:
    return full(tuple(x.shape), fill_value, dtype or x.dtype)


def arange(start, end=None, step=1, dtype=None) -> Tensor:
    """Values from start to end (exclusive) by step; int64 for ints, float32 if any is a float.

    A size symbol for start or end (`arange(x.shape[1])` in a dynamic trace) gives the `iota` op
    of a symbolic length; a float start, end or step beside a symbol pins the symbol (a guard).
    """
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if (is_symbolic(start) or is_symbolic(end)) and all(_is_integer(v) for v in (start, end, step)):
        return _iota(start, end, step, dtype)
    values = np.arange(start, end, step)
    if dtype is None:
        dtype = dt.float32 if values.dtype.kind == "f" else dt.int64
    return as_tensor(values, dtype)


def _is_integer(value) -> bool:
    return is_symbolic(value) or (isinstance(value, (int, np.integer)) and not isinstance(value, bool))


def _iota(start, end, step: int, dtype) -> Tensor:
    """arange with a symbolic start or end: numpy's length rule, kept symbolic."""
    step = int(step)
    count = (end - start + step - 1) // step if step > 0 else (start - end - step - 1) // -step
    if count < 0:  # decided by the symbols' bounds in the usual cases; otherwise a guard
        count = 0
    return apply("iota", [], length=count, start=start, step=step,
                 dtype=dt.int64 if dtype is None else dt.as_dtype(dtype))


def linspace(start: float, end: float, steps: int, dtype=dt.float32) -> Tensor:
    return as_tensor(np.linspace(start, end, steps), dtype)


def eye(n: int, m: int | None = None, dtype=dt.float32) -> Tensor:
    return as_tensor(np.eye(n, m), dtype)


def rand(*size, seed: int | None = None, dtype=dt.float32, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1)."""
    if seed is None and current_trace() is not None:
        return random.draw(_shape(size), dtype, "uniform").requires_grad_(requires_grad)
    return as_tensor(_rng(seed).random(_shape(size)), dtype).requires_grad_(requires_grad)


def randn(*size, seed: int | None = None, dtype=dt.float32, requires_grad: bool = False) -> Tensor:
    """Standard normal samples."""
    if seed is None and current_trace() is not None:
        return random.draw(_shape(size), dtype, "normal").requires_grad_(requires_grad)
    return as_tensor(_rng(seed).standard_normal(_shape(size)), dtype).requires_grad_(requires_grad)


def randint(low: int, high: int | None = None, size=(), seed: int | None = None, dtype=dt.int64) -> Tensor:
    """Uniform integers in [low, high)."""
    if high is None:
        low, high = 0, low
    return as_tensor(_rng(seed).integers(low, high, size=tuple(size)), dtype)
