"""ONNX operators as compositions of tensorkiln front-end ops.

Each converter is `fn(ctx, inputs, attrs) -> Tensor | list[Tensor | None]`:
`inputs` holds one Tensor per node input (None for an omitted optional one),
`attrs` the node's attributes as Python values, `ctx` the node (its opset,
name, how many outputs are wanted) and `ctx.values(t)` to read an input that
must be known at compile time (a shape, axes, pads...).

Converters only call tensorkiln's Tensor methods, `tensorkiln.frontend.functions` and
`tk.nn.functional`, so the graph optimizer and the C backend see ordinary
primitives. Ops on values that are all eager (initializers, constants, shapes)
compute at once: that is how Shape -> Gather -> Concat chains become
constants at trace time. `VALUE_INPUTS` names the inputs each op needs as
values; the loader uses it to specialize graph inputs that feed them.
"""
from __future__ import annotations

import math
import string
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError, UnsupportedOpError
from ...frontend.functions import concat, matmul, repeat, where
from ...nn import functional as F
from ...frontend.tensor import Tensor, apply, as_tensor
from ...frontend.trace import composite_scope

# ONNX TensorProto element types tensorkiln holds (the others: uint16/32/64, string, complex, float8, 4-bit...).
ONNX_DTYPES = {1: dt.float32, 2: dt.uint8, 3: dt.int8, 5: dt.int16, 6: dt.int32, 7: dt.int64, 9: dt.bool_,
               10: dt.float16, 11: dt.float64, 16: dt.bfloat16}


def tk_dtype(elem_type: int) -> dt.DType:
    """The tensorkiln dtype of an ONNX element type; UnsupportedOpError for the others."""
    if elem_type in ONNX_DTYPES:
        return ONNX_DTYPES[elem_type]
    raise UnsupportedOpError(f"element type {elem_type_name(elem_type)} is not supported")


def elem_type_name(elem_type: int) -> str:
    import onnx
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


@dataclass
class NodeContext:
    """What a converter knows about the node it converts."""

    op_type: str
    name: str
    opset: int
    n_outputs: int
    outputs_used: list[bool] = field(default_factory=list)

    def values(self, t: Tensor | None, what: str) -> np.ndarray | None:
        """The value of an input that must be known at compile time (shape, axes, pads, ...)."""
        if t is None:
            return None
        if t.is_traced:
            raise UnsupportedOpError(
                f"node '{self.name}' ({self.op_type}): input '{what}' must be known when the model is "
                "compiled (a constant, an initializer, a graph input, or computed from shapes); here it is "
                "computed from runtime data, which would make the output shape data-dependent")
        return t.numpy()

    def ints(self, t: Tensor | None, what: str) -> list[int] | None:
        v = self.values(t, what)
        return None if v is None else [int(i) for i in v.reshape(-1)]

    def unsupported(self, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"node '{self.name}' ({self.op_type}, opset {self.opset}): {why}")


Converter = Callable[[NodeContext, list, dict], object]
CONVERTERS: dict[str, Converter] = {}
# op -> function(opset) -> positions of inputs that must be values at compile time
VALUE_INPUTS: dict[str, Callable[[int], set[int]]] = {}


def converter(*names: str, values: Callable[[int], set[int]] | set[int] | None = None):
    """Register a converter for ONNX ops `names` (domain ai.onnx)."""
    def decorate(fn: Converter) -> Converter:
        for n in names:
            CONVERTERS[n] = fn
            if values is not None:
                VALUE_INPUTS[n] = values if callable(values) else (lambda opset, v=frozenset(values): set(v))
        return fn
    return decorate


