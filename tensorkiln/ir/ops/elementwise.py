"""Elementwise primitives: unary math, binary arithmetic and comparisons, where, cast.

Binary and ternary ops broadcast their operands with numpy's rule; operands of
arithmetic must already share one dtype (the front-end inserts casts after
type promotion, so every conversion is visible in the graph).
"""
from __future__ import annotations

import math

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError
from ...loops import expr as E
from ...loops.math import math_function
from ...loops.types import compute_dtype
from .gradient import NOT_DIFFERENTIABLE, mask, sum_to
from .registry import Attrs, MappingType, OpKind, TensorType, register


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting of shapes; raises ShapeError when they do not fit."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(ndim):
        size = 1
        for shape in shapes:
            k = axis - (ndim - len(shape))
            if k < 0:
                continue
            d = shape[k]
            if d == 1:
                continue
            if size != 1 and d != size:
                raise ShapeError(f"shapes {' and '.join(str(list(s)) for s in shapes)} "
                                 f"cannot be broadcast (axis {axis - ndim}: {size} vs {d})")
            size = d
        result.append(size)
    return tuple(result)


def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf  # exact to the last bit; optional
        return erf(x)
    except ImportError:
        return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.round(x)


# Which dtype categories an op accepts (DType.category: 0 bool, 1 integer, 2 floating).
FLOAT_ONLY = (2,)
NUMERIC = (1, 2)
ANY = (0, 1, 2)


def _int_safe(fn):
    """Integer division by zero is undefined in C; make the reference say so loudly."""
    def wrapped(a, b):
        if a.dtype.kind in "iu" and np.any(b == 0):
            raise ZeroDivisionError("integer division by zero")
        return fn(a, b)
    return wrapped


CATEGORY_NAMES = {0: "bool", 1: "integer", 2: "floating"}


def _check_category(name: str, dtype: dt.DType, allowed: tuple[int, ...]) -> None:
    if dtype.category not in allowed:
        kinds = "/".join(CATEGORY_NAMES[c] for c in allowed)
        raise DTypeError(f"expects {kinds} operands, got {dtype.name}")


def _unary_infer(name, allowed):
    def infer(types: list[TensorType], attrs: Attrs) -> TensorType:
        _check_category(name, types[0].dtype, allowed)
        out_dtype = dt.bool_ if name == "isnan" else types[0].dtype
        return TensorType(types[0].shape, out_dtype)
    return infer


def _unary_reference(fn):
    def reference(inputs, attrs, out):
        with np.errstate(all="ignore"):
            return fn(inputs[0])
    return reference


def _same_dtype(types: list[TensorType]) -> dt.DType:
    first = types[0].dtype
    for t in types[1:]:
        if t.dtype != first:
            raise DTypeError(f"operand dtypes differ ({', '.join(x.dtype.name for x in types)}); "
                             "cast them to one dtype first")
    return first


def _binary_infer(name, allowed, compare=False):
    def infer(types: list[TensorType], attrs: Attrs) -> TensorType:
        dtype = _same_dtype(types)
        _check_category(name, dtype, allowed)
        shape = broadcast_shapes(types[0].shape, types[1].shape)
        return TensorType(shape, dt.bool_ if compare else dtype)
    return infer


def _binary_reference(fn):
    def reference(inputs, attrs, out):
        with np.errstate(all="ignore"):
            return fn(inputs[0], inputs[1])
    return reference


def _where_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    cond, a, b = types
    if not cond.dtype.is_bool:
        raise DTypeError(f"condition must be bool, got {cond.dtype.name}")
    dtype = _same_dtype([a, b])
    return TensorType(broadcast_shapes(cond.shape, a.shape, b.shape), dtype)


def _cast_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    return TensorType(types[0].shape, attrs["dtype"])


def _cast_reference(inputs, attrs, out):
    x = inputs[0]
    target = attrs["dtype"].compute
    if target.is_integer and x.dtype.kind == "f":
        # C leaves out-of-range conversions undefined; tensorkiln truncates toward zero,
        # saturates at the integer range and maps NaN to 0, here and in generated code.
        info = np.iinfo(target.storage)
        wide = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0, posinf=np.inf, neginf=-np.inf)
        high, low = wide >= float(info.max), wide <= float(info.min)
        inside = np.where(high | low, 0.0, wide).astype(target.storage)  # exact: every such value fits
        return np.where(high, info.max, np.where(low, info.min, inside)).astype(target.storage)
    with np.errstate(all="ignore"):
        return x.astype(target.storage)



