"""Spatial sampling: grid_sample (nearest, linear, cubic; zeros, border, reflection padding; any number
of spatial axes) and affine_grid, the grid of an affine transform (tk.nn.functional's; the ONNX
GridSample/AffineGrid converters and PyTorch's grid_sampler_2d lowering use them).

grid_sample is composed of elementwise ops on the grid's coordinates and gathers from the input
viewed as (N, C, D1 * ... * Dr): per spatial axis each output point reads a few taps (1 nearest,
2 linear, 4 cubic) with a weight each, and the output is the sum over every combination of taps
(2^r or 4^r gathers) of the product of their weights. The rules follow the ONNX reference and
PyTorch's grid_sampler: a coordinate outside the sampled range is clamped ("border") or reflected
("reflection") before interpolating; a tap outside the input reads 0 ("zeros"), the nearest edge
("border") or its reflection ("reflection"); "nearest" rounds half to even; cubic is Keys' with
A = -0.75.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import dtypes as dt
from ..errors import ShapeError, UnsupportedOpError, at_user_line
from ..frontend.functions import concat, matmul, where
from ..frontend.tensor import Tensor, as_tensor
from ..shapes import prod

CUBIC_A = -0.75
MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}  # ONNX's and torch's names
PADDINGS = ("zeros", "border", "reflection")


def _unnormalize(g: Tensor, size: int, align_corners: bool) -> Tensor:
    """[-1, 1] to pixel coordinates: corner pixels' centers (align_corners) or their outer edges."""
    if align_corners:
        return (g + 1.0) * (0.5 * (size - 1))
    return ((g + 1.0) * size - 1.0) * 0.5