def _axis(axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ShapeError(f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _prod(values) -> int:
    return int(np.prod(list(values), dtype=np.int64))


def _scalar(t: Tensor, dtype: dt.DType) -> Tensor:
    return t.to(dtype) if t.dtype != dtype else t


def _full(shape, value, dtype: dt.DType) -> Tensor:
    return Tensor._from_value(dt.to_storage(np.full(tuple(shape), value), dtype), dtype)


# ---- elementwise ------------------------------------------------------------------------

def _legacy_broadcast(ctx: NodeContext, a: Tensor, b: Tensor, attrs: dict) -> Tensor:
    """Opset < 7 binary ops: b broadcasts into a from `axis` when broadcast=1."""
    if ctx.opset < 7 and attrs.get("broadcast", 0) and "axis" in attrs and b.ndim < a.ndim:
        axis = _axis(attrs["axis"], a.ndim)
        b = b.reshape(tuple(b.shape) + (1,) * (a.ndim - axis - b.ndim))
    return b


def _binary(fn):
    def convert(ctx, inputs, attrs):
        a, b = inputs
        return fn(a, _legacy_broadcast(ctx, a, b, attrs))
    return convert


converter("Add")(_binary(lambda a, b: a + b))
converter("Sub")(_binary(lambda a, b: a - b))
converter("Mul")(_binary(lambda a, b: a * b))
converter("Equal")(_binary(lambda a, b: a == b))
converter("Less")(_binary(lambda a, b: a < b))
converter("Greater")(_binary(lambda a, b: a > b))
converter("LessOrEqual")(_binary(lambda a, b: a <= b))
converter("GreaterOrEqual")(_binary(lambda a, b: a >= b))
converter("And", "BitwiseAnd")(_binary(lambda a, b: a & b))
converter("Or", "BitwiseOr")(_binary(lambda a, b: a | b))
converter("Xor", "BitwiseXor")(_binary(lambda a, b: a ^ b))


@converter("Div")
def _div(ctx, inputs, attrs):
    a, b = inputs
    b = _legacy_broadcast(ctx, a, b, attrs)
    if a.dtype.is_floating:
        return a / b
    q = a // b  # integers: ONNX (like C) truncates toward zero
    fix = ((a % b) != 0) & ((a < 0) != (b < 0))
    return where(fix, q + 1, q)


@converter("Mod")
def _mod(ctx, inputs, attrs):
    a, b = inputs
    r = a % b  # Python semantics: the sign of the divisor
    if attrs.get("fmod", 0):  # C fmod: the sign of the dividend
        r = where((r != 0) & ((r < 0) != (a < 0)), r - b, r)
    return r


@converter("Pow")
def _pow(ctx, inputs, attrs):
    x, y = inputs
    y = _legacy_broadcast(ctx, x, y, attrs)
    if x.dtype.is_integer and y.dtype.is_floating:
        return (x.to(dt.float64) ** y.to(dt.float64)).to(x.dtype)
    return x ** y.to(x.dtype)


def _unary(fn):
    return lambda ctx, inputs, attrs: fn(inputs[0])


for _name, _fn in {
    "Abs": Tensor.abs, "Neg": Tensor.neg, "Sqrt": Tensor.sqrt, "Reciprocal": Tensor.reciprocal,
    "Exp": Tensor.exp, "Log": Tensor.log, "Sin": Tensor.sin, "Cos": Tensor.cos, "Tanh": Tensor.tanh,
    "Sigmoid": Tensor.sigmoid, "Erf": Tensor.erf, "Relu": Tensor.relu, "Floor": Tensor.floor,
    "Ceil": Tensor.ceil, "Round": Tensor.round, "Sign": Tensor.sign, "Not": Tensor.logical_not,
    "Identity": lambda x: x, "Tan": lambda x: x.sin() / x.cos(),
    "Softsign": lambda x: x / (1.0 + x.abs()),
    "Sinh": lambda x: (x.exp() - (-x).exp()) * 0.5, "Cosh": lambda x: (x.exp() + (-x).exp()) * 0.5,
    "Asinh": lambda x: (x + (x * x + 1.0).sqrt()).log(), "Acosh": lambda x: (x + (x * x - 1.0).sqrt()).log(),
    "Atanh": lambda x: ((1.0 + x) / (1.0 - x)).log() * 0.5,
    "BitwiseNot": lambda x: x ^ -1,
    "Mish": lambda x: x * F.softplus(x).tanh(),
}.items():
    converter(_name)(_unary(_fn))


def _atan(x: Tensor) -> Tensor:
    """arctan by range reduction (|x| > 1 -> pi/2 - atan(1/x), then the half-angle step) and a series."""
    ax = x.abs()
    big = ax > 1.0
    r = where(big, 1.0 / where(big, ax, 1.0), ax)
    r = r / (1.0 + (1.0 + r * r).sqrt())  # atan(r) = 2 atan(r / (1 + sqrt(1 + r^2))), now r <= 0.4143
    r2, term, total = r * r, r, r
    for k in range(3, 24, 2):
        term = term * r2 * -1.0
        total = total + term * (1.0 / k)
    total = total * 2.0
    total = where(big, math.pi / 2 - total, total)
    return where(x < 0, -total, total)


converter("Atan")(_unary(_atan))
converter("Asin")(_unary(lambda x: _atan(x / (1.0 - x * x).sqrt())))
converter("Acos")(_unary(lambda x: math.pi / 2 - _atan(x / (1.0 - x * x).sqrt())))


@converter("IsNaN")
def _isnan(ctx, inputs, attrs):
    return inputs[0].isnan()


@converter("IsInf")
def _isinf(ctx, inputs, attrs):
    x = inputs[0]
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    result = _full(x.shape, False, dt.bool_)
    if pos:
        result = result | (x == float("inf"))
    if neg:
        result = result | (x == float("-inf"))
    return result


@converter("LeakyRelu")
def _leaky_relu(ctx, inputs, attrs):
    return F.leaky_relu(inputs[0], attrs.get("alpha", 0.01))


@converter("Elu")
def _elu(ctx, inputs, attrs):
    return F.elu(inputs[0], attrs.get("alpha", 1.0))


@converter("Selu")
def _selu(ctx, inputs, attrs):
    x = inputs[0]
    alpha, gamma = attrs.get("alpha", 1.67326319217681884765625), attrs.get("gamma", 1.05070102214813232421875)
    return where(x > 0, x, (x.exp() - 1.0) * alpha) * gamma


@converter("Celu")
def _celu(ctx, inputs, attrs):
    x, alpha = inputs[0], attrs.get("alpha", 1.0)
    return x.relu() + (((x * (1.0 / alpha)).exp() - 1.0) * alpha).clamp(max=0.0)


@converter("ThresholdedRelu")
def _thresholded_relu(ctx, inputs, attrs):
    x = inputs[0]
    return where(x > attrs.get("alpha", 1.0), x, 0.0)


@converter("Shrink")
def _shrink(ctx, inputs, attrs):
    x = inputs[0]
    lambd, bias = attrs.get("lambd", 0.5), attrs.get("bias", 0.0)
    return where(x < -lambd, x + bias, where(x > lambd, x - bias, 0.0)).to(x.dtype)


@converter("HardSigmoid")
def _hard_sigmoid(ctx, inputs, attrs):
    x = inputs[0]
    return (x * attrs.get("alpha", 0.2) + attrs.get("beta", 0.5)).clamp(0.0, 1.0)


@converter("HardSwish")
def _hard_swish(ctx, inputs, attrs):
    return F.hardswish(inputs[0])


@converter("Softplus")
def _softplus(ctx, inputs, attrs):
    return F.softplus(inputs[0])


@converter("Gelu")
def _gelu(ctx, inputs, attrs):
    return F.gelu(inputs[0], approximate=attrs.get("approximate", "none"))


@converter("PRelu")
def _prelu(ctx, inputs, attrs):
    x, slope = inputs
    if ctx.opset < 7 and slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1]:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return where(x < 0, x * slope, x)


@converter("Clip", values=lambda opset: set())
def _clip(ctx, inputs, attrs):
    x = inputs[0]
    if ctx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
        return x.clamp(lo, hi)
    lo = inputs[1] if len(inputs) > 1 else None
    hi = inputs[2] if len(inputs) > 2 else None
    out = x
    if lo is not None:
        out = out.maximum(lo.reshape(()).to(x.dtype))
    if hi is not None:
        out = out.minimum(hi.reshape(()).to(x.dtype))
    return out


def _variadic(fn):
    def convert(ctx, inputs, attrs):
        out = inputs[0]
        for t in inputs[1:]:
            out = fn(out, t)
        return out
    return convert


converter("Max")(_variadic(lambda a, b: a.maximum(b)))
converter("Min")(_variadic(lambda a, b: a.minimum(b)))
converter("Sum")(_variadic(lambda a, b: a + b))


@converter("Mean")
def _mean(ctx, inputs, attrs):
    return _variadic(lambda a, b: a + b)(ctx, inputs, attrs) * (1.0 / len(inputs))


@converter("Where")
def _where(ctx, inputs, attrs):
    return where(*inputs)


@converter("Cast")
def _cast(ctx, inputs, attrs):
    return inputs[0].to(tk_dtype(attrs["to"]))


@converter("CastLike")
def _cast_like(ctx, inputs, attrs):
    return inputs[0].to(inputs[1].dtype)


# ---- constants and shapes -----------------------------------------------------------------

def tensor_from_proto(proto) -> Tensor:
    """An eager tensor from an ONNX TensorProto."""
    from onnx import numpy_helper
    dtype = tk_dtype(proto.data_type)
    array = numpy_helper.to_array(proto)
    if dtype is dt.bfloat16:
        array = np.asarray(array).astype(np.float32)
    return as_tensor(np.array(array), dtype)


@converter("Constant")
def _constant(ctx, inputs, attrs):
    if "value" in attrs:
        return tensor_from_proto(attrs["value"])
    if "value_float" in attrs:
        return as_tensor(np.float32(attrs["value_float"]))
    if "value_floats" in attrs:
        return as_tensor(np.asarray(attrs["value_floats"], dtype=np.float32))
    if "value_int" in attrs:
        return as_tensor(np.int64(attrs["value_int"]))
    if "value_ints" in attrs:
        return as_tensor(np.asarray(attrs["value_ints"], dtype=np.int64))
    raise ctx.unsupported(f"Constant of kind {sorted(attrs)} is not supported (strings, sparse tensors)")


@converter("ConstantOfShape", values={0})
def _constant_of_shape(ctx, inputs, attrs):
    shape = ctx.ints(inputs[0], "input")
    value = tensor_from_proto(attrs["value"]) if "value" in attrs else as_tensor(np.float32(0))
    return _full(shape, value.numpy().reshape(-1)[0], value.dtype)


@converter("Shape")
def _shape(ctx, inputs, attrs):
    shape = inputs[0].shape
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return as_tensor(np.asarray(shape[start:end], dtype=np.int64))


@converter("Size")
def _size(ctx, inputs, attrs):
    return as_tensor(np.int64(inputs[0].numel()))


@converter("EyeLike")
def _eye_like(ctx, inputs, attrs):
    x = inputs[0]
    dtype = tk_dtype(attrs["dtype"]) if "dtype" in attrs else x.dtype
    return as_tensor(np.eye(x.shape[0], x.shape[1], k=attrs.get("k", 0)), dtype)


@converter("Range", values={0, 1, 2})
def _range(ctx, inputs, attrs):
    start, limit, delta = (ctx.values(t, n).reshape(-1)[0] for t, n in zip(inputs, ("start", "limit", "delta")))
    count = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    values = start + np.arange(count).astype(start.dtype) * delta
    return as_tensor(np.asarray(values, dtype=start.dtype), inputs[0].dtype)


# ---- movement ------------------------------------------------------------------------------

@converter("Reshape", values=lambda opset: {1} if opset >= 5 else set())
def _reshape(ctx, inputs, attrs):
    x = inputs[0]
    shape = attrs["shape"] if ctx.opset < 5 else ctx.ints(inputs[1], "shape")
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(tuple(shape))


@converter("Flatten")
def _flatten(ctx, inputs, attrs):
    x = inputs[0]
    axis = attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(_prod(x.shape[:axis]), _prod(x.shape[axis:]))


@converter("Transpose")
def _transpose(ctx, inputs, attrs):
    x = inputs[0]
    perm = attrs.get("perm") or list(reversed(range(x.ndim)))
    return x.permute(tuple(perm))


def _axes_input(ctx, inputs, attrs, since: int, position: int = 1):
    """Axes given as an attribute (before opset `since`) or as an input (from it)."""
    if ctx.opset < since:
        return attrs.get("axes")
    return ctx.ints(inputs[position], "axes") if len(inputs) > position else None


@converter("Squeeze", values=lambda opset: {1} if opset >= 13 else set())
def _squeeze(ctx, inputs, attrs):
    x = inputs[0]
    axes = _axes_input(ctx, inputs, attrs, 13)
    if axes is None:
        return x.reshape(tuple(s for s in x.shape if s != 1))
    axes = {_axis(a, x.ndim) for a in axes}
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"Squeeze: axis {a} has size {x.shape[a]}, not 1 (input shape {list(x.shape)})")
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


