"""Lowerings of ATen's remaining neural-network ops as compositions of tensorkiln primitives.

Resampling (nearest and bilinear upsampling) computes its source indices and
weights at compile time with PyTorch's formulas, in the float type PyTorch uses,
so each output reads the same input elements; padding, group norm, training-free
batch norm, 3-d pooling (`window` over three axes), distances and embedding bags
are the textbook formulas over primitives.
"""
from __future__ import annotations

import math
import operator

import numpy as np
import torch

from ... import dtypes as dt
from ...frontend.functions import mean, var, where
from ...frontend.tensor import Tensor, apply, as_tensor
from ...nn import functional as F
from .lowering import register_lowering

aten = torch.ops.aten


# ---- resampling ----------------------------------------------------------------------------------

def _index_float(x: Tensor):
    """The float type PyTorch's CPU kernels compute source coordinates in."""
    return np.float64 if x.dtype == dt.float64 else np.float32


def _output_sizes(x: Tensor, output_size, scale_factors) -> tuple[list[int], list]:
    spatial = x.shape[2:]
    if output_size is not None:
        return [int(s) for s in output_size], [None] * len(spatial)
    scales = [float(s) for s in scale_factors]
    return [int(math.floor(n * s)) for n, s in zip(spatial, scales)], scales


def _scale(in_size: int, out_size: int, scale, align_corners: bool, real):
    """PyTorch's area_pixel_compute_scale: source pixels per output pixel."""
    if align_corners:
        return real((in_size - 1) / (out_size - 1)) if out_size > 1 else real(0)
    if scale is not None and scale > 0:
        return real(1.0 / scale)
    return real(in_size / out_size)


def nearest_source(in_size: int, out_size: int, scale, real) -> np.ndarray:
    """PyTorch's nearest_idx: floor(dst * scale), clamped to the input."""
    if out_size == in_size:
        return np.arange(out_size, dtype=np.int64)
    if out_size == 2 * in_size:
        return np.arange(out_size, dtype=np.int64) >> 1
    s = _scale(in_size, out_size, scale, False, real)
    source = np.floor(np.arange(out_size).astype(real) * s).astype(np.int64)
    return np.minimum(source, in_size - 1)


def linear_source(in_size: int, out_size: int, scale, align_corners: bool, real):
    """PyTorch's compute_indices_weights_linear: (index0, index1, weight of index1)."""
    s = _scale(in_size, out_size, scale, align_corners, real)
    dst = np.arange(out_size).astype(real)
    if align_corners:
        src = s * dst
    else:
        src = np.maximum(s * (dst + real(0.5)) - real(0.5), real(0))
    index0 = src.astype(np.int64)
    index1 = index0 + (index0 < in_size - 1)
    lambda1 = np.clip(src - index0.astype(real), 0, 1).astype(real)
    return index0, index1, lambda1


def resample_nearest(x: Tensor, sizes, scales) -> Tensor:
    """Nearest-neighbour resampling of the axes after (N, C) to `sizes`; `scales` as PyTorch's kernel takes them."""
    real = _index_float(x)
    for axis, (out, scale) in enumerate(zip(sizes, scales)):
        source = nearest_source(x.shape[2 + axis], int(out), scale, real)
        x = x.index_select(2 + axis, as_tensor(source))
    return x


def resample_linear(x: Tensor, sizes, align_corners: bool, scales) -> Tensor:
    """Linear interpolation along each axis after (N, C) in turn (bilinear for two)."""
    real = _index_float(x)
    for axis, (out, scale) in enumerate(zip(sizes, scales)):
        d = 2 + axis
        index0, index1, lambda1 = linear_source(x.shape[d], int(out), scale, bool(align_corners), real)
        shape = (int(out),) + (1,) * (x.ndim - d - 1)
        w1 = as_tensor(lambda1.reshape(shape), x.dtype)
        w0 = as_tensor((real(1) - lambda1).reshape(shape), x.dtype)
        x = x.index_select(d, as_tensor(index0)) * w0 + x.index_select(d, as_tensor(index1)) * w1
    return x


@register_lowering(aten.upsample_nearest1d.vec, aten.upsample_nearest2d.vec, aten.upsample_nearest3d.vec)
def upsample_nearest_vec(x, output_size, scale_factors):
    return resample_nearest(x, *_output_sizes(x, output_size, scale_factors))


@register_lowering(aten.upsample_nearest1d.default, aten.upsample_nearest2d.default,
                   aten.upsample_nearest3d.default)
def upsample_nearest(x, output_size, *scales):
    return resample_nearest(x, output_size, list(scales) + [None] * (len(output_size) - len(scales)))


@register_lowering(aten.upsample_linear1d.vec, aten.upsample_bilinear2d.vec, aten.upsample_trilinear3d.vec)
def upsample_linear_vec(x, output_size, align_corners, scale_factors):
    sizes, scales = _output_sizes(x, output_size, scale_factors)
    return resample_linear(x, sizes, align_corners, scales)


@register_lowering(aten.upsample_linear1d.default, aten.upsample_bilinear2d.default,
                   aten.upsample_trilinear3d.default)
