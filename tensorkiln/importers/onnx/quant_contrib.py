"""ONNX Runtime's quantization operators (domain com.microsoft), as its quantizer writes them.

`onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QOperator)` replaces each
quantized float op by a QLinear* operator of the com.microsoft domain (QLinearAdd for a residual
add, QGemm for a classifier, QLinearSoftmax in attention, ...), and ONNX Runtime's own graph
optimizer writes DynamicQuantizeMatMul and MatMulIntegerToFloat into the models it saves. Each
operator's definition is "dequantize the inputs, the float op, quantize the result", and it is
converted as exactly that: the same graph ops a QDQ model's DequantizeLinear -> op ->
QuantizeLinear chain gives (quant.py's `dequantize` and `quantize`), so the int8 passes fuse them
the same way (a residual add becomes a side value of its convolution's requantizing epilogue).
ONNX Runtime computes some of them with lookup tables or fused scale ratios, so its outputs may
differ from these by one quantum.

The integer products (QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul) are exact int32 sums on
`matmul_integer` (the u8 x s8 GEMM for constant weights), as MatMulInteger's are. DynamicQuantizeLSTM
(`quantize_dynamic`'s LSTM) is the float LSTM of its dequantized weights.

MatMulNBits (the weight-only 2-, 4- or 8-bit blocks that `MatMul4BitsQuantizer` / `MatMulNBitsQuantizer`
write, the form of ONNX int4 language models) is its definition too: the weight dequantized once, at
compile time, block by block, `(q - zero_point) * scale`, and a float matmul by it (`accuracy_level`,
which lets ONNX Runtime quantize A to int8, is not taken up: the float product is the exact one). With
a weight-only precision ("int8w", "int4w-g<block>") the weight-only pass finds those blocks in the
float weight and keeps their integers and scales (passes/weight_only.py).

Keys are "com.microsoft::Op"; com.microsoft's QuantizeLinear and DequantizeLinear are ai.onnx's.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ... import dtypes as dt
from ...frontend.functions import concat, matmul, where
from ...frontend.tensor import Tensor, as_tensor
from ...nn import functional as F
from .activations import _coerced
from .helpers import normalize_axis
from .pooling import _average_pool, _global_average_pool
from .quant import (_dequantize_linear, _dynamic_quantize_linear, _integer_matmul, _quantize_linear,
                    _requantize, _row_zero_point, _shifted, dequantize, quantize)
from .registry import CONVERTERS, NodeContext, converter

DOMAIN = "com.microsoft"

CONVERTERS[f"{DOMAIN}::QuantizeLinear"] = _quantize_linear
CONVERTERS[f"{DOMAIN}::DequantizeLinear"] = _dequantize_linear


def _optional(inputs: list, index: int) -> Tensor | None:
    return inputs[index] if len(inputs) > index else None


def _requantized(ctx: NodeContext, value: Tensor, scale: Tensor, zero_point: Tensor | None,
                 like: Tensor) -> Tensor:
    """value quantized with (scale, zero_point) to the zero point's type (the input's when absent)."""
    return quantize(ctx, value, scale, zero_point, zero_point.dtype if zero_point is not None else like.dtype)


def _check_8bit(ctx: NodeContext, *values: Tensor) -> None:
    for value in values:
        if value.dtype.name not in ("uint8", "int8"):
            raise ctx.unsupported(f"a quantized input of type {value.dtype.name}: this operator takes uint8 or int8")


def _binary(fn):
    """QLinearAdd, QLinearMul: (A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point)."""
    def convert(ctx, inputs, attrs):
        a, a_scale, a_zero, b, b_scale, b_zero, c_scale = inputs[:7]
        _check_8bit(ctx, a, b)
        value = fn(dequantize(ctx, a, a_scale, a_zero), dequantize(ctx, b, b_scale, b_zero))
        return _requantized(ctx, value, c_scale, _optional(inputs, 7), a)
    return convert


converter(f"{DOMAIN}::QLinearAdd")(_binary(lambda x, y: x + y))
converter(f"{DOMAIN}::QLinearMul")(_binary(lambda x, y: x * y))


def _unary(fn):
    """Ops on one quantized tensor: (X, X_scale, X_zero_point, Y_scale, Y_zero_point), fn(ctx, x, attrs)."""
    def convert(ctx, inputs, attrs):
        x, x_scale, x_zero, y_scale = inputs[0], inputs[1], inputs[2], inputs[3]
        _check_8bit(ctx, x)
        value = fn(ctx, dequantize(ctx, x, x_scale, x_zero), attrs)
        return _requantized(ctx, value, y_scale, _optional(inputs, 4), x)
    return convert


def _leaky_relu(ctx, x, attrs):
    return F.leaky_relu(x, attrs.get("alpha", 0.01))


def _softmax(ctx, x, attrs):
    """Softmax with the semantics of the float model's opset (`opset` attribute): before 13, the input
    viewed as 2-D at `axis`."""
    if "opset" not in attrs:
        raise ctx.unsupported("QLinearSoftmax needs its 'opset' attribute (the float Softmax's opset)")
    softmax = _coerced(lambda v, axis: F.softmax(v, axis))
    return softmax(dataclasses.replace(ctx, opset=int(attrs["opset"])), [x],
                   {"axis": attrs.get("axis", -1 if attrs["opset"] >= 13 else 1)})


def _channels_first(fn):
    """A pool on NCHW, or on NHWC (`channels_last`) by way of a transpose each side."""
    def pool(ctx, x, attrs):
        pool_attrs = {k: v for k, v in attrs.items() if k != "channels_last"}
        if not attrs.get("channels_last", 0):
            return fn(ctx, [x], pool_attrs)
        last = x.ndim - 1
        out = fn(ctx, [x.permute(0, last, *range(1, last))], pool_attrs)
        return out.permute(0, *range(2, x.ndim), 1)
    return pool


def _reduce_mean(ctx, x, attrs):
    axes = attrs.get("axes")
    axes = tuple(range(x.ndim)) if not axes else tuple(sorted({normalize_axis(a, x.ndim) for a in axes}))
    return x.mean(axes, keepdim=bool(attrs.get("keepdims", 1)))


converter(f"{DOMAIN}::QLinearLeakyRelu")(_unary(_leaky_relu))
converter(f"{DOMAIN}::QLinearSigmoid")(_unary(lambda ctx, x, attrs: F.sigmoid(x)))
converter(f"{DOMAIN}::QLinearSoftmax")(_unary(_softmax))
converter(f"{DOMAIN}::QLinearAveragePool")(_unary(_channels_first(_average_pool)))
converter(f"{DOMAIN}::QLinearGlobalAveragePool")(_unary(_channels_first(_global_average_pool)))
converter(f"{DOMAIN}::QLinearReduceMean")(_unary(_reduce_mean))


@converter(f"{DOMAIN}::QLinearConcat")
def _qlinear_concat(ctx, inputs, attrs):
    """(Y_scale, Y_zero_point, then X, X_scale, X_zero_point for each input) along `axis`."""
    y_scale, y_zero, rest = inputs[0], inputs[1], inputs[2:]
    if not rest or len(rest) % 3:
        raise ctx.unsupported(f"{len(inputs)} inputs: QLinearConcat takes Y_scale, Y_zero_point and "
                              "(tensor, scale, zero point) triples")
    tensors = rest[0::3]
    _check_8bit(ctx, *tensors)
    if "axis" not in attrs:
        raise ctx.unsupported("QLinearConcat needs its 'axis' attribute")
    axis = normalize_axis(attrs["axis"], tensors[0].ndim)
    values = [dequantize(ctx, x, scale, zero) for x, scale, zero in zip(tensors, rest[1::3], rest[2::3])]
    return _requantized(ctx, concat(values, axis), y_scale, y_zero, tensors[0])


@converter(f"{DOMAIN}::QLinearWhere")
def _qlinear_where(ctx, inputs, attrs):
    """(condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point)."""
    condition, x, x_scale, x_zero, y, y_scale, y_zero, z_scale = inputs[:8]
    _check_8bit(ctx, x, y)
    value = where(condition, dequantize(ctx, x, x_scale, x_zero), dequantize(ctx, y, y_scale, y_zero))
    return _requantized(ctx, value, z_scale, _optional(inputs, 8), x)


def _product(ctx: NodeContext, a: Tensor, b: Tensor, a_zero: Tensor | None, b_zero: Tensor | None) -> Tensor:
    """(a - a_zero) @ (b - b_zero): exact int32 sums where the operands allow, else exact in float64."""
    acc = _integer_matmul(a, b, _row_zero_point(a_zero), b_zero)
    if acc is None:
        return matmul(_shifted(a, _row_zero_point(a_zero)), _shifted(b, b_zero)).to(dt.int32)
    return acc


@converter(f"{DOMAIN}::QGemm")
def _qgemm(ctx, inputs, attrs):
    """A' @ B' in int32 plus the int32 bias C, times alpha * a_scale * b_scale: float32 output, or
    requantized with (y_scale, y_zero_point) when y_scale is given."""
    a, a_scale, a_zero, b, b_scale, b_zero = inputs[:6]
    bias, y_scale, y_zero = _optional(inputs, 6), _optional(inputs, 7), _optional(inputs, 8)
    _check_8bit(ctx, a, b)
    if a.ndim != 2 or b.ndim != 2:
        raise ctx.unsupported(f"QGemm takes 2-D A and B, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    a = a.transpose(0, 1) if attrs.get("transA", 0) else a
    b = b.transpose(0, 1) if attrs.get("transB", 0) else b
    acc = _product(ctx, a, b, a_zero, b_zero)
    if bias is not None:
        acc = (acc + bias.to(dt.int32)).to(dt.int32)
    alpha = float(attrs.get("alpha", 1.0))
    if y_scale is None:
        return acc.to(dt.float32) * (a_scale.to(dt.float32) * b_scale.to(dt.float32) * alpha)
    ratio = a_scale.to(dt.float64) * b_scale.to(dt.float64) * alpha / y_scale.to(dt.float64)
    return _requantize(ctx, acc.to(dt.float64), ratio, y_zero, y_zero.dtype if y_zero is not None else a.dtype)


@converter(f"{DOMAIN}::MatMulIntegerToFloat")
def _matmul_integer_to_float(ctx, inputs, attrs):
    """(A - a_zero_point) @ (B - b_zero_point) * a_scale * b_scale (+ bias), in float32."""
    a, b, a_scale, b_scale = inputs[:4]
    a_zero, b_zero, bias = _optional(inputs, 4), _optional(inputs, 5), _optional(inputs, 6)
    _check_8bit(ctx, a, b)
    out = _product(ctx, a, b, a_zero, b_zero).to(dt.float32) * (a_scale.to(dt.float32) * b_scale.to(dt.float32))
    return out if bias is None else out + bias


@converter(f"{DOMAIN}::DynamicQuantizeMatMul")
def _dynamic_quantize_matmul(ctx, inputs, attrs):
    """A quantized at run time to uint8 (DynamicQuantizeLinear), then MatMulIntegerToFloat with B."""
    a, b, b_scale = inputs[:3]
    b_zero, bias = _optional(inputs, 3), _optional(inputs, 4)
    a_q, a_scale, a_zero = _dynamic_quantize_linear(ctx, [a], {})
    return _matmul_integer_to_float(ctx, [a_q, b, a_scale, b_scale, a_zero, b_zero, bias], attrs)


def _unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` values of each row of `packed` (uint8, `8 // bits` values a byte, lowest bits first)."""
    per_byte = 8 // bits
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(packed.shape[:-1] + (-1,))[..., :count]


