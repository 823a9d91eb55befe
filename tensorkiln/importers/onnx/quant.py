"""ONNX quantization operators: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the
integer matmul and convolution ops (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv).

The quantized values are integers held in integer tensors (int8, uint8, int16); the
arithmetic runs on floats, as a QDQ model's float graph does:

    DequantizeLinear   y = (x - zero_point) * scale
    QuantizeLinear     y = clamp(round_half_even(x / scale) + zero_point, type's range)

MatMulInteger and QLinearMatMul with 8-bit operands and a 2-D B run on `matmul_integer` (exact
int32 sums; a constant B then runs on the u8 x s8 GEMM, passes/int8_weights.py), the zero points
subtracted as column and row sums around it. Other integer products (16-bit types, batched B,
the convolutions) are computed in float64, which holds every sum of products of 8- and 16-bit
integers exactly (up to 2^53). Results are requantized as onnx's reference does (the scale ratio
in the scales' type, the product in float64).

Scales and zero points are per tensor (a scalar), per axis (1-D along `axis`) or blocked
(`block_size`: each scale covers `block_size` consecutive elements along `axis`).
"""
from __future__ import annotations

from ... import dtypes as dt
from ...frontend.functions import matmul, matmul_integer
from ...frontend.tensor import Tensor
from ...frontend.trace import current_trace
from .conv import convolution
from .element_types import tk_dtype
from .helpers import normalize_axis
from .registry import NodeContext, converter

ONNX_UINT8 = 2  # TensorProto.UINT8: QuantizeLinear's type when neither a zero point nor output_dtype names one
_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535)}


def _range(ctx: NodeContext, dtype: dt.DType) -> tuple[int, int]:
    if dtype.name not in _RANGES:
        raise ctx.unsupported(f"quantized type {dtype.name} is not one of {', '.join(_RANGES)}")
    return _RANGES[dtype.name]


