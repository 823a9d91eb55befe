"""ONNX data-movement operators: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat,
Split, Expand, Tile, Pad (constant, reflect, edge, wrap) and the block rearrangements
DepthToSpace and SpaceToDepth. Shapes, axes, split sizes, repeats and pads given as inputs must
be known at trace time (`values=`)."""
from __future__ import annotations

from ...errors import ShapeError
from ...frontend.functions import concat, repeat
from ...nn import functional as F
from .helpers import axes_input, normalize_axis, prod
from .registry import converter


@converter("Reshape", values=lambda opset: {1} if opset >= 5 else set())
def _reshape(ctx, inputs, attrs):
    x = inputs[0]
    shape = attrs["shape"] if ctx.opset < 5 else ctx.sizes(inputs[1], "shape")
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(tuple(shape))


@converter("Flatten")
def _flatten(ctx, inputs, attrs):
    x = inputs[0]
    axis = attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))


@converter("Transpose")
def _transpose(ctx, inputs, attrs):
    x = inputs[0]
    perm = attrs.get("perm") or list(reversed(range(x.ndim)))
    return x.permute(tuple(perm))


@converter("Squeeze", values=lambda opset: {1} if opset >= 13 else set())
def _squeeze(ctx, inputs, attrs):
    x = inputs[0]
    axes = axes_input(ctx, inputs, attrs, 13)
    if axes is None:
        return x.reshape(tuple(s for s in x.shape if s != 1))
    axes = {normalize_axis(a, x.ndim) for a in axes}
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"Squeeze: axis {a} has size {x.shape[a]}, not 1 (input shape {list(x.shape)})")
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


@converter("Unsqueeze", values=lambda opset: {1} if opset >= 13 else set())
def _unsqueeze(ctx, inputs, attrs):
    x = inputs[0]
    axes = axes_input(ctx, inputs, attrs, 13)
    rank = x.ndim + len(axes)
    axes = sorted(normalize_axis(a, rank) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return x.reshape(tuple(shape))


@converter("Concat")
def _concat(ctx, inputs, attrs):
    tensors = [t for t in inputs if t is not None]
    axis = normalize_axis(attrs["axis"], tensors[0].ndim) if ctx.opset >= 4 else attrs.get("axis", 1)
    nonempty = [t for t in tensors if t.shape[axis] != 0] or tensors[:1]
    return concat(nonempty, axis)


@converter("Split", values=lambda opset: {1} if opset >= 13 else set())
def _split(ctx, inputs, attrs):
    x = inputs[0]
    axis = normalize_axis(attrs.get("axis", 0), x.ndim)
    n = x.shape[axis]
    sizes = attrs.get("split") if ctx.opset < 13 else (ctx.ints(inputs[1], "split") if len(inputs) > 1 else None)
    if ctx.opset < 2 and len(inputs) > 1 and inputs[1] is not None:
        sizes = ctx.ints(inputs[1], "split")
    if not sizes:
        parts = attrs.get("num_outputs", ctx.n_outputs)
        if ctx.opset >= 18 and "num_outputs" in attrs:
            size = -(-n // parts)
            sizes = [min(size, n - i * size) for i in range(parts)]
        else:
            if n % parts:
                raise ShapeError(f"Split: axis of size {n} cannot be split into {parts} equal parts")
            sizes = [n // parts] * parts
    return list(x.split(list(sizes), axis))


@converter("Expand", values={1})
def _expand(ctx, inputs, attrs):
    x = inputs[0]
    shape = ctx.sizes(inputs[1], "shape")
    rank = max(len(shape), x.ndim)
    a = (1,) * (rank - x.ndim) + tuple(x.shape)
    b = (1,) * (rank - len(shape)) + tuple(shape)
    out = tuple(max(p, q) if 1 in (p, q) else p for p, q in zip(a, b))
    return x.reshape(a).expand(out)


@converter("Tile", values={1})
def _tile(ctx, inputs, attrs):
    return repeat(inputs[0], *ctx.ints(inputs[1], "repeats"))


@converter("Pad", values=lambda opset: {1, 2, 3} if opset >= 11 else set())
def _pad(ctx, inputs, attrs):
    x = inputs[0]
    mode = attrs.get("mode", "constant")
    if ctx.opset < 11:
        pads = attrs.get("pads", attrs.get("paddings"))
        value = attrs.get("value", 0.0)
        axes = None
    else:
        pads = ctx.ints(inputs[1], "pads")
        value = ctx.values(inputs[2], "constant_value") if len(inputs) > 2 else None
        value = 0 if value is None or value.size == 0 else value.reshape(-1)[0].item()
        axes = ctx.ints(inputs[3], "axes") if len(inputs) > 3 else None
    axes = list(range(x.ndim)) if axes is None else [normalize_axis(a, x.ndim) for a in axes]
    pairs = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        pairs[a] = (pads[i], pads[i + len(axes)])
    torch_pads = []
    for lo, hi in reversed(pairs):
        torch_pads += [lo, hi]
    modes = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}
    if mode not in modes:
        raise ctx.unsupported(f"mode {mode!r} is not supported")
    if mode == "constant":
        if x.dtype.is_integer:
            value = int(value)
        elif x.dtype.is_bool:
            value = bool(value)
        return F.pad(x, torch_pads, "constant", value)
    return F.pad(x, torch_pads, modes[mode])


@converter("DepthToSpace")
def _depth_to_space(ctx, inputs, attrs):
    x = inputs[0]
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    if attrs.get("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@converter("SpaceToDepth")
def _space_to_depth(ctx, inputs, attrs):
    x = inputs[0]
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.permute(0, 3, 5, 1, 2, 4) if attrs.get("mode", "DCR") == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)