# ---- loop-IR lowerings: an element of the result from its operands' elements ------------------

def _call(fn: str):
    """Lower to the loop-IR math function `fn` (loops/math.py)."""
    return lambda args, node: E.call(fn, *args)


def _expr(build):
    """Lower with `build(*args)`, a function of the operands' expressions."""
    return lambda args, node: build(*args)


def _const(value, dtype: str) -> E.Expr:
    return E.Const(float(value), dtype) if dtype.startswith("float") else E.Const(int(value), dtype)


def _lower_abs(x):
    return E.call("fabs", x) if x.dtype.startswith("float") else E.Select(E.lt(x, 0), -x, x)


def _lower_sign(x):
    one, zero = _const(1, x.dtype), _const(0, x.dtype)
    return E.Select(E.gt(x, zero), one, E.Select(E.lt(x, zero), -one, zero))


def _lower_pow(a, b):
    if a.dtype.startswith("float"):
        return E.call("pow", a, b)
    return E.cast(E.call("pow", E.cast(a, "float64"), E.cast(b, "float64")), a.dtype)


def _lower_floor_div(a, b):
    return E.call("floor", a / b) if a.dtype.startswith("float") else a // b


def _lower_mod(a, b):
    """Python's (and numpy's) float remainder, as numpy computes it: fmod, moved into the divisor's sign.

    a - floor(a / b) * b would be NaN for an infinite divisor (3 % inf is 3, -1 % inf is inf).
    """
    if not a.dtype.startswith("float"):
        return a % b
    zero = _const(0, a.dtype)
    m = E.call("fmod", a, b)
    wrong_sign = E.logical_and(E.ne(m, zero), E.ne(E.lt(b, zero), E.lt(m, zero)))
    return E.Select(E.eq(m, zero), E.call("copysign", zero, b), E.Select(wrong_sign, m + b, m))


def _logical(bitwise: str, logical):
    """Bitwise on integers, logical on bools."""
    return _expr(lambda a, b: E.BinOp(bitwise, a, b) if a.dtype != "bool" else logical(a, b))


def _lower_cast(args, node):
    (x,) = args
    target = compute_dtype(node.dtype.name)
    if target == "bool":
        return E.ne(x, _const(0, x.dtype)) if x.dtype != "bool" else x
    if node.dtype.name in ("float16", "bfloat16"):
        # a 16-bit value held in float32: round it as storing it would
        rounded = E.cast(x, "float32")
        if node.inputs[0].dtype.name != node.dtype.name:
            rounded = E.call("round_f16" if node.dtype.name == "float16" else "round_bf16", rounded)
        return rounded
    return E.cast(x, target)


# ---- the rows: one per primitive -----------------------------------------------------------------
# unary(name, numpy reference, accepted dtypes, loop-IR lowering, gradient, facts): `grad` is
# (build, g, x, y) -> x's gradient (None: zero) and binary's one such function per operand
# (build, g, a, b, y); `method` is the Tensor method and tk.<name> (float-only methods turn integer
# tensors into float32 first), `onnx`/`aten` the importers' operators that are exactly this op,
# `cheap` lets readers recompute it. The Tensor methods of two-operand rows are written by the front-end
# (they promote operand types first), so the table only names them. Conventions as PyTorch's: abs and relu have subgradient 0 at 0,
# maximum/minimum give half to each operand on a tie.

def _zero(*args):
    """The gradient of a piecewise-constant op: zero."""
    return None



def _describe(accepts: tuple[int, ...], note: str) -> str:
    kinds = "/".join(CATEGORY_NAMES[c] for c in accepts)
    return f"{kinds} operands" + (f"; {note}" if note else "")


def _unary_gradient(grad):
    """The rule of a unary row from grad(build, g, x, y) -> x's gradient (None: zero)."""
    if grad is NOT_DIFFERENTIABLE:
        return grad
    return lambda g, inputs, out, attrs, needs, build: (grad(build, g, inputs[0], out),)


def _binary_gradient(grad):
    """The rule of a binary row from one function per operand, grad(build, g, a, b, y), before a
    broadcast operand's gradient is summed back to its shape."""
    if grad is NOT_DIFFERENTIABLE:
        return grad

    def rule(g, inputs, out, attrs, needs, build):
        grads = (fn(build, g, *inputs, out) if need else None for fn, need in zip(grad, needs))
        return tuple(None if d is None else sum_to(build, d, x.shape) for d, x in zip(grads, inputs))
    return rule


