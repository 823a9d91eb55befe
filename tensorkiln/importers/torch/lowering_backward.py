"""Lowerings of ATen's backward ops: what AOTAutograd's backward graph of a CNN holds after PyTorch's core
decompositions (convolution_backward and the pooling backward ops), so CNNs train through
torch.compile(backend="tensorkiln").

A convolution's and an average pool's backward are the vector-Jacobian products of their forward
lowerings, taken by tensorkiln's own autodiff (tk.vjp over the op table's gradient rules), so the
gradient of every convolution form (strided, dilated, grouped, transposed, 1-d) is the one its forward
already has. Max pooling's backward instead routes each output gradient to the input position PyTorch's
forward chose (`indices`, the flat position in the input plane): with ties, another rule would pick
another element. For each of the kernel's offsets (k*k in 2-d, k*k*k in 3-d), the gradients whose index is
that offset's input position are placed, zero-stuffed by the stride, onto the input grid: one elementwise
pass per offset, no scatter.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from ...frontend.autodiff.functional import vjp
from ...frontend.creation import arange, as_tensor, zeros
from ...frontend.functions import where
from ...frontend.tensor import Tensor
from ...nn import functional as F
from .lowering import register_lowering
from .lowering_layers import adaptive_avg_pool2d, avg_pool2d, convolution
from .lowering_nn import adaptive_avg_pool3d, avg_pool3d, grid_sampler_2d, reflection_pad, replication_pad

aten = torch.ops.aten


def _masked_vjp(forward, operands, output_mask, grad_output) -> list:
    """The gradients of `forward(*operands)` for the operands `output_mask` asks for (None for the others),
    by tk.vjp over only those."""
    wanted = [bool(m) for m in output_mask[:len(operands)]]
    if not any(wanted):
        return [None] * len(operands)

    def differentiated(*chosen):
        given = iter(chosen)
        return forward(*(next(given) if w else t for t, w in zip(operands, wanted)))

    _, pullback = vjp(differentiated, *(t for t, w in zip(operands, wanted) if w))
    grads = iter(pullback(grad_output))
    return [next(grads) if w else None for w in wanted]


@register_lowering(aten.convolution_backward.default)
def convolution_backward(grad_output, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    grad_input, grad_weight = _masked_vjp(
        lambda xs, ws: convolution(xs, ws, None, stride, padding, dilation, transposed, output_padding, groups),
        (x, weight), output_mask, grad_output)
    grad_bias = grad_output.sum([0] + list(range(2, grad_output.ndim))) if output_mask[2] else None
    return grad_input, grad_weight, grad_bias


@register_lowering(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    _, pullback = vjp(lambda t: avg_pool2d(t, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                           divisor_override), x)
    return pullback(grad_output)[0]


@register_lowering(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad_output, x):
    _, pullback = vjp(lambda t: adaptive_avg_pool2d(t, tuple(grad_output.shape[-2:])), x)
    return pullback(grad_output)[0]


@register_lowering(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    _, pullback = vjp(lambda t: avg_pool3d(t, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                           divisor_override), x)
    return pullback(grad_output)[0]


@register_lowering(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(grad_output, x):
    _, pullback = vjp(lambda t: adaptive_avg_pool3d(t, tuple(grad_output.shape[-3:])), x)
    return pullback(grad_output)[0]


@register_lowering(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def grid_sampler_2d_backward(grad_output, x, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    return tuple(_masked_vjp(lambda xs, gs: grid_sampler_2d(xs, gs, interpolation_mode, padding_mode, align_corners),
                             (x, grid), output_mask, grad_output))


def _spatial(value, dims: int, default=None) -> tuple[int, ...]:
    """An int or list pooling argument as one value per spatial axis ([] means `default`'s)."""
    if isinstance(value, int):
        return (value,) * dims
    value = list(value)
    if not value:
        return tuple(default) if default is not None else (1,) * dims
    return tuple(value) * dims if len(value) == 1 else tuple(value)


def _place(t: Tensor, stride: tuple[int, ...], offset: tuple[int, ...], size: tuple[int, ...]) -> Tensor:
    """r of spatial `size` with r[..., i*s + o, ...] = t[..., i, ...] along each spatial axis; positions
    outside are dropped."""
    for axis, (s, o, n) in enumerate(zip(stride, offset, size)):
        d = t.ndim - len(size) + axis
        if s > 1:  # zero-stuff: t[i] lands at i*s
            shape = tuple(t.shape)
            t = t.reshape(*shape[:d + 1], 1, *shape[d + 1:])
            t = F.pad(t, (0, 0) * (t.ndim - d - 2) + (0, s - 1))
            t = t.reshape(*shape[:d], shape[d] * s, *shape[d + 1:])
        # shift by the offset (a negative one drops leading positions), then crop or pad to the input's size
        drop = min(max(-o, 0), t.shape[d])
        t = t.narrow(d, drop, t.shape[d] - drop)
        low = max(o, 0)
        t = t.narrow(d, 0, min(t.shape[d], max(n - low, 0)))
        t = F.pad(t, (0, 0) * (t.ndim - d - 1) + (low, n - low - t.shape[d]))
    return t


def _max_pool_backward(grad_output, x, kernel_size, stride, padding, dilation, indices, dims: int) -> Tensor:
    """Route each output gradient to the input position PyTorch's `indices` (flat within the input's
    spatial volume) names: one elementwise pass per kernel offset, zero-stuffed onto the input grid."""
    kernel = _spatial(kernel_size, dims)
    strides = _spatial(stride, dims, kernel)
    pads, dilations = _spatial(padding, dims), _spatial(dilation, dims)
    size = tuple(x.shape[-dims:])
    outs = tuple(grad_output.shape[-dims:])
    starts = []  # each output position's first input coordinate along each axis, broadcast over the others
    for axis in range(dims):
        shape = [1] * dims
        shape[axis] = outs[axis]
        starts.append(arange(outs[axis]).reshape(*shape) * strides[axis] - pads[axis])
    result = zeros(tuple(x.shape), dtype=grad_output.dtype)
    for offset in itertools.product(*(range(k) for k in kernel)):
        flat = None  # the flat input position this offset reads for each output (outside: never chosen)
        for axis in range(dims):
            coordinate = starts[axis] + offset[axis] * dilations[axis]
            flat = coordinate if flat is None else flat * size[axis] + coordinate
        routed = where(indices == flat, grad_output, 0.0)
        shift = tuple(o * d - p for o, d, p in zip(offset, dilations, pads))
        result = result + _place(routed, strides, shift, size)
    return result


@register_lowering(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad_output, x, kernel_size, stride, padding, dilation, indices, 2)


@register_lowering(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad_output, x, kernel_size, stride, padding, dilation, indices, 3)


@register_lowering(aten.reflection_pad1d_backward.default, aten.reflection_pad2d_backward.default,
                   aten.reflection_pad3d_backward.default)
def reflection_pad_backward(grad_output, x, padding):
    _, pullback = vjp(lambda t: reflection_pad(t, padding), x)
    return pullback(grad_output)[0]


@register_lowering(aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
                   aten.replication_pad3d_backward.default)
def replication_pad_backward(grad_output, x, padding):
    _, pullback = vjp(lambda t: replication_pad(t, padding), x)
    return pullback(grad_output)[0]


# ---- distances: PyTorch's own gradient formulas (DistanceOpsKernel.cpp), which define the gradient at
# zero distance (0) and at ties of the infinity norm; the chain rule through sqrt would give NaN there ----

def _distance_gradient(diff: Tensor, grad: Tensor, dist: Tensor, p: float) -> Tensor:
    """d(dist)/d(diff) * grad per coordinate, as ATen's cdist/pdist backward kernels compute it."""
    zero = dist == 0.0
    if p == 0:
        return diff * 0.0
    if p == 1:
        return grad * diff.sign()
    if p == float("inf"):
        return where(diff.abs() == dist, grad * diff.sign(), 0.0)
    if p == 2:
        return where(zero, 0.0, grad * diff / where(zero, 1.0, dist))
    safe = where(zero, 1.0, dist) ** (p - 1)
    if p < 2:
        skip = zero | ((diff == 0.0) & (p < 1))
        return where(skip, 0.0, diff.sign() * diff.abs() ** (p - 1) * grad / safe)
    return where(zero, 0.0, diff * diff.abs() ** (p - 2) * grad / safe)


@register_lowering(aten._cdist_backward.default)
def cdist_backward(grad, x1, x2, p, cdist):
    """The gradient for x1 (PyTorch asks again with the operands swapped for x2's)."""
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # (..., R1, R2, M)
    return _distance_gradient(diff, grad.unsqueeze(-1), cdist.unsqueeze(-1), float(p)).sum(-2)


@register_lowering(aten._pdist_backward.default)
def pdist_backward(grad, x, p, pdist):
    n = x.shape[0]
    first, second = np.triu_indices(n, 1)
    a = x.index_select(0, as_tensor(first.astype(np.int64)))
    b = x.index_select(0, as_tensor(second.astype(np.int64)))
    pairs = _distance_gradient(a - b, grad.unsqueeze(-1), pdist.unsqueeze(-1), float(p))  # (P, M)
    # each pair's gradient goes to its first row and, negated, to its second: an incidence matrix (N, P)
    incidence = np.zeros((n, len(first)), dtype=np.float32)
    incidence[first, np.arange(len(first))] = 1.0
    incidence[second, np.arange(len(first))] = -1.0
    return as_tensor(incidence.astype(x.dtype.storage)) @ pairs