def _quant_param(ctx: NodeContext, value: Tensor, shape: tuple, axis: int, block_size: int) -> Tensor:
    """A scale or zero point laid out to broadcast against a tensor of `shape`."""
    if value.ndim == 0 or value.numel() == 1:
        return value.reshape(())
    axis = normalize_axis(axis, len(shape))
    if not block_size:
        if value.ndim != 1 or value.shape[0] != shape[axis]:
            raise ctx.unsupported(f"a per-axis scale or zero point of shape {tuple(value.shape)} does not match "
                                  f"axis {axis} of an input of shape {tuple(shape)}")
        return value.reshape(tuple(value.shape[0] if d == axis else 1 for d in range(len(shape))))
    blocks = -(-shape[axis] // block_size)
    if value.ndim != len(shape) or value.shape[axis] != blocks:
        raise ctx.unsupported(f"a blocked scale of shape {tuple(value.shape)} does not match an input of shape "
                              f"{tuple(shape)} with block_size {block_size} along axis {axis}")
    # (.., blocks, ..) -> (.., blocks, block_size, ..) -> (.., blocks * block_size, ..), cut to the input's length
    wide = list(value.shape)
    wide.insert(axis + 1, block_size)
    spread = value.unsqueeze(axis + 1).expand(*wide)
    merged = list(value.shape)
    merged[axis] = blocks * block_size
    return spread.reshape(tuple(merged)).narrow(axis, 0, shape[axis])


def quantize(ctx: NodeContext, x: Tensor, scale: Tensor, zero_point: Tensor | None, dtype: dt.DType,
             axis: int = 1, block_size: int = 0) -> Tensor:
    """clamp(round_half_even(x / scale) + zero_point) in `dtype`'s range, as `dtype`."""
    lo, hi = _range(ctx, dtype)
    scaled = (x / _quant_param(ctx, scale, tuple(x.shape), axis, block_size)).round()
    if zero_point is not None:
        zero = _quant_param(ctx, zero_point, tuple(x.shape), axis, block_size)
        scaled = scaled + zero.to(scaled.dtype)
    return scaled.clamp(float(lo), float(hi)).to(dtype)


def _shifted(x: Tensor, zero_point: Tensor | None, dtype: dt.DType = dt.float64) -> Tensor:
    """x - zero_point in a float type (zero_point already laid out to broadcast)."""
    out = x.to(dtype)
    return out if zero_point is None else out - zero_point.to(dtype)


def _requantize(ctx: NodeContext, acc: Tensor, ratio: Tensor, zero_point: Tensor | None,
                dtype: dt.DType) -> Tensor:
    """acc * ratio + zero_point, rounded half to even and saturated to `dtype` (acc in float64)."""
    lo, hi = _range(ctx, dtype)
    out = acc * ratio.to(dt.float64)
    if zero_point is not None:
        out = out + zero_point.to(dt.float64)
    return out.round().clamp(float(lo), float(hi)).to(dtype)


@converter("QuantizeLinear")
def _quantize_linear(ctx, inputs, attrs):
    x, scale = inputs[0], inputs[1]
    zero_point = inputs[2] if len(inputs) > 2 else None
    if attrs.get("saturate", 1) != 1:
        raise ctx.unsupported("saturate=0 applies to float8 outputs, which tensorkiln does not hold")
    if zero_point is not None:
        dtype = zero_point.dtype
    else:
        dtype = tk_dtype(attrs.get("output_dtype") or ONNX_UINT8)
    if attrs.get("precision"):
        precision = tk_dtype(attrs["precision"])
        x, scale = x.to(precision), scale.to(precision)
    return quantize(ctx, x, scale, zero_point, dtype, attrs.get("axis", 1), attrs.get("block_size", 0))


def _kept_in_graph(x: Tensor) -> Tensor:
    """A constant 8-bit tensor as a node of the graph being traced, so that its dequantization is
    graph ops too, which the qdq_matmul pass (passes/qdq_matmul.py) finds before constant folding
    would make float weights of it (as it still does where no integer kernel takes them)."""
    trace = current_trace()
    if trace is None or x.is_traced or x.dtype.name not in ("int8", "uint8"):
        return x
    return Tensor._from_node(trace.constant_for(x), trace)


def dequantize(ctx: NodeContext, x: Tensor, scale: Tensor, zero_point: Tensor | None, axis: int = 1,
               block_size: int = 0) -> Tensor:
    """(x - zero_point) * scale in float32: a DequantizeLinear's graph ops (the int8 passes match them)."""
    x = _kept_in_graph(x)
    shape = tuple(x.shape)
    if zero_point is not None:
        zero_point = _quant_param(ctx, zero_point, shape, axis, block_size)
    return _shifted(x, zero_point, dt.float32) * _quant_param(ctx, scale, shape, axis, block_size).to(dt.float32)


@converter("DequantizeLinear")
def _dequantize_linear(ctx, inputs, attrs):
    scale = inputs[1]
    zero_point = inputs[2] if len(inputs) > 2 else None
    out = dequantize(ctx, inputs[0], scale, zero_point, attrs.get("axis", 1), attrs.get("block_size", 0))
    return out.to(tk_dtype(attrs["output_dtype"]) if attrs.get("output_dtype") else scale.dtype)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx, inputs, attrs):
    x = inputs[0].to(dt.float32)
    uint8 = tk_dtype(ONNX_UINT8)
    high, low = x.max().clamp(min=0.0), x.min().clamp(max=0.0)
    span = high - low
    # a constant input (max == min, both 0 after the clamps) gets scale 1, as the reference
    scale = (span + (span == 0.0).to(dt.float32)) / 255.0
    zero = (0.0 - low / scale).clamp(0.0, 255.0).round()
    y = ((x / scale).round() + zero).clamp(0.0, 255.0).to(uint8)
    return [y, scale.to(inputs[0].dtype), zero.to(uint8)]


def _row_zero_point(zero_point: Tensor | None) -> Tensor | None:
    """MatMulInteger's a_zero_point: a scalar, or one per row of A (a column to broadcast)."""
    if zero_point is None or zero_point.ndim == 0 or zero_point.numel() == 1:
        return None if zero_point is None else zero_point.reshape(())
    return zero_point.reshape((zero_point.shape[0], 1))


def _channel_zero_point(zero_point: Tensor | None, rank: int) -> Tensor | None:
    """A weight zero point: a scalar, or one per output channel (axis 0 of the weight)."""
    if zero_point is None or zero_point.ndim == 0 or zero_point.numel() == 1:
        return None if zero_point is None else zero_point.reshape(())
    return zero_point.reshape((zero_point.shape[0],) + (1,) * (rank - 1))


def _known_zero(t: Tensor | None) -> bool:
    """No zero point, or one known at compile time to be all zeros (its terms then vanish)."""
    return t is None or (not t.is_traced and not t.numpy().any())


