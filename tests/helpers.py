"""Shared helpers for the front-end tests: the tolerance table, `assert_close`, input factories.

Tolerance per dtype
-------------------
Expected values are computed in float64 by numpy (or a hand-written loop) from
the inputs *as stored* in the tested dtype (so a float16 input is first rounded
to float16), and compared with `assert_close` at these tolerances:

============  ========  ========  ==============================================
dtype         rtol      atol      why
============  ========  ========  ==============================================
float64       1e-10     1e-12     float64 arithmetic, a few roundings
float32       1e-5      1e-5      ~80 ulps: numpy's float32 transcendentals and
                                  short float32 sums/dots (K <= ~64)
float16       2e-3      2e-3      computed in float32, rounded once (0.5 ulp =
                                  4.9e-4) plus the error of float32 compute
bfloat16      1.6e-2    1.6e-2    computed in float32, rounded once (0.5 ulp =
                                  3.9e-3), with room for one more rounding
(u)int8..64  exact     exact     integer arithmetic is exact (wrapping as C)
bool          exact     exact
============  ========  ========  ==============================================

A composite op (softmax, layer_norm, attention, losses, ...) rounds a 16-bit
result after every primitive, so tests of composites in float16/bfloat16 pass
`factor=COMPOSITE_FACTOR`, which multiplies rtol and atol.

Eager vs tk.jit: a graph run as traced (opt_level=0) by the reference
interpreter must equal eager mode exactly (same numpy references). Optimized
graphs (opt_level >= 1) and compiled code (TK_TEST_BACKEND=c) are compared at
the tolerance above times COMPOSITE_FACTOR.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import dtypes as dt
from tensorkiln import nn
from tensorkiln.kernels.target import cpu_target

TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-5),
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
    "uint8": (0.0, 0.0),
    "int8": (0.0, 0.0),
    "int16": (0.0, 0.0),
    "int32": (0.0, 0.0),
    "int64": (0.0, 0.0),
    "bool": (0.0, 0.0),
}
COMPOSITE_FACTOR = 4.0

# The backend tk.jit runs in these tests (see conftest.py): "interpreter" (default) or "c".
JIT_BACKEND = os.environ.get("TK_TEST_BACKEND", "interpreter")
# Hypothesis tests that set their own max_examples scale it by this (HYPOTHESIS_PROFILE=thorough: 10x).
EXAMPLES_SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 1


def scaled_examples(n: int) -> int:
    """max_examples for a property: n by default, more under the thorough profile."""
    return n * EXAMPLES_SCALE


# Front-end test modules that call tk.jit start with `pytestmark = FRONT_END`.
FRONT_END = [pytest.mark.usefixtures("reference_backend"),
             pytest.mark.filterwarnings("ignore:tensorkiln.*reference interpreter")]

ALL_DTYPES = (tk.bool, tk.uint8, tk.int8, tk.int16, tk.int32, tk.int64, tk.float16, tk.bfloat16, tk.float32,
              tk.float64)
FLOAT_DTYPES = (tk.float16, tk.bfloat16, tk.float32, tk.float64)
INT_DTYPES = (tk.uint8, tk.int8, tk.int16, tk.int32, tk.int64)
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES

# Shapes every elementwise/reduction test runs on: scalars, size-1 and zero-size dimensions.
SHAPES = [(), (1,), (0,), (5,), (2, 3), (1, 4), (3, 1), (2, 0, 3), (2, 1, 3), (1, 1, 1), (2, 3, 4)]


def tolerance(dtype, factor: float = 1.0) -> tuple[float, float]:
    """(rtol, atol) for a dtype, scaled by `factor` for floating dtypes."""
    rtol, atol = TOLERANCES[dt.as_dtype(dtype).name]
    return rtol * factor, atol * factor


def to_numpy(value) -> np.ndarray:
    """A Tensor's values as numpy (bfloat16 widened to float32); arrays and scalars pass through."""
    if isinstance(value, tk.Tensor):
        return value.numpy()
    return np.asarray(value)


def assert_close(actual, expected, dtype=None, *, factor: float = 1.0, rtol: float | None = None,
                 atol: float | None = None, check_dtype: bool = True) -> None:
    """Check a tensor (or array) against expected values at `dtype`'s tolerance.

    `dtype` defaults to the tensor's own dtype; when `actual` is a Tensor and
    `check_dtype` is true, its dtype must equal `dtype`. Shapes must match
    exactly (no broadcasting); NaNs must be in the same places; integers and
    bools must be equal.
    """
    if dtype is None:
        dtype = actual.dtype if isinstance(actual, tk.Tensor) else dt.from_numpy_dtype(np.asarray(actual).dtype)
    dtype = dt.as_dtype(dtype)
    if check_dtype and isinstance(actual, tk.Tensor):
        assert actual.dtype == dtype, f"dtype {actual.dtype} != expected {dtype}"
    got = to_numpy(actual)
    want = np.asarray(to_numpy(expected))
    assert got.shape == want.shape, f"shape {got.shape} != expected {want.shape}"
    if not dtype.is_floating:
        np.testing.assert_array_equal(got, want.astype(got.dtype) if want.dtype != got.dtype else want)
        return
    r, a = tolerance(dtype, factor)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=r if rtol is None else rtol, atol=a if atol is None else atol,
                               equal_nan=True)


def stored(array, dtype) -> np.ndarray:
    """`array`'s values after storing them in `dtype` (rounded to float16/bfloat16, cast to ints), as float64/int64/bool."""
    dtype = dt.as_dtype(dtype)
    values = tk.tensor(np.asarray(array), dtype=dtype).numpy()
    if dtype.is_floating:
        return values.astype(np.float64)
    return values.astype(np.int64) if dtype.is_integer else values.astype(bool)