def unary(name: str, reference, accepts: tuple[int, ...], lower, grad, doc: str = "", **facts) -> None:
    """Register an elementwise op of one operand."""
    register(name, OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _unary_infer(name, accepts),
             _unary_reference(reference), 1, _describe(accepts, doc), lower=lower,
             gradient=_unary_gradient(grad), float_only=accepts == FLOAT_ONLY, **facts)


def binary(name: str, reference, accepts: tuple[int, ...], lower, grad, compare: bool = False, doc: str = "",
           **facts) -> None:
    """Register an elementwise op of two operands of one dtype, broadcast as numpy does."""
    note = "; ".join(part for part in ("result bool" if compare else "", doc) if part)
    register(name, OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _binary_infer(name, accepts, compare),
             _binary_reference(reference), 2, _describe(accepts, note), lower=lower,
             gradient=_binary_gradient(grad), custom_method="method" in facts, **facts)


def _relu(x):
    return np.maximum(x, 0).astype(x.dtype)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _reciprocal(x):
    return 1.0 / x


def _lower_relu(x):
    return E.maximum(x, _const(0, x.dtype))


def _lower_reciprocal(x):
    return _const(1, x.dtype) / x


def _lower_sigmoid(x):
    one = _const(1, x.dtype)
    return one / (one + E.call("exp", -x))


def _erf_gradient(build, g, x, y):
    return g * (-(x * x)).exp() * (2.0 / math.sqrt(math.pi))


def _asin_gradient(build, g, x, y):
    return g * (1.0 - x * x).rsqrt()


def _acos_gradient(build, g, x, y):
    return -g * (1.0 - x * x).rsqrt()


def _log10_gradient(build, g, x, y):
    return g / (x * math.log(10.0))


def _pass(build, g, a, b, y):
    return g


def _negated(build, g, a, b, y):
    return -g


def _times_b(build, g, a, b, y):
    return g * b


def _times_a(build, g, a, b, y):
    return g * a


_DIV_GRADIENTS = (lambda build, g, a, b, y: g / b, lambda build, g, a, b, y: -g * a / (b * b))
_MOD_GRADIENTS = (_pass, lambda build, g, a, b, y: -g * build.apply("floor_div", [a, b]))


def _pow_base_gradient(build, g, a, b, y):
    """b * a^(b-1), and 0 where b == 0 (no 0 * inf)."""
    return mask(build, b != 0, g * b * a ** (b - 1.0))


def _pow_exponent_gradient(build, g, a, b, y):
    """a^b log a, and 0 where a == 0 and b >= 0 (PyTorch's convention)."""
    return mask(build, ~((a == 0) & (b >= 0)), g * y * a.log())


_POW_GRADIENTS = (_pow_base_gradient, _pow_exponent_gradient)


def _extremum_gradients(which):
    """maximum's (which=max) or minimum's gradients: g to the operand that wins, half to each on a tie."""
    def share(build, g, wins, a, b):
        return g * (wins.to(g.dtype) + (a == b).to(g.dtype) * 0.5)
    if which is max:
        return (lambda build, g, a, b, y: share(build, g, a > b, a, b),
                lambda build, g, a, b, y: share(build, g, a < b, a, b))
    return (lambda build, g, a, b, y: share(build, g, a < b, a, b),
            lambda build, g, a, b, y: share(build, g, a > b, a, b))


def _where_gradient(g, inputs, out, attrs, needs, build):
    c, a, b = inputs
    zero = build.constant(0, g.dtype)
    return (None,
            sum_to(build, build.apply("where", [c, g, zero]), a.shape) if needs[1] else None,
            sum_to(build, build.apply("where", [c, zero, g]), b.shape) if needs[2] else None)


def _cast_gradient(g, inputs, out, attrs, needs, build):
    x = inputs[0]
    return (g.to(x.dtype) if x.dtype.is_floating else None,)


#     name          reference          dtypes      loop-IR lowering                 gradient of x
unary("neg",        np.negative,       NUMERIC,    _expr(lambda x: -x),             lambda b, g, x, y: -g,
      cheap=True, method="neg", onnx="Neg", aten="neg")
unary("abs",        np.abs,            NUMERIC,    _expr(_lower_abs),               lambda b, g, x, y: g * x.sign(),
      cheap=True, method="abs", onnx="Abs", aten="abs")
