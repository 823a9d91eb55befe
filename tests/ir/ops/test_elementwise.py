"""Elementwise ops (tensorkiln/ir/ops/elementwise.py and the Tensor methods on top) against numpy/scipy.

Every op runs over SHAPES (scalars, size-1 and zero-size dimensions), contiguous
and non-contiguous numpy inputs, and every dtype; dtypes an op does not accept
must raise DTypeError. Tolerances: the table in helpers.py.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorkiln as tk
from tensorkiln.ir.ops import REGISTRY

from helpers import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, SHAPES, assert_close, make_tensor, stored

LAYOUTS = ["contiguous", "transpose", "strided"]


def _halves(rng, shape):
    return rng.integers(-9, 10, size=shape) / 2.0


# name -> (float64 reference, accepted categories: "float" (ints and bools computed in float32),
#          "numeric" (ints and floats, bool rejected), "rounding" (ints returned unchanged), "any"),
#          input range
UNARY = {
    "neg": (np.negative, "numeric", (-3, 3)),
    "__neg__": (np.negative, "numeric", (-3, 3)),
    "abs": (np.abs, "numeric", (-3, 3)),
    "__abs__": (np.abs, "numeric", (-3, 3)),
    "sign": (np.sign, "numeric", (-3, 3)),
    "relu": (lambda v: np.maximum(v, 0), "numeric", (-3, 3)),
    "square": (np.square, "numeric", (-3, 3)),
    "exp": (np.exp, "float", (-3, 3)),
    "log": (np.log, "float", (0.05, 4)),
    "log1p": (np.log1p, "float", (-0.9, 3)),
    "sqrt": (np.sqrt, "float", (0, 4)),
    "rsqrt": (lambda v: 1 / np.sqrt(v), "float", (0.05, 4)),
    "reciprocal": (np.reciprocal, "float", (0.25, 4)),
    "sin": (np.sin, "float", (-4, 4)),
    "cos": (np.cos, "float", (-4, 4)),
    "tanh": (np.tanh, "float", (-3, 3)),
    "erf": (scipy.special.erf, "float", (-3, 3)),
    "sigmoid": (lambda v: 1 / (1 + np.exp(-v)), "float", (-6, 6)),
    "floor": (np.floor, "rounding", (-4, 4)),
    "ceil": (np.ceil, "rounding", (-4, 4)),
    "round": (np.round, "rounding", None),  # halves: ties go to even
    "trunc": (np.trunc, "rounding", (-4, 4)),
    "tan": (np.tan, "float", (-1.4, 1.4)),
    "sinh": (np.sinh, "float", (-3, 3)),
    "cosh": (np.cosh, "float", (-3, 3)),
    "asin": (np.arcsin, "float", (-0.95, 0.95)),
    "acos": (np.arccos, "float", (-0.95, 0.95)),
    "atan": (np.arctan, "float", (-4, 4)),
    "log2": (np.log2, "float", (0.05, 4)),
    "log10": (np.log10, "float", (0.05, 4)),
    "asinh": (np.arcsinh, "float", (-4, 4)),
    "acosh": (np.arccosh, "float", (1, 4)),
    "atanh": (np.arctanh, "float", (-0.95, 0.95)),
    "erfc": (scipy.special.erfc, "float", (-3, 3)),
    "exp2": (np.exp2, "float", (-3, 3)),
    "lgamma": (scipy.special.gammaln, "float", (0.1, 5)),
    "i0": (scipy.special.i0, "float", (-3, 3)),
    "digamma": (scipy.special.digamma, "float", (0.5, 5)),
    "erfinv": (scipy.special.erfinv, "float", (-0.9, 0.9)),
    "isnan": (np.isnan, "any", (-3, 3)),
    "isinf": (np.isinf, "any", (-3, 3)),
    "logical_not": (np.logical_not, "any", (-3, 3)),
}


def test_every_one_operand_primitive_is_tested_here():
    methods = {op.method for op in REGISTRY.values() if op.method and op.arity == 1}
    assert methods <= set(UNARY), f"add an independent reference for {sorted(methods - set(UNARY))}"


def test_references_are_sampled_inside_each_primitives_domain():
    for op in REGISTRY.values():
        if op.method in UNARY and UNARY[op.method][2] is not None and op.domain[0] is not None:
            assert UNARY[op.method][2][0] >= op.domain[0], op.name


def _unary_case(rng, name, shape, dtype, layout):
    _, _, span = UNARY[name]
    if span is None:
        array = _halves(rng, shape)
        x = tk.tensor(array if layout == "contiguous" else _layout(array, layout), dtype=dtype)
        return x, stored(array, dtype)
    low, high = span
    if name == "reciprocal" and not dtype.is_unsigned:  # both signs, away from zero
        x, values = make_tensor(rng, shape, dtype, low, high, layout)
        flip = np.where(rng.random(shape) < 0.5, -1, 1)
        return x * tk.tensor(flip, dtype=dtype if not dtype.is_bool else tk.int64), values * flip
    return make_tensor(rng, shape, dtype, low, high, layout)


def _layout(array, layout):
    from helpers import noncontiguous
    return noncontiguous(array, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype, layout, rng):
    reference, category, _ = UNARY[name]
    for shape in SHAPES:
        x, values = _unary_case(rng, name, shape, dtype, layout)
        if category == "numeric" and dtype.is_bool:
            with pytest.raises(tk.DTypeError, match=r"got bool"):
                getattr(x, name)()
            continue
        out = getattr(x, name)()
        if category == "any":
            expected_dtype = tk.bool
        elif category == "float" and not dtype.is_floating:
            expected_dtype = tk.float32
        else:
            expected_dtype = dtype
        with np.errstate(all="ignore"):
            expected = reference(values.astype(np.float64) if not dtype.is_bool else values.astype(np.float64))
        if category == "rounding" and not dtype.is_floating:
            expected = values
        assert out.shape == shape
        assert_close(out, expected, expected_dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_unary_special_values(dtype):
    x = tk.tensor([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=dtype)
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
    with np.errstate(all="ignore"):
        for name in ("exp", "log", "sqrt", "tanh", "sigmoid", "abs", "neg", "relu", "floor", "erf", "log1p",
                     "reciprocal", "isnan"):
            ref = UNARY[name][0]
            expected = ref(v)
            assert_close(getattr(x, name)(), expected, tk.bool if name == "isnan" else dtype)


def test_sigmoid_does_not_overflow():
    x = tk.tensor([-1000.0, -88.0, 0.0, 88.0, 1000.0])
    with np.errstate(all="raise"):
        out = x.sigmoid().numpy()
    np.testing.assert_allclose(out, [0.0, 1 / (1 + np.exp(88.0)), 0.5, 1 / (1 + np.exp(-88.0)), 1.0], rtol=1e-6)


def test_log1p_is_accurate_for_tiny_values():
    for dtype, tiny in ((tk.float32, 1e-8), (tk.float64, 1e-17), (tk.float16, 1e-4), (tk.bfloat16, 1e-4)):
        x = tk.tensor([tiny, -tiny], dtype=dtype)
        assert_close(x.log1p(), np.log1p(stored([tiny, -tiny], dtype)), dtype)


def test_round_is_half_to_even():
    x = tk.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997])
    assert x.round().tolist() == [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 0.0]


# ---- binary ops --------------------------------------------------------------------------

BROADCAST_PAIRS = [((), ()), ((3,), ()), ((), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((0, 3), (1, 3)),
                   ((2, 0, 1), (3,)), ((4, 1, 3), (2, 1)), ((1,), (5,)), ((2, 3), (2, 3)), ((1, 1), (1,))]

# name -> (numpy reference, accepted categories ("numeric", "any", "float-result", "intbool"),
#          operand-value kind)
BINARY = {
    "__add__": (np.add, "numeric", "any"),
    "__sub__": (np.subtract, "numeric", "any"),
    "__mul__": (np.multiply, "numeric", "any"),
    "__truediv__": (np.true_divide, "float-result", "nonzero"),
    "__floordiv__": (np.floor_divide, "numeric", "exact-nonzero"),
    "__mod__": (np.mod, "numeric", "exact-nonzero"),
    "fmod": (np.fmod, "numeric", "exact-nonzero"),
    "atan2": (np.arctan2, "float-result", "nonzero"),
    "hypot": (np.hypot, "float-result", "nonzero"),
    "__pow__": (np.power, "numeric", "pow"),
    "maximum": (np.maximum, "any", "any"),
    "minimum": (np.minimum, "any", "any"),
    "__eq__": (np.equal, "compare", "small"),
    "__ne__": (np.not_equal, "compare", "small"),
    "__lt__": (np.less, "compare", "small"),
    "__le__": (np.less_equal, "compare", "small"),
    "__gt__": (np.greater, "compare", "small"),
    "__ge__": (np.greater_equal, "compare", "small"),
    "__and__": (np.bitwise_and, "intbool", "any"),
    "__or__": (np.bitwise_or, "intbool", "any"),
    "__xor__": (np.bitwise_xor, "intbool", "any"),
}


def _full_range(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype.storage)
    return int(info.min), int(info.max)


def _binary_operands(rng, kind, shape_a, shape_b, dtype, layout):
    if kind in ("any",):
        low, high = _full_range(dtype) if dtype.is_integer else (-3, 3)  # integers wrap as numpy's do
        return make_tensor(rng, shape_a, dtype, low, high, layout) + make_tensor(rng, shape_b, dtype, low, high)
    if kind == "small":  # many ties for comparisons
        a = rng.integers(-2, 3, size=shape_a) / (2 if dtype.is_floating else 1)
        b = rng.integers(-2, 3, size=shape_b) / (2 if dtype.is_floating else 1)
    elif kind == "nonzero":
        a = rng.uniform(-3, 3, size=shape_a)
        b = rng.uniform(0.5, 3, size=shape_b) * np.where(rng.random(shape_b) < 0.5, -1, 1)
    elif kind == "exact-nonzero":  # integer-valued floats: floor division and remainder are exact
        a = rng.integers(-9, 10, size=shape_a).astype(np.float64)
        b = rng.integers(1, 4, size=shape_b) * np.where(rng.random(shape_b) < 0.5, -1, 1)
    else:  # pow
        if dtype.is_floating:
            a, b = rng.uniform(0.5, 2, size=shape_a), rng.uniform(-2, 2, size=shape_b)
        else:
            a, b = rng.integers(-3, 4, size=shape_a), rng.integers(0, 4, size=shape_b)
    if dtype.is_bool:
        a, b = a != 0, b != 0
    a_t = tk.tensor(a if layout == "contiguous" else _layout(np.asarray(a), layout), dtype=dtype)
    return a_t, stored(a, dtype), tk.tensor(b, dtype=dtype), stored(b, dtype)


@pytest.mark.parametrize("layout", ["contiguous", "transpose"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, dtype, layout, rng):
    reference, category, kind = BINARY[name]
    for shape_a, shape_b in BROADCAST_PAIRS:
        a, av, b, bv = _binary_operands(rng, kind, shape_a, shape_b, dtype, layout)
        rejects = (category in ("numeric",) and dtype.is_bool) or (category == "intbool" and dtype.is_floating)
        if rejects:
            with pytest.raises(tk.DTypeError):
                getattr(a, name)(b)
            continue
        out = getattr(a, name)(b)
        if category == "compare":
            expected_dtype = tk.bool
        elif category == "float-result" and not dtype.is_floating:
            expected_dtype = tk.float32
        else:
            expected_dtype = dtype
        if dtype.is_floating or category in ("float-result",):
            with np.errstate(all="ignore"):
                expected = reference(av.astype(np.float64), bv.astype(np.float64))
        else:  # integer arithmetic in the storage type wraps like C
            expected = reference(av.astype(dtype.storage), bv.astype(dtype.storage))
        assert out.shape == np.broadcast_shapes(shape_a, shape_b)
        assert_close(out, expected, expected_dtype)


@pytest.mark.parametrize("name", ["__radd__", "__rsub__", "__rmul__", "__rtruediv__", "__rfloordiv__",
                                  "__rmod__", "__rpow__", "__rand__", "__ror__", "__rxor__"])
def test_reflected_operators_with_scalars(name):
    forward = {"__radd__": np.add, "__rsub__": np.subtract, "__rmul__": np.multiply, "__rtruediv__": np.true_divide,
               "__rfloordiv__": np.floor_divide, "__rmod__": np.mod, "__rpow__": np.power,
               "__rand__": np.bitwise_and, "__ror__": np.bitwise_or, "__rxor__": np.bitwise_xor}[name]
    values = [1, 2, 3, -4] if name != "__rpow__" else [0, 1, 2, 3]
    x = tk.tensor(values)
    out = getattr(x, name)(7)
    expected = forward(7, np.array(values))
    assert_close(out, expected, tk.float32 if name == "__rtruediv__" else tk.int64)


def test_python_operator_syntax():
    a = tk.tensor([6.0, -7.0])
    assert (2 - a).tolist() == [-4.0, 9.0]
    assert (1 / tk.tensor([2.0, 4.0])).tolist() == [0.5, 0.25]
    assert (-7 // tk.tensor([2, -2])).tolist() == [-4, 3]
    assert (tk.tensor([-7, 7]) % 3).tolist() == [2, 1]          # sign of the divisor, as Python
    assert (tk.tensor([-7.5, 7.5]) % -2).tolist() == [-1.5, -0.5]
    assert (2 ** tk.tensor([0, 3])).tolist() == [1, 8]
    assert (+a) is a
    assert (a ** 2).dtype is tk.float32 and (a ** 0.5).dtype is tk.float32
    assert (tk.tensor([4]) ** 0.5).tolist() == [2.0]


def test_integer_division_by_zero_raises():
    with pytest.raises(ZeroDivisionError):
        tk.tensor([1, 2]) // tk.tensor([1, 0])
    with pytest.raises(ZeroDivisionError):
        tk.tensor([1, 2]) % 0


def test_float_division_by_zero_follows_ieee():
    out = tk.tensor([1.0, -1.0, 0.0]) / 0.0
    assert out.numpy()[0] == np.inf and out.numpy()[1] == -np.inf and np.isnan(out.numpy()[2])
    assert (tk.tensor([1, 0]) / tk.tensor([0, 0])).numpy()[0] == np.inf


def test_maximum_minimum_propagate_nan():
    a = tk.tensor([np.nan, 1.0, 2.0])
    b = tk.tensor([0.0, np.nan, 1.0])
    np.testing.assert_array_equal(a.maximum(b).numpy(), [np.nan, np.nan, 2.0])
    np.testing.assert_array_equal(tk.minimum(a, b).numpy(), [np.nan, np.nan, 1.0])


@pytest.mark.parametrize("a_dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("b_dtype", [tk.uint8, tk.int8, tk.int16, tk.int64, tk.float16, tk.bfloat16, tk.float64],
                         ids=lambda d: d.name)
def test_mixed_dtype_arithmetic_values(a_dtype, b_dtype, rng):
    a, av = make_tensor(rng, (2, 3), a_dtype, -3, 3)
    b, bv = make_tensor(rng, (3,), b_dtype, -3, 3)
    out = tk.maximum(a, b) if a_dtype.is_bool else a * b
    dtype = tk.promote_types(a_dtype, b_dtype)
    assert out.dtype is dtype
    expected = np.maximum(av, bv) if a_dtype.is_bool else av.astype(np.float64) * bv
    assert_close(out, stored(expected, dtype) if not dtype.is_floating else expected, dtype)


def test_bool_arithmetic_is_rejected_with_the_op_name():
    t = tk.tensor([True, False])
    for op in (lambda: t + t, lambda: t - t, lambda: t * t, lambda: -t, lambda: t ** t):
        with pytest.raises(tk.DTypeError, match=r"got bool"):
            op()
    assert (t + 1).dtype is tk.int64  # a scalar of a higher category lifts bool first


# ---- where ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_where(dtype, rng):
    for shapes in [((), (), ()), ((3,), (3,), (3,)), ((2, 1), (1, 3), (3,)), ((0, 2), (2,), ()),
                   ((4, 1, 2), (3, 1), (1,))]:
        cond = rng.random(shapes[0]) < 0.5
        a, av = make_tensor(rng, shapes[1], dtype)
        b, bv = make_tensor(rng, shapes[2], dtype, layout="transpose")
        out = tk.where(tk.tensor(cond), a, b)
        assert_close(out, np.where(cond, av, bv), dtype)
    # non-bool conditions are cast (nonzero is true); scalars are weak
    out = tk.where(tk.tensor([0, 2]), tk.tensor([1.0, 1.0], dtype=tk.float16), 0.5)
    assert out.dtype is tk.float16 and out.tolist() == [0.5, 1.0]
    assert tk.where(tk.tensor([True, False]), 1, 2.5).dtype is tk.float32


# ---- hypothesis: random broadcast shapes, ops and dtypes ----------------------------------------

@given(data=st.data(),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=3),
       name=st.sampled_from(["__add__", "__sub__", "__mul__", "__truediv__", "maximum", "minimum", "__lt__",
                             "__eq__"]),
       dtype=st.sampled_from([tk.uint8, tk.int8, tk.int16, tk.int32, tk.int64, tk.float16, tk.bfloat16, tk.float32,
                              tk.float64]),
       transpose=st.booleans())
def test_binary_broadcasting_property(data, shapes, name, dtype, transpose):
    (shape_a, shape_b), result_shape = shapes
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    kind = "nonzero" if name == "__truediv__" else "small"
    a, av, b, bv = _binary_operands(rng, kind, shape_a, shape_b, dtype, "transpose" if transpose else "contiguous")
    reference, category, _ = BINARY[name]
    out = getattr(a, name)(b)
    assert out.shape == result_shape
    if dtype.is_floating or category == "float-result":
        with np.errstate(all="ignore"):  # ints in (0, 1) truncate to 0: x / 0 is inf on both sides
            expected = reference(av.astype(np.float64), bv.astype(np.float64))
    else:
        expected = reference(av.astype(dtype.storage), bv.astype(dtype.storage))
    expected_dtype = tk.bool if category == "compare" else (
        tk.float32 if category == "float-result" and not dtype.is_floating else dtype)
    assert_close(out, expected, expected_dtype)


@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=4))
def test_incompatible_shapes_raise_shape_error(shapes):
    (shape, _), _ = shapes
    a = tuple(max(d, 2) for d in shape)
    b = tuple(d + 1 for d in a)  # every axis of size >= 2 and different from a's
    with pytest.raises(tk.ShapeError, match=r"cannot be broadcast"):
        tk.zeros(a) + tk.zeros(b)


@pytest.mark.parametrize("dtype", [tk.float32, tk.float64], ids=lambda d: d.name)
def test_nextafter_steps_one_float_of_the_operands_type(dtype):
    rng = np.random.default_rng(3)
    a = rng.uniform(-3, 3, size=(4, 5)).astype(dtype.storage)
    b = np.where(rng.random((4, 5)) < 0.5, a + 1, a - 1).astype(dtype.storage)
    b[0, 0] = a[0, 0]  # toward itself: unchanged
    compiled = tk.jit(lambda x, y: x.nextafter(y))
    for out in (tk.tensor(a).nextafter(tk.tensor(b)), compiled(a, b)):
        np.testing.assert_array_equal(out.numpy(), np.nextafter(a, b))


def test_lgamma_is_infinite_at_the_poles():
    x = np.array([0.0, -1.0, -2.0, 0.5], np.float32)
    out = tk.jit(lambda v: v.lgamma())(x).numpy()
    assert np.isinf(out[:3]).all() and np.isclose(out[3], np.log(np.sqrt(np.pi)), rtol=1e-6)