def upsample_linear(x, output_size, align_corners, *scales):
    return resample_linear(x, output_size, align_corners, list(scales) + [None] * (len(output_size) - len(scales)))


# ---- padding ---------------------------------------------------------------------------------------

@register_lowering(aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default)
def reflection_pad(x, padding):
    return F.pad(x, list(padding), "reflect")


@register_lowering(aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default)
def replication_pad(x, padding):
    return F.pad(x, list(padding), "replicate")


# ---- normalization -----------------------------------------------------------------------------------

def _float(x: Tensor) -> Tensor:
    return x if x.dtype.is_floating else x.to(dt.float32)


@register_lowering(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, n, channels, hw, groups, eps):
    xf = _float(x)
    grouped = xf.reshape((x.shape[0], groups, -1))
    mu = mean(grouped, -1, True)
    rstd = (var(grouped, -1, correction=0, keepdim=True) + eps).rsqrt()
    out = ((grouped - mu) * rstd).reshape(tuple(x.shape))
    per_channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out, mu.reshape((x.shape[0], groups)), rstd.reshape((x.shape[0], groups))


def _batch_norm_statistics(x: Tensor, eps: float):
    axes = (0,) + tuple(range(2, x.ndim))
    mu = mean(x, axes, True)
    rstd = (var(x, axes, correction=0, keepdim=True) + eps).rsqrt()
    return mu, rstd


