"""The lowering table: one entry per ATen op, mapping it onto tensorkiln's front-end ops.

    @register_lowering(aten.relu.default)
    def relu(x): return x.relu()

Arguments arrive as in the op's ATen schema, with tk Tensors in place of torch
tensors (keyword arguments keep their schema names). A lowering may carry a
`check(node) -> reason | None` that refuses a variant it cannot run (a training
batch norm, a 3-d convolution); `convert.check_supported` collects every refusal
and every missing op before anything is lowered, and names them all at once.
The converter casts each result to the dtype PyTorch recorded for the node, so
lowerings may compute in a wider type.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ... import dtypes as dt
from ...frontend.creation import arange as tk_arange
from ...frontend.creation import full as tk_full
from ...frontend.functions import cat, matmul, mean, var, where
from ...frontend.functions import stack as tk_stack
from ...nn import functional as F
from ...frontend.tensor import Tensor, as_tensor, normalize_dim
from ...ir.ops import REGISTRY
from ...shapes import is_symbolic
from .tensors import tk_dtype, to_tk

aten = torch.ops.aten


@dataclass
class Lowering:
    fn: Callable
    check: Callable | None = None  # node -> None when supported, else the reason


LOWERINGS: dict = {}


def register_lowering(*targets, check: Callable | None = None):
    """Register `fn` as the lowering of each ATen overload in `targets` (an OpOverloadPacket means all)."""
    def decorate(fn):
        for target in targets:
            overloads = [getattr(target, o) for o in target.overloads()] \
                if isinstance(target, torch._ops.OpOverloadPacket) else [target]
            for overload in overloads:
                LOWERINGS[overload] = Lowering(fn, check)
        return fn
    return decorate


def lowered_ops() -> list[str]:
    """Names of every ATen overload the table covers."""
    return sorted(str(t) for t in LOWERINGS if isinstance(t, torch._ops.OpOverload))


# ---- helpers ---------------------------------------------------------------------------------

def _dtype(dtype, default=None):
    return tk_dtype(dtype) if dtype is not None else default


def _meta(node, i: int):
    arg = node.args[i] if i < len(node.args) else None
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


def _binary(op, a, b):
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = as_tensor(a)
    return op(a, b)


def _float_of(x: Tensor) -> Tensor:
    return x if x.dtype.is_floating else x.to(dt.float32)


# ---- elementwise arithmetic -------------------------------------------------------------------

@register_lowering(aten.add.Tensor, aten.add.Scalar)
def add(a, b, alpha=1):
    return _binary(lambda x, y: x + y, a, b if alpha == 1 else _binary(lambda x, y: x * y, b, alpha))


@register_lowering(aten.sub.Tensor, aten.sub.Scalar)
def sub(a, b, alpha=1):
    return _binary(lambda x, y: x - y, a, b if alpha == 1 else _binary(lambda x, y: x * y, b, alpha))


@register_lowering(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(a, b, alpha=1):
    return sub(b, a, alpha)


@register_lowering(aten.mul.Tensor, aten.mul.Scalar)
def mul(a, b):
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype.is_bool and b.dtype.is_bool:
        return a.logical_and(b)  # PyTorch multiplies bools: logical and
    return _binary(lambda x, y: x * y, a, b)


@register_lowering(aten.div.Tensor, aten.div.Scalar)
def div(a, b):
    return _binary(lambda x, y: x / y, a, b)


@register_lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(a, b, rounding_mode=None):
    if rounding_mode is None:
        return div(a, b)
    a_t = a if isinstance(a, Tensor) else as_tensor(a)
    if rounding_mode == "floor":
        if a_t.dtype.is_floating or (isinstance(b, Tensor) and b.dtype.is_floating) or isinstance(b, float):
            return (a_t / b).floor()
        return a_t // b
    quotient = a_t / b  # trunc: toward zero
    out = where(quotient < 0, quotient.ceil(), quotient.floor())
    return out if quotient.dtype.is_floating and (a_t.dtype.is_floating or isinstance(b, float) or
                                                   (isinstance(b, Tensor) and b.dtype.is_floating)) \
        else out.to(a_t.dtype)


@register_lowering(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(a, b):
    return _binary(lambda x, y: x % y, a, b)


@register_lowering(aten.floor_divide.default)
def floor_divide(a, b):
    return _binary(lambda x, y: x // y, a, b)


@register_lowering(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def pow_(a, b):
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        if b == 2:
            return a * a
        if b == 0.5:
            return _float_of(a).sqrt()
        if b == -0.5:
            return _float_of(a).rsqrt()
        if b == 1:
            return a
    return _binary(lambda x, y: x ** y, a, b)


@register_lowering(aten.maximum.default)
def maximum(a, b):
    return a.maximum(b)


@register_lowering(aten.minimum.default)
def minimum(a, b):
    return a.minimum(b)


def _unary(name: str):
    def lower(x):
        return getattr(x, name)()
    lower.__name__ = name
    return lower


# The ATen operators that are exactly one primitive (the op table's `aten` names), through its method.
for _op in REGISTRY.values():
    if _op.aten and _op.arity == 1:
        register_lowering(getattr(aten, _op.aten).default)(_unary(_op.method))
register_lowering(aten.log1p.default)(_unary("log1p"))


@register_lowering(aten.bitwise_not.default)
def bitwise_not(x):
    """~x: logical not of bools; of integers x ^ -1 (all bits flipped, ~uint8(0) = 255 as in PyTorch)."""
    return x.logical_not() if x.dtype.is_bool else x ^ -1


@register_lowering(aten.expm1.default)
def expm1(x):
    return _float_of(x).exp() - 1.0


@register_lowering(aten.square.default)
def square(x):
    return x * x


# ---- comparisons and logic ----------------------------------------------------------------------

for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    register_lowering(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)(
        (lambda n: lambda a, b: _binary(lambda x, y: getattr(x, n)(y) if isinstance(x, Tensor)
                                        else getattr(as_tensor(x), n)(y), a, b))(_name))


@register_lowering(aten.logical_and.default)
def logical_and(a, b):
    return a.logical_and(b)


@register_lowering(aten.logical_or.default)
def logical_or(a, b):
    return a.logical_or(b)


@register_lowering(aten.logical_xor.default)
def logical_xor(a, b):
    return a.logical_xor(b)


@register_lowering(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)
def bitwise_and(a, b):
    return _binary(lambda x, y: x & y, a, b)


@register_lowering(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)
def bitwise_or(a, b):
    return _binary(lambda x, y: x | y, a, b)


@register_lowering(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)
def bitwise_xor(a, b):
    return _binary(lambda x, y: x ^ y, a, b)


@register_lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where_(condition, a, b):
    return where(condition, a, b)


@register_lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(x, mask, value):
    return x.masked_fill(mask, value)


@register_lowering(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):  # noqa: A002
    return x.clamp(min, max)


@register_lowering(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(x, min):  # noqa: A002
    return x.clamp(min, None)


@register_lowering(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(x, max):  # noqa: A002
    return x.clamp(None, max)


# ---- activations ---------------------------------------------------------------------------------

@register_lowering(aten.gelu.default)
def gelu(x, approximate="none"):
    return F.gelu(x, approximate=approximate)


@register_lowering(aten.silu.default)
def silu(x):
    return F.silu(x)


@register_lowering(aten.hardtanh.default)
def hardtanh(x, min_val=-1.0, max_val=1.0):
    return F.hardtanh(x, min_val, max_val)


@register_lowering(aten.hardswish.default)
def hardswish(x):
    return F.hardswish(x)


@register_lowering(aten.hardsigmoid.default)
def hardsigmoid(x):
    return F.hardsigmoid(x)


@register_lowering(aten.leaky_relu.default)
def leaky_relu(x, negative_slope=0.01):
    return F.leaky_relu(x, negative_slope)


@register_lowering(aten.elu.default)
def elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    x = _float_of(x)
    out = where(x > 0, x, alpha * ((x * input_scale).exp() - 1.0))
    return out * scale if scale != 1.0 else out


@register_lowering(aten.softplus.default)
def softplus(x, beta=1.0, threshold=20.0):
    return F.softplus(x, beta, threshold)


@register_lowering(aten._softmax.default, aten.softmax.int)
def softmax(x, dim, half_to_float=False, dtype=None):
    if isinstance(half_to_float, torch.dtype):  # softmax.int(self, dim, dtype)
        dtype = half_to_float
    x = x.to(_dtype(dtype)) if dtype is not None else x
    return F.softmax(x, dim)


@register_lowering(aten._log_softmax.default, aten.log_softmax.int)
def log_softmax(x, dim, half_to_float=False, dtype=None):
    if isinstance(half_to_float, torch.dtype):
        dtype = half_to_float
    x = x.to(_dtype(dtype)) if dtype is not None else x
    return F.log_softmax(x, dim)


# ---- dropout (inference) ---------------------------------------------------------------------------

@register_lowering(aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default,
                   check=lambda node: None if len(node.args) < 3 or not node.args[2] or node.args[1] == 0
                   else "training-mode dropout")
def dropout(x, p, train):
    return x


@register_lowering(aten.native_dropout.default,
                   check=lambda node: None if node.args[2] is False or node.args[1] == 0
                   else "training-mode dropout")
def native_dropout(x, p, train):
    return x, tk_full(tuple(x.shape), True, dt.bool_)


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


# ---- reductions ----------------------------------------------------------------------------------------

def _dims(dim, ndim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return dim


@register_lowering(aten.sum.dim_IntList, aten.sum.default)
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, torch.dtype):  # sum.default(self, *, dtype)
        dim, dtype = None, dim
    return x.sum(_dims(dim, x.ndim), keepdim, dtype=_dtype(dtype))


@register_lowering(aten.mean.dim, aten.mean.default)
def mean_(x, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, torch.dtype):
        dim, dtype = None, dim
    return mean(x, _dims(dim, x.ndim), keepdim, _dtype(dtype))


@register_lowering(aten.prod.dim_int, aten.prod.default)
def prod(x, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, torch.dtype):
        dim, dtype = None, dim
    return x.prod(dim, keepdim, dtype=_dtype(dtype))


@register_lowering(aten.amax.default)
def amax(x, dim=(), keepdim=False):
    return x.amax(_dims(dim, x.ndim), keepdim)


@register_lowering(aten.amin.default)
def amin(x, dim=(), keepdim=False):
    return x.amin(_dims(dim, x.ndim), keepdim)


@register_lowering(aten.max.dim)
def max_dim(x, dim, keepdim=False):
    return x.amax(dim, keepdim), x.argmax(dim, keepdim)


@register_lowering(aten.min.dim)
def min_dim(x, dim, keepdim=False):
    return x.amin(dim, keepdim), x.argmin(dim, keepdim)


@register_lowering(aten.max.default)
def max_all(x):
    return x.amax()


@register_lowering(aten.min.default)
def min_all(x):
    return x.amin()


@register_lowering(aten.argmax.default)
def argmax(x, dim=None, keepdim=False):
    return x.argmax(dim, keepdim)


@register_lowering(aten.argmin.default)
def argmin(x, dim=None, keepdim=False):
    return x.argmin(dim, keepdim)


@register_lowering(aten.var.correction, aten.var.dim)
def var_(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(unbiased, bool):  # var.dim(self, dim, unbiased, keepdim)
        correction = 1 if unbiased else 0
    return var(x, _dims(dim, x.ndim), keepdim=keepdim, correction=1 if correction is None else correction)


@register_lowering(aten.var_mean.correction, aten.var_mean.dim, aten.var_mean.default)
def var_mean(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):  # var_mean.default(self, unbiased)
        dim, unbiased = None, dim
    dims = _dims(dim, x.ndim)
    return var_(x, dim, unbiased, keepdim, correction=correction), mean(x, dims, keepdim=keepdim)


@register_lowering(aten.round.decimals)
def round_decimals(x, *, decimals=0):
    """ATen's rule: round(x * 10^d) / 10^d, or for d < 0 round(x / 10^-d) * 10^-d, in x's precision."""
    if decimals == 0:
        return x.round()
    scale = as_tensor(10.0 ** abs(decimals), x.dtype)
    return (x * scale).round() / scale if decimals > 0 else (x / scale).round() * scale


@register_lowering(aten.any.dim, aten.any.dims, aten.any.default)
def any_(x, dim=None, keepdim=False):
    return x.any(_dims(dim, x.ndim), keepdim)


@register_lowering(aten.all.dim, aten.all.dims, aten.all.default)
def all_(x, dim=None, keepdim=False):
    return x.all(_dims(dim, x.ndim), keepdim)


# ---- movement ------------------------------------------------------------------------------------------

@register_lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default,
                   aten._reshape_alias.default)
def view(x, size, *strides):
    return x.reshape(tuple(size))


@register_lowering(aten.flatten.using_ints)
def flatten(x, start_dim=0, end_dim=-1):
    return x.flatten(start_dim, end_dim)


@register_lowering(aten.permute.default, aten.permute_copy.default)
def permute(x, dims):
    return x.permute(tuple(dims))


@register_lowering(aten.transpose.int, aten.transpose_copy.int)
def transpose(x, dim0, dim1):
    return x.transpose(dim0, dim1)


@register_lowering(aten.t.default, aten.t_copy.default)
def t(x):
    return x.t()


@register_lowering(aten.expand.default, aten.expand_copy.default)
def expand(x, size, *, implicit=False):
    return x.expand(tuple(size))


@register_lowering(aten.clone.default, aten.alias.default, aten.alias_copy.default, aten.detach.default,
                   aten.detach_copy.default, aten.lift_fresh_copy.default, aten.contiguous.default,
                   aten.lift_fresh.default)
def clone(x, *, memory_format=None):
    return x


@register_lowering(aten._assert_tensor_metadata.default, aten._assert_scalar.default,
                   aten.sym_constrain_range_for_size.default)
def no_op(*args, **kwargs):
    return None


@register_lowering(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(x, dim=0, start=None, end=None, step=1):
    d = normalize_dim(dim, x.ndim, "slice")
    n = x.shape[d]
    start, stop, step = slice(start, end, step).indices(n)
    index = [slice(None)] * x.ndim
    index[d] = slice(start, max(start, stop), step)
    return x[tuple(index)]


@register_lowering(aten.select.int, aten.select_copy.int)
def select(x, dim, index):
    d = normalize_dim(dim, x.ndim, "select")
    key = [slice(None)] * x.ndim
    key[d] = index
    return x[tuple(key)]


@register_lowering(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(x, dim):
    return x.unsqueeze(dim)


@register_lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.squeeze_copy.dim,
                   aten.squeeze_copy.dims, aten.squeeze_copy.default)
def squeeze(x, dim=None):
    if x.ndim == 0:
        return x
    return x.squeeze(tuple(dim) if isinstance(dim, (list, tuple)) else dim)


@register_lowering(aten.cat.default, aten.concat.default)
def cat_(tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])  # legacy rule
    return cat(tensors, dim)


@register_lowering(aten.stack.default)
def stack(tensors, dim=0):
    return tk_stack(list(tensors), dim)


@register_lowering(aten.split.Tensor, aten.split_copy.Tensor)
def split(x, split_size, dim=0):
    return list(x.split(split_size, dim))


@register_lowering(aten.split_with_sizes.default, aten.split_with_sizes_copy.default)
def split_with_sizes(x, split_sizes, dim=0):
    return list(x.split(list(split_sizes), dim))


@register_lowering(aten.unbind.int, aten.unbind_copy.int)
def unbind(x, dim=0):
    return list(x.unbind(dim))


@register_lowering(aten.chunk.default)
def chunk(x, chunks, dim=0):
    return list(x.chunk(chunks, dim))


@register_lowering(aten.flip.default)
def flip(x, dims):
    return x.flip(tuple(dims))


@register_lowering(aten.repeat.default)
def repeat(x, repeats):
    return x.repeat(tuple(repeats))


@register_lowering(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    return F.pad(x, list(pad), "constant", value)


@register_lowering(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return F.embedding(indices, weight)


@register_lowering(aten.index_select.default)
def index_select(x, dim, index):
    if x.ndim == 0:  # PyTorch indexes a 0-d tensor as one element (index [0])
        return x.reshape(1).index_select(0, index.reshape(-1)).reshape(())
    return x.index_select(dim, index)


@register_lowering(aten.gather.default)
def gather(x, dim, index, *, sparse_grad=False):
    return x.gather(dim, index)


def _check_index(node):
    indices = node.args[1]
    used = [i for i in indices if i is not None]
    if len(used) != 1:
        return "only one index tensor"
    meta = used[0].meta.get("val") if isinstance(used[0], torch.fx.Node) else None
    if meta is not None and meta.dtype == torch.bool:
        return "boolean mask indexing (data-dependent shape)"
    return None


@register_lowering(aten.index.Tensor, check=_check_index)
def index(x, indices):
    dim = next(i for i, t in enumerate(indices) if t is not None)
    idx = indices[dim]
    out = x.index_select(dim, idx.reshape(-1))
    return out.reshape(tuple(x.shape[:dim]) + tuple(idx.shape) + tuple(x.shape[dim + 1:]))


# ---- creation -------------------------------------------------------------------------------------------

def _fill(shape, value, dtype):
    shape = tuple(int(s) for s in shape)
    if dtype is None:
        dtype = dt.bool_ if isinstance(value, bool) else dt.int64 if isinstance(value, int) else dt.float32
    return tk_full(shape, value, dtype)


@register_lowering(aten.full.default)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill(size, fill_value, _dtype(dtype))


@register_lowering(aten.full_like.default)
def full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _fill(x.shape, fill_value, _dtype(dtype, x.dtype))


@register_lowering(aten.zeros.default, aten.empty.memory_format, aten.new_empty.default, aten.new_zeros.default)
def zeros(*args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    size = args[-1]
    like = args[0] if len(args) == 2 else None  # new_zeros(self, size)
    return _fill(size, 0, _dtype(dtype, like.dtype if like is not None else dt.float32))


@register_lowering(aten.ones.default, aten.new_ones.default)
def ones(*args, dtype=None, layout=None, device=None, pin_memory=None):
    size = args[-1]
    like = args[0] if len(args) == 2 else None
    return _fill(size, 1, _dtype(dtype, like.dtype if like is not None else dt.float32))


@register_lowering(aten.zeros_like.default, aten.empty_like.default)
def zeros_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _fill(x.shape, 0, _dtype(dtype, x.dtype))


@register_lowering(aten.ones_like.default)
def ones_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _fill(x.shape, 1, _dtype(dtype, x.dtype))


@register_lowering(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(*args, dtype=None, layout=None, device=None, pin_memory=None):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    if dtype is None:
        dtype = torch.float32 if any(isinstance(v, float) for v in (start, end, step)) else torch.int64
    if any(is_symbolic(v) for v in (start, end, step)):  # a size symbol of the trace: the iota op
        return tk_arange(start, end, step, dtype=_dtype(dtype))
    values = torch.arange(start, end, step, dtype=dtype)  # PyTorch's own length and rounding rules
    return to_tk(values, copy=True)


@register_lowering(aten.scalar_tensor.default)
def scalar_tensor(value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _fill((), value, _dtype(dtype, dt.float32))


@register_lowering(aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout)
def to_copy(x, dtype=None, *args, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None, copy=False):
    if isinstance(dtype, torch.dtype):
        return x.to(_dtype(dtype))
    return x


@register_lowering(aten.copy.default)
def copy(dst, src, non_blocking=False):
    return src.to(dst.dtype).expand(tuple(dst.shape))


@register_lowering(aten.fill.Scalar)
def fill(x, value):
    return _fill(x.shape, value, x.dtype)


@register_lowering(aten.tril.default)
def tril(x, diagonal=0):
    rows, cols = x.shape[-2:]
    mask = np.tril(np.ones((rows, cols), dtype=bool), diagonal)
    return where(as_tensor(mask), x, as_tensor(0, x.dtype))


@register_lowering(aten.triu.default)
def triu(x, diagonal=0):
    rows, cols = x.shape[-2:]
    mask = np.triu(np.ones((rows, cols), dtype=bool), diagonal)
    return where(as_tensor(mask), x, as_tensor(0, x.dtype))



@register_lowering(aten.linalg_vector_norm.default)
def linalg_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    x = _float_of(x.to(_dtype(dtype)) if dtype is not None else x)
    dims = _dims(dim, x.ndim)
    if ord == 2:
        return (x * x).sum(dims, keepdim).sqrt()
    if ord == 1:
        return x.abs().sum(dims, keepdim)
    if ord == float("inf"):
        return x.abs().amax(dims, keepdim)
    if ord == float("-inf"):
        return x.abs().amin(dims, keepdim)
    if ord == 0:
        return (x != 0).to(x.dtype).sum(dims, keepdim)
    return (x.abs() ** ord).sum(dims, keepdim) ** (1.0 / ord)


del _name