unary("sign",       np.sign,           NUMERIC,    _expr(_lower_sign),              _zero,
      method="sign", onnx="Sign", aten="sign")
unary("relu",       _relu,             NUMERIC,    _expr(_lower_relu),              lambda b, g, x, y: mask(b, x > 0, g),
      cheap=True, method="relu", onnx="Relu", aten="relu")
unary("exp",        np.exp,            FLOAT_ONLY, _call("exp"),                    lambda b, g, x, y: g * y,
      method="exp", onnx="Exp", aten="exp")
unary("log",        np.log,            FLOAT_ONLY, _call("log"),                    lambda b, g, x, y: g / x,
      domain=(0, None), method="log", onnx="Log", aten="log")
unary("sqrt",       np.sqrt,           FLOAT_ONLY, _call("sqrt"),                   lambda b, g, x, y: g / (y * 2.0),
      domain=(0, None), method="sqrt", onnx="Sqrt", aten="sqrt")
unary("rsqrt",      _rsqrt,            FLOAT_ONLY, _call("rsqrt"),                  lambda b, g, x, y: g * y * y * y * -0.5,
      domain=(0, None), method="rsqrt", aten="rsqrt")
unary("reciprocal", _reciprocal,       FLOAT_ONLY, _expr(_lower_reciprocal),        lambda b, g, x, y: -g * y * y,
      method="reciprocal", onnx="Reciprocal", aten="reciprocal")
unary("sin",        np.sin,            FLOAT_ONLY, _call("sin"),                    lambda b, g, x, y: g * x.cos(),
      method="sin", onnx="Sin", aten="sin")
unary("cos",        np.cos,            FLOAT_ONLY, _call("cos"),                    lambda b, g, x, y: -g * x.sin(),
      method="cos", onnx="Cos", aten="cos")
unary("tanh",       np.tanh,           FLOAT_ONLY, _call("tanh"),                   lambda b, g, x, y: g * (1.0 - y * y),
      method="tanh", onnx="Tanh", aten="tanh")
unary("erf",        _erf,              FLOAT_ONLY, _call("erf"),                    _erf_gradient,
      method="erf", onnx="Erf", aten="erf")
unary("sigmoid",    _sigmoid,          FLOAT_ONLY, _expr(_lower_sigmoid),           lambda b, g, x, y: g * y * (1.0 - y),
      method="sigmoid", onnx="Sigmoid", aten="sigmoid")
unary("floor",      np.floor,          FLOAT_ONLY, _call("floor"),                  _zero,
      method="floor", onnx="Floor", aten="floor", identity_on_integers=True)
unary("ceil",       np.ceil,           FLOAT_ONLY, _call("ceil"),                   _zero,
      method="ceil", onnx="Ceil", aten="ceil", identity_on_integers=True)
unary("round",      _round_half_even,  FLOAT_ONLY, _call("rint"),                   _zero, doc="half to even",
      method="round", onnx="Round", aten="round", identity_on_integers=True)
unary("trunc",      np.trunc,          FLOAT_ONLY, _call("trunc"),                  _zero, doc="toward zero",
      method="trunc", aten="trunc", identity_on_integers=True)
unary("tan",        np.tan,            FLOAT_ONLY, _call("tan"),                    lambda b, g, x, y: g * (1.0 + y * y),
      method="tan", onnx="Tan", aten="tan")
unary("sinh",       np.sinh,           FLOAT_ONLY, _call("sinh"),                   lambda b, g, x, y: g * x.cosh(),
      method="sinh", onnx="Sinh", aten="sinh")
unary("cosh",       np.cosh,           FLOAT_ONLY, _call("cosh"),                   lambda b, g, x, y: g * x.sinh(),
      method="cosh", onnx="Cosh", aten="cosh")
unary("asin",       np.arcsin,         FLOAT_ONLY, _call("asin"),                   _asin_gradient,
      domain=(-1, 1), method="asin", onnx="Asin", aten="asin")
unary("acos",       np.arccos,         FLOAT_ONLY, _call("acos"),                   _acos_gradient,
      domain=(-1, 1), method="acos", onnx="Acos", aten="acos")
unary("atan",       np.arctan,         FLOAT_ONLY, _call("atan"),                   lambda b, g, x, y: g / (1.0 + x * x),
      method="atan", onnx="Atan", aten="atan")
unary("log2",       np.log2,           FLOAT_ONLY, _call("log2"),                   lambda b, g, x, y: g / (x * math.log(2.0)),
      domain=(0, None), method="log2", aten="log2")
