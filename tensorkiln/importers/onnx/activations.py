"""ONNX activation functions (Relu and Sigmoid are in elementwise.py's one-to-one table), the
softmax family (Softmax, LogSoftmax, Hardmax: before opset 13 the input is viewed as 2-D at
`axis`), and Dropout, an identity at inference (training mode with a nonzero ratio is random and
is refused)."""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...frontend.functions import where
from ...frontend.tensor import as_tensor
from ...nn import functional as F
from .helpers import filled, normalize_axis, prod
from .registry import converter


@converter("Softsign")
def _softsign(ctx, inputs, attrs):
    x = inputs[0]
    return x / (1.0 + x.abs())


@converter("Mish")
def _mish(ctx, inputs, attrs):
    x = inputs[0]
    return x * F.softplus(x).tanh()


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


def _coerced(fn):
    """Softmax-like ops: before opset 13 the input is viewed as 2-D at `axis` (default 1)."""
    def convert(ctx, inputs, attrs):
        x = inputs[0]
        if ctx.opset < 13:
            axis = normalize_axis(attrs.get("axis", 1), x.ndim)
            flat = x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))
            return fn(flat, 1).reshape(x.shape)
        return fn(x, normalize_axis(attrs.get("axis", -1), x.ndim))
    return convert


def _hardmax(x, axis):
    index = x.argmax(axis, True)
    positions = as_tensor(np.arange(x.shape[axis]).reshape([-1 if i == axis else 1 for i in range(x.ndim)]))
    return (positions == index).to(x.dtype)


converter("Softmax")(_coerced(lambda x, a: F.softmax(x, a)))
converter("LogSoftmax")(_coerced(lambda x, a: F.log_softmax(x, a)))
converter("Hardmax")(_coerced(_hardmax))


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
    return [x, filled(x.shape, True, dt.bool_)][:max(ctx.n_outputs, 1)]