def _affine(out: Tensor, weight, bias) -> Tensor:
    per_channel = (1, out.shape[1]) + (1,) * (out.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out


def _no_running_update(node):
    """Training mode with running statistics updates them in place: that state change is not lowered."""
    training = node.args[5] if len(node.args) > 5 else node.kwargs.get("training")
    if training and node.args[3] is not None:
        return "training-mode batch norm updating running statistics"
    return None


@register_lowering(aten._native_batch_norm_legit.default, check=_no_running_update)
def native_batch_norm_legit(x, weight, bias, running_mean, running_var, training, momentum, eps):
    xf = _float(x)
    if training:
        return native_batch_norm_legit_no_stats(x, weight, bias, training, momentum, eps)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    out = (xf - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    empty = as_tensor(np.zeros(0, dtype=np.float32), xf.dtype)
    return _affine(out, weight, bias), empty, empty


@register_lowering(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_legit_no_stats(x, weight, bias, training, momentum, eps):
    xf = _float(x)
    mu, rstd = _batch_norm_statistics(xf, eps)
    return _affine((xf - mu) * rstd, weight, bias), mu.reshape(-1), rstd.reshape(-1)


# ---- 3-d pooling -------------------------------------------------------------------------------------

def _triple(value, default=None) -> tuple[int, ...]:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return default
    if isinstance(value, int):
        return (value,) * 3
    return tuple(value) * 3 if len(value) == 1 else tuple(value)


def _pool_geometry(shape, kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's pooling output sizes, and the padding past the input the last windows need."""
    outs, extra = [], []
    for size, k, s, p, d in zip(shape, kernel, stride, padding, dilation):
        span = size + 2 * p - d * (k - 1) - 1
        n = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (n - 1) * s >= size + p:  # the last window must start inside the input
            n -= 1
        outs.append(n)
        extra.append(max(0, (n - 1) * s + d * (k - 1) + 1 - (size + 2 * p)))
    return outs, extra


def _windows(x: Tensor, value, kernel, stride, padding, dilation, extra) -> Tensor:
    pads = ((0, 0),) * (x.ndim - 3) + tuple((p, p + e) for p, e in zip(padding, extra))
    if any(lo or hi for lo, hi in pads):
        x = apply("pad", [x], pads=pads, value=value)
    return apply("window", [x], kernel=tuple(kernel), stride=tuple(stride), dilation=tuple(dilation))


@register_lowering(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    kernel = _triple(kernel_size)
    stride, padding, dilation = _triple(stride, kernel), _triple(padding), _triple(dilation)
    outs, extra = _pool_geometry(x.shape[-3:], kernel, stride, padding, dilation, ceil_mode)
    windows = _windows(x, dt.finfo_min(x.dtype) if x.dtype.is_floating else _int_min(x.dtype),
                       kernel, stride, padding, dilation, extra)
    values = windows.amax((-3, -2, -1))
    flat = windows.reshape(tuple(windows.shape[:-3]) + (int(np.prod(kernel)),)).argmax(-1)
    # the window cell of the maximum, then its input coordinate per axis: PyTorch's flat D*H*W index
    index = None
    cell_stride = int(np.prod(kernel))
    for axis in range(3):
        cell_stride //= kernel[axis]
        k = (flat // cell_stride) % kernel[axis]
        starts_shape = [1, 1, 1]
        starts_shape[axis] = outs[axis]
        starts = as_tensor((np.arange(outs[axis], dtype=np.int64) * stride[axis] - padding[axis]).reshape(starts_shape))
        coordinate = starts + k * dilation[axis]
        index = coordinate if index is None else index * x.shape[x.ndim - 3 + axis] + coordinate
    return values, index


def _int_min(dtype: dt.DType) -> int:
    return int(np.iinfo(dtype.storage).min)


@register_lowering(aten.avg_pool3d.default)
def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    x = _float(x)
    kernel = _triple(kernel_size)
    stride, padding = _triple(stride, kernel), _triple(padding)
    outs, extra = _pool_geometry(x.shape[-3:], kernel, stride, padding, (1, 1, 1), ceil_mode)
    total = _windows(x, 0.0, kernel, stride, padding, (1, 1, 1), extra).sum((-3, -2, -1))
    if divisor_override:
        return total * (1.0 / divisor_override)
    divisor = F.pool_divisors(outs, x.shape[-3:], kernel, stride, padding, count_include_pad)
    return total / as_tensor(divisor, x.dtype)


@register_lowering(aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(x, output_size):
    x = _float(x)
    sizes = _triple(output_size)
    for axis, out in enumerate(sizes):
        d = x.ndim - 3 + axis
        matrix = as_tensor(F.adaptive_pool_matrix(x.shape[d], out).T, x.dtype)  # (size, out)
        x = (x.transpose(d, -1) @ matrix).transpose(d, -1)
    return x


# ---- distances -------------------------------------------------------------------------------------

def _p_norm(diff: Tensor, p: float) -> Tensor:
    """The p-norm over the last axis, as torch.cdist defines p = 0 and p = inf."""
    if p == 0:
        return (diff != 0).to(diff.dtype).sum(-1)
    if p == 1:
        return diff.abs().sum(-1)
    if p == 2:
        return (diff * diff).sum(-1).sqrt()
    if p == float("inf"):
        return diff.abs().amax(-1)
    return (diff.abs() ** p).sum(-1) ** (1.0 / p)


@register_lowering(aten._cdist_forward.default)
def cdist_forward(x1, x2, p, compute_mode=None):
    return _p_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), float(p))


@register_lowering(aten._pdist_forward.default)
def pdist_forward(x, p=2.0):
    first, second = np.triu_indices(x.shape[0], 1)
    a = x.index_select(0, as_tensor(first.astype(np.int64)))
    b = x.index_select(0, as_tensor(second.astype(np.int64)))
    return _p_norm(a - b, float(p))


# ---- embedding bags ----------------------------------------------------------------------------------

def _only_bag_output_used(node):
    if any(user.target is not operator.getitem or user.args[1] != 0 for user in node.users):
        return "an embedding_bag output other than the result (offset2bag, bag sizes, max indices)"
    return None


@register_lowering(aten._embedding_bag.default, aten._embedding_bag_forward_only.default,
                   check=_only_bag_output_used)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Bag b holds indices offsets[b] .. offsets[b+1]-1; mode 0 sums, 1 averages, 2 takes the maximum.
    An empty bag (or one of padding entries only) gives zeros, as in PyTorch."""
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    n = indices.shape[0]
    positions = as_tensor(np.arange(n, dtype=np.int64))
    starts = offsets.narrow(0, 0, bags).to(dt.int64)
    bag_of = (starts.unsqueeze(1) <= positions).to(dt.int64).sum(0) - 1  # (n,)
    member = bag_of == as_tensor(np.arange(bags, dtype=np.int64).reshape(bags, 1))  # (bags, n)
    member = member.logical_and(bag_of >= 0)
    if include_last_offset:
        member = member.logical_and(positions < offsets.narrow(0, bags, 1).to(dt.int64))
    if padding_idx is not None and padding_idx >= 0:
        member = member.logical_and(indices != padding_idx)
    rows = weight.index_select(0, indices)  # (n, dim)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.to(rows.dtype).unsqueeze(1)
    cells = member.unsqueeze(2)
    count = member.to(dt.int64).sum(1, keepdim=True)
    if mode == 2:
        picked = where(cells, rows.unsqueeze(0), as_tensor(float("-inf"), rows.dtype)).amax(1)
        out = where(count > 0, picked, as_tensor(0, rows.dtype))
    else:
        out = where(cells, rows.unsqueeze(0), as_tensor(0, rows.dtype)).sum(1, dtype=rows.dtype)
        if mode == 1:
            out = out / count.clamp(1, None).to(rows.dtype)
    return out, None, None, None


# ---- spatial sampling ------------------------------------------------------------------------------

_SAMPLING_MODES = ("bilinear", "nearest", "bicubic")  # aten's interpolation_mode numbers
_PADDING_MODES = ("zeros", "border", "reflection")  # aten's padding_mode numbers


@register_lowering(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners):
    """grid_sampler_2d and _3d (bicubic is 2-d only: grid_sample refuses it for three axes)."""
    return F.grid_sample(x, grid, _SAMPLING_MODES[interpolation_mode], _PADDING_MODES[padding_mode],
                         bool(align_corners))


@register_lowering(aten.affine_grid_generator.default)
def affine_grid_generator(theta, size, align_corners):
    return F.affine_grid(theta, size, bool(align_corners))
