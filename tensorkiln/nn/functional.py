"""tk.nn.functional: neural-network operations with PyTorch's names and signatures.

Every function here is a composition of primitive ops; the ones a later layer
recognises (softmax, layer_norm, attention, ...) are marked with @composite so
the nodes they create carry the composite's name.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import dtypes as dt
from ..errors import DTypeError, ShapeError, at_user_line
from ..frontend.autodiff.mode import no_grad
from ..frontend.creation import arange, randint
from ..frontend.functions import concat, flip, matmul, mean, var, where
from ..frontend.random import philox
from ..frontend.tensor import Tensor, apply, as_tensor, normalize_dim, tensor_methods
from ..frontend.trace import composite, mark_mutable
from ..shapes import has_symbols, is_symbolic


def _pair(value, name: str) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value[0], value[0]
    if len(value) != 2:
        raise ShapeError(at_user_line(f"{name} must be an int or a pair, got {value}"))
    return value


def _floating(x: Tensor) -> Tensor:
    return x if x.dtype.is_floating else x.to(dt.DEFAULT_FLOAT)


# ---- activations -----------------------------------------------------------------

def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


@composite("gelu")
def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU, exact (erf) or with PyTorch's tanh approximation."""
    x = _floating(input)
    if approximate == "none":
        return 0.5 * x * (1.0 + (x * (1.0 / math.sqrt(2.0))).erf())
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + inner.tanh())
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


@composite("silu")
def silu(input: Tensor, inplace: bool = False) -> Tensor:
    x = _floating(input)
    return x * x.sigmoid()


@composite("softplus")
def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, linear above `threshold` like PyTorch."""
    x = _floating(input)
    z = x * beta
    smooth = (z.relu() + (-z.abs()).exp().log1p()) * (1.0 / beta)  # log1p: exp(-|z|) may be tiny
    return where(z > threshold, x, smooth)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return where(input >= 0, input, input * negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    x = _floating(input)
    return where(x > 0, x, alpha * (x.exp() - 1.0))


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    return input.clamp(min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return input.clamp(0, 6)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return (_floating(input) * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return input * hardsigmoid(input)


def _shifted_rows(input: Tensor, dim: int | None, dtype, op: str) -> tuple[Tensor, int] | tuple[None, Tensor]:
    """x - max(x) along `dim` (stable softmax), or (None, x) when the axis is empty."""
    x = _floating(input.to(dtype) if dtype is not None else input)
    d = normalize_dim(-1 if dim is None else dim, x.ndim, op)
    if x.ndim and x.shape[d] == 0:  # nothing to normalize (and no max of an empty axis)
        return None, x
    return x - x.amax(d, keepdim=True), d


@composite("softmax")
def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim`, computed stably (max subtracted first)."""
    shifted, d = _shifted_rows(input, dim, dtype, "softmax")
    if shifted is None:
        return d
    e = shifted.exp()
    return e / e.sum(d, keepdim=True)


@composite("log_softmax")
def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """log(softmax(x)) along `dim`, computed stably."""
    shifted, d = _shifted_rows(input, dim, dtype, "log_softmax")
    if shifted is None:
        return d
    return shifted - shifted.exp().sum(d, keepdim=True).log()


# ---- linear layers and convolution -------------------------------------------------------

@composite("linear")
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """input @ weight.T + bias, weight of shape (out_features, in_features)."""
    out = matmul(input, as_tensor(weight).transpose(-1, -2) if as_tensor(weight).ndim == 2 else weight)
    return out + bias if bias is not None else out


def _conv_padding(padding, kernel: tuple[int, int], stride, dilation) -> tuple[int, int, int, int]:
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0, 0, 0
        if padding == "same":
            if stride != (1, 1):
                raise ShapeError(at_user_line("conv2d: padding='same' needs stride 1"))
            pads = []
            for k, d in zip(kernel, dilation):
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]
            return pads[0], pads[1], pads[2], pads[3]
        raise ValueError(f"conv2d: padding must be 'valid', 'same', an int or a pair, got {padding!r}")
    ph, pw = _pair(padding, "padding")
    return ph, ph, pw, pw


