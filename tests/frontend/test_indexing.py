"""Indexing (tensorkiln/frontend/indexing.py) compared with numpy's result exactly: shape, values and errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorkiln as tk

from helpers import FRONT_END, ALL_DTYPES, make_tensor

pytestmark = FRONT_END

A = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)


def check(array: np.ndarray, key, dtype=tk.int64, as_tensor_key: bool = False):
    """x[key] must equal numpy's array[key] exactly (the key may hold numpy arrays)."""
    x = tk.tensor(array, dtype=dtype)
    expected = tk.tensor(array, dtype=dtype).numpy()[key]
    tk_key = key
    if as_tensor_key:
        items = key if isinstance(key, tuple) else (key,)
        tk_key = tuple(tk.tensor(k) if isinstance(k, np.ndarray) else k for k in items)
    got = x[tk_key]
    assert isinstance(got, tk.Tensor)
    assert got.dtype is dtype
    assert got.shape == expected.shape, (key, got.shape, expected.shape)
    np.testing.assert_array_equal(got.numpy(), expected)
    return got


# ---- basic indexing ----------------------------------------------------------------------------

@pytest.mark.parametrize("key", [
    0, -1, 1, (1, 2), (-1, -1, -1, -1), (0, slice(None), 2),
    slice(None), slice(1, None), slice(None, -1), slice(None, None, -1), slice(None, None, 2),
    (slice(None), slice(None, None, -2)), (slice(3, 0, -1),), (slice(None), slice(-1, -4, -1)),
    (slice(10, 20),), (slice(-100, 100),), (slice(1, 1),), (slice(None), slice(2, 0)),
    None, (None, 0), (0, None, 1), (None, None), (slice(None), None, Ellipsis, None),
    Ellipsis, (Ellipsis, 0), (0, Ellipsis), (0, Ellipsis, 0), (Ellipsis, None), (1, Ellipsis, slice(None, None, -1)),
    (Ellipsis, 1, 2, 3, 4), (0, 1, 2, 3), (), (np.int64(1), np.int32(-2)),
])
def test_basic_indexing(key):
    check(A, key)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_basic_indexing_every_dtype(dtype, rng):
    x, v = make_tensor(rng, (3, 4), dtype, -3, 3, "transpose")
    for key in [(1,), (slice(None, None, -1), 2), (None, Ellipsis, slice(1, 3)), (-1, -1)]:
        out = x[key]
        assert out.dtype is dtype
        np.testing.assert_array_equal(out.numpy().astype(np.float64), v[key].astype(np.float64))


def test_scalar_and_zero_size_tensors():
    s = tk.tensor(5)
    assert s[()].item() == 5 and s[None].shape == (1,) and s[...].shape == ()
    e = tk.zeros(0, 3)
    assert e[:, 1].shape == (0,) and e[::-1].shape == (0, 3) and e[..., None].shape == (0, 3, 1)
    check(np.zeros((0, 3)), (slice(None, None, -1), slice(None, None, -1)))
    check(np.zeros((1,)), slice(-2, None, -1))  # a reversed slice that starts before the beginning
    check(np.zeros((3,)), slice(-5, None, -1))


