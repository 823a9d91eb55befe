"""ONNX normalizations: BatchNormalization (inference, `spatial=0` per-activation parameters, and
training mode with batch statistics), InstanceNormalization, LayerNormalization (with its mean and
inverse-std outputs), GroupNormalization, MeanVarianceNormalization, LRN and LpNormalization
(p = 1 or 2; an all-zero slice gives zeros)."""
from __future__ import annotations

from ... import dtypes as dt
from ...frontend.functions import where
from ...frontend.tensor import Tensor, apply
from ...frontend.trace import composite_scope
from ...nn import functional as F
from .helpers import filled, normalize_axis
from .registry import converter


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
    axis = normalize_axis(attrs.get("axis", -1), x.ndim)
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
    axes = tuple(normalize_axis(a, x.ndim) for a in attrs.get("axes", [0, 2, 3]))
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


@converter("LpNormalization")
def _lp_normalization(ctx, inputs, attrs):
    x = inputs[0]
    axis = normalize_axis(attrs.get("axis", -1), x.ndim)
    p = attrs.get("p", 2)
    if p not in (1, 2):
        raise ctx.unsupported(f"p={p} (the operator defines p = 1 or 2)")
    with composite_scope("lp_normalization"):
        norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
        zero = norm == 0  # an all-zero slice normalizes to zeros, not 0/0 (opset 22's rule, harmless before)
        return where(zero, filled((), 0, x.dtype), x / where(zero, filled((), 1, x.dtype), norm))