def nbits_weight(ctx: NodeContext, b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, k: int,
                 n: int, bits: int, block: int) -> np.ndarray:
    """MatMulNBits' weight as a float (K, N) array: column n's depth k is (q - zero_point) * scale of its block."""
    blocks = -(-k // block)
    blob = block * bits // 8
    if b.dtype != np.uint8 or b.size != n * blocks * blob or scales.size != n * blocks:
        raise ctx.unsupported(f"MatMulNBits with K={k}, N={n}, bits={bits}, block_size={block} takes B as uint8 "
                              f"({n}, {blocks}, {blob}) and {n * blocks} scales; got B {b.dtype} {b.shape} and "
                              f"{scales.size} scales")
    q = _unpack_bits(b.reshape(n, blocks * blob), bits, blocks * block).astype(np.float32)
    if zero_points is None:
        zero = np.full((n, blocks), 1 << (bits - 1), np.float32)
    elif zero_points.dtype == np.uint8:  # packed like B, each row whole bytes
        zero = _unpack_bits(zero_points.reshape(n, -1), bits, blocks).astype(np.float32)
    else:  # the scales' float type, one per block
        zero = zero_points.reshape(n, blocks).astype(np.float32)
    scale = scales.reshape(n, blocks).astype(np.float32)
    weight = (q.reshape(n, blocks, block) - zero[..., None]) * scale[..., None]
    return np.ascontiguousarray(weight.reshape(n, blocks * block)[:, :k].T).astype(scales.dtype)


@converter(f"{DOMAIN}::MatMulNBits", values={1, 2, 3})
def _matmul_nbits(ctx, inputs, attrs):
    """A @ dequantized(B) (+ bias): B's 2-, 4- or 8-bit values in blocks of `block_size` depths of a column."""
    a, b, scales = inputs[:3]
    zero_points, g_idx, bias = _optional(inputs, 3), _optional(inputs, 4), _optional(inputs, 5)
    bits = int(attrs.get("bits", 4))
    missing = [name for name in ("K", "N", "block_size") if name not in attrs]
    if missing:
        raise ctx.unsupported(f"MatMulNBits needs its attribute(s) {', '.join(missing)}")
    k, n, block = int(attrs["K"]), int(attrs["N"]), int(attrs["block_size"])
    if bits not in (2, 4, 8) or block < 16 or block & (block - 1):
        raise ctx.unsupported(f"MatMulNBits with bits={bits} and block_size={block}: bits must be 2, 4 or 8 and "
                              "block_size a power of 2 of at least 16")
    if g_idx is not None:
        raise ctx.unsupported("MatMulNBits with g_idx (blocks in another order than K's) is not supported")
    if a.shape[-1] != k:
        raise ctx.unsupported(f"MatMulNBits with K={k} takes A (..., {k}), got A {tuple(a.shape)}")
    weight = nbits_weight(ctx, ctx.values(b, "B"), ctx.values(scales, "scales"),
                          ctx.values(zero_points, "zero_points"), k, n, bits, block)
    out = matmul(a, as_tensor(weight.astype(np.float32)).to(a.dtype))
    return out if bias is None else out + bias


def _lstm_weight(value: Tensor, scale: Tensor, zero: Tensor | None) -> Tensor:
    """A DynamicQuantizeLSTM weight (directions, rows, 4 hidden) dequantized and laid out as LSTM's
    (directions, 4 hidden, rows): a scale and zero point per direction, or per direction and gate row."""
    per_row = scale.ndim == 2
    shape = (scale.shape[0], 1, scale.shape[1]) if per_row else (-1, 1, 1)
    zero = None if zero is None else zero.reshape(shape).to(dt.float32)
    weight = _shifted(value, zero, dt.float32) * scale.reshape(shape).to(dt.float32)
    return weight.permute(0, 2, 1)


@converter(f"{DOMAIN}::DynamicQuantizeLSTM")
def _dynamic_quantize_lstm(ctx, inputs, attrs):
    """ONNX's LSTM with its 8-bit W and R dequantized (inputs 8-11: W_scale, W_zero_point, R_scale,
    R_zero_point): the activations stay float32, where ONNX Runtime quantizes them to uint8 as it goes,
    so its outputs differ from these by that rounding (about 1e-2 of their range)."""
    w, r = inputs[1], inputs[2]
    _check_8bit(ctx, w, r)
    if len(inputs) < 12 or inputs[8] is None or inputs[10] is None:
        raise ctx.unsupported("DynamicQuantizeLSTM needs W_scale and R_scale (inputs 8 and 10)")
    weights = [_lstm_weight(w, inputs[8], inputs[9]), _lstm_weight(r, inputs[10], inputs[11])]
    return CONVERTERS["LSTM"](ctx, [inputs[0], *weights, *inputs[3:8]], attrs)
