"""Tensor creation (tensorkiln/frontend/creation.py): tensor, zeros/ones/full/empty, *_like, arange, linspace, eye, random."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import tensorkiln as tk

from helpers import ALL_DTYPES, assert_close, noncontiguous


@pytest.mark.parametrize("data, dtype, shape", [
    ([1, 2, 3], tk.int64, (3,)),
    ([1.0, 2], tk.float32, (2,)),
    ([[True, False]], tk.bool, (1, 2)),
    (3, tk.int64, ()),
    (2.5, tk.float32, ()),
    (False, tk.bool, ()),
    ([], tk.float32, (0,)),
    ([[], []], tk.float32, (2, 0)),
    ([[1, 2], [3, 4]], tk.int64, (2, 2)),
])
def test_tensor_from_python_data(data, dtype, shape):
    t = tk.tensor(data)
    assert t.dtype is dtype and t.shape == shape
    np.testing.assert_array_equal(t.numpy(), np.asarray(data, dtype=dtype.storage).reshape(shape))


@pytest.mark.parametrize("np_dtype", [np.float16, np.float32, np.float64, np.uint8, np.int8, np.int16, np.int32,
                                      np.int64, np.bool_])
def test_tensor_from_numpy_keeps_dtype(np_dtype):
    a = np.arange(6).reshape(2, 3).astype(np_dtype)
    t = tk.tensor(a)
    assert t.dtype.storage == np.dtype(np_dtype)
    np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("scalar, dtype", [(np.float64(1.5), tk.float64), (np.float16(1.5), tk.float16),
                                           (np.int32(3), tk.int32), (np.int8(-3), tk.int8), (np.uint8(250), tk.uint8),
                                           (np.int16(-300), tk.int16), (np.bool_(True), tk.bool),
                                           (np.float32(2.0), tk.float32)])
def test_tensor_from_numpy_scalar_keeps_its_dtype(scalar, dtype):
    t = tk.tensor(scalar)
    assert t.dtype is dtype and t.shape == () and t.item() == scalar.item()


def test_tensor_copies_but_from_numpy_shares():
    a = np.arange(4.0)
    copied, shared = tk.tensor(a), tk.from_numpy(a)
    a[0] = 100.0
    assert copied.numpy()[0] == 0.0
    assert shared.numpy()[0] == 100.0


@pytest.mark.parametrize("how", ["transpose", "strided"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_tensor_from_noncontiguous_numpy(how, dtype):
    base = (np.arange(24).reshape(4, 6) % 5 - 2).astype(np.float64)
    view = noncontiguous(base, how)
    t = tk.tensor(view, dtype=dtype)
    assert t.shape == (4, 6)
    assert_close(t, tk.tensor(np.ascontiguousarray(base), dtype=dtype).numpy(), dtype)
    # numpy-style slicing views too
    assert_close(tk.tensor(base[::-1, 1::2], dtype=dtype), tk.tensor(base, dtype=dtype).numpy()[::-1, 1::2], dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_tensor_with_dtype(dtype):
    t = tk.tensor([[0, 1], [2, 3]], dtype=dtype)
    assert t.dtype is dtype
    expected = np.array([[0, 1], [2, 3]]) if not dtype.is_bool else np.array([[0, 1], [1, 1]], bool)
    assert_close(t, expected, dtype)


def test_tensor_from_tensor_copies_and_converts():
    x = tk.tensor([1.5, 2.5])
    y = tk.tensor(x)
    assert y is not x and y.dtype is tk.float32
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    z = tk.tensor(x, dtype=tk.int32)
    assert z.dtype is tk.int32 and z.tolist() == [1, 2]
    bf = tk.tensor(x, dtype=tk.bfloat16)
    assert tk.tensor(bf).dtype is tk.bfloat16 and tk.tensor(bf).tolist() == [1.5, 2.5]


def test_tensor_from_list_of_tensors():
    t = tk.tensor([tk.tensor([1.0, 2.0]), tk.tensor([3.0, 4.0])])
    assert t.shape == (2, 2)
    np.testing.assert_array_equal(t.numpy(), [[1, 2], [3, 4]])


def test_tensor_rejects_ragged_and_objects():
    with pytest.raises((TypeError, ValueError)):
        tk.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        tk.tensor(object())
    with pytest.raises(TypeError):
        tk.tensor([1, "a"])


def test_constructor_and_as_tensor():
    t = tk.Tensor([1, 2], dtype=tk.float64)
    assert t.dtype is tk.float64 and t.tolist() == [1.0, 2.0]
    same = tk.as_tensor(t)
    assert same is t
    assert tk.as_tensor(np.ones(2, np.float16)).dtype is tk.float16


@pytest.mark.parametrize("fn, value", [(tk.zeros, 0), (tk.ones, 1), (tk.empty, None)])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_zeros_ones_empty(fn, value, dtype):
    for args in ((2, 3), ((2, 3),), ([2, 3],)):
        t = fn(*args, dtype=dtype)
        assert t.shape == (2, 3) and t.dtype is dtype
        if value is not None:
            assert_close(t, np.full((2, 3), value), dtype)
    assert fn(dtype=dtype).shape == ()
    assert fn(0, 4, dtype=dtype).shape == (0, 4)


def test_default_dtypes():
    assert tk.zeros(2).dtype is tk.float32
    assert tk.ones(2).dtype is tk.float32
    assert tk.full((2,), 7).dtype is tk.int64
    assert tk.full((2,), 7.0).dtype is tk.float32
    assert tk.full((2,), True).dtype is tk.bool
    assert tk.full(3, 1.5).shape == (3,)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_full_and_like(dtype):
    t = tk.full((2, 2), 3, dtype=dtype)
    assert_close(t, np.full((2, 2), 3 if not dtype.is_bool else True), dtype)
    base = tk.zeros(3, 1, dtype=dtype)
    for like, fill in ((tk.zeros_like(base), 0), (tk.ones_like(base), 1), (tk.full_like(base, 2), 2)):
        assert like.shape == (3, 1) and like.dtype is dtype
        assert_close(like, np.full((3, 1), fill if not dtype.is_bool else bool(fill)), dtype)
    assert tk.zeros_like(base, dtype=tk.int8).dtype is tk.int8
    assert tk.full_like(base, 2.5, dtype=tk.float64).numpy()[0, 0] == 2.5


@pytest.mark.parametrize("args, kwargs, expected, dtype", [
    ((5,), {}, np.arange(5), tk.int64),
    ((2, 7), {}, np.arange(2, 7), tk.int64),
    ((0, 10, 3), {}, np.arange(0, 10, 3), tk.int64),
    ((5, 0, -2), {}, np.arange(5, 0, -2), tk.int64),
    ((0, 1, 0.25), {}, np.arange(0, 1, 0.25), tk.float32),
    ((2.5,), {}, np.arange(2.5), tk.float32),
    ((0,), {}, np.arange(0), tk.int64),
    ((4,), {"dtype": tk.float16}, np.arange(4), tk.float16),
    ((3,), {"dtype": tk.bfloat16}, np.arange(3), tk.bfloat16),
])
def test_arange(args, kwargs, expected, dtype):
    t = tk.arange(*args, **kwargs)
    assert t.dtype is dtype
    assert_close(t, expected, dtype)


def test_linspace_and_eye():
    assert_close(tk.linspace(0, 1, 5), np.linspace(0, 1, 5), tk.float32)
    assert_close(tk.linspace(-1, 1, 1, dtype=tk.float64), np.linspace(-1, 1, 1), tk.float64)
    assert tk.linspace(0, 1, 0).shape == (0,)
    assert_close(tk.eye(3), np.eye(3), tk.float32)
    assert_close(tk.eye(2, 4, dtype=tk.int32), np.eye(2, 4), tk.int32)


def test_random_reproducible_with_seed_and_manual_seed():
    a = tk.randn(3, 4, seed=7)
    b = tk.randn(3, 4, seed=7)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    tk.manual_seed(123)
    c = tk.rand(5)
    d = tk.randint(0, 10, (4,))
    tk.manual_seed(123)
    np.testing.assert_array_equal(c.numpy(), tk.rand(5).numpy())
    np.testing.assert_array_equal(d.numpy(), tk.randint(0, 10, (4,)).numpy())


def test_random_ranges_shapes_and_dtypes():
    r = tk.rand(1000, seed=0)
    assert r.dtype is tk.float32 and r.shape == (1000,)
    assert 0.0 <= r.numpy().min() and r.numpy().max() < 1.0
    n = tk.randn(2000, seed=1, dtype=tk.float64)
    assert n.dtype is tk.float64 and abs(n.numpy().mean()) < 0.15 and 0.85 < n.numpy().std() < 1.15
    i = tk.randint(3, 6, size=(50,), seed=2)
    assert i.dtype is tk.int64 and set(i.numpy().tolist()) <= {3, 4, 5}
    j = tk.randint(4, size=(2, 2), seed=3, dtype=tk.int8)
    assert j.dtype is tk.int8 and j.shape == (2, 2) and j.numpy().max() < 4
    assert tk.rand(2, 3, seed=0).shape == (2, 3) and tk.randn((2, 3), seed=0).shape == (2, 3)
    assert tk.rand(2, seed=0, dtype=tk.bfloat16).dtype is tk.bfloat16


@pytest.mark.parametrize("make, value", [(tk.zeros, 0), (tk.ones, 1)])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_zeros_and_ones_allocate_their_dtype_once(make, value, dtype):
    """The result is made in its own dtype: no int64 array of the whole size is converted (3x memory)."""
    shape = (512, 256)
    tracemalloc.start()
    try:
        t = make(*shape, dtype=dtype)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert t.dtype is dtype and t.shape == shape
    np.testing.assert_array_equal(t.numpy().astype(np.float64), np.full(shape, value, dtype=np.float64))
    nbytes = t._value.nbytes
    assert peak < nbytes + 64 * 1024, f"peak {peak} bytes for a {nbytes}-byte tensor"
