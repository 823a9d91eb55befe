"""Lowerings of ATen's backward ops: what AOTAutograd's backward graph of a CNN holds after PyTorch's core
decompositions (convolution_backward and the pooling backward ops), so CNNs train through
torch.compile(backend="tensorkiln").

A convolution's and an average pool's backward are the vector-Jacobian products of their forward
lowerings, taken by tensorkiln's own autodiff (tk.vjp over the op table's gradient rules), so the
gradient of every convolution form (strided, dilated, grouped, transposed, 1-d) is the one its forward
already has. Max pooling's backward instead routes each output gradient to the input position PyTorch's
forward chose (`indices`, the flat position in the input plane): with ties, another rule would pick
another element. For each of the kernel's k*k offsets, the gradients whose index is that offset's input
position are placed, zero-stuffed by the stride, onto the input grid: k*k elementwise passes, no scatter.
"""
from __future__ import annotations

import torch

from ...frontend.autodiff.functional import vjp
from ...frontend.creation import arange, zeros
from ...frontend.functions import where
from ...frontend.tensor import Tensor
from ...nn import functional as F
from .lowering import avg_pool2d, adaptive_avg_pool2d, convolution, register_lowering

aten = torch.ops.aten


@register_lowering(aten.convolution_backward.default)
def convolution_backward(grad_output, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    wanted = [bool(output_mask[0]), bool(output_mask[1])]
    grad_input = grad_weight = grad_bias = None
    if any(wanted):
        primals = [t for t, w in zip((x, weight), wanted) if w]

        def forward(*differentiated):
            given = iter(differentiated)
            xs, ws = (next(given) if wanted[0] else x), (next(given) if wanted[1] else weight)
            return convolution(xs, ws, None, stride, padding, dilation, transposed, output_padding, groups)

        _, pullback = vjp(forward, *primals)
        grads = iter(pullback(grad_output))
        grad_input = next(grads) if wanted[0] else None
        grad_weight = next(grads) if wanted[1] else None
    if output_mask[2]:
        grad_bias = grad_output.sum([0] + list(range(2, grad_output.ndim)))
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


def _pair(value) -> tuple[int, int]:
    value = [value] if isinstance(value, int) else list(value)
    return (value[0], value[-1]) if value else (1, 1)


def _place(t: Tensor, stride: tuple[int, int], offset: tuple[int, int], size: tuple[int, int]) -> Tensor:
    """r of spatial `size` with r[..., i*sh + oy, j*sw + ox] = t[..., i, j]; positions outside are dropped."""
    *lead, oh, ow = t.shape
    (sh, sw), (oy, ox), (h, w) = stride, offset, size
    if sh > 1 or sw > 1:  # zero-stuff: t[i, j] lands at (i*sh, j*sw)
        t = F.pad(t.reshape(*lead, oh, 1, ow, 1), (0, sw - 1, 0, 0, 0, sh - 1)).reshape(*lead, oh * sh, ow * sw)
    rows, cols = t.shape[-2], t.shape[-1]
    # shift by the offset (a negative one drops leading rows), then crop or pad to the input's size
    t = t[..., max(-oy, 0):, max(-ox, 0):]
    top, left = max(oy, 0), max(ox, 0)
    rows, cols = rows - max(-oy, 0), cols - max(-ox, 0)
    t = t[..., :max(h - top, 0), :max(w - left, 0)]
    rows, cols = min(rows, max(h - top, 0)), min(cols, max(w - left, 0))
    return F.pad(t, (left, w - left - cols, top, h - top - rows))


@register_lowering(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    (kh, kw), (ph, pw), (dh, dw) = _pair(kernel_size), _pair(padding), _pair(dilation)
    sh, sw = _pair(stride) if isinstance(stride, int) or len(stride) else (kh, kw)  # [] means the kernel's
    h, w = x.shape[-2], x.shape[-1]
    oh, ow = grad_output.shape[-2], grad_output.shape[-1]
    rows = arange(oh).reshape(oh, 1) * sh - ph
    cols = arange(ow).reshape(1, ow) * sw - pw
    result = zeros(tuple(x.shape), dtype=grad_output.dtype)
    for di in range(kh):
        for dj in range(kw):
            # the flat input position this offset reads for each output (outside the input: never chosen)
            chosen = indices == (rows + di * dh) * w + (cols + dj * dw)
            routed = where(chosen, grad_output, 0.0)
            result = result + _place(routed, (sh, sw), (di * dh - ph, dj * dw - pw), (h, w))
    return result
