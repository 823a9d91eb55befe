"""The Tensor class (tensorkiln/frontend/tensor.py): properties, conversions out of tensorkiln, numpy interop,
PyTorch's and numpy's spellings of the same call, and the functional tk.* aliases."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk

from helpers import ALL_DTYPES, FLOAT_DTYPES, assert_close, make_tensor


# ---- properties ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 4), (1, 2, 3)])
def test_shape_properties(shape):
    t = tk.zeros(shape)
    assert t.shape == shape and isinstance(t.shape, tuple)
    assert t.ndim == len(shape) == t.dim()
    assert t.size() == shape
    assert t.numel() == int(np.prod(shape))
    assert not t.is_traced
    for d in range(len(shape)):
        assert t.size(d) == shape[d] and t.size(d - len(shape)) == shape[d]
    if shape:
        assert len(t) == shape[0]
        assert len(list(t)) == shape[0]
    else:
        with pytest.raises(TypeError):
            len(t)
        with pytest.raises(TypeError):
            iter(t)


def test_size_out_of_range_is_axis_error():
    with pytest.raises(tk.AxisError):
        tk.zeros(2, 3).size(2)
    with pytest.raises(IndexError):  # AxisError is an IndexError too
        tk.zeros(2, 3).size(-3)


def test_iteration_yields_rows():
    t = tk.tensor([[1, 2], [3, 4], [5, 6]])
    rows = list(t)
    assert [r.tolist() for r in rows] == [[1, 2], [3, 4], [5, 6]]
    assert all(r.shape == (2,) for r in rows)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_item_tolist_scalars(dtype):
    t = tk.tensor([[3]], dtype=dtype)
    value = t.item()
    assert value == (True if dtype.is_bool else 3)
    assert isinstance(value, bool if dtype.is_bool else (float if dtype.is_floating else int))
    assert t.tolist() == [[value]]
    assert float(t) == float(value) and int(t) == int(value) and bool(t) is True
    with pytest.raises(ValueError):
        tk.zeros(2, dtype=dtype).item()
    with pytest.raises(ValueError):
        bool(tk.zeros(2, dtype=dtype))


def test_index_protocol_only_for_integer_tensors():
    assert [10, 20, 30][tk.tensor(1)] == 20
    assert list(range(5))[tk.tensor(np.int8(-1))] == 4
    with pytest.raises(TypeError):
        [1, 2][tk.tensor(1.0)]


def test_repr():
    assert repr(tk.tensor([1, 2])) == "tensor([1, 2], dtype=tk.int64)"
    assert "dtype=tk.bfloat16" in repr(tk.tensor([1.5], dtype=tk.bfloat16))
    assert "1.5" in repr(tk.tensor([1.5], dtype=tk.bfloat16))


def test_numpy_returns_storage_values():
    assert tk.tensor([1.0], dtype=tk.float16).numpy().dtype == np.float16
    assert tk.tensor([1.0], dtype=tk.bfloat16).numpy().dtype == np.float32
    assert tk.tensor([1], dtype=tk.int8).numpy().dtype == np.int8
    assert np.asarray(tk.tensor([1.5, 2.5])).dtype == np.float32
    assert np.asarray(tk.tensor([1.5, 2.5]), dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.array(tk.tensor([[1, 2]])), [[1, 2]])


def test_contiguous_clone_detach():
    t = tk.tensor([1.0, 2.0])
    assert t.contiguous() is t and t.detach() is t
    c = t.clone()
    assert c is not t and c.tolist() == t.tolist() and c._value is not t._value


# ---- numpy interop -------------------------------------------------------------------------

def test_numpy_array_on_the_left_defers_to_tensor():
    a = np.arange(6.0).reshape(2, 3)
    t = tk.tensor(np.ones((2, 3)))  # float64
    for result, expected in ((a + t, a + 1), (a - t, a - 1), (a * t, a), (a / t, a), (a ** t, a),
                             (a @ t.T, a @ np.ones((3, 2))), (a > t, a > 1), (a == t, a == 1)):
        assert isinstance(result, tk.Tensor)
        assert_close(result, expected, result.dtype)


def test_numpy_scalars_are_weak_like_python_scalars():
    t = tk.ones(2)  # float32
    for s in (np.float64(2.0), np.int64(2), np.float32(2.0)):
        assert (t * s).dtype is tk.float32
        assert (s * t).dtype is tk.float32
    assert (tk.ones(2, dtype=tk.int8) + np.int64(1)).dtype is tk.int8


def test_python_lists_as_operands():
    t = tk.tensor([1.0, 2.0])
    assert_close(t + [10, 20], [11, 22], tk.float32)
    assert_close([[1], [2]] * t, [[1, 2], [2, 4]], tk.float32)  # list of ints -> int64 tensor, promoted
    assert_close(t @ [1.0, 1.0], 3.0, tk.float32)


# ---- PyTorch and numpy spellings --------------------------------------------------------

@pytest.mark.parametrize("method", ["sum", "mean", "prod", "amax", "amin", "all", "any", "std", "var"])
def test_dim_keepdim_and_axis_keepdims_agree(method, rng):
    x, _ = make_tensor(rng, (3, 4, 2), tk.float64, 0.5, 2.0)
    torch_style = getattr(x, method)(dim=1, keepdim=True)
    numpy_style = getattr(x, method)(axis=1, keepdims=True)
    positional = getattr(x, method)(1, True) if method not in ("var", "std") else getattr(x, method)(1, None, True)
    assert torch_style.shape == numpy_style.shape == positional.shape == (3, 1, 2)
    np.testing.assert_array_equal(torch_style.numpy(), numpy_style.numpy())
    np.testing.assert_array_equal(torch_style.numpy(), positional.numpy())
    tuple_dims = getattr(x, method)(dim=(0, 2))
    assert tuple_dims.shape == (4,)
    np.testing.assert_array_equal(tuple_dims.numpy(), getattr(x, method)(axis=(2, 0)).numpy())
    with pytest.raises(TypeError):
        getattr(x, method)(dim=1, axis=1)
    with pytest.raises(TypeError):
        getattr(x, method)(1, keepdim=True, keepdims=True)


@pytest.mark.parametrize("name, np_fn", [("max", np.max), ("min", np.min)])
def test_max_min_with_dim_returns_values_and_indices(name, np_fn, rng):
    a = rng.integers(0, 4, size=(3, 5)).astype(np.float32)  # ties: the first index wins
    x = tk.tensor(a)
    out = getattr(x, name)(1)
    values, indices = out
    assert out.values is values and out.indices is indices
    assert_close(values, np_fn(a, axis=1), tk.float32)
    assert_close(indices, (np.argmax if name == "max" else np.argmin)(a, axis=1), tk.int64)
    v2, i2 = getattr(x, name)(dim=0, keepdim=True)
    assert v2.shape == i2.shape == (1, 5) and i2.dtype is tk.int64
    v3, i3 = getattr(x, name)(-1)
    np.testing.assert_array_equal(i3.numpy(), indices.numpy())
    # no dim: a 0-d tensor; numpy's axis= spelling gives numpy's result (values only)
    whole = getattr(x, name)()
    assert whole.shape == () and whole.item() == np_fn(a)
    np_style = getattr(x, name)(axis=1)
    assert isinstance(np_style, tk.Tensor)
    assert_close(np_style, np_fn(a, axis=1), tk.float32)
    assert getattr(x, name)(axis=1, keepdims=True).shape == (3, 1)
    # with a tensor or scalar: elementwise maximum/minimum, as torch.max(a, b)
    other = tk.tensor(np.full((3, 5), 1.5, np.float32))
    assert_close(getattr(x, name)(other), (np.maximum if name == "max" else np.minimum)(a, 1.5), tk.float32)


def test_var_std_correction_spellings(rng):
    a = rng.normal(size=(4, 6))
    x = tk.tensor(a)
    assert_close(x.var(), np.var(a, ddof=1), tk.float64)           # PyTorch's default: Bessel
    assert_close(x.var(1), np.var(a, axis=1, ddof=1), tk.float64)
    assert_close(x.var(1, unbiased=False), np.var(a, axis=1), tk.float64)
    assert_close(x.var(dim=1, correction=0), np.var(a, axis=1), tk.float64)
    assert_close(x.var(axis=1, ddof=0), np.var(a, axis=1), tk.float64)
    assert_close(x.var(axis=0, ddof=2, keepdims=True), np.var(a, axis=0, ddof=2, keepdims=True), tk.float64)
    assert_close(x.std(), np.std(a, ddof=1), tk.float64)
    assert_close(x.std(0, correction=0), np.std(a, axis=0), tk.float64)
    assert_close(x.std(axis=(0, 1), ddof=3), np.std(a, ddof=3), tk.float64)
    assert_close(tk.var(x, 1), np.var(a, axis=1, ddof=1), tk.float64)
    with pytest.raises(TypeError):
        x.var(correction=1, ddof=1)
    # too few elements for the correction: nan (PyTorch) rather than an error
    assert np.isnan(tk.tensor([1.0]).var().item())
    assert tk.tensor([1.0]).var(correction=0).item() == 0.0


def test_argmax_argmin_spellings(rng):
    a = rng.integers(0, 3, size=(2, 3, 4))
    x = tk.tensor(a)
    assert x.argmax().item() == np.argmax(a) and x.argmin().item() == np.argmin(a)
    np.testing.assert_array_equal(x.argmax(dim=2).numpy(), np.argmax(a, axis=2))
    np.testing.assert_array_equal(x.argmax(axis=-2, keepdims=True).numpy(), np.argmax(a, axis=-2, keepdims=True))
    np.testing.assert_array_equal(x.argmin(1, True).numpy(), np.argmin(a, axis=1, keepdims=True))


def test_sum_dtype_argument():
    x = tk.tensor([100, 100], dtype=tk.int8)
    assert x.sum().dtype is tk.int64 and x.sum().item() == 200
    assert x.sum(dtype=tk.int8).item() == np.int8(-56)
    assert x.sum(dtype=tk.float32).dtype is tk.float32
    assert tk.tensor([1.5]).mean(dtype=tk.float64).dtype is tk.float64


# ---- tk.* functional aliases ---------------------------------------------------------------

ALIASES = ["abs", "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid", "relu",
           "floor", "ceil", "round", "sign", "reciprocal", "log1p", "square", "isnan", "sum", "prod", "amax",
           "amin", "max", "min", "argmax", "argmin", "std", "all", "any", "softmax", "log_softmax", "gelu",
           "silu", "logical_not", "flatten", "transpose", "squeeze"]


@pytest.mark.parametrize("name", ALIASES)
def test_functional_aliases_match_methods(name):
    a = np.array([[0.5, 1.5, 2.0], [1.0, 0.25, 3.0]])
    via_function = getattr(tk, name)(a)
    via_method = getattr(tk.tensor(a), name)()
    np.testing.assert_array_equal(via_function.numpy(), via_method.numpy())


def test_functional_aliases_with_arguments():
    a = np.arange(6.0).reshape(2, 3)
    assert_close(tk.sum(a, dim=1, keepdim=True), a.sum(1, keepdims=True), tk.float64)
    assert_close(tk.clamp(a, 1, 4), np.clip(a, 1, 4), tk.float64)
    assert_close(tk.clip(a, max=2), np.minimum(a, 2), tk.float64)
    assert_close(tk.permute(a, 1, 0), a.T, tk.float64)
    assert_close(tk.add(a, 1), a + 1, tk.float64)
    assert_close(tk.pow(a, 2), a ** 2, tk.float64)
    assert_close(tk.remainder(a, 4), a % 4, tk.float64)
    assert tk.max(a, 1).indices.tolist() == [2, 2]
    assert_close(tk.mean(a, 0), a.mean(0), tk.float64)
    assert_close(tk.reshape(a, (3, 2)), a.reshape(3, 2), tk.float64)
    assert_close(tk.flip(a, 0), a[::-1], tk.float64)
    assert [p.shape for p in tk.split(a, 2, 1)] == [(2, 2), (2, 1)]
    assert_close(tk.where(a > 2, a, 0.0), np.where(a > 2, a, 0.0), tk.float64)
    assert_close(tk.maximum(a, 2.0), np.maximum(a, 2.0), tk.float64)
    assert_close(tk.minimum(a, tk.tensor(2.0)), np.minimum(a, 2.0), tk.float64)
    assert_close(tk.matmul(a, a.T), a @ a.T, tk.float64)
    for cmp, np_cmp in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                        ("gt", np.greater), ("ge", np.greater_equal)):
        assert_close(getattr(tk, cmp)(a, 2.0), np_cmp(a, 2.0), tk.bool)


def test_functional_aliases_of_movement_and_binary_ops():
    a = np.arange(6.0).reshape(2, 3)
    m = np.array([[True, False, True], [False, True, False]])
    assert_close(tk.unsqueeze(a, 0), a[None], tk.float64)
    assert_close(tk.expand(a[:1], 4, 3), np.broadcast_to(a[:1], (4, 3)), tk.float64)
    assert_close(tk.broadcast_to(a[:, :1], (2, 5)), np.broadcast_to(a[:, :1], (2, 5)), tk.float64)
    assert_close(tk.narrow(a, 1, 1, 2), a[:, 1:3], tk.float64)
    assert [r.tolist() for r in tk.unbind(a, 1)] == a.T.tolist()
    assert_close(tk.repeat(a, 2, 1), np.tile(a, (2, 1)), tk.float64)
    assert_close(tk.gather(a, 1, np.array([[2], [0]])), [[2.0], [3.0]], tk.float64)
    assert_close(tk.index_select(a, 1, np.array([2, 0])), a[:, [2, 0]], tk.float64)
    assert_close(tk.masked_fill(a, m, -1.0), np.where(m, -1.0, a), tk.float64)
    assert_close(tk.logical_and(a, m), np.logical_and(a, m), tk.bool)
    assert_close(tk.logical_or(a, m), np.logical_or(a, m), tk.bool)
    for name, np_fn in (("sub", np.subtract), ("mul", np.multiply), ("div", np.true_divide), ("neg", None)):
        out = getattr(tk, name)(a, 2.0) if np_fn else tk.neg(a)
        assert_close(out, np_fn(a, 2.0) if np_fn else -a, tk.float64)


@pytest.mark.parametrize("name, np_fn", [
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.true_divide), ("pow", np.power),
    ("remainder", np.mod), ("floor_divide", np.floor_divide), ("maximum", np.maximum), ("minimum", np.minimum),
    ("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
    ("ge", np.greater_equal),
])
def test_method_aliases_of_operators(name, np_fn):
    a, b = np.array([[1.0, 2.5, -3.0]]), np.array([[2.0], [-1.5]])
    out = getattr(tk.tensor(a), name)(tk.tensor(b))
    with np.errstate(invalid="ignore"):  # (-3.0) ** -1.5 is nan on both sides
        expected = np_fn(a, b)
    assert_close(out, expected, tk.bool if name in ("eq", "ne", "lt", "le", "gt", "ge") else tk.float64)
    assert_close(getattr(tk.tensor(a), name)(2), np_fn(a, 2), out.dtype)


# ---- methods with PyTorch semantics --------------------------------------------------------

@pytest.mark.parametrize("dtype", [tk.int64, tk.int8, tk.uint8, tk.int16, tk.float32, tk.float16, tk.bfloat16, tk.bool],
                         ids=lambda d: d.name)
def test_masked_fill_keeps_dtype(dtype):
    x = tk.tensor([[1, 0], [3, 4]], dtype=dtype)
    mask = tk.tensor([[True, False], [False, True]])
    out = x.masked_fill(mask, 1)
    assert out.dtype is dtype
    expected = np.where(mask.numpy(), 1, x.numpy().astype(np.float64))
    assert_close(out, expected, dtype)
    # a broadcast mask and a tensor value
    out2 = x.masked_fill(tk.tensor([False, True]), tk.tensor(0))
    assert out2.dtype is dtype
    assert_close(out2, np.where([False, True], 0, x.numpy().astype(np.float64)), dtype)


def test_masked_fill_float_value_into_int_tensor_truncates_like_pytorch():
    out = tk.tensor([1, 2]).masked_fill(tk.tensor([True, False]), 0.5)
    assert out.dtype is tk.int64 and out.tolist() == [0, 2]


def test_masked_fill_minus_inf_for_attention_scores():
    scores = tk.tensor([[1.0, 2.0]], dtype=tk.float16)
    out = scores.masked_fill(tk.tensor([[False, True]]), float("-inf"))
    assert out.dtype is tk.float16 and out.numpy()[0, 1] == -np.inf


@pytest.mark.parametrize("op, np_op", [("logical_and", np.logical_and), ("logical_or", np.logical_or),
                                       ("logical_xor", np.logical_xor)])
@pytest.mark.parametrize("dtype", [tk.bool, tk.uint8, tk.int8, tk.int16, tk.int64, tk.float32, tk.bfloat16],
                         ids=lambda d: d.name)
def test_logical_ops_treat_nonzero_as_true(op, np_op, dtype):
    a = np.array([0, 1, 2, -3, 0, 5])
    b = np.array([0, 0, 4, 1, 7, -2])
    out = getattr(tk.tensor(a, dtype=dtype), op)(tk.tensor(b, dtype=dtype))
    assert out.dtype is tk.bool
    np.testing.assert_array_equal(out.numpy(), np_op(a.astype(bool) if dtype.is_bool else a,
                                                     b.astype(bool) if dtype.is_bool else b))
    assert getattr(tk.tensor(a, dtype=dtype), op)(1).dtype is tk.bool
    np.testing.assert_array_equal(tk.logical_not(tk.tensor(a, dtype=dtype)).numpy(), np.logical_not(a))


def test_bitwise_operators_on_integers_and_bools():
    a, b = np.array([12, 10, -1]), np.array([10, 6, 5])
    ta, tb = tk.tensor(a), tk.tensor(b)
    np.testing.assert_array_equal((ta & tb).numpy(), a & b)
    np.testing.assert_array_equal((ta | tb).numpy(), a | b)
    np.testing.assert_array_equal((ta ^ tb).numpy(), a ^ b)
    p, q = tk.tensor([True, True, False]), tk.tensor([True, False, False])
    np.testing.assert_array_equal((p & q).numpy(), [True, False, False])
    np.testing.assert_array_equal((p | True).numpy(), [True, True, True])
    np.testing.assert_array_equal((~p).numpy(), [False, False, True])
    with pytest.raises(tk.DTypeError):
        ~ta
    with pytest.raises(tk.DTypeError):
        tk.tensor([1.0]) & tk.tensor([1.0])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + (tk.int32, tk.int64), ids=lambda d: d.name)
def test_clamp(dtype, rng):
    x, xv = make_tensor(rng, (4, 5), dtype, -5, 5)
    assert_close(x.clamp(-1, 2), np.clip(xv, -1, 2), dtype)
    assert_close(x.clamp(min=0), np.maximum(xv, 0), dtype)
    assert_close(x.clamp(max=0), np.minimum(xv, 0), dtype)
    assert_close(x.clip(-1, 1), np.clip(xv, -1, 1), dtype)
    lo = tk.tensor(np.linspace(-3, 0, 5), dtype=dtype)
    assert_close(x.clamp(lo, 3), np.clip(xv, lo.numpy().astype(np.float64), 3), dtype)
    assert x.clamp() is x


def test_clamp_with_float_bounds_on_int_tensor_promotes():
    out = tk.tensor([1, 5]).clamp(min=1.5)
    assert out.dtype is tk.float32 and out.tolist() == [1.5, 5.0]


def test_where_method():
    x = tk.tensor([1.0, 2.0, 3.0])
    assert x.where(x > 1.5, 0.0).tolist() == [0.0, 2.0, 3.0]


def test_tensors_hash_by_identity():
    a, b = tk.tensor([1]), tk.tensor([1])
    assert len({a, b}) == 2 and {a: 1}[a] == 1


@pytest.mark.parametrize("name", ["__add__", "add", "sum", "max", "permute", "reshape", "T", "float"])
def test_methods_written_in_other_modules_are_named_as_tensors(name):
    member = vars(tk.Tensor)[name]
    function = member.fget if isinstance(member, property) else member
    assert function.__qualname__.startswith("Tensor.")
    with pytest.raises(TypeError, match=r"Tensor\.sum\(\) got an unexpected keyword"):
        tk.tensor([1.0]).sum(no_such_argument=1)


@pytest.mark.parametrize("shape,offset,dim1,dim2", [((4, 4), 0, 0, 1), ((3, 5), 2, 0, 1), ((5, 3), -2, 0, 1),
                                                     ((2, 3, 4, 3), 1, 3, 1), ((3, 4), 7, 0, 1), ((2, 3, 3), 0, -1, -2)])
def test_diagonal_matches_numpy(shape, offset, dim1, dim2):
    a = np.random.default_rng(0).standard_normal(shape)
    expected = np.diagonal(a, offset, dim1, dim2)
    got = tk.diagonal(tk.tensor(a), offset, dim1, dim2).numpy()
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    compiled = tk.jit(lambda t: tk.diagonal(t, offset, dim1, dim2) * 2.0)
    np.testing.assert_allclose(compiled(a).numpy(), expected * 2.0)