math_function("log10", 1, np.log10)  # libm's log10f/log10 in C: a loop-IR math function beside its op
unary("log10",      np.log10,          FLOAT_ONLY, _call("log10"),                  _log10_gradient,
      domain=(0, None), method="log10", aten="log10")
# methods of their own: logical_not makes any dtype bool first; integers are never NaN
unary("not",        np.logical_not,    (0,),       _expr(E.logical_not),            NOT_DIFFERENTIABLE,
      cheap=True, method="logical_not", custom_method=True, onnx="Not", aten="logical_not")
unary("isnan",      np.isnan,          FLOAT_ONLY, _expr(lambda x: E.ne(x, x)),     NOT_DIFFERENTIABLE,
      method="isnan", custom_method=True, aten="isnan")

#      name         reference                  dtypes      loop-IR lowering              gradients of a and b
binary("add",       np.add,                    NUMERIC,    _expr(lambda a, b: a + b),    (_pass, _pass), cheap=True, method="add")
binary("sub",       np.subtract,               NUMERIC,    _expr(lambda a, b: a - b),    (_pass, _negated), cheap=True, method="sub")
binary("mul",       np.multiply,               NUMERIC,    _expr(lambda a, b: a * b),    (_times_b, _times_a), cheap=True, method="mul")
binary("div",       np.divide,                 FLOAT_ONLY, _expr(lambda a, b: a / b),    _DIV_GRADIENTS,
       doc="true division", method="div")
binary("floor_div", _int_safe(np.floor_divide), NUMERIC,   _expr(_lower_floor_div),      (_zero, _zero),
       doc="floor division (Python's //)", method="floor_divide")
math_function("copysign", 2, np.copysign)  # libm's copysignf/copysign: the sign of a zero remainder
binary("mod",       _int_safe(np.mod),         NUMERIC,    _expr(_lower_mod),            _MOD_GRADIENTS,
       doc="remainder with the divisor's sign (Python's %)", method="remainder")
binary("pow",       np.power,                  NUMERIC,    _expr(_lower_pow),            _POW_GRADIENTS, method="pow")
binary("maximum",   np.maximum,                ANY,        _expr(E.maximum),             _extremum_gradients(max),
       cheap=True, method="maximum")
binary("minimum",   np.minimum,                ANY,        _expr(E.minimum),             _extremum_gradients(min),
       cheap=True, method="minimum")
binary("and",       np.bitwise_and,            (0, 1),     _logical("bitand", E.logical_and), NOT_DIFFERENTIABLE,
       doc="logical on bool, bitwise on integers", cheap=True)
binary("or",        np.bitwise_or,             (0, 1),     _logical("bitor", E.logical_or), NOT_DIFFERENTIABLE,
       doc="logical on bool, bitwise on integers", cheap=True)
binary("xor",       np.bitwise_xor,            (0, 1),     _logical("bitxor", E.ne),     NOT_DIFFERENTIABLE,
       doc="logical on bool, bitwise on integers")
binary("eq",        np.equal,                  ANY,        _expr(E.eq),                  NOT_DIFFERENTIABLE, compare=True, cheap=True, method="eq")
binary("ne",        np.not_equal,              ANY,        _expr(E.ne),                  NOT_DIFFERENTIABLE, compare=True, cheap=True, method="ne")
binary("lt",        np.less,                   ANY,        _expr(E.lt),                  NOT_DIFFERENTIABLE, compare=True, cheap=True, method="lt")
binary("le",        np.less_equal,             ANY,        _expr(E.le),                  NOT_DIFFERENTIABLE, compare=True, cheap=True, method="le")
binary("gt",        np.greater,                ANY,        _expr(E.gt),                  NOT_DIFFERENTIABLE, compare=True, cheap=True, method="gt")
binary("ge",        np.greater_equal,          ANY,        _expr(E.ge),                  NOT_DIFFERENTIABLE, compare=True, cheap=True, method="ge")

register("where", OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _where_infer,
         lambda inputs, attrs, out: np.where(*inputs), 3, "where(cond, a, b): a bool condition, a and b of one dtype",
         lower=_expr(E.Select), cheap=True, gradient=_where_gradient)
register("cast", OpKind.ELEMENTWISE, MappingType.ONE_TO_ONE, _cast_infer, _cast_reference, 1,
         "attr dtype; float to integer truncates toward zero and saturates, NaN becomes 0",
         lower=_lower_cast, cheap=True, gradient=_cast_gradient)