def _borders(size: int, align_corners: bool) -> tuple[float, float]:
    """The range of coordinates that lie inside the input along one axis."""
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def _reflect(x: Tensor, low: float, high: float) -> Tensor:
    """x reflected at `low` and `high` until it lies between them (the ONNX reference's rule)."""
    span = high - low
    if span <= 0:
        return x * 0.0 + low  # a single coordinate: every reflection lands on it
    below, above = x < low, x > high
    distance = where(below, low - x, where(above, x - high, x * 0.0))
    flips = (distance / span).trunc()
    rest = distance - flips * span
    even = (flips - (flips * 0.5).floor() * 2.0) == 0.0
    from_low, from_high = low + rest, high - rest
    return where(below, where(even, from_low, from_high), where(above, where(even, from_high, from_low), x))


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """Keys' cubic convolution weights of the taps at floor - 1 .. floor + 2, for t = x - floor(x)."""
    a = CUBIC_A
    s, u, v = t + 1.0, 1.0 - t, 2.0 - t
    return [((s * a - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a,
            ((t * (a + 2.0)) - (a + 3.0)) * t * t + 1.0,
            ((u * (a + 2.0)) - (a + 3.0)) * u * u + 1.0,
            ((v * a - 5.0 * a) * v + 8.0 * a) * v - 4.0 * a]


def _taps(x: Tensor, mode: str) -> tuple[Tensor, Tensor | None]:
    """(positions, weights or None for 1) of the taps along one axis, the taps on a new last axis."""
    if mode == "nearest":
        return x.unsqueeze(-1), None
    base = x.floor()
    t = (x - base).unsqueeze(-1)
    offsets = [0.0, 1.0] if mode == "linear" else [-1.0, 0.0, 1.0, 2.0]
    positions = base.unsqueeze(-1) + as_tensor(np.array(offsets, x.dtype.storage))
    weights = concat([1.0 - t, t] if mode == "linear" else _cubic_weights(t), -1)
    return positions, weights


def _tap_index(position: Tensor, size: int, padding: str, borders: tuple[float, float]):
    """(int64 index inside [0, size), or None where the tap reads 0) of taps at integral positions."""
    if padding == "reflection":
        position = _reflect(position, *borders).trunc()
    inside = None
    if padding == "zeros":
        inside = (position >= 0.0) & (position <= size - 1.0)
    index = position.clamp(0.0, size - 1.0).to(dt.int64)  # clamped: "border", and a safe read elsewhere
    return index, inside


def _source_position(coord: Tensor, size: int, mode: str, padding: str, align_corners: bool) -> Tensor:
    """The pixel coordinate one axis samples, before its taps are taken.

    Linear and nearest sampling clamp or reflect the coordinate itself first; cubic sampling
    applies the padding to each tap only (as PyTorch and ONNX Runtime do)."""
    position = _unnormalize(coord, size, align_corners)
    if mode == "nearest":
        position = position.round()
    if mode != "cubic" and padding == "border":
        position = position.clamp(0.0, size - 1.0)
    elif mode != "cubic" and padding == "reflection":
        position = _reflect(position, *_borders(size, align_corners))
    return position


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool = False) -> Tensor:
    """input (N, C, D1..Dr) sampled at grid (N, H1..Hr, r), whose last axis lists (x, y, ...) in [-1, 1],
    as torch.nn.functional.grid_sample (and ONNX GridSample): mode bilinear/linear, nearest or
    bicubic/cubic (2 spatial axes), padding_mode zeros, border or reflection."""
    x, grid = as_tensor(input), as_tensor(grid)
    if mode not in MODES:
        raise ValueError(f"grid_sample: mode {mode!r} is not one of {', '.join(MODES)}")
    if padding_mode not in PADDINGS:
        raise ValueError(f"grid_sample: padding_mode {padding_mode!r} is not one of {', '.join(PADDINGS)}")
    mode, padding = MODES[mode], padding_mode
    rank = x.ndim - 2
    if rank < 1 or grid.ndim != x.ndim or grid.shape[-1] != rank or grid.shape[0] != x.shape[0]:
        raise ShapeError(at_user_line(f"grid_sample: input of shape {list(x.shape)} needs a grid of shape "
                                      f"[N={x.shape[0] if x.ndim else '?'}, H1..H{max(rank, 1)}, {max(rank, 1)}], "
                                      f"got {list(grid.shape)}"))
    if mode == "cubic" and rank != 2:
        raise UnsupportedOpError(f"grid_sample: bicubic sampling over {rank} spatial axes (defined for 2)")
    n, sizes = x.shape[0], list(x.shape[2:])
    compute = dt.promote_types(grid.dtype.compute, x.dtype.compute, dt.float32)
    points = tuple(grid.shape[1:-1])
    coords = grid.to(compute).reshape((n, prod(points), rank))
    positions = [_source_position(coords.narrow(2, rank - 1 - axis, 1).squeeze(2), size, mode, padding, align_corners)
                 for axis, size in enumerate(sizes)]  # the grid lists x (the last axis) first
    values = sample_points(x.to(compute), positions, mode, padding, align_corners)
    return values.reshape((n, x.shape[1]) + points).to(x.dtype)


def sample_points(x: Tensor, positions: list[Tensor], mode: str, padding: str, align_corners: bool) -> Tensor:
    """x (N, C, D1..Dr) at P points given by their pixel coordinates along each axis (r tensors (N, P)),
    interpolated by `mode` with taps outside padded by `padding`: (N, C, P).

    Each axis's taps sit on one axis of their own, so the whole neighbourhood is one gather of
    (N, C, P * taps^r) values and a weighted sum over the taps."""
    n, c, sizes = x.shape[0], x.shape[1], list(x.shape[2:])
    rank, count = len(sizes), positions[0].shape[1]
    index, weight = None, None
    for axis, (size, position) in enumerate(zip(sizes, positions)):
        tap_positions, weights = _taps(position, mode)
        tap, inside = _tap_index(tap_positions, size, padding, _borders(size, align_corners))
        if inside is not None:
            weights = inside.to(x.dtype) if weights is None else where(inside, weights, 0.0)
        # (N, P, T) -> (N, P, 1, .., T, .., 1): this axis's taps on tap axis `axis`
        spread = (n, count) + tuple(tap.shape[-1] if a == axis else 1 for a in range(rank))
        stride = prod(sizes[axis + 1:])
        part = tap.reshape(spread) * stride if stride != 1 else tap.reshape(spread)
        index = part if index is None else index + part
        if weights is not None:
            weights = weights.reshape(spread)
            weight = weights if weight is None else weight * weights
    taps = tuple(index.shape[2:])
    neighbourhood = prod(taps)
    index = index.reshape((n, 1, count * neighbourhood)).expand(n, c, count * neighbourhood)
    values = x.reshape((n, c, prod(sizes))).gather(2, index).reshape((n, c, count, neighbourhood))
    if weight is not None:
        values = values * weight.expand(n, count, *taps).reshape((n, 1, count, neighbourhood))
    return values.sum(-1)


def _base_coordinates(size: int, align_corners: bool) -> np.ndarray:
    """The normalized coordinates of `size` pixel centers along one axis."""
    if align_corners:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.zeros(1)
    return (np.arange(size) * 2.0 + 1.0) / size - 1.0



def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool = False) -> Tensor:
    """The sampling grid (N, D.., H, W, r) of the affine transforms theta (N, r, r + 1) for an output of
    `size` (N, C, [D,] H, W), as torch.nn.functional.affine_grid and ONNX AffineGrid (r = 2 or 3)."""
    theta = as_tensor(theta)
    size = [int(s) for s in size]
    rank = len(size) - 2
    if rank not in (2, 3) or tuple(theta.shape) != (size[0], rank, rank + 1):
        raise ShapeError(at_user_line(f"affine_grid: size {size} needs theta of shape [{size[0]}, {rank}, "
                                      f"{rank + 1}] (2 or 3 spatial axes), got {list(theta.shape)}"))
    spatial = size[2:]
    # (x, y[, z], 1) of every output point, x varying fastest: the last spatial axis is x
    axes = [_base_coordinates(s, align_corners) for s in reversed(spatial)]
    mesh = np.meshgrid(*axes[::-1], indexing="ij")  # in spatial order (D, H, W)
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(prod(spatial))], axis=-1)
    base_t = as_tensor(base.astype(dt.promote_types(theta.dtype.compute, dt.float32).storage))
    points = matmul(base_t, theta.to(base_t.dtype).transpose(1, 2))  # (N, points, rank)
    return points.reshape((size[0], *spatial, rank)).to(theta.dtype)