@converter("Unsqueeze", values=lambda opset: {1} if opset >= 13 else set())
def _unsqueeze(ctx, inputs, attrs):
    x = inputs[0]
    axes = _axes_input(ctx, inputs, attrs, 13)
    rank = x.ndim + len(axes)
    axes = sorted(_axis(a, rank) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return x.reshape(tuple(shape))


@converter("Concat")
def _concat(ctx, inputs, attrs):
    tensors = [t for t in inputs if t is not None]
    axis = _axis(attrs["axis"], tensors[0].ndim) if ctx.opset >= 4 else attrs.get("axis", 1)
    nonempty = [t for t in tensors if t.shape[axis] != 0] or tensors[:1]
    return concat(nonempty, axis)


@converter("Split", values=lambda opset: {1} if opset >= 13 else set())
def _split(ctx, inputs, attrs):
    x = inputs[0]
    axis = _axis(attrs.get("axis", 0), x.ndim)
    n = x.shape[axis]
    sizes = attrs.get("split") if ctx.opset < 13 else (ctx.ints(inputs[1], "split") if len(inputs) > 1 else None)
    if ctx.opset < 2 and len(inputs) > 1 and inputs[1] is not None:
        sizes = ctx.ints(inputs[1], "split")
    if not sizes:
        parts = attrs.get("num_outputs", ctx.n_outputs)
        if ctx.opset >= 18 and "num_outputs" in attrs:
            size = -(-n // parts)
            sizes = [min(size, n - i * size) for i in range(parts)]
        else:
            if n % parts:
                raise ShapeError(f"Split: axis of size {n} cannot be split into {parts} equal parts")
            sizes = [n // parts] * parts
    return list(x.split(list(sizes), axis))


def slice_tensor(x: Tensor, starts, ends, axes, steps) -> Tensor:
    """ONNX Slice semantics (clamping, negative indices and steps) as x[key]."""
    axes = list(range(len(starts))) if axes is None else [_axis(a, x.ndim) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    key = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        n = x.shape[axis]
        if step == 0:
            raise ShapeError("Slice: step cannot be 0")
        start = start + n if start < 0 else start
        end = end + n if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
            key[axis] = slice(start, end, step)
        else:
            start, end = min(max(start, -1), n - 1), min(max(end, -1), n - 1)
            key[axis] = slice(start, None if end < 0 else end, step) if start >= 0 else slice(0, 0)
    return x[tuple(key)]


@converter("Slice", values=lambda opset: {1, 2, 3, 4} if opset >= 10 else set())
def _slice(ctx, inputs, attrs):
    x = inputs[0]
    if ctx.opset < 10:
        return slice_tensor(x, attrs["starts"], attrs["ends"], attrs.get("axes"), None)
    get = lambda i, n: ctx.ints(inputs[i], n) if len(inputs) > i else None  # noqa: E731
    return slice_tensor(x, get(1, "starts"), get(2, "ends"), get(3, "axes"), get(4, "steps"))


@converter("Gather")
def _gather(ctx, inputs, attrs):
    data, index = inputs
    axis = _axis(attrs.get("axis", 0), data.ndim)
    return apply("take", [data, index], axis=axis)


@converter("GatherElements")
def _gather_elements(ctx, inputs, attrs):
    data, index = inputs
    return data.gather(_axis(attrs.get("axis", 0), data.ndim), index)


@converter("GatherND")
def _gather_nd(ctx, inputs, attrs):
    data, index = inputs
    b = attrs.get("batch_dims", 0)
    k = index.shape[-1]
    batch = tuple(data.shape[:b])
    dims = data.shape[b:b + k]
    tail = tuple(data.shape[b + k:])
    nb, nk = _prod(batch), _prod(dims)
    index = index.to(dt.int64).reshape((nb, -1, k)) if nb else index.to(dt.int64).reshape((0, 0, k))
    linear = None
    for j, size in enumerate(dims):
        i = index[:, :, j]
        i = where(i < 0, i + size, i)
        linear = i if linear is None else linear * size + i
    if linear is None:
        linear = _full(index.shape[:2], 0, dt.int64)
    linear = linear + as_tensor(np.arange(nb, dtype=np.int64).reshape(-1, 1) * nk)
    flat = data.reshape((nb * nk,) + tail)
    out = apply("take", [flat, linear], axis=0)
    return out.reshape(batch + tuple(inputs[1].shape[b:-1]) + tail)


@converter("Expand", values={1})
def _expand(ctx, inputs, attrs):
    x = inputs[0]
    shape = ctx.ints(inputs[1], "shape")
    rank = max(len(shape), x.ndim)
    a = (1,) * (rank - x.ndim) + tuple(x.shape)
    b = (1,) * (rank - len(shape)) + tuple(shape)
    out = tuple(max(p, q) if 1 in (p, q) else p for p, q in zip(a, b))
    return x.reshape(a).expand(out)


@converter("Tile", values={1})
def _tile(ctx, inputs, attrs):
    return repeat(inputs[0], *ctx.ints(inputs[1], "repeats"))


@converter("Pad", values=lambda opset: {1, 2, 3} if opset >= 11 else set())
def _pad(ctx, inputs, attrs):
    x = inputs[0]
    mode = attrs.get("mode", "constant")
    if ctx.opset < 11:
        pads = attrs.get("pads", attrs.get("paddings"))
        value = attrs.get("value", 0.0)
        axes = None
    else:
        pads = ctx.ints(inputs[1], "pads")
        value = ctx.values(inputs[2], "constant_value") if len(inputs) > 2 else None
        value = 0 if value is None or value.size == 0 else value.reshape(-1)[0].item()
        axes = ctx.ints(inputs[3], "axes") if len(inputs) > 3 else None
    axes = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim) for a in axes]
    pairs = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        pairs[a] = (pads[i], pads[i + len(axes)])
    torch_pads = []
    for lo, hi in reversed(pairs):
        torch_pads += [lo, hi]
    modes = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}
    if mode not in modes:
        raise ctx.unsupported(f"mode {mode!r} is not supported")
    if mode == "constant":
        if x.dtype.is_integer:
            value = int(value)
        elif x.dtype.is_bool:
            value = bool(value)
        return F.pad(x, torch_pads, "constant", value)
    return F.pad(x, torch_pads, modes[mode])


# ---- reductions ------------------------------------------------------------------------------

def _reduce_args(ctx, x, inputs, attrs, since):
    """(axes, keepdims), or None when the op is a no-op (empty axes with noop_with_empty_axes)."""
    axes = _axes_input(ctx, inputs, attrs, since)
    keep = bool(attrs.get("keepdims", 1))
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return None
        axes = range(x.ndim)
    return tuple(sorted({_axis(a, x.ndim) for a in axes})), keep


def _reduced_shape(x, axes, keep):
    return tuple(1 if i in axes else s for i, s in enumerate(x.shape) if keep or i not in axes)


def _reducer(since: int, fn, empty=None):
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        args = _reduce_args(ctx, x, inputs, attrs, since)
        if args is None:
            return x
        axes, keep = args
        if empty is not None and any(x.shape[a] == 0 for a in axes):
            return _full(_reduced_shape(x, axes, keep), empty(x.dtype), x.dtype)
        return fn(x, axes, keep)
    return convert


def _same_dtype(fn):
    return lambda x, axes, keep: fn(x, axes, keep).to(x.dtype)


def _log_sum_exp(x, axes, keep):
    m = x.amax(axes, keepdim=True)
    m = where(m.abs() == float("inf"), 0.0, m).to(x.dtype)
    out = (x - m).exp().sum(axes, keepdim=True).log() + m
    return out if keep else out.reshape(_reduced_shape(x, axes, False))


_REDUCERS = {
    "ReduceSum": (13, _same_dtype(lambda x, a, k: x.sum(a, k)), None),
    "ReduceMean": (18, _same_dtype(lambda x, a, k: x.mean(a, k)), None),
    "ReduceMax": (18, lambda x, a, k: x.amax(a, k), lambda d: dt.finfo_min(d)),
    "ReduceMin": (18, lambda x, a, k: x.amin(a, k), lambda d: dt.finfo_max(d)),
    "ReduceProd": (18, _same_dtype(lambda x, a, k: x.prod(a, k)), None),
    "ReduceL1": (18, _same_dtype(lambda x, a, k: x.abs().sum(a, k)), None),
    "ReduceL2": (18, _same_dtype(lambda x, a, k: (x * x).sum(a, k).to(dt.float64 if not x.dtype.is_floating
                                                                       else x.dtype).sqrt()), None),
    "ReduceSumSquare": (18, _same_dtype(lambda x, a, k: (x * x).sum(a, k)), None),
    "ReduceLogSum": (18, lambda x, a, k: x.sum(a, k).log(), None),
    "ReduceLogSumExp": (18, _log_sum_exp, lambda d: float("-inf")),
}
for _name, (_since, _fn, _empty) in _REDUCERS.items():
    converter(_name, values=lambda opset, s=_since: {1} if opset >= s else set())(_reducer(_since, _fn, _empty))


def _arg(op):
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        axis = _axis(attrs.get("axis", 0), x.ndim)
        keep = bool(attrs.get("keepdims", 1))
        if attrs.get("select_last_index", 0):
            n = x.shape[axis]
            flipped = x.flip(axis)
            index = getattr(flipped, op)(axis, keep)
            return (n - 1) - index
        return getattr(x, op)(axis, keep)
    return convert


converter("ArgMax")(_arg("argmax"))
converter("ArgMin")(_arg("argmin"))


def _coerced(fn):
    """Softmax-like ops: before opset 13 the input is viewed as 2-D at `axis` (default 1)."""
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        if ctx.opset < 13:
            axis = _axis(attrs.get("axis", 1), x.ndim)
            flat = x.reshape(_prod(x.shape[:axis]), _prod(x.shape[axis:]))
            return fn(flat, 1).reshape(x.shape)
        return fn(x, _axis(attrs.get("axis", -1), x.ndim))
    return convert


def _hardmax(x, axis):
    index = x.argmax(axis, True)
    positions = as_tensor(np.arange(x.shape[axis]).reshape([-1 if i == axis else 1 for i in range(x.ndim)]))
    return (positions == index).to(x.dtype)


converter("Softmax")(_coerced(lambda x, a: F.softmax(x, a)))
converter("LogSoftmax")(_coerced(lambda x, a: F.log_softmax(x, a)))
converter("Hardmax")(_coerced(_hardmax))


@converter("TopK", values=lambda opset: {1} if opset >= 10 else set())
def _topk(ctx, inputs, attrs):
    x = inputs[0]
    k = attrs["k"] if ctx.opset < 10 else ctx.ints(inputs[1], "k")[0]
    axis = _axis(attrs.get("axis", -1), x.ndim)
    largest = attrs.get("largest", 1)
    sentinel = dt.finfo_min(x.dtype) if largest else dt.finfo_max(x.dtype)
    positions = as_tensor(np.arange(x.shape[axis]).reshape([-1 if i == axis else 1 for i in range(x.ndim)]))
    values, indices, rest = [], [], x
    for _ in range(k):  # k selection rounds: ties go to the lower index, as ONNX asks
        index = rest.argmax(axis, True) if largest else rest.argmin(axis, True)
        values.append(x.gather(axis, index))
        indices.append(index)
        rest = where(positions == index, _full((), sentinel, x.dtype), rest)
    if not k:
        shape = tuple(0 if i == axis else s for i, s in enumerate(x.shape))
        return [_full(shape, 0, x.dtype), _full(shape, 0, dt.int64)]
    return [concat(values, axis), concat(indices, axis)]


@converter("CumSum", values={1})
def _cumsum(ctx, inputs, attrs):
    x = inputs[0]
    axis = _axis(ctx.ints(inputs[1], "axis")[0], x.ndim)
    n = x.shape[axis]
    i, j = np.arange(n).reshape(-1, 1), np.arange(n).reshape(1, -1)
    exclusive, reverse = attrs.get("exclusive", 0), attrs.get("reverse", 0)
    if reverse:
        mask = i > j if exclusive else i >= j
    else:
        mask = i < j if exclusive else i <= j
    moved = x.transpose(axis, -1)
    out = matmul(moved, as_tensor(mask.astype(np.float64), x.dtype))
    return out.transpose(axis, -1)


@converter("Trilu", values={1})
def _trilu(ctx, inputs, attrs):
    x = inputs[0]
    k = ctx.ints(inputs[1], "k")[0] if len(inputs) > 1 and inputs[1] is not None else 0
    n, m = x.shape[-2:]
    ones = np.ones((n, m), dtype=bool)
    mask = np.triu(ones, k) if attrs.get("upper", 1) else np.tril(ones, k)
    return where(as_tensor(mask), x, _full((), 0, x.dtype))


# ---- contractions ------------------------------------------------------------------------

@converter("MatMul")
def _matmul(ctx, inputs, attrs):
    return matmul(*inputs)


@converter("Gemm")
def _gemm(ctx, inputs, attrs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if attrs.get("transA", 0):
        a = a.transpose(0, 1)
    if attrs.get("transB", 0):
        b = b.transpose(0, 1)
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    with composite_scope("linear"):
        y = matmul(a, b)
        if alpha != 1.0:
            y = y * alpha
        if c is not None and beta != 0.0:
            y = y + (c if beta == 1.0 else c * beta).to(y.dtype)
    return y


def _conv_pads(ctx, attrs, spatial, kernel, strides, dilations):
    """(begin, end) padding per spatial axis from pads or auto_pad."""
    n = len(spatial)
    auto = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("NOTSET", ""):
        pads = attrs.get("pads") or [0] * (2 * n)
        return [(pads[i], pads[i + n]) for i in range(n)]
    if auto == "VALID":
        return [(0, 0)] * n
    result = []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        result.append((small, big) if auto == "SAME_UPPER" else (big, small))
    return result


def _conv2d(x, w, pads, strides, dilations, group):
    (pt, pb), (pl, pr) = pads
    return apply("conv2d", [x, w], stride=tuple(strides), padding=(pt, pb, pl, pr),
                 dilation=tuple(dilations), groups=int(group))


def _conv_nd(x, w, pads, strides, dilations, group):
    """Convolution over 1, 2 or 3 spatial axes, built from the conv2d primitive."""
    n = x.ndim - 2
    if n == 1:
        out = _conv2d(x.unsqueeze(2), w.unsqueeze(2), [(0, 0)] + pads, [1] + strides, [1] + dilations, group)
        return out.squeeze(2)
    if n == 2:
        return _conv2d(x, w, pads, strides, dilations, group)
    if n == 3:  # sum over the depth taps of 2-D convolutions of depth slices
        (dlo, dhi) = pads[0]
        if dlo or dhi:
            x = apply("pad", [x], pads=((0, 0), (0, 0), (dlo, dhi), (0, 0), (0, 0)), value=0.0)
        nb, c, depth = x.shape[:3]
        kd = w.shape[2]
        od = (depth - dilations[0] * (kd - 1) - 1) // strides[0] + 1
        total = None
        for t in range(kd):
            start = t * dilations[0]
            xs = x[:, :, start:start + (od - 1) * strides[0] + 1:strides[0]]
            xs = xs.permute(0, 2, 1, 3, 4).reshape((nb * od, c) + tuple(x.shape[3:]))
            y = _conv2d(xs, w[:, :, t], pads[1:], strides[1:], dilations[1:], group)
            total = y if total is None else total + y
        return total.reshape((nb, od) + tuple(total.shape[1:])).permute(0, 2, 1, 3, 4)
    raise ShapeError(f"Conv over {n} spatial axes is not supported (1, 2 or 3)")


@converter("Conv")
def _conv(ctx, inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    n = x.ndim - 2
    kernel = attrs.get("kernel_shape") or list(w.shape[2:])
    strides = attrs.get("strides") or [1] * n
    dilations = attrs.get("dilations") or [1] * n
    pads = _conv_pads(ctx, attrs, x.shape[2:], kernel, strides, dilations)
    with composite_scope("conv2d"):
        out = _conv_nd(x, w.to(x.dtype), pads, list(strides), list(dilations), attrs.get("group", 1))
        if b is not None:
            out = out + b.to(x.dtype).reshape((1, -1) + (1,) * n)
    return out


@converter("ConvTranspose")
def _conv_transpose(ctx, inputs, attrs):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    n = x.ndim - 2
    if n not in (1, 2):
        raise ctx.unsupported(f"ConvTranspose over {n} spatial axes is not supported (1 or 2)")
    group = attrs.get("group", 1)
    kernel = attrs.get("kernel_shape") or list(w.shape[2:])
    strides = attrs.get("strides") or [1] * n
    dilations = attrs.get("dilations") or [1] * n
    out_pad = attrs.get("output_padding") or [0] * n
    spatial = x.shape[2:]
    auto = attrs.get("auto_pad", "NOTSET")
    pads = attrs.get("pads")
    output_shape = attrs.get("output_shape")
    if output_shape or auto in ("SAME_UPPER", "SAME_LOWER"):
        if not output_shape:
            output_shape = [s * st for s, st in zip(spatial, strides)]
        output_shape = list(output_shape)[-n:]
        pads_be = []
        for i in range(n):
            total = strides[i] * (spatial[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - output_shape[i]
            if auto == "SAME_UPPER":
                pads_be.append((total // 2, total - total // 2))
            else:
                pads_be.append((total - total // 2, total // 2))
    elif auto == "VALID" or not pads:
        pads_be = [(0, 0)] * n
    else:
        pads_be = [(pads[i], pads[i + n]) for i in range(n)]
    if n == 1:
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        kernel, strides, dilations, out_pad = [1] + list(kernel), [1] + list(strides), [1] + list(dilations), \
            [0] + list(out_pad)
        pads_be = [(0, 0)] + pads_be
    with composite_scope("conv_transpose"):
        nb, c, h, wd = x.shape
        sh, sw = strides
        if sh > 1 or sw > 1:  # insert stride-1 zeros between input elements
            z = x.reshape(nb, c, h, 1, wd, 1)
            z = apply("pad", [z], pads=((0, 0), (0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1)), value=0.0)
            x = z.reshape(nb, c, h * sh, wd * sw)[:, :, :(h - 1) * sh + 1, :(wd - 1) * sw + 1]
        full = []
        for i in range(2):
            k = (kernel[i] - 1) * dilations[i]
            full.append((k - pads_be[i][0], k - pads_be[i][1] + out_pad[i]))
        torch_pads = [full[1][0], full[1][1], full[0][0], full[0][1]]
        x = F.pad(x, torch_pads)  # negative values crop
        cg, og = w.shape[0] // group, w.shape[1]
        wt = w.to(x.dtype).reshape((group, cg, og) + tuple(w.shape[2:])).permute(0, 2, 1, 3, 4)
        wt = wt.reshape((group * og, cg) + tuple(w.shape[2:])).flip((2, 3))
        out = _conv2d(x, wt, [(0, 0), (0, 0)], [1, 1], list(dilations), group)
        if b is not None:
            out = out + b.to(out.dtype).reshape(1, -1, 1, 1)
    return out.squeeze(2) if n == 1 else out


@converter("Einsum")
def _einsum(ctx, inputs, attrs):
    equation = attrs["equation"].replace(" ", "")
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    spare = [c for c in string.ascii_letters if c not in equation]
    ell_rank = max((t.ndim - (len(term) - 3) for t, term in zip(inputs, terms) if "..." in term), default=0)
    ell = "".join(spare[:ell_rank])
    terms = [term.replace("...", ell[ell_rank - (t.ndim - (len(term) - 3)):]) if "..." in term else term
             for t, term in zip(inputs, terms)]
    if "->" not in equation:
        counts = {c: "".join(terms).count(c) for c in "".join(terms)}
        rhs = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        rhs = rhs.replace("...", ell)
    letters = list(dict.fromkeys("".join(terms) + rhs))
    sizes = {}
    for t, term in zip(inputs, terms):
        if len(set(term)) != len(term):
            raise ctx.unsupported(f"equation {equation!r}: a repeated index in one operand (a diagonal)")
        for c, s in zip(term, t.shape):
            sizes[c] = max(sizes.get(c, 1), s)
    product = None
    for t, term in zip(inputs, terms):
        order = sorted(range(len(term)), key=lambda i: letters.index(term[i]))
        moved = t.permute(tuple(order)) if order else t
        present = [term[i] for i in order]
        shaped = moved.reshape(tuple(sizes[c] if c in present and moved.shape[present.index(c)] != 1 else 1
                                     for c in letters))
        product = shaped if product is None else product * shaped
    summed = [i for i, c in enumerate(letters) if c not in rhs]
    if summed:
        product = product.sum(tuple(summed))
        if not product.dtype.is_floating and product.dtype != inputs[0].dtype:
            product = product.to(inputs[0].dtype)
    kept = [c for c in letters if c in rhs]
    out = product.permute(tuple(kept.index(c) for c in rhs)) if rhs else product
    return out.expand(tuple(sizes[c] for c in rhs)) if rhs else out


# ---- pooling -------------------------------------------------------------------------------

def _pool_geometry(x, attrs, global_pool=False):
    n = x.ndim - 2
    spatial = list(x.shape[2:])
    if global_pool:
        return spatial, [1] * n, [1] * n, [(0, 0)] * n, [1] * n
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    auto = attrs.get("auto_pad", "NOTSET")
    ceil_mode = attrs.get("ceil_mode", 0)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = _conv_pads(None, attrs, spatial, kernel, strides, dilations)
        outs = [-(-s // st) for s, st in zip(spatial, strides)]
    else:
        if auto == "VALID":
            pads = [(0, 0)] * n
        else:
            p = attrs.get("pads") or [0] * (2 * n)
            pads = [(p[i], p[i + n]) for i in range(n)]
        outs = []
        for size, k, s, d, (lo, hi) in zip(spatial, kernel, strides, dilations, pads):
            span = size + lo + hi - d * (k - 1) - 1
            if ceil_mode:
                o = -(-span // s) + 1
                if (o - 1) * s >= size + lo:
                    o -= 1
            else:
                o = span // s + 1
            outs.append(o)
    return kernel, strides, dilations, pads, outs


def _windows(x, value, kernel, strides, dilations, pads, outs):
    extra = [max(0, (o - 1) * s + (k - 1) * d + 1 - (size + lo + hi))
             for o, s, k, d, size, (lo, hi) in zip(outs, strides, kernel, dilations, x.shape[2:], pads)]
    full = ((0, 0), (0, 0)) + tuple((lo, hi + e) for (lo, hi), e in zip(pads, extra))
    if any(a or b for a, b in full):
        x = apply("pad", [x], pads=full, value=value)
    w = apply("window", [x], kernel=tuple(kernel), stride=tuple(strides), dilation=tuple(dilations))
    # the window op yields as many positions as fit; keep the first `outs`
    if tuple(w.shape[2:2 + len(outs)]) != tuple(outs):
        w = w[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]
    return w


def _window_counts(x, kernel, strides, dilations, pads, outs, include_pad):
    """Number of cells each window averages (per output position), as a constant array."""
    counts = None
    for size, k, s, d, (lo, hi), o in zip(x.shape[2:], kernel, strides, dilations, pads, outs):
        pos = (np.arange(o) * s - lo).reshape(-1, 1) + np.arange(k) * d
        low, high = (-lo, size + hi) if include_pad else (0, size)
        c = ((pos >= low) & (pos < high)).sum(axis=1).astype(np.float64)
        counts = c if counts is None else np.multiply.outer(counts, c)
    return counts


@converter("MaxPool")
def _max_pool(ctx, inputs, attrs):
    x = inputs[0]
    kernel, strides, dilations, pads, outs = _pool_geometry(x, attrs)
    n = len(kernel)
    with composite_scope("max_pool"):
        w = _windows(x, float(dt.finfo_min(x.dtype)) if x.dtype.is_floating else int(dt.finfo_min(x.dtype)),
                     kernel, strides, dilations, pads, outs)
        axes = tuple(range(-n, 0))
        values = w.amax(axes)
        if ctx.n_outputs < 2 or not ctx.outputs_used[1]:
            return values
        flat = w.reshape(tuple(w.shape[:2 + n]) + (_prod(kernel),)).argmax(-1)
        spatial = list(x.shape[2:])
        coords = []
        rem = flat
        for i in range(n):  # kernel offsets per axis, then input coordinates
            inner = _prod(kernel[i + 1:])
            off = rem // inner
            rem = rem % inner
            base = (np.arange(outs[i]) * strides[i] - pads[i][0]).reshape([-1 if j == i else 1 for j in range(n)])
            coords.append(as_tensor(base.astype(np.int64)) + off * dilations[i])
        linear = None
        order = list(range(n)) if not attrs.get("storage_order", 0) else list(reversed(range(n)))
        for i in order:
            linear = coords[i] if linear is None else linear * spatial[i] + coords[i]
        nc = as_tensor((np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * _prod(spatial))
                       .reshape((x.shape[0], x.shape[1]) + (1,) * n))
    return [values, linear + nc]


@converter("AveragePool")
def _average_pool(ctx, inputs, attrs):
    x = inputs[0]
    kernel, strides, dilations, pads, outs = _pool_geometry(x, attrs)
    n = len(kernel)
    with composite_scope("avg_pool"):
        w = _windows(x, 0.0, kernel, strides, dilations, pads, outs)
        total = w.sum(tuple(range(-n, 0)))
        counts = _window_counts(x, kernel, strides, dilations, pads, outs, attrs.get("count_include_pad", 0))
        return total / as_tensor(counts, x.dtype)


@converter("LpPool")
def _lp_pool(ctx, inputs, attrs):
    x = inputs[0]
    p = attrs.get("p", 2)
    kernel, strides, dilations, pads, outs = _pool_geometry(x, attrs)
    w = _windows(x, 0.0, kernel, strides, dilations, pads, outs)
    return (w.abs() ** float(p)).sum(tuple(range(-len(kernel), 0))) ** (1.0 / p)


@converter("GlobalAveragePool")
def _global_average_pool(ctx, inputs, attrs):
    x = inputs[0]
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@converter("GlobalMaxPool")
def _global_max_pool(ctx, inputs, attrs):
    x = inputs[0]
    return x.amax(tuple(range(2, x.ndim)), keepdim=True)


@converter("GlobalLpPool")
def _global_lp_pool(ctx, inputs, attrs):
    x, p = inputs[0], attrs.get("p", 2)
    return (x.abs() ** float(p)).sum(tuple(range(2, x.ndim)), keepdim=True) ** (1.0 / p)


# ---- normalization -------------------------------------------------------------------------

def _per_channel(t: Tensor, x: Tensor) -> Tensor:
    t = t.to(x.dtype)
    if t.ndim == 1:
        return t.reshape((1, -1) + (1,) * (x.ndim - 2))
    return t.reshape((1,) + tuple(t.shape))  # opset < 9 spatial=0: per activation


@converter("BatchNormalization")
def _batch_norm(ctx, inputs, attrs):
    x, scale, bias, mean, var = inputs[:5]
    eps = attrs.get("epsilon", 1e-5)
    training = ctx.opset >= 14 and attrs.get("training_mode", 0)
    with composite_scope("batch_norm"):
        if training:
            axes = (0,) + tuple(range(2, x.ndim))
            batch_mean = x.mean(axes, keepdim=True)
            centered = x - batch_mean
            batch_var = (centered * centered).mean(axes, keepdim=True)
            y = centered * (batch_var + eps).rsqrt() * _per_channel(scale, x) + _per_channel(bias, x)
            momentum = attrs.get("momentum", 0.9)
            running_mean = mean * momentum + batch_mean.reshape(-1).to(mean.dtype) * (1 - momentum)
            running_var = var * momentum + batch_var.reshape(-1).to(var.dtype) * (1 - momentum)
            return [y, running_mean, running_var]
        y = (x - _per_channel(mean, x)) * (_per_channel(var, x) + eps).rsqrt()
        y = y * _per_channel(scale, x) + _per_channel(bias, x)
    outputs = [y]
    if ctx.n_outputs > 1:  # opset < 9 optional statistics outputs: pass the running values through
        outputs += [mean, var, mean, var][:ctx.n_outputs - 1]
    return outputs


@converter("InstanceNormalization")
def _instance_norm(ctx, inputs, attrs):
    x, scale, bias = inputs
    eps = attrs.get("epsilon", 1e-5)
    axes = tuple(range(2, x.ndim))
    with composite_scope("instance_norm"):
        mu = x.mean(axes, keepdim=True)
        centered = x - mu
        variance = (centered * centered).mean(axes, keepdim=True)
        return centered * (variance + eps).rsqrt() * _per_channel(scale, x) + _per_channel(bias, x)


@converter("LayerNormalization")
def _layer_norm(ctx, inputs, attrs):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = _axis(attrs.get("axis", -1), x.ndim)
    eps = attrs.get("epsilon", 1e-5)
    axes = tuple(range(axis, x.ndim))
    normalized = tuple(x.shape[axis:])
    wants_stats = ctx.n_outputs > 1 and any(ctx.outputs_used[1:])
    if not wants_stats and tuple(scale.shape) == normalized and (bias is None or tuple(bias.shape) == normalized):
        return F.layer_norm(x, normalized, scale.to(x.dtype), None if bias is None else bias.to(x.dtype), eps)
    stash = dt.float32 if attrs.get("stash_type", 1) == 1 and x.dtype in (dt.float16, dt.bfloat16) else x.dtype
    with composite_scope("layer_norm"):
        xs = x.to(stash)
        mu = xs.mean(axes, keepdim=True)
        centered = xs - mu
        inv_std = ((centered * centered).mean(axes, keepdim=True) + eps).rsqrt()
        y = (centered * inv_std).to(x.dtype) * scale
        if bias is not None:
            y = y + bias
    return [y, mu, inv_std]


@converter("GroupNormalization")
def _group_norm(ctx, inputs, attrs):
    x, scale, bias = inputs
    groups = attrs["num_groups"]
    eps = attrs.get("epsilon", 1e-5)
    nb, c = x.shape[:2]
    with composite_scope("group_norm"):
        g = x.reshape(nb, groups, -1)
        mu = g.mean(2, keepdim=True)
        centered = g - mu
        y = (centered * ((centered * centered).mean(2, keepdim=True) + eps).rsqrt()).reshape(x.shape)
        if ctx.opset < 21 and scale.shape[0] == groups and groups != c:  # opset 18: per-group parameters
            scale = scale.reshape(-1, 1).expand(groups, c // groups).reshape(-1)
            bias = bias.reshape(-1, 1).expand(groups, c // groups).reshape(-1)
        return y * _per_channel(scale, x) + _per_channel(bias, x)


@converter("MeanVarianceNormalization")
def _mvn(ctx, inputs, attrs):
    x = inputs[0]
    axes = tuple(_axis(a, x.ndim) for a in attrs.get("axes", [0, 2, 3]))
    mu = x.mean(axes, keepdim=True)
    variance = (x * x).mean(axes, keepdim=True) - mu * mu
    return (x - mu) / (variance.sqrt() + 1e-9)


@converter("LRN")
def _lrn(ctx, inputs, attrs):
    x = inputs[0]
    size = attrs["size"]
    alpha, beta, bias = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = (x * x).transpose(1, -1)
    padded = apply("pad", [sq], pads=tuple((0, 0) for _ in range(x.ndim - 1)) + ((lo, hi),), value=0.0)
    windows = apply("window", [padded], kernel=(size,), stride=(1,), dilation=(1,))
    total = windows.sum(-1).transpose(1, -1)
    return x / (total * (alpha / size) + bias) ** beta


@converter("Dropout", values=lambda opset: {1, 2} if opset >= 12 else set())
def _dropout(ctx, inputs, attrs):
    x = inputs[0]
    training = False
    if ctx.opset >= 12 and len(inputs) > 2 and inputs[2] is not None:
        training = bool(ctx.values(inputs[2], "training_mode").reshape(-1)[0])
    ratio = ctx.values(inputs[1], "ratio") if len(inputs) > 1 and inputs[1] is not None else None
    ratio = float(ratio.reshape(-1)[0]) if ratio is not None else attrs.get("ratio", 0.5)
    if ctx.opset < 7 and not attrs.get("is_test", 0):
        training = True
    if training and ratio > 0:
        raise ctx.unsupported("Dropout in training mode is random; export the model for inference")
    return [x, _full(x.shape, True, dt.bool_)][:max(ctx.n_outputs, 1)]


# ---- layout --------------------------------------------------------------------------------

@converter("DepthToSpace")
def _depth_to_space(ctx, inputs, attrs):
    x = inputs[0]
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    if attrs.get("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@converter("SpaceToDepth")
def _space_to_depth(ctx, inputs, attrs):
    x = inputs[0]
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.permute(0, 3, 5, 1, 2, 4) if attrs.get("mode", "DCR") == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@converter("OneHot", values={1, 2})
def _one_hot(ctx, inputs, attrs):
    index, depth, values = inputs
    depth = int(ctx.values(depth, "depth").reshape(-1)[0])
    axis = attrs.get("axis", -1)
    rank = index.ndim + 1
    axis = _axis(axis, rank)
    index = index.to(dt.int64)
    index = where(index < 0, index + depth, index).unsqueeze(axis)
    positions = as_tensor(np.arange(depth, dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(rank)]))
    off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    return where(positions == index, on, off)


# ---- resize --------------------------------------------------------------------------------

def _source_coordinates(mode, out_size, in_size, scale, roi_start, roi_end):
    x = np.arange(out_size, dtype=np.float64)
    length = in_size * scale  # ONNX uses the unrounded resized length in the transforms
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_size / length
        center = in_size / 2
        return center * (1 - adjustment) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if length > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * (in_size - 1) / (length - 1) if length > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        if length > 1:
            return roi_start * (in_size - 1) + x * (roi_end - roi_start) * (in_size - 1) / (length - 1)
        return np.full_like(x, 0.5 * (roi_start + roi_end) * (in_size - 1))
    raise ValueError(f"coordinate_transformation_mode {mode!r} is not supported")


def _nearest(coords, mode):
    if mode == "round_prefer_ceil":
        return np.floor(coords + 0.5)
    if mode == "floor":
        return np.floor(coords)
    if mode == "ceil":
        return np.ceil(coords)
    return np.ceil(coords - 0.5)  # round_prefer_floor


def _cubic_weights(t, a):
    def k(s):
        s = np.abs(s)
        return np.where(s <= 1, ((a + 2) * s - (a + 3)) * s * s + 1,
                        np.where(s < 2, ((a * s - 5 * a) * s + 8 * a) * s - 4 * a, 0.0))
    return [k(t + 1), k(t), k(1 - t), k(2 - t)]


def _resize_matrix(mode, coord_mode, nearest_mode, in_size, out_size, scale, roi, attrs):
    """The (out, in) interpolation matrix of one axis and the positions reading the extrapolation value."""
    coords = _source_coordinates(coord_mode, out_size, in_size, scale, *roi)
    outside = (coords < 0) | (coords > in_size - 1) if coord_mode == "tf_crop_and_resize" else \
        np.zeros(out_size, dtype=bool)
    m = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    if mode == "nearest":
        idx = np.clip(_nearest(coords, nearest_mode).astype(np.int64), 0, in_size - 1)
        m[rows, idx] = 1.0
    elif mode == "linear":
        c = np.clip(coords, 0, in_size - 1)
        lo = np.floor(c).astype(np.int64)
        hi = np.minimum(lo + 1, in_size - 1)
        w = c - lo
        np.add.at(m, (rows, lo), 1 - w)
        np.add.at(m, (rows, hi), w)
    elif mode == "cubic":
        base = np.floor(coords).astype(np.int64)
        t = coords - base
        weights = _cubic_weights(t, attrs.get("cubic_coeff_a", -0.75))
        taps = [base - 1, base, base + 1, base + 2]
        if attrs.get("exclude_outside", 0):
            inside = [(p >= 0) & (p < in_size) for p in taps]
            weights = [wt * ok for wt, ok in zip(weights, inside)]
            total = sum(weights)
            weights = [wt / np.where(total == 0, 1, total) for wt in weights]
        for p, wt in zip(taps, weights):
            np.add.at(m, (rows, np.clip(p, 0, in_size - 1)), wt)
    else:
        raise ValueError(f"Resize mode {mode!r} is not supported")
    return m, outside


def _resize(ctx, x, scales, sizes, roi, attrs, axes=None):
    mode = attrs.get("mode", "nearest")
    coord_mode = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest_mode = attrs.get("nearest_mode", "round_prefer_floor")
    if attrs.get("antialias", 0):
        raise ctx.unsupported("antialias is not supported")
    axes = list(range(x.ndim)) if axes is None else [_axis(a, x.ndim) for a in axes]
    full_scales = [1.0] * x.ndim
    full_sizes = list(x.shape)
    if sizes is not None:
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        ratios = [sizes[i] / x.shape[a] for i, a in enumerate(axes)]
        if policy in ("not_larger", "not_smaller"):
            r = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [r] * len(axes)
            sizes = [int(math.floor(r * x.shape[a] + 0.5)) for a in axes]
        for i, a in enumerate(axes):
            full_scales[a], full_sizes[a] = ratios[i], int(sizes[i])
    else:
        for i, a in enumerate(axes):
            full_scales[a] = float(scales[i])
            full_sizes[a] = int(math.floor(x.shape[a] * float(scales[i])))
    rois = [(0.0, 1.0)] * x.ndim
    if roi is not None and len(roi) and coord_mode == "tf_crop_and_resize":
        k = len(axes)
        for i, a in enumerate(axes):
            rois[a] = (float(roi[i]), float(roi[i + k]))
    extrapolation = attrs.get("extrapolation_value", 0.0)
    y = x if x.dtype.is_floating else x.to(dt.float32)
    for a in range(x.ndim):
        if full_sizes[a] == x.shape[a] and full_scales[a] == 1.0 and coord_mode != "tf_crop_and_resize":
            continue
        m, outside = _resize_matrix(mode, coord_mode, nearest_mode, x.shape[a], full_sizes[a], full_scales[a],
                                    rois[a], attrs)
        moved = y.transpose(a, -1)
        if mode == "nearest":
            index = as_tensor(np.argmax(m, axis=1).astype(np.int64))
            out = apply("take", [moved, index], axis=moved.ndim - 1)
        else:
            out = matmul(moved, as_tensor(m.T, y.dtype))
        if outside.any():
            out = where(as_tensor(outside), extrapolation, out)
        y = out.transpose(a, -1)
    return y.to(x.dtype) if y.dtype != x.dtype else y


@converter("Resize", values=lambda opset: {1, 2, 3} if opset >= 11 else {1})
def _resize_op(ctx, inputs, attrs):
    x = inputs[0]
    if ctx.opset < 11:
        scales = ctx.values(inputs[1], "scales")
        return _resize(ctx, x, list(scales), None, None, dict(attrs, coordinate_transformation_mode="asymmetric",
                                                              nearest_mode="floor"))
    roi = ctx.values(inputs[1], "roi") if len(inputs) > 1 else None
    scales = ctx.values(inputs[2], "scales") if len(inputs) > 2 else None
    sizes = ctx.ints(inputs[3], "sizes") if len(inputs) > 3 else None
    if scales is not None and scales.size == 0:
        scales = None
    if sizes is not None and not sizes:
        sizes = None
    return _resize(ctx, x, None if scales is None else list(scales), sizes,
                   None if roi is None else list(roi.reshape(-1)), attrs, attrs.get("axes"))


@converter("Upsample", values=lambda opset: {1} if opset >= 9 else set())
def _upsample(ctx, inputs, attrs):
    x = inputs[0]
    scales = attrs.get("scales") if ctx.opset < 9 else list(ctx.values(inputs[1], "scales"))
    mode = attrs.get("mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    return _resize(ctx, x, scales, None, None, dict(mode=mode, coordinate_transformation_mode="asymmetric",
                                                    nearest_mode="floor"))


def supported_ops() -> list[str]:
    """The ONNX operators (domain ai.onnx) the importer converts."""
    return sorted(CONVERTERS)