@composite("conv2d")
def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation) of an (N, C, H, W) input, as torch.nn.functional.conv2d."""
    x, w = as_tensor(input), as_tensor(weight)
    unbatched = x.ndim == 3
    if unbatched:
        x = x.unsqueeze(0)
    if x.dtype != w.dtype and x.dtype.is_floating and w.dtype.is_floating:
        w = w.to(x.dtype)
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    if w.ndim != 4:
        raise ShapeError(at_user_line(f"conv2d: weight must be (out, in/groups, kh, kw), got {list(w.shape)}"))
    pads = _conv_padding(padding, tuple(w.shape[2:]), stride, dilation)
    out = apply("conv2d", [x, w], stride=stride, padding=pads, dilation=dilation, groups=int(groups))
    if bias is not None:
        b = as_tensor(bias)
        b = b.to(x.dtype) if b.dtype.is_floating and x.dtype.is_floating else b  # as the weight: keep x's dtype
        out = out + b.reshape(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """3-D convolution of an (N, C, D, H, W) input, as torch.nn.functional.conv3d; `padding` may also
    be three (begin, end) pairs. Computed as KD 2-d convolutions, one per kernel depth tap, each over
    the depth positions it reads folded into the batch, and summed."""
    x, w = as_tensor(input), as_tensor(weight)
    if x.dtype != w.dtype and x.dtype.is_floating and w.dtype.is_floating:
        w = w.to(x.dtype)
    triple = (lambda v, name: (v,) * 3 if isinstance(v, int) else tuple(v) * (3 // len(v)))
    stride, dilation = triple(stride, "stride"), triple(dilation, "dilation")
    pads = [tuple(p) if isinstance(p, (tuple, list)) else (p, p) for p in triple(padding, "padding")]
    if x.ndim != 5 or w.ndim != 5:
        raise ShapeError(at_user_line(f"conv3d: expects an (N, C, D, H, W) input and an (out, in/groups, kd, kh, "
                                      f"kw) weight, got {list(x.shape)} and {list(w.shape)}"))
    (dlo, dhi), (sd, dd) = pads[0], (stride[0], dilation[0])
    if dlo or dhi:
        x = apply("pad", [x], pads=((0, 0), (0, 0), (dlo, dhi), (0, 0), (0, 0)), value=0.0)
    n, c, depth = x.shape[:3]
    out_depth = (depth - dd * (w.shape[2] - 1) - 1) // sd + 1
    if out_depth < 1:
        raise ShapeError(at_user_line(f"conv3d: input depth {depth - dlo - dhi} (padded {depth}) is smaller than "
                                      f"the kernel's {dd * (w.shape[2] - 1) + 1}"))
    (pt, pb), (pl, pr) = pads[1:]
    total = None
    for tap in range(w.shape[2]):
        start = tap * dd
        planes = x[:, :, start:start + (out_depth - 1) * sd + 1:sd]  # (N, C, out_depth, H, W)
        planes = planes.permute(0, 2, 1, 3, 4).reshape((n * out_depth, c) + tuple(x.shape[3:]))
        term = apply("conv2d", [planes, w[:, :, tap]], stride=stride[1:], padding=(pt, pb, pl, pr),
                     dilation=dilation[1:], groups=int(groups))
        total = term if total is None else total + term
    out = total.reshape((n, out_depth) + tuple(total.shape[1:])).permute(0, 2, 1, 3, 4)
    if bias is not None:
        out = out + as_tensor(bias).to(out.dtype).reshape(1, -1, 1, 1, 1)
    return out


def conv_transpose(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                   output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed convolution over the 1, 2 or 3 spatial axes of an (N, C, *spatial) input, as
    torch.nn.functional.conv_transpose1d/2d/3d (weight (C, out/groups, *kernel)); `padding` may also
    be one (begin, end) pair per axis. Computed as a stride-1 convolution of the zero-stuffed input
    (stride - 1 zeros between elements), padded by dilation * (kernel - 1) - padding (negative: crop),
    with the spatially flipped weight whose in/out channels are swapped per group."""
    x, w = as_tensor(input), as_tensor(weight)
    n = x.ndim - 2
    if n not in (1, 2, 3) or w.ndim != x.ndim:
        raise ShapeError(at_user_line(f"conv_transpose: expects an (N, C, *spatial) input over 1-3 axes and a "
                                      f"(C, out/groups, *kernel) weight, got {list(x.shape)} and {list(w.shape)}"))
    per_axis = (lambda v: (v,) * n if isinstance(v, int) else tuple(v) * (n // len(v)))
    stride, dilation, output_padding = per_axis(stride), per_axis(dilation), per_axis(output_padding)
    pads = [tuple(p) if isinstance(p, (tuple, list)) else (p, p) for p in per_axis(padding)]
    size = tuple(x.shape[2:])
    if any(s > 1 for s in stride):  # insert stride - 1 zeros between input elements along each axis
        lead = tuple(x.shape[:2])
        x = x.reshape(lead + tuple(d for extent in size for d in (extent, 1)))
        x = apply("pad", [x], pads=((0, 0), (0, 0)) + tuple(p for s in stride for p in ((0, 0), (0, s - 1))),
                  value=0.0)
        x = x.reshape(lead + tuple(e * s for e, s in zip(size, stride)))
        x = x[(slice(None), slice(None)) + tuple(slice(0, (e - 1) * s + 1) for e, s in zip(size, stride))]
    edges = []  # F.pad lists the last axis first
    for axis in reversed(range(n)):
        reach = dilation[axis] * (w.shape[2 + axis] - 1)
        edges += [reach - pads[axis][0], reach - pads[axis][1] + output_padding[axis]]
    x = pad(x, edges)
    cin, cout_g = w.shape[:2]
    wt = w.reshape((groups, cin // groups, cout_g) + tuple(w.shape[2:])).transpose(1, 2)
    wt = wt.reshape((groups * cout_g, cin // groups) + tuple(w.shape[2:])).flip(tuple(range(2, 2 + n)))
    if n == 1:
        out = conv2d(x.unsqueeze(2), wt.unsqueeze(2), None, 1, 0, (1,) + dilation, groups).squeeze(2)
    elif n == 2:
        out = conv2d(x, wt, None, 1, 0, dilation, groups)
    else:
        out = conv3d(x, wt, None, 1, 0, dilation, groups)
    if bias is not None:
        out = out + as_tensor(bias).to(out.dtype).reshape((1, -1) + (1,) * n)
    return out


# ---- pooling -----------------------------------------------------------------------------

def _pool_geometry(x: Tensor, kernel_size, stride, padding, dilation, ceil_mode: bool, op: str):
    kernel = _pair(kernel_size, "kernel_size")
    stride = _pair(stride if stride is not None and stride != [] else kernel, "stride")
    padding, dilation = _pair(padding, "padding"), _pair(dilation, "dilation")
    if min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ShapeError(at_user_line(f"{op}: kernel_size, stride and dilation must be positive and padding "
                                      f"non-negative, got {kernel}, {stride}, {dilation}, {padding}"))
    if x.ndim not in (3, 4):
        raise ShapeError(at_user_line(f"{op}: expects a 3-d or 4-d input, got shape {list(x.shape)}"))
    for p, k in zip(padding, kernel):
        if p > k // 2:
            raise ShapeError(at_user_line(f"{op}: padding {p} must be at most half of kernel size {k}"))
    outs, extra = [], []
    for size, k, s, p, d in zip(x.shape[-2:], kernel, stride, padding, dilation):
        span = size + 2 * p - d * (k - 1) - 1
        if span < 0:
            raise ShapeError(at_user_line(f"{op}: kernel {kernel} does not fit input of shape {list(x.shape)}"))
        n = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (n - 1) * s >= size + p:  # last window must start inside the input
            n -= 1
        outs.append(n)
        extra.append(max(0, (n - 1) * s + d * (k - 1) + 1 - (size + 2 * p)))
    return kernel, stride, padding, dilation, outs, extra


def _padded_windows(x: Tensor, value, kernel, stride, padding, dilation, extra) -> Tensor:
    pads = [(0, 0)] * (x.ndim - 2) + [(padding[0], padding[0] + extra[0]), (padding[1], padding[1] + extra[1])]
    if any(lo or hi for lo, hi in pads):
        x = apply("pad", [x], pads=tuple(pads), value=value)
    return apply("window", [x], kernel=kernel, stride=stride, dilation=dilation)


@composite("max_pool2d")
def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Max over sliding windows; with return_indices, also the flat H*W index of each maximum."""
    x = as_tensor(input)
    kernel, stride, padding, dilation, outs, extra = _pool_geometry(
        x, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
    windows = _padded_windows(x, float(dt.finfo_min(x.dtype)), kernel, stride, padding, dilation, extra)
    values = windows.amax((-2, -1))
    if not return_indices:
        return values
    flat = windows.reshape(tuple(windows.shape[:-2]) + (kernel[0] * kernel[1],)).argmax(-1)
    kh, kw = flat // kernel[1], flat % kernel[1]
    rows = as_tensor(np.arange(outs[0]) * stride[0] - padding[0]).reshape(-1, 1) + kh * dilation[0]
    cols = as_tensor(np.arange(outs[1]) * stride[1] - padding[1]).reshape(1, -1) + kw * dilation[1]
    return values, rows * x.shape[-1] + cols


@composite("avg_pool2d")
def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over sliding windows, with PyTorch's rules for padding and ceil mode."""
    x = _floating(as_tensor(input))
    kernel, stride, padding, dilation, outs, extra = _pool_geometry(
        x, kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d")
    windows = _padded_windows(x, 0.0, kernel, stride, padding, dilation, extra)
    total = windows.sum((-2, -1))
    if divisor_override:
        return total * (1.0 / divisor_override)
    if not any(padding) and not any(extra) and has_symbols(outs):  # every window whole, at run-time sizes
        return total / as_tensor(np.float64(kernel[0] * kernel[1]), x.dtype)
    if has_symbols(outs):  # windows clipped by the padding at run-time sizes: the counts computed per call
        return total / run_time_window_counts(outs, x.shape[-2:], kernel, stride, (1, 1),
                                              [(p, p) for p in padding], count_include_pad, x.dtype)
    divisor = pool_divisors(outs, x.shape[-2:], kernel, stride, padding, count_include_pad)
    return total / as_tensor(divisor, x.dtype)


def run_time_window_counts(outs, sizes, kernel, stride, dilation, pads, include_pad: bool, dtype) -> Tensor:
    """The cells each pooling window averages, for run-time sizes: a tensor of the pooled axes' shape
    computed from iotas over the output positions where the division reads it (no guard on a size).

    Window o of an axis covers o*s - lo + j*d for j < k; it counts the cells in [-lo, size + hi) when
    `include_pad`, else in [0, size). pads: (lo, hi) per axis.
    """
    counts = None
    for axis, (n, size, k, s, d, (lo, hi)) in enumerate(zip(outs, sizes, kernel, stride, dilation, pads)):
        start = arange(n) * s - lo
        low, high = (-lo, size + hi) if include_pad else (0, size)
        first = _ceil_div(-start + low, d).maximum(as_tensor(np.int64(0)))  # the first tap inside
        stop = _ceil_div(-start + high, d).minimum(as_tensor(np.int64(k)))  # one past the last
        count = (stop - first).maximum(as_tensor(np.int64(0))).astype(dtype)
        count = count.reshape(tuple(n if i == axis else 1 for i in range(len(outs))))
        counts = count if counts is None else counts * count
    return counts


def _ceil_div(a: Tensor, d: int) -> Tensor:
    return a if d == 1 else -((-a) // d)


def pool_divisors(outs, sizes, kernel, stride, padding, count_include_pad: bool) -> np.ndarray:
    """The divisor of each average-pooling window (one axis per pooled axis), known at compile time:
    the cells it covers, padding included when `count_include_pad` (PyTorch's rule)."""
    divisor = np.ones((), dtype=np.float64)
    for n, size, k, s, p in zip(outs, sizes, kernel, stride, padding):
        start = np.arange(n) * s - p
        end = np.minimum(start + k, size + p)
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, size)
        divisor = np.multiply.outer(divisor, end - np.maximum(start, -p))
    return divisor


def adaptive_pool_matrix(size: int, out: int) -> np.ndarray:
    """(out, size): row i averages input cells floor(i*size/out) .. ceil((i+1)*size/out) (PyTorch's windows)."""
    m = np.zeros((out, size))
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m


@composite("adaptive_avg_pool2d")
def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Average pooling to a fixed output size (windows as in PyTorch)."""
    x = _floating(as_tensor(input))
    h, w = x.shape[-2:]
    if isinstance(output_size, (tuple, list)):  # None keeps that dimension's size (PyTorch)
        output_size = tuple(size if o is None else o for o, size in zip(output_size, (h, w)))
    oh, ow = _pair(output_size, "output_size")
    if (oh, ow) == (1, 1):
        return x.mean((-2, -1), keepdim=True)
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(x, (h // oh, w // ow))
    rows = as_tensor(adaptive_pool_matrix(h, oh), x.dtype)
    cols = as_tensor(adaptive_pool_matrix(w, ow).T, x.dtype)
    return matmul(matmul(rows, x), cols)


# ---- normalization -----------------------------------------------------------------------

@composite("layer_norm")
def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing `normalized_shape` dims, then scale and shift."""
    x = _floating(as_tensor(input))
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape or len(shape) > x.ndim:
        raise ShapeError(at_user_line(f"layer_norm: normalized_shape {list(shape)} does not match "
                                      f"the trailing dims of input {list(x.shape)}"))
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    mu = mean(x, dims, True)
    centered = x - mu
    variance = mean(centered * centered, dims, True)
    out = centered * (variance + eps).rsqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


@composite("batch_norm")
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalization over dim 1; in training mode uses batch statistics and updates running ones."""
    x = _floating(as_tensor(input))
    if x.ndim < 2:
        raise ShapeError(at_user_line(f"batch_norm: expects (N, C, ...) input, got {list(x.shape)}"))
    c = x.shape[1]
    stat_shape = (1, c) + (1,) * (x.ndim - 2)

    def per_channel(t):
        t = as_tensor(t)
        if tuple(t.shape) != (c,):
            raise ShapeError(at_user_line(f"batch_norm: expected per-channel tensor of shape [{c}], "
                                          f"got {list(t.shape)}"))
        return t.reshape(stat_shape)

    if training:
        dims = (0,) + tuple(range(2, x.ndim))
        mu = mean(x, dims, True)
        variance = var(x, dims, correction=0, keepdim=True)
        if running_mean is not None or running_var is not None:
            _update_running_stats(x, mu, variance, running_mean, running_var, momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are required when training=False")
        mu, variance = per_channel(running_mean), per_channel(running_var)
    out = (x - mu) * (variance + eps).rsqrt()
    if weight is not None:
        out = out * per_channel(weight)
    if bias is not None:
        out = out + per_channel(bias)
    return out


def _update_running_stats(x, mu, variance, running_mean, running_var, momentum):
    """Exponential moving averages, as PyTorch (running_var uses the unbiased batch variance).

    The statistics are updated in place; inside tk.jit the update is recorded
    and becomes a graph output written back into the buffers after each call.
    """
    count = x.numel() // x.shape[1]
    with no_grad():
        for stat, batch in ((running_mean, mu), (running_var, variance * (count / max(count - 1, 1)))):
            if stat is None:
                continue
            stat = as_tensor(stat)
            new = stat._inplace() * (1.0 - momentum) + batch.reshape(-1).to(stat.dtype) * momentum
            stat.copy_(new)


# ---- attention ---------------------------------------------------------------------------

@composite("attention")
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v over the last two dims, as PyTorch's SDPA."""
    q, k, v = (as_tensor(t) for t in (query, key, value))
    if dropout_p:
        raise ValueError("scaled_dot_product_attention: dropout_p must be 0 (inference)")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(at_user_line(
            f"scaled_dot_product_attention: query {list(q.shape)}, key {list(k.shape)} and value "
            f"{list(v.shape)} do not fit (need (..., L, E), (..., S, E), (..., S, Ev))"))
    if enable_gqa and q.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        groups = q.shape[-3] // k.shape[-3]
        k = k.unsqueeze(-3).expand(*k.shape[:-2], groups, *k.shape[-2:]).reshape(*q.shape[:-2], *k.shape[-2:])
        v = v.unsqueeze(-3).expand(*v.shape[:-2], groups, *v.shape[-2:]).reshape(*q.shape[:-2], *v.shape[-2:])
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = matmul(q, k.transpose(-2, -1)) * scale
    length, source = q.shape[-2], k.shape[-2]
    if is_causal:
        scores = where(causal_mask(length, source), scores, float("-inf"))
    if attn_mask is not None:
        mask = as_tensor(attn_mask)
        scores = where(mask, scores, float("-inf")) if mask.dtype.is_bool else scores + mask
    return matmul(softmax(scores, -1), v)


def causal_mask(length, source) -> Tensor:
    """mask[i, j] = j <= i: a constant for static sizes, iota comparisons for symbolic ones (one
    program serves every length; the attention kernel reads either as an index comparison)."""
    if is_symbolic(length) or is_symbolic(source):
        return arange(source).reshape(1, source) <= arange(length).reshape(length, 1)
    return as_tensor(np.tril(np.ones((length, source), dtype=bool)))


# ---- losses ------------------------------------------------------------------------------

def _reduce_loss(loss: Tensor, reduction: str, denominator=None) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / denominator if denominator is not None else loss.mean()
    raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _class_axis_view(n_classes: int, ndim: int) -> Tensor:
    """arange(C) shaped to broadcast against (N, C, d1, ...) logits."""
    shape = (1, n_classes) + (1,) * (ndim - 2) if ndim >= 2 else (n_classes,)
    return as_tensor(np.arange(n_classes, dtype=np.int64).reshape(shape))


def _check_targets(target: Tensor, n_classes: int, ignore_index: int, op: str) -> None:
    if target.is_traced:
        return
    values = target.numpy()
    bad = values[((values < 0) | (values >= n_classes)) & (values != ignore_index)]
    if bad.size:
        raise IndexError(f"{op}: target {bad.reshape(-1)[0]} is out of range for {n_classes} classes")


@composite("nll_loss")
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class-index targets given log-probabilities (N, C, ...)."""
    logp, target = as_tensor(input), as_tensor(target)
    class_dim = 1 if logp.ndim >= 2 else 0
    n_classes = logp.shape[class_dim]
    expected = tuple(logp.shape[:class_dim] + logp.shape[class_dim + 1:])
    if not target.dtype.is_integer:
        raise DTypeError(at_user_line(f"nll_loss: class-index targets must be integers, got {target.dtype.name}"))
    if tuple(target.shape) != expected:
        raise ShapeError(at_user_line(f"nll_loss: target shape {list(target.shape)} does not match "
                                      f"input {list(logp.shape)} (expected {list(expected)})"))
    _check_targets(target, n_classes, ignore_index, "nll_loss")
    target = target.to(dt.int64)
    onehot = target.unsqueeze(class_dim) == _class_axis_view(n_classes, logp.ndim)
    picked = where(onehot, logp, 0.0).sum(class_dim)
    valid = (target != ignore_index).to(logp.dtype)
    if weight is not None:
        w = as_tensor(weight).to(logp.dtype)
        sample_weight = where(onehot, w.reshape(_class_axis_view(n_classes, logp.ndim).shape), 0.0).sum(class_dim)
        valid = valid * sample_weight
    return _reduce_loss(-picked * valid, reduction, valid.sum())


@composite("cross_entropy")
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,
                  ignore_index: int = -100, reduce=None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits (N, C, ...) against class indices or class probabilities."""
    logits, target = _floating(as_tensor(input)), as_tensor(target)
    class_dim = 1 if logits.ndim >= 2 else 0
    n_classes = logits.shape[class_dim]
    logp = log_softmax(logits, class_dim)
    w = None
    if weight is not None:
        w = as_tensor(weight).to(logp.dtype).reshape(_class_axis_view(n_classes, logits.ndim).shape)
    if target.dtype.is_floating:  # class probabilities
        if tuple(target.shape) != tuple(logits.shape):
            raise ShapeError(at_user_line(f"cross_entropy: probability target shape {list(target.shape)} "
                                          f"must equal input shape {list(logits.shape)}"))
        probs = target.to(logp.dtype)
        if label_smoothing:
            probs = probs * (1.0 - label_smoothing) + label_smoothing / n_classes
        terms = probs * logp if w is None else probs * logp * w
        loss = -terms.sum(class_dim)
        return _reduce_loss(loss, reduction)
    if not label_smoothing:
        return nll_loss(logp, target, weight, ignore_index, reduction)
    loss = nll_loss(logp, target, weight, ignore_index, "none")
    valid = (target.to(dt.int64) != ignore_index).to(logp.dtype)
    smooth = -(logp if w is None else logp * w).sum(class_dim) * valid
    combined = loss * (1.0 - label_smoothing) + smooth * (label_smoothing / n_classes)
    if reduction != "mean":
        return _reduce_loss(combined, reduction)
    if w is None:
        denominator = valid.sum()
    else:
        onehot = target.to(dt.int64).unsqueeze(class_dim) == _class_axis_view(n_classes, logits.ndim)
        denominator = (where(onehot, w, 0.0).sum(class_dim) * valid).sum()
    return combined.sum() / denominator


def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    diff = as_tensor(input) - target
    return _reduce_loss(diff * diff, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    return _reduce_loss((as_tensor(input) - target).abs(), reduction)


# ---- movement and lookup ----------------------------------------------------------------

def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad trailing dims: `pad` = (last_lo, last_hi, second_last_lo, ...); negative values crop."""
    x = as_tensor(input)
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(at_user_line(f"pad: {len(pad)} values do not describe (before, after) pairs "
                                      f"for a tensor of rank {x.ndim}"))
    pairs = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pairs[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if any(lo < 0 or hi < 0 for lo, hi in pairs):  # crop first
        index = tuple(slice(-lo if lo < 0 else 0, x.shape[d] + hi if hi < 0 else x.shape[d])
                      for d, (lo, hi) in enumerate(pairs))
        x = x[index]
        pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    if mode == "constant":
        fill = 0 if value is None else value
        if not any(lo or hi for lo, hi in pairs):
            return x
        return apply("pad", [x], pads=tuple(pairs), value=fill)
    for d, (lo, hi) in enumerate(pairs):
        if lo or hi:
            x = _pad_edges(x, d, lo, hi, mode)
    return x


def _pad_edges(x: Tensor, d: int, lo: int, hi: int, mode: str) -> Tensor:
    n = x.shape[d]

    def take(start, stop):
        index = [slice(None)] * x.ndim
        index[d] = slice(start, stop)
        return x[tuple(index)]

    if mode == "reflect":
        if lo >= n or hi >= n:
            raise ShapeError(at_user_line(f"pad: reflect padding ({lo}, {hi}) must be smaller than the "
                                          f"dimension size {n}"))
        parts = [flip(take(1, lo + 1), d), x, flip(take(n - 1 - hi, n - 1), d)]
    elif mode == "replicate":
        edge_shape = list(x.shape)
        parts = []
        if lo:
            edge_shape[d] = lo
            parts.append(take(0, 1).expand(edge_shape))
        parts.append(x)
        if hi:
            edge_shape[d] = hi
            parts.append(take(n - 1, n).expand(edge_shape))
    elif mode == "circular":
        if lo > n or hi > n:
            raise ShapeError(at_user_line(f"pad: circular padding ({lo}, {hi}) exceeds dimension size {n}"))
        parts = [take(n - lo, n), x, take(0, hi)]
    else:
        raise ValueError(f"pad: mode must be constant, reflect, replicate or circular, got {mode!r}")
    return concat([p for p in parts if p.shape[d]], d)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm=None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of `weight` selected by integer `input`: output shape input.shape + (dim,)."""
    index, table = as_tensor(input), as_tensor(weight)
    if not index.dtype.is_integer:
        raise DTypeError(at_user_line(f"embedding: indices must be integers, got {index.dtype.name}"))
    if table.ndim != 2:
        raise ShapeError(at_user_line(f"embedding: weight must be 2-d, got {list(table.shape)}"))
    if padding_idx is not None and table.requires_grad:  # the padding row gets no gradient (PyTorch)
        padding = (index == (padding_idx % table.shape[0])).unsqueeze(-1)
        return where(padding, apply("take", [table.detach(), index], axis=0), apply("take", [table, index], axis=0))
    return apply("take", [table, index], axis=0)


# ---- dropout -----------------------------------------------------------------------------

def new_dropout_seed() -> Tensor:
    """A dropout seed: an int64 0-d tensor drawn from tk.manual_seed's generator, advanced by every
    dropout call (marked mutable, so compiled functions read it per call and write it back)."""
    seed = randint(0, 2 ** 31 - 1, ())
    mark_mutable(seed)
    return seed


_default_seed: list = []  # the seed F.dropout uses when none is given (created on first use)


@composite("dropout")
def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,
            seed: Tensor | None = None) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) (identity when not training).

    The mask compares Philox uniform numbers under key `seed` (an int64 0-d tensor,
    advanced by one per call) with p (frontend/random.py); without a seed a default one drawn from
    tk.manual_seed's generator is used. Works the same eagerly and inside tk.jit.
    """
    x = _floating(as_tensor(input))
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    if seed is None:
        if not _default_seed:
            _default_seed.append(new_dropout_seed())
        seed = _default_seed[0]
    keep = philox(seed, 0, tuple(x.shape)) >= p
    seed.add_(1)
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last dimension."""
    index = as_tensor(tensor)
    if num_classes < 0:
        num_classes = int(index.numpy().max()) + 1
    return (index.unsqueeze(-1) == as_tensor(np.arange(num_classes))).to(dt.int64)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along `dim`."""
    x = _floating(as_tensor(input))
    norm = (x.abs() ** p).sum(dim, keepdim=True) ** (1.0 / p)
    return x / norm.clamp(min=eps)


@tensor_methods
class TensorNN:
    """Tensor's neural-network methods (added to Tensor: tensor.py is below this module)."""

    __slots__ = ()

    def softmax(self, dim: int = -1, dtype=None) -> Tensor:
        return softmax(self, dim, dtype=dtype)

    def log_softmax(self, dim: int = -1, dtype=None) -> Tensor:
        return log_softmax(self, dim, dtype=dtype)

    def gelu(self, approximate: str = "none") -> Tensor:
        return gelu(self, approximate=approximate)

    def silu(self) -> Tensor:
        return silu(self)

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        return softplus(self, beta, threshold)


from .sampling import affine_grid, grid_sample  # noqa: E402,F401  (torch.nn.functional's spatial sampling)
