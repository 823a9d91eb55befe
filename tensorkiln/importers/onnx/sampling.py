"""ONNX spatial sampling: GridSample and AffineGrid, by tk.nn.functional's grid_sample and affine_grid
(tensorkiln/nn/sampling.py: the modes, paddings and rules)."""
from __future__ import annotations

from ...nn.sampling import MODES, PADDINGS, affine_grid, grid_sample
from .registry import converter


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


@converter("GridSample")
def _grid_sample(ctx, inputs, attrs):
    x, grid = inputs
    default = "bilinear" if ctx.opset < 20 else "linear"
    mode = _text(attrs.get("mode", default))
    padding = _text(attrs.get("padding_mode", "zeros"))
    if mode not in MODES:
        raise ctx.unsupported(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if padding not in PADDINGS:
        raise ctx.unsupported(f"padding_mode {padding!r} is not one of {', '.join(PADDINGS)}")
    return grid_sample(x, grid, mode, padding, bool(attrs.get("align_corners", 0)))


@converter("AffineGrid", values={1})
def _affine_grid(ctx, inputs, attrs):
    return affine_grid(inputs[0], ctx.ints(inputs[1], "size"), bool(attrs.get("align_corners", 0)))