def _integer_matmul(a: Tensor, b: Tensor, a_zero: Tensor | None, b_zero: Tensor | None) -> Tensor | None:
    """(a - a_zero) @ (b - b_zero) exactly in int32 on matmul_integer, or None where that does not apply.

    (A - za)(B - zb) = A @ B - za * colsum(B) - rowsum(A) * zb + K za zb: with B constant, colsum(B)
    folds at compile time, and the usual symmetric weights (zb = 0) need no row sums at all.
    """
    eight_bit = ("int8", "uint8")
    if a.ndim < 2 or b.ndim != 2 or a.dtype.name not in eight_bit or b.dtype.name not in eight_bit:
        return None
    acc = matmul_integer(a, b)
    a_zero = None if _known_zero(a_zero) else a_zero.to(dt.int32)
    b_zero = None if _known_zero(b_zero) else b_zero.to(dt.int32)
    if a_zero is not None:
        acc = acc - a_zero * b.to(dt.int32).sum(0).to(dt.int32)
    if b_zero is not None:
        acc = acc - a.to(dt.int32).sum(-1, keepdim=True).to(dt.int32) * b_zero
        if a_zero is not None:
            acc = acc + a_zero * b_zero * b.shape[0]
    return acc.to(dt.int32)


@converter("MatMulInteger")
def _matmul_integer(ctx, inputs, attrs):
    a, b = inputs[0], inputs[1]
    a_zero = _row_zero_point(inputs[2] if len(inputs) > 2 else None)
    b_zero = inputs[3] if len(inputs) > 3 else None  # a scalar or one per column: broadcasts as is
    exact = _integer_matmul(a, b, a_zero, b_zero)
    if exact is not None:
        return exact
    return matmul(_shifted(a, a_zero), _shifted(b, b_zero)).to(dt.int32)


@converter("QLinearMatMul")
def _qlinear_matmul(ctx, inputs, attrs):
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale = inputs[:7]
    y_zero = inputs[7] if len(inputs) > 7 else None
    acc = _integer_matmul(a, b, _row_zero_point(a_zero), b_zero)
    if acc is not None:
        acc = acc.to(dt.float64)
    else:
        acc = matmul(_shifted(a, _row_zero_point(a_zero)), _shifted(b, b_zero))
    ratio = a_scale.reshape((-1, 1)) * b_scale / y_scale if a_scale.numel() > 1 else a_scale * b_scale / y_scale
    return _requantize(ctx, acc, ratio, y_zero, y_zero.dtype if y_zero is not None else a.dtype)


def _integer_conv(ctx: NodeContext, x: Tensor, x_zero: Tensor | None, w: Tensor, w_zero: Tensor | None,
                  bias: Tensor | None, attrs: dict) -> Tensor:
    """The convolution of (x - x_zero) and (w - w_zero) (plus an int32 bias), exact in float64; with a
    constant 8-bit filter the qdq_integer pass (passes/qdq_integer.py) runs it on integers."""
    shifted_w = _shifted(_kept_in_graph(w), _channel_zero_point(w_zero, w.ndim))
    inputs = [_shifted(x, None if x_zero is None else x_zero.reshape(())), shifted_w,
              None if bias is None else bias.to(dt.float64)]
    return convolution(ctx, inputs, attrs)


@converter("ConvInteger")
def _conv_integer(ctx, inputs, attrs):
    x, w = inputs[0], inputs[1]
    x_zero = inputs[2] if len(inputs) > 2 else None
    w_zero = inputs[3] if len(inputs) > 3 else None
    return _integer_conv(ctx, x, x_zero, w, w_zero, None, attrs).to(dt.int32)


@converter("QLinearConv")
def _qlinear_conv(ctx, inputs, attrs):
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale = inputs[:7]
    y_zero = inputs[7] if len(inputs) > 7 else None
    bias = inputs[8] if len(inputs) > 8 else None
    acc = _integer_conv(ctx, x, x_zero, w, w_zero, bias, attrs)
    if w_scale.numel() > 1:  # one scale per output channel
        w_scale = w_scale.reshape((1, w_scale.shape[0]) + (1,) * (acc.ndim - 2))
    return _requantize(ctx, acc, x_scale * w_scale / y_scale, y_zero,
                       y_zero.dtype if y_zero is not None else x.dtype)
