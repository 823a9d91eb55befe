"""Max, average and adaptive pooling, with static or run-time window counts."""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError, at_user_line
from ...frontend.creation import arange
from ...frontend.functions import matmul
from ...frontend.tensor import Tensor, apply, as_tensor
from ...frontend.trace import composite
from ...shapes import has_symbols
from .arguments import _floating, _pair


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
