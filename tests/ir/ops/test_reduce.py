"""Reductions (tensorkiln/ir/ops/reduce.py and Tensor.sum/mean/var/... on top) against numpy.

Every reduction runs over SHAPES with dim None, each single dim (positive and
negative), a tuple of dims, keepdim on and off, every dtype and non-contiguous
inputs. Tolerances: the table in helpers.py.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorkiln as tk

from helpers import ALL_DTYPES, SHAPES, assert_close, make_tensor


def _mean(v, axis, keepdims):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "Mean of empty slice"
        return np.mean(v, axis=axis, keepdims=keepdims)


def _var(ddof):
    def fn(v, axis, keepdims):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            n = v.size if axis is None else int(np.prod([v.shape[a] for a in np.atleast_1d(axis)]))
            if n - ddof <= 0:  # PyTorch: nan (inf/nan from the division), not an error
                s = np.sum((v - np.mean(v, axis=axis, keepdims=True)) ** 2, axis=axis, keepdims=keepdims)
                return s / 0.0
            return np.var(v, axis=axis, ddof=ddof, keepdims=keepdims)
    return fn


# name -> (numpy reference on float64/int64 values, result dtype rule, kwargs)
#   result dtype rule: "same", "acc" (ints/bools accumulate in int64), "float" (ints -> float32),
#   "int64", "bool"
REDUCTIONS = {
    "sum": (np.sum, "acc", {}),
    "prod": (np.prod, "acc", {}),
    "mean": (_mean, "float", {}),
    "var": (_var(1), "float", {}),
    "var_c0": (_var(0), "float", {"correction": 0}),
    "std": (lambda v, axis, keepdims: np.sqrt(_var(1)(v, axis, keepdims)), "float", {}),
    "amax": (np.max, "same", {}),
    "amin": (np.min, "same", {}),
    "all": (np.all, "bool", {}),
    "any": (np.any, "bool", {}),
}


def _result_dtype(rule, dtype):
    if rule == "same":
        return dtype
    if rule == "acc":
        return dtype if dtype.is_floating else tk.int64
    if rule == "float":
        return dtype if dtype.is_floating else tk.float32
    return {"int64": tk.int64, "bool": tk.bool}[rule]


def _dim_choices(ndim):
    dims = [None]
    for d in range(ndim):
        dims += [d, d - ndim]
    if ndim >= 2:
        dims += [(0, ndim - 1), (-1, 0)]
    if ndim == 3:
        dims += [(0, 1, 2)]
    if ndim == 0:
        dims += [0, -1]  # PyTorch accepts dim 0 / -1 on a 0-d tensor
    return dims


def _np_axis(dim, ndim):
    if dim is None or ndim == 0:
        return None if ndim else ()
    return tuple(d % ndim for d in (dim if isinstance(dim, tuple) else (dim,)))


@pytest.mark.parametrize("layout", ["contiguous", "transpose"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction(name, dtype, layout, rng):
    reference, rule, kwargs = REDUCTIONS[name]
    method = name.split("_")[0]
    low, high = (0.5, 1.5) if name == "prod" else (-3, 3)
    if name in ("sum", "amax", "amin") and dtype.is_integer and dtype.bits <= 32:
        info = np.iinfo(dtype.storage)  # the type's full range: sums accumulate in int64 and cannot overflow
        low, high = int(info.min), int(info.max)
    for shape in SHAPES:
        x, values = make_tensor(rng, shape, dtype, low, high, layout)
        for dim in _dim_choices(len(shape)):
            axis = _np_axis(dim, len(shape))
            for keepdim in (False, True):
                reduced = [a for a in (range(len(shape)) if axis is None else axis)]
                empty = any(shape[a] == 0 for a in reduced)
                if name in ("amax", "amin") and empty:
                    with pytest.raises(tk.ShapeError, match="empty axis"):
                        getattr(x, method)(dim, keepdim)
                    continue
                if method in ("var", "std"):
                    out = getattr(x, method)(dim, None, keepdim, **kwargs)
                else:
                    out = getattr(x, method)(dim, keepdim, **kwargs)
                v = values.astype(np.float64) if rule == "float" else values
                if rule == "acc" and not dtype.is_floating:
                    v = values.astype(np.int64)
                expected = np.asarray(reference(v, axis=axis, keepdims=keepdim))
                assert_close(out, expected, _result_dtype(rule, dtype),
                             factor=4.0 if name in ("var", "var_c0", "std") else 1.0)


@pytest.mark.parametrize("name, np_fn", [("argmax", np.argmax), ("argmin", np.argmin)])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_argmax_argmin(name, np_fn, dtype, rng):
    for shape in SHAPES:
        x, values = make_tensor(rng, shape, dtype, -2, 2, "transpose")  # few distinct values: ties
        values = values if dtype.is_bool else values.astype(np.float64)
        for dim in [None] + list(range(-len(shape), len(shape))):
            for keepdim in (False, True):
                size = values.size if dim is None else shape[dim]
                if size == 0:
                    with pytest.raises(tk.ShapeError, match="empty axis"):
                        getattr(x, name)(dim, keepdim)
                    continue
                out = getattr(x, name)(dim, keepdim)
                if dim is None:
                    expected = np.asarray(np_fn(values))  # the index into the flattened tensor
                    if keepdim:  # PyTorch's and numpy's shapes differ here; only the value is checked
                        out = out.reshape(())
                else:
                    expected = np_fn(values, axis=dim, keepdims=keepdim)
                assert_close(out, expected, tk.int64)


def test_argmax_ties_take_first_index():
    x = tk.tensor([[1, 3, 3, 0], [2, 2, 2, 2]])
    assert x.argmax(1).tolist() == [1, 0]
    assert x.argmin(1).tolist() == [3, 0]
    assert x.max(1).indices.tolist() == [1, 0]


def test_nan_propagates_through_max_and_argmax_finds_it():
    x = tk.tensor([1.0, np.nan, 3.0])
    assert np.isnan(x.amax().item()) and np.isnan(x.max().item())
    assert x.argmax().item() == 1 and x.argmin().item() == 1  # numpy's and PyTorch's choice


@pytest.mark.parametrize("dtype", [tk.uint8, tk.int8, tk.int16, tk.int32, tk.int64, tk.bool], ids=lambda d: d.name)
def test_integer_sums_accumulate_in_int64(dtype):
    value = True if dtype.is_bool else (200 if dtype.is_unsigned else 100)
    x = tk.full((300,), value, dtype=dtype)
    s = x.sum()
    assert s.dtype is tk.int64  # as torch: a uint8 sum is int64, never wrapped to 8 bits
    assert s.item() == 300 * int(value)
    assert x.prod().dtype is tk.int64


def test_empty_reductions_give_identities():
    z = tk.zeros(0, 3)
    assert z.sum().item() == 0.0 and z.prod().item() == 1.0
    assert z.sum(0).tolist() == [0.0, 0.0, 0.0]
    assert z.prod(0, keepdim=True).shape == (1, 3)
    assert np.isnan(z.mean().item())
    assert z.amax(1).shape == (0,)  # reducing a non-empty axis of an empty tensor is fine
    assert z.all().item() is True and z.any().item() is False
    assert z.all(0).tolist() == [True, True, True] and z.any(1).shape == (0,)
    assert z.any(0, keepdim=True).shape == (1, 3)


def test_float16_sum_accumulates_in_float32():
    x = tk.full((4096,), 1.0, dtype=tk.float16)
    assert x.sum().item() == 4096.0  # a float16 accumulator would stop at 2048
    assert tk.full((3000,), 1.0, dtype=tk.bfloat16).mean().item() == 1.0


def test_reduction_dim_errors():
    x = tk.zeros(2, 3)
    with pytest.raises(tk.AxisError, match=r"sum.*dimension 2 is out of range"):
        x.sum(2)
    with pytest.raises(tk.AxisError, match="repeated"):
        x.sum((0, -2))
    with pytest.raises(tk.AxisError):
        x.argmax(-3)
    with pytest.raises(TypeError):
        x.sum(1.5)
    with pytest.raises(tk.DTypeError, match="sum booleans"):
        from tensorkiln.frontend.tensor import apply
        apply("reduce_sum", [tk.tensor([True])], axes=(0,), keepdims=False)


@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4),
       name=st.sampled_from(["sum", "mean", "amax", "amin", "prod", "var"]),
       dtype=st.sampled_from([tk.float32, tk.float64, tk.int32, tk.float16]), keepdim=st.booleans())
def test_reduction_random_dims_property(data, shape, name, dtype, keepdim):
    ndim = len(shape)
    dims = data.draw(st.lists(st.integers(-ndim, ndim - 1), min_size=1, max_size=ndim,
                              unique_by=lambda d: d % ndim))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    x, values = make_tensor(rng, shape, dtype, 0.5, 1.5)
    reference, rule, _ = REDUCTIONS[name]
    axis = tuple(sorted(d % ndim for d in dims))
    out = getattr(x, name)(tuple(dims), keepdim) if name != "var" else x.var(tuple(dims), None, keepdim)
    v = values.astype(np.float64) if (rule == "float" or dtype.is_floating) else values.astype(np.int64)
    expected = reference(v, axis=axis, keepdims=keepdim)
    assert_close(out, np.asarray(expected), _result_dtype(rule, dtype), factor=4.0)
