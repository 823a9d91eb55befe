"""ONNX Col2Im: sliding-window columns (N, C * prod(block), L) summed back into an image (N, C, *image).

The inverse arrangement of im2col: column entry (c, k, l) belongs at pixel
offset(k) * dilation + position(l) * stride - pad_begin, and pixels that several windows
cover receive the sum. Composed of movement ops: per kernel offset, the slab of its L values
is spread out by the strides (zeros between), padded into place, and the slabs are summed;
the pads are cut off at the end. Any number of spatial axes.
"""
from __future__ import annotations

import itertools

from ...errors import ShapeError
from ...frontend.tensor import Tensor, apply
from .helpers import prod
from .registry import converter


def _spread(x: Tensor, strides: list[int]) -> Tensor:
    """(N, C, b1, .., br) -> (N, C, (b1 - 1) * s1 + 1, ..): the values `stride` apart, zeros between."""
    if all(s == 1 for s in strides):
        return x
    n, c, blocks = x.shape[0], x.shape[1], list(x.shape[2:])
    interleaved = (n, c) + tuple(v for b in blocks for v in (b, 1))
    pads = ((0, 0), (0, 0)) + tuple(p for s in strides for p in ((0, 0), (0, s - 1)))
    wide = apply("pad", [x.reshape(interleaved)], pads=pads, value=0.0)
    wide = wide.reshape((n, c) + tuple(b * s for b, s in zip(blocks, strides)))
    index = (slice(None), slice(None)) + tuple(slice(0, (b - 1) * s + 1) for b, s in zip(blocks, strides))
    return wide[index]


def col2im(x: Tensor, image: list[int], block: list[int], dilations: list[int], pads: list[int],
           strides: list[int], where_: str) -> Tensor:
    """Sum the columns of x (N, C * prod(block), L) back into an image (N, C, *image)."""
    r = len(image)
    begin, end = pads[:r], pads[r:]
    padded = [i + b + e for i, b, e in zip(image, begin, end)]
    spans = [(k - 1) * d + 1 for k, d in zip(block, dilations)]
    blocks = [(p - s) // st + 1 for p, s, st in zip(padded, spans, strides)]
    kernel = prod(block)
    if x.ndim != 3 or x.shape[1] % kernel or min(blocks) < 1 or x.shape[2] != prod(blocks):
        raise ShapeError(f"{where_}: input of shape {list(x.shape)} is not (N, C * {kernel}, {prod(blocks)}) for "
                         f"image {image}, block {block}, dilations {dilations}, pads {pads}, strides {strides}")
    n, c = x.shape[0], x.shape[1] // kernel
    slabs = x.reshape((n, c, kernel) + tuple(blocks))
    total = None
    for k, offset in enumerate(itertools.product(*(range(b) for b in block))):
        spread = _spread(slabs.narrow(2, k, 1).squeeze(2), strides)
        starts = [o * d for o, d in zip(offset, dilations)]
        placed = apply("pad", [spread], value=0.0, pads=((0, 0), (0, 0)) + tuple(
            (s, p - s - w) for s, p, w in zip(starts, padded, spread.shape[2:])))
        total = placed if total is None else total + placed
    index = (slice(None), slice(None)) + tuple(slice(b, b + i) for b, i in zip(begin, image))
    return total[index]


@converter("Col2Im", values={1, 2})
def _col2im(ctx, inputs, attrs):
    x = inputs[0]
    image, block = ctx.ints(inputs[1], "image_shape"), ctx.ints(inputs[2], "block_shape")
    r = len(image)
    where_ = f"node '{ctx.name}' (Col2Im)"
    if len(block) != r or r < 1:
        raise ShapeError(f"{where_}: image_shape {image} and block_shape {block} must have one entry per spatial axis")
    dilations = attrs.get("dilations") or [1] * r
    pads = attrs.get("pads") or [0] * (2 * r)
    strides = attrs.get("strides") or [1] * r
    if len(dilations) != r or len(strides) != r or len(pads) != 2 * r:
        raise ShapeError(f"{where_}: dilations {dilations}, strides {strides} and pads {pads} do not match "
                         f"{r} spatial axes")
    return col2im(x, image, block, list(dilations), list(pads), list(strides), where_)
