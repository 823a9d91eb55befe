"""philox: counter-based random numbers (Philox4x32-10), the one primitive behind every random op.

Element i of a `philox` node is a pure function of (key, offset + i, stream):
the Philox4x32-10 block cipher (Salmon et al., "Parallel random numbers: as easy
as 1, 2, 3", SC 2011; the generator Inductor and JAX use) encrypts the 128-bit
counter (offset + i as two 32-bit words, then the stream id as two more) under
the 64-bit key, and a transform turns the four random words into a float:

- uniform: [0, 1); float32 from the top 24 bits of word 0, float64 from 53 bits of words 0 and 1;
- normal: Box-Muller in float64, sqrt(-2 log u1) * cos(2 pi u2) with u1 in (0, 1] from words 0-1 and
  u2 from words 2-3 (a float32 result is that value rounded).

So any element can be computed alone, in any order, by any thread: the numbers
are reproducible for a given key and offset whatever the thread count, and
each call draws new ones when its caller passes a new key or offset (both are
0-d int64 operands, so compiled code reads them at run time). `stream` (an
attribute) separates the random ops of one graph that share a key and offset.
The streams are not PyTorch's (its CPU generator is a Mersenne twister).
"""
from __future__ import annotations

import math

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from ...loops import expr as E
from ...loops.math import math_function
from .gradient import NOT_DIFFERENTIABLE
from .registry import Attrs, MappingType, OpKind, TensorType, register

_MASK = np.uint64(0xFFFFFFFF)
_MULTIPLIERS = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_KEY_STEPS = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))
DISTRIBUTIONS = ("uniform", "normal")


def philox4x32(counter: list[np.ndarray], key: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """Ten Philox rounds over four uint64 arrays holding 32-bit words; the same as the C helper
    `tk_philox4x32` (codegen/c_random.py). `key`: two 32-bit words (uint64 arrays or scalars)."""
    c0, c1, c2, c3 = (np.asarray(w, dtype=np.uint64) & _MASK for w in counter)
    k0, k1 = (np.asarray(w, dtype=np.uint64) & _MASK for w in key)
    for _ in range(10):
        p0, p1 = _MULTIPLIERS[0] * c0, _MULTIPLIERS[1] * c2  # 32 x 32 -> 64 bits: never wraps
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _MASK, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _MASK)
        k0, k1 = (k0 + _KEY_STEPS[0]) & _MASK, (k1 + _KEY_STEPS[1]) & _MASK
    return [c0, c1, c2, c3]


def _words(key, counter, stream) -> list[np.ndarray]:
    """Philox's four words for int64 key, counter and stream (their two's-complement bits)."""
    key, counter, stream = (np.asarray(v, dtype=np.int64).view(np.uint64) for v in (key, counter, stream))
    return philox4x32([counter & _MASK, counter >> np.uint64(32), stream & _MASK, stream >> np.uint64(32)],
                      (key & _MASK, key >> np.uint64(32)))


def _unit53(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """[0, 1) from 53 bits: 32 of `high`, the top 21 of `low`."""
    return ((high << np.uint64(21)) | (low >> np.uint64(11))).astype(np.float64) * 2.0 ** -53


def philox_values(key, counter, stream, distribution: str, dtype: str) -> np.ndarray:
    """The numbers `philox` gives (numpy reference): arrays of int64 key and counter (broadcast)."""
    w = _words(key, counter, stream)
    if distribution == "uniform":
        if dtype == "float32":
            return ((w[0] >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24)).astype(np.float32)
        return _unit53(w[0], w[1])
    u1, u2 = 1.0 - _unit53(w[0], w[1]), _unit53(w[2], w[3])
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return z.astype(np.float32) if dtype == "float32" else z


def _scalar_function(distribution: str, dtype: str):
    def evaluate(key, counter, stream):
        return philox_values(key, counter, stream, distribution, dtype).item()
    return evaluate


# One C helper per (distribution, float type): int64 key, counter and stream in, a float out
for _distribution in DISTRIBUTIONS:
    for _dtype, _suffix in (("float32", "f32"), ("float64", "f64")):
        math_function(f"philox_{_distribution}_{_dtype}", 3, _scalar_function(_distribution, _dtype),
                      {_dtype: f"tk_philox_{_distribution}_{_suffix}({{args}})"},
                      signature=(("int64", "int64", "int64"), _dtype))
del _distribution, _dtype, _suffix


def _infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    for role, t in zip(("key", "offset"), types):
        if t.shape != () or t.dtype != dt.int64:
            raise DTypeError(f"the {role} must be a 0-d int64 tensor, got {t}")
    shape, dtype = attrs["shape"], attrs["dtype"]
    if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        raise ShapeError(f"shape must be non-negative integers, got {list(shape)}")
    if dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"random numbers are float32 or float64, got {dtype.name}")
    if attrs["distribution"] not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {attrs['distribution']!r}")
    return TensorType(tuple(int(d) for d in shape), dtype)


def _reference(inputs, attrs: Attrs, out: TensorType) -> np.ndarray:
    key, offset = (int(np.asarray(v).reshape(())) for v in inputs)
    counter = np.int64(offset) + np.arange(out.size, dtype=np.int64)  # wraps as C's uint64 addition would
    values = philox_values(key, counter, attrs["stream"], attrs["distribution"], out.dtype.name)
    return values.reshape(out.shape)


def _lower(args: tuple[E.Expr, ...], node) -> E.Expr:
    """The C helper at counter offset + (linear index): the operands' expressions, then the output index."""
    key, offset, *index = args
    linear: E.Expr | None = None  # row-major: ((i0 * n1 + i1) * n2 + i2) ...
    for i, size in zip(index, node.shape):
        linear = E.cast(i, "int64") if linear is None else linear * size + E.cast(i, "int64")
    linear = E.Const(0, "int64") if linear is None else linear
    fn = f"philox_{node.attrs['distribution']}_{node.dtype.name}"
    return E.call(fn, key, offset + linear, E.Const(int(node.attrs["stream"]), "int64"))


register("philox", OpKind.ELEMENTWISE, MappingType.ONE_TO_MANY, _infer, _reference, 2,
         "random numbers of `shape` from Philox4x32-10 at counters offset + i; operands: 0-d int64 key, "
         "0-d int64 offset; attrs: shape, dtype, distribution (uniform [0, 1) or normal), stream",
         lower=_lower, indexed=True, gradient=NOT_DIFFERENTIABLE)