def random_array(rng: np.random.Generator, shape, dtype, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    """Random values of `dtype` in [low, high) as a numpy array in the dtype's natural numpy type.

    bfloat16 values come back as float32 arrays holding values exactly representable in bfloat16.
    """
    dtype = dt.as_dtype(dtype)
    shape = tuple(shape)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_integer:
        lo = max(int(np.floor(low)), np.iinfo(dtype.storage).min)
        hi = min(int(np.ceil(high)), np.iinfo(dtype.storage).max)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype.storage)
    values = rng.uniform(low, high, size=shape)
    if dtype is tk.bfloat16:
        return stored(values, tk.bfloat16).astype(np.float32)
    return values.astype(dtype.storage)


def noncontiguous(array: np.ndarray, how: str = "transpose") -> np.ndarray:
    """The same values as `array` in a non-contiguous numpy view ('transpose' or 'strided')."""
    array = np.asarray(array)
    if array.ndim == 0:
        return array.copy()
    if how == "transpose":
        view = np.ascontiguousarray(array.T).T
    elif how == "strided":
        big = np.zeros(tuple(2 * d for d in array.shape) or (), dtype=array.dtype)
        view = big[tuple(slice(None, None, 2) for _ in array.shape)] if array.ndim else big
        view[...] = array
    else:
        raise ValueError(how)
    assert np.array_equal(view, array, equal_nan=array.dtype.kind == "f")
    if array.ndim >= 2 and array.size > 1 and min(array.shape) > 1:
        assert not view.flags.c_contiguous
    return view


def make_tensor(rng: np.random.Generator, shape, dtype, low: float = -2.0, high: float = 2.0,
                layout: str = "contiguous"):
    """(tensor, its stored values as float64/int64/bool) for random inputs of `dtype`."""
    array = random_array(rng, shape, dtype, low, high)
    if layout != "contiguous":
        array = noncontiguous(array, layout)
    return tk.tensor(array, dtype=dtype), stored(array, dtype)


def reference_dtype(dtype) -> np.dtype:
    """numpy dtype to compute a float64 expectation in (ints stay ints)."""
    dtype = dt.as_dtype(dtype)
    return np.dtype(np.float64) if dtype.is_floating else dtype.storage


def eager_and_jit(fn, *args, **kwargs):
    """Run `fn` eagerly and through tk.jit; assert the two agree; return the eager result.

    The front-end check runs the traced graph as traced (opt_level=0: no graph
    rewrites) with the reference interpreter (the default in tests): both sides
    run the same numpy references, so they must agree exactly. The default
    pipeline (opt_level=2) rewrites the graph, so it is compared at the dtype's
    tolerance (times COMPOSITE_FACTOR), as is everything with TK_TEST_BACKEND=c.
    """
    eager = fn(*args, **kwargs)
    assert_same_structure(eager, tk.jit(fn, opt_level=0)(*args, **kwargs), exact=JIT_BACKEND != "c")
    assert_same_structure(eager, tk.jit(fn)(*args, **kwargs), exact=False)
    return eager


def assert_same_structure(a, b, exact: bool = True):
    """Two nested results (tensors in tuples/lists/dicts) agree: structure, dtypes, shapes and values."""
    if isinstance(a, tk.Tensor):
        assert isinstance(b, tk.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        if exact:
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        else:
            assert_close(b, a.numpy(), a.dtype, factor=COMPOSITE_FACTOR)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_structure(x, y, exact)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same_structure(a[k], b[k], exact)
    else:
        assert a == b


def random_conv2d(rng: np.random.Generator, seed: int):
    """A Conv2d with randomly drawn groups, channels, kernel, stride and padding (odd counts included);
    returns it with its kernel size. Weights come from `tk.manual_seed(seed)`."""
    groups = int(rng.choice([1, 1, 2]))
    c_in = groups * int(rng.integers(1, 9))
    c_out = groups * int(rng.integers(1, 13))
    kernel, stride = int(rng.choice([1, 3, 5])), int(rng.choice([1, 2]))
    padding = int(rng.integers(0, kernel // 2 + 1))
    tk.manual_seed(seed)
    return nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding, groups=groups), kernel


def ort_int8_reduce_range() -> bool:
    """Whether a test that compares an int8 model with ONNX Runtime should quantize it with 7-bit
    weights (`reduce_range=True`). ONNX Runtime's integer GEMMs are exact only with VNNI: on AVX2
    alone they sum u8 x s8 pairs with vpmaddubsw, whose 16-bit sums saturate, so its answer moves by
    several quanta; 7-bit weights, its advice for such CPUs, saturate no pair sum. tensorkiln's
    integer kernels are exact either way."""
    return cpu_target().int8_dot != "vnni"


def residual_cnn(width: int, classes: int, pool: str = "adaptive"):
    """A small PyTorch CNN in eval mode: a 3x3 stem, a residual 3x3 block, a global mean and a linear
    classifier (quantized models' tests: a residual add, a pool and a GEMM after the convolutions)."""
    import torch

    class ResidualCNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, width, 3, padding=1)
            self.body = torch.nn.Conv2d(width, width, 3, padding=1)
            self.head = torch.nn.Linear(width, classes)

        def forward(self, x):
            x = torch.relu(self.stem(x))
            x = x + torch.relu(self.body(x))
            pooled = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1) if pool == "adaptive" else x.mean((2, 3))
            return self.head(pooled)

    return ResidualCNN().eval()