@given(data=st.data(), shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
def test_random_basic_indices(data, shape):
    key = data.draw(hnp.basic_indices(shape, min_dims=0, allow_newaxis=True, allow_ellipsis=True))
    check(np.arange(int(np.prod(shape))).reshape(shape), key)


@pytest.mark.parametrize("key, message", [
    (3, "index 3 is out of bounds for dimension 0 with size 2"),
    (-3, "index -3 is out of bounds for dimension 0 with size 2"),
    ((0, 5), "index 5 is out of bounds for dimension 1 with size 3"),
    ((0, 0, 0, 0, 0), "too many indices for tensor of dimension 4"),
    ((Ellipsis, Ellipsis), "single ellipsis"),
    (([0, 2],), "index 2 is out of bounds"),
    ((0, [0, -4]), "index -4 is out of bounds"),
    ((slice(None), [[3]]), "index 3 is out of bounds"),
    (np.array([1.0]), "must be integer or bool"),
    ((0, 0, 0, 0, None, 0), "too many indices"),
])
def test_out_of_range_raises_index_error_like_numpy(key, message):
    x = tk.tensor(A)
    with pytest.raises(IndexError, match=message):
        x[key]
    if not (isinstance(key, np.ndarray) and key.dtype.kind == "f"):
        with pytest.raises(IndexError):
            A[key]


def test_zero_slice_step_is_an_error():
    with pytest.raises(ValueError, match="step"):
        tk.tensor(A)[::0]


# ---- advanced (integer array) indexing --------------------------------------------------------

I01 = np.array([0, 1])
I21 = np.array([2, -1, 0])
J = np.array([[1, 0], [2, 2]])
I02 = np.array([2, -1])

ADVANCED_KEYS = [
    # one array
    I01, (slice(None), I21), (Ellipsis, I21), (slice(None), slice(None), J), (None, I01), (I01, None),
    np.array([], dtype=np.int64), (slice(None), np.array(1)), (slice(None), J, slice(1, 3)),
    # several arrays, adjacent: the broadcast dims replace them in place
    (I01, I01), (slice(None), I21, I21), (slice(None), J, np.array([0, 3])), (Ellipsis, I21, I21),
    (slice(None), slice(None), J, J), (slice(None), I21[:, None], np.array([0, 1, 3])),
    # several arrays, separated: the broadcast dims go first
    (I01, slice(None), I02), (I01, slice(None), slice(None), np.array([4, 0])), (J % 2, 0, slice(None), J),
    (I01, None, I01), (slice(None), I21, None, I21), (I01[:, None], slice(1, 3), np.array([0, 1, 2, 3])),
    # arrays mixed with ints (an int next to arrays is a 0-d array)
    (0, I21), (I01, 1), (1, slice(None), I21), (I01, 2, slice(None), 0), (0, slice(None), 0, I01),
    (-1, I21, -2), (slice(None, None, -1), I21, 1, slice(None, None, 2)),
    # lists, negative indices, repeated indices
    ([1, 1, 0],), ([[0], [1]], [0, 2]), (slice(None), [-1, -2, -3, 0]), ([0, 1], [2, 0], [3, 3], [4, 0]),
]


@pytest.mark.parametrize("key", ADVANCED_KEYS, ids=lambda k: repr(k).replace("\n", "")[:60])
def test_advanced_indexing_matches_numpy(key):
    check(A, key)
    if any(isinstance(k, np.ndarray) for k in (key if isinstance(key, tuple) else (key,))):
        check(A, key, as_tensor_key=True)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_advanced_indexing_every_dtype(dtype, rng):
    x, v = make_tensor(rng, (3, 4, 2), dtype, -3, 3, "strided")
    for key in [(I21,), (I01, slice(None), I01), (slice(None), I21, 1)]:
        out = x[key]
        assert out.dtype is dtype
        np.testing.assert_array_equal(out.numpy().astype(np.float64), v[key].astype(np.float64))


@pytest.mark.parametrize("index_dtype", [tk.uint8, tk.int8, tk.int16, tk.int32, tk.int64], ids=lambda d: d.name)
def test_narrow_index_dtypes_on_long_axes(index_dtype):
    a = np.arange(300 * 2).reshape(300, 2)
    x = tk.tensor(a)
    index = np.array([255, 5, 128, 0]) if index_dtype.is_unsigned else np.array([-1, 5, -128, 127])
    for key in [(index,), (index, 1), (index, np.array([0, 1, 1, 0]))]:
        tk_key = tuple(tk.tensor(k, dtype=index_dtype) if isinstance(k, np.ndarray) else k for k in key)
        np.testing.assert_array_equal(x[tk_key].numpy(), a[key])
    np.testing.assert_array_equal(x.index_select(0, tk.tensor(index, dtype=index_dtype)).numpy(), a[index])
    np.testing.assert_array_equal(x.gather(0, tk.tensor(index.reshape(4, 1), dtype=index_dtype)).numpy(),
                                  a[index, :1])


def test_index_arrays_that_do_not_broadcast():
    with pytest.raises(tk.ShapeError, match="could not be broadcast"):
        tk.tensor(A)[np.array([0, 1]), np.array([0, 1, 2])]


@st.composite
def advanced_keys(draw, shape):
    """A key for `shape` mixing ints, slices, None, Ellipsis and integer arrays of broadcastable shapes."""
    ndim = len(shape)
    index_shape = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    key, ellipsis_used, dim = [], False, 0
    while dim < ndim:
        kind = draw(st.sampled_from(["array", "array", "int", "slice", "none", "ellipsis"]))
        size = shape[dim]
        if kind == "array" and size:
            sub = index_shape[draw(st.integers(0, len(index_shape))):]  # broadcasts with index_shape
            key.append(draw(hnp.arrays(np.int64, sub, elements=st.integers(-size, size - 1))))
            dim += 1
        elif kind == "int" and size:
            key.append(draw(st.integers(-size, size - 1)))
            dim += 1
        elif kind == "slice":
            key.append(slice(draw(st.none() | st.integers(-4, 4)), draw(st.none() | st.integers(-4, 4)),
                             draw(st.sampled_from([None, 1, 2, -1, -2]))))
            dim += 1
        elif kind == "none":
            key.append(None)
        elif kind == "ellipsis" and not ellipsis_used:
            ellipsis_used = True
            skip = draw(st.integers(0, ndim - dim))
            key.append(Ellipsis)
            dim += skip
        else:
            key.append(slice(None))
            dim += 1
    return tuple(key[:draw(st.integers(0, len(key)))]) if draw(st.booleans()) else tuple(key)


@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
def test_random_advanced_indices(data, shape):
    key = data.draw(advanced_keys(shape))
    array = np.arange(int(np.prod(shape))).reshape(shape)
    try:
        expected = array[key]
    except IndexError:  # e.g. an Ellipsis that consumed too much in a truncated key
        with pytest.raises(IndexError):
            tk.tensor(array)[key]
        return
    got = tk.tensor(array)[key]
    assert got.shape == expected.shape, key
    np.testing.assert_array_equal(got.numpy(), expected)


# ---- boolean masks (eager only) ------------------------------------------------------------------

def test_boolean_masks(rng):
    m1 = np.array([False, True])
    m2 = np.array([[True, False, True], [False, False, True]])
    m3 = rng.random((3, 4)) < 0.5
    for key in [m1, (m1,), (slice(None), rng.random(3) < 0.5), m2, (m2, 1), (Ellipsis, rng.random(5) < 0.5),
                (0, m3), (slice(None), m3), (m1, slice(None), I21), (m2, slice(1, 3), np.array([0, 4, 1])),
                np.zeros((2, 3, 4, 5), bool), np.ones((2, 3, 4, 5), bool), (None, m2)]:
        check(A, key)
        check(A, key, as_tensor_key=True)
    x = tk.tensor(A)
    np.testing.assert_array_equal(x[x > 100].numpy(), A[A > 100])
    np.testing.assert_array_equal(x[[True, False]].numpy(), A[[True, False]])


def test_zero_dim_boolean_index():
    for key in [True, False, (True, 1), (False, Ellipsis, 1), (None, True), (True, I01), (slice(None), True, I21)]:
        check(A, key)
    check(A, np.True_)


def test_boolean_mask_shape_mismatch_raises_index_error():
    x = tk.tensor(A)
    with pytest.raises(IndexError, match="boolean index did not match.*dimension 0.*size of dimension is 2"):
        x[np.array([True, False, True])]
    with pytest.raises(IndexError, match="dimension 1"):
        x[:, np.ones((4, 4), bool)]
    with pytest.raises(IndexError):
        A[:, np.ones((4, 4), bool)]


def test_boolean_mask_cannot_be_traced():
    @tk.jit
    def f(x):
        return x[x > 0]
    with pytest.raises(tk.TraceError, match="boolean mask"):
        f(tk.tensor([1.0, -1.0]))


# ---- traced indexing ----------------------------------------------------------------------------

@pytest.mark.parametrize("key", [(1, slice(None, None, -1)), (Ellipsis, None, 2), (I01, slice(None), I02),
                                 (slice(None), I21, 0), (0, I21)], ids=repr)
def test_traced_indexing_matches_eager(key):
    @tk.jit
    def f(x):
        return x[key]
    x = tk.tensor(A)
    np.testing.assert_array_equal(f(x).numpy(), A[key])


def test_traced_index_tensor_as_input():
    @tk.jit
    def f(x, i):
        return x[:, i]
    out = f(tk.tensor(A), tk.tensor(np.array([2, -1])))
    np.testing.assert_array_equal(out.numpy(), A[:, [2, -1]])


def test_an_empty_ellipsis_still_separates_advanced_indices():
    """numpy: `...` standing for no axis between index arrays (ints count as arrays) puts their dims first."""
    b = np.arange(6).reshape(1, 2, 3, 1)
    for key in [(slice(None), np.array([0, 1]), np.array([2, 0]), Ellipsis, 0),
                (slice(None), np.array([0, 1]), np.array([2, 0]), 0),
                (slice(None), np.array([1]), Ellipsis, np.array([0, 2]), 0)]:
        got = tk.tensor(b)[key]
        assert got.shape == b[key].shape, key
        np.testing.assert_array_equal(got.numpy(), b[key])
