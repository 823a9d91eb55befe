"""Lowerings of ATen's layer ops: matrix products and convolutions, layer and batch norm (inference),
attention, and 2-d pooling."""
from __future__ import annotations

import operator

from ...frontend.creation import full as tk_full
from ...frontend.functions import matmul, mean, var, where
from ...nn import functional as F
from .lowering import _float_of, _meta, aten, register_lowering


# ---- contractions -----------------------------------------------------------------------------------

@register_lowering(aten.mm.default, aten.bmm.default, aten.matmul.default)
def mm(a, b):
    return matmul(a, b)


@register_lowering(aten.addmm.default, aten.baddbmm.default)
def addmm(bias, a, b, beta=1, alpha=1):
    product = matmul(a, b)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (bias if beta == 1 else bias * beta)


@register_lowering(aten.linear.default)
def linear(x, weight, bias=None):
    return F.linear(x, weight, bias)


def _check_convolution(node):
    weight = _meta(node, 1)
    if weight is None or weight.dim() not in (3, 4, 5):
        return "a convolution over more than three spatial axes (1-d, 2-d and 3-d are lowered)"
    return None


@register_lowering(aten.convolution.default, check=_check_convolution)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        return F.conv_transpose(x, weight, bias, tuple(stride), tuple(padding), tuple(output_padding), groups,
                                tuple(dilation))
    if weight.ndim == 5:
        return F.conv3d(x, weight, bias, tuple(stride), tuple(padding), tuple(dilation), groups)
    if weight.ndim == 3:  # (N, C, L) as (N, C, 1, L)
        return F.conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, stride[0]), (0, padding[0]),
                        (1, dilation[0]), groups).squeeze(2)
    return F.conv2d(x, weight, bias, tuple(stride), tuple(padding), tuple(dilation), groups)


def _check_conv(dims: int):
    def check(node):
        weight = _meta(node, 1)
        return None if weight is not None and weight.dim() == dims + 2 else f"a {dims}-d convolution's weight"
    return check


# Before decomposition (tk.from_torch converts torch.export's graph directly when it can).
@register_lowering(aten.conv2d.default, check=_check_conv(2))
def conv2d(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    pair = (lambda v: (v, v) if isinstance(v, int) else tuple(v) * (2 // len(v)))
    return convolution(x, weight, bias, pair(stride), pair(padding), pair(dilation), False, (0, 0), groups)


@register_lowering(aten.conv1d.default, check=_check_conv(1))
def conv1d(x, weight, bias=None, stride=(1,), padding=(0,), dilation=(1,), groups=1):
    single = (lambda v: (v,) if isinstance(v, int) else tuple(v))
    return convolution(x, weight, bias, single(stride), single(padding), single(dilation), False, (0,), groups)


# ---- normalization -----------------------------------------------------------------------------------

@register_lowering(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    out = F.layer_norm(x, tuple(normalized_shape), weight, bias, eps)
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xf = _float_of(x)
    mu = mean(xf, dims, True)
    rstd = (var(xf, dims, correction=0, keepdim=True) + eps).rsqrt()
    return out, mu, rstd


@register_lowering(aten.layer_norm.default)
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return F.layer_norm(x, tuple(normalized_shape), weight, bias, eps)


def _empty_stats(x):
    return tk_full((0,), 0.0, x.dtype)


@register_lowering(aten._native_batch_norm_legit_no_training.default)
def batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    return F.batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps), \
        _empty_stats(x), _empty_stats(x)


@register_lowering(aten.native_batch_norm.default,
                   check=lambda node: None if node.args[5] is False else "training-mode batch norm")
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps)


@register_lowering(aten.batch_norm.default,
                   check=lambda node: None if node.args[5] is False else "training-mode batch norm")
def batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    return F.batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)


# ---- attention -------------------------------------------------------------------------------------

def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa)
    if attn_mask is not None and attn_mask.dtype.is_bool:  # a fully masked row gives 0, as in PyTorch
        out = where(attn_mask.any(-1, keepdim=True), out, 0.0)
    return out


def _no_attention_dropout(node):
    p = node.kwargs.get("dropout_p", node.args[3] if len(node.args) > 3 and isinstance(node.args[3], float)
                        else 0.0)
    return None if not p else "attention dropout"


@register_lowering(aten.scaled_dot_product_attention.default)
def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    return _sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _only_attention_output_used(node):
    """The fused attention ops also return logsumexp, weights or RNG state; only the output is lowered."""
    if any(user.target is not operator.getitem or user.args[1] != 0 for user in node.users):
        return "an attention output other than the result (logsumexp, weights or RNG state)"
    return _no_attention_dropout(node)


@register_lowering(aten._scaled_dot_product_flash_attention_for_cpu.default, check=_only_attention_output_used)
def sdpa_flash_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    return _sdpa(q, k, v, attn_mask, 0.0, is_causal, scale), None


@register_lowering(aten._scaled_dot_product_attention_math.default, check=_only_attention_output_used)
def sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, *, scale=None,
              enable_gqa=False):
    return _sdpa(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa), None


@register_lowering(aten._scaled_dot_product_efficient_attention.default, check=_only_attention_output_used)
def sdpa_efficient(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None):
    return _sdpa(q, k, v, attn_bias, 0.0, is_causal, scale), None, None, None


@register_lowering(aten._scaled_dot_product_flash_attention.default, check=_only_attention_output_used)
def sdpa_flash(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    return (_sdpa(q, k, v, None, 0.0, is_causal, scale),) + (None,) * 8


# ---- pooling -----------------------------------------------------------------------------------------

@register_lowering(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return F.max_pool2d(x, kernel_size, list(stride) or None, padding, dilation, ceil_mode, return_indices=True)


@register_lowering(aten.max_pool2d.default)
def max_pool2d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return F.max_pool2d(x, kernel_size, list(stride) or None, padding, dilation, ceil_mode)


@register_lowering(aten.avg_pool2d.default)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return F.avg_pool2d(x, kernel_size, list(stride) or None, padding, ceil_mode, count_include_pad,
                        divisor_override)


@register_lowering(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(x, output_size):
    return F.adaptive_avg_pool2d(x, tuple(output_size))
