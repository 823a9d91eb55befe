"""Backend-only ops: contractions that graph passes make for the C backend from matmul and conv2d.

Users and importers never build them (`OpDef.backend_only`): the layout pass
blocks convolution chains into `conv2d_nchwc`, the winograd_weights pass turns a
3x3 convolution with constant weights into `conv2d_winograd`, and the
packed_weights pass gives a constant GEMM operand as `matmul_packed`'s panels.
Each has a numpy reference and a gradient like every primitive, so a graph
after those passes still runs in the interpreter and trains.
"""
from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from .contraction import _conv2d_gradient, _conv2d_infer, _conv2d_reference, _matmul_gradient
from .gradient import pad_axis, slice_axis
from .gemm_panels import unpack_panels
from .registry import MappingType, OpKind, TensorType, register
from .winograd_math import WINOGRAD_POINTS, transform_from_panels, weight_transform_inverse, weights_from_transform


def _matmul_packed_infer(types, attrs):
    a, panels = types
    n = attrs["n"]
    if a.dtype != panels.dtype or a.dtype.name not in ("float32", "float64"):
        raise DTypeError(f"matmul_packed expects float32 or float64 operands of one dtype, got "
                         f"{a.dtype.name} and {panels.dtype.name}")
    if a.ndim < 2 or panels.ndim != 3 or panels.shape[1] != a.shape[-1] or \
            not (panels.shape[0] - 1) * panels.shape[2] < n <= panels.shape[0] * panels.shape[2]:
        raise ShapeError(f"matmul_packed expects A (..., M, K) and B's panels (ceil(N / NR), K, NR) for "
                         f"N = {n}, got {a.shape} and {panels.shape}")
    return TensorType(a.shape[:-1] + (n,), a.dtype)


def _matmul_packed_reference(inputs, attrs, out):
    a, panels = inputs
    return np.matmul(a, unpack_panels(panels, attrs["n"]))


OUT_LAYOUTS = ("nchwc", "nchw")


def _conv2d_nchwc_infer(types, attrs):
    x, w = types
    if x.dtype != w.dtype:
        raise DTypeError(f"input and weight dtypes differ ({x.dtype.name}, {w.dtype.name})")
    if not x.dtype.is_floating:
        raise DTypeError(f"conv2d_nchwc expects floating operands, got {x.dtype.name}")
    if x.ndim not in (4, 5) or w.ndim != 6:
        raise ShapeError("conv2d_nchwc expects input (N, C/cb, H, W, cb) or (N, C, H, W) and weight "
                         "(K/kb, C/cb, KH, KW, cb, kb)")
    if attrs["out_layout"] not in OUT_LAYOUTS:
        raise ShapeError(f"out_layout must be one of {OUT_LAYOUTS}, got {attrs['out_layout']!r}")
    kblocks, wcblocks, kh, kw, wcb, kb = w.shape
    groups = attrs.get("groups", 1)
    if groups != 1 and (groups != kblocks * kb or (wcblocks, wcb) != (1, 1)):
        raise ShapeError(f"conv2d_nchwc computes groups=1 or depthwise (groups = channels, weight "
                         f"(C/kb, 1, KH, KW, 1, kb)); got groups={groups} with weight {w.shape}")
    # Input channels as the input is blocked: depthwise reads channel block b lane j for output b, j.
    in_blocks, in_block = (kblocks, kb) if groups > 1 else (wcblocks, wcb)
    if x.ndim == 5:
        n, cblocks, h, wd, cb = x.shape
        if (in_blocks, in_block) != (cblocks, cb):
            raise ShapeError(f"weight blocks input channels as {in_blocks}x{in_block}, input has {cblocks}x{cb}")
    else:
        n, c, h, wd = x.shape
        if c != in_blocks * in_block:
            raise ShapeError(f"weight expects {in_blocks * in_block} input channels, input has {c}")
    as_nchw = {"groups": groups, "stride": attrs["stride"], "padding": attrs["padding"],
               "dilation": attrs["dilation"]}
    plain = _conv2d_infer([TensorType((n, in_blocks * in_block, h, wd), x.dtype),
                           TensorType((kblocks * kb, wcblocks * wcb, kh, kw), w.dtype)], as_nchw)
    _, _, oh, ow = plain.shape
    if attrs["out_layout"] == "nchw":
        return TensorType((n, kblocks * kb, oh, ow), x.dtype)
    return TensorType((n, kblocks, oh, ow, kb), x.dtype)


def _conv2d_nchwc_reference(inputs, attrs, out):
    """Unblock the operands, convolve in NCHW, block the result again (unless out_layout is "nchw")."""
    x, w = inputs
    kblocks, cblocks, kh, kw, cb, kb = w.shape
    if x.ndim == 5:
        n, xblocks, h, wd, xb = x.shape
        x = x.transpose(0, 1, 4, 2, 3).reshape(n, xblocks * xb, h, wd)
    w_plain = w.transpose(0, 5, 1, 4, 2, 3).reshape(kblocks * kb, cblocks * cb, kh, kw)
    conv_attrs = {"groups": attrs.get("groups", 1), "stride": attrs["stride"], "padding": attrs["padding"],
                  "dilation": attrs["dilation"]}
    y = _conv2d_reference([x, w_plain], conv_attrs, None)
    if attrs["out_layout"] == "nchw":
        return y
    n, _, oh, ow = y.shape
    return np.ascontiguousarray(y.reshape(n, kblocks, kb, oh, ow).transpose(0, 1, 3, 4, 2))


def _conv2d_winograd_infer(types, attrs):
    x, u = types
    m, k = attrs["m"], attrs["out_channels"]
    if m not in WINOGRAD_POINTS:
        raise ShapeError(f"conv2d_winograd: tile size m must be one of {sorted(WINOGRAD_POINTS)}, got {m}")
    if x.dtype != u.dtype or x.dtype.name not in ("float32", "float64"):
        raise DTypeError(f"conv2d_winograd expects float32 or float64 operands of one dtype, got "
                         f"{x.dtype.name} and {u.dtype.name}")
    if x.ndim != 4 or u.ndim != 4 or u.shape[0] != (m + 2) ** 2 or u.shape[2] != x.shape[1] or \
            not (u.shape[1] - 1) * u.shape[3] < k <= u.shape[1] * u.shape[3]:
        raise ShapeError(f"conv2d_winograd expects input (N, C, H, W) and transformed weights in panels "
                         f"({(m + 2) ** 2}, ceil(K / MR), C, MR) for K = {k}, got {x.shape} and {u.shape}")
    plain = {"groups": 1, "stride": (1, 1), "padding": attrs["padding"], "dilation": (1, 1)}
    return _conv2d_infer([x, TensorType((k, u.shape[2], 3, 3), u.dtype)], plain)


def _conv2d_winograd_reference(inputs, attrs, out):
    """The 3x3 convolution whose weights U encodes (recovered exactly up to rounding: pinv(G) G = I)."""
    x, u = inputs
    w = weights_from_transform(transform_from_panels(u, attrs["out_channels"]), attrs["m"])
    plain = {"groups": 1, "stride": (1, 1), "padding": attrs["padding"], "dilation": (1, 1)}
    return _conv2d_reference([x, w], plain, None)


# ---- gradients ----------------------------------------------------------------------------

def _matmul_packed_gradient(g, inputs, out, attrs, needs, build):
    """matmul's rule on the K x N matrix the panels hold; B's gradient is packed like B."""
    a, panels = inputs
    count, k, nr = panels.shape
    n = attrs["n"]
    b = slice_axis(build, build.apply("permute", [panels], perm=(1, 0, 2)).reshape(k, count * nr), 1, 0, n)
    ga, gb = _matmul_gradient(g, (a, b), out, {}, needs, build)
    if gb is not None:
        gb = build.apply("permute", [pad_axis(build, gb, 1, 0, count * nr - n).reshape(k, count, nr)],
                         perm=(1, 0, 2))
    return ga, gb


def _winograd_inverse(build, m: int, dtype):
    """pinv(G) (3 x n) of F(m x m, 3 x 3): w = pinv(G) U pinv(G)^T recovers the 3x3 weights."""
    return build.constant(weight_transform_inverse(m).astype(np.float32), dtype)


def _conv2d_winograd_gradient(g, inputs, out, attrs, needs, build):
    """conv2d's rule on the weights U encodes (w = P U P^T, P = pinv(G)); U's gradient is P^T gw P.

    U comes in panels (e, ceil(K/MR), c, MR): unpacked to (e, c, K) first, and
    its gradient packed back the same way (zero in the lanes past K).
    """
    x, panels = inputs
    m, k = attrs["m"], attrs["out_channels"]
    e, count, c, mr = panels.shape
    n = m + 2
    p = _winograd_inverse(build, m, panels.dtype)
    u = build.apply("permute", [panels], perm=(0, 2, 1, 3)).reshape(e, c, count * mr)
    u = slice_axis(build, u, 2, 0, k) if count * mr != k else u
    u4 = build.apply("permute", [u.reshape(n, n, c, k)], perm=(2, 3, 0, 1))  # [c, k, i, j]
    w = build.apply("permute", [p @ u4 @ p.transpose(0, 1)], perm=(1, 0, 2, 3))  # [k, c, r, s]
    conv_attrs = {"groups": 1, "stride": (1, 1), "padding": attrs["padding"], "dilation": (1, 1)}
    gx, gw = _conv2d_gradient(g, (x, w), None, conv_attrs, needs, build)
    gu = None
    if gw is not None:
        gw4 = build.apply("permute", [gw], perm=(1, 0, 2, 3))  # [c, k, r, s]
        gu = build.apply("permute", [p.transpose(0, 1) @ gw4 @ p], perm=(2, 3, 0, 1)).reshape(e, c, k)
        gu = pad_axis(build, gu, 2, 0, count * mr - k).reshape(e, c, count, mr)
        gu = build.apply("permute", [gu], perm=(0, 2, 1, 3))
    return gx, gu


def _conv2d_nchwc_gradient(g, inputs, out, attrs, needs, build):
    """conv2d's rule on the unblocked operands, the gradients blocked again like the operands."""
    x, w = inputs
    kblocks, cblocks, kh, kw, cb, kb = w.shape
    groups = attrs.get("groups", 1)
    if x.ndim == 5:
        n, xblocks, h, wd, xb = x.shape
        x_plain = x.permute(0, 1, 4, 2, 3).reshape(n, xblocks * xb, h, wd)
    else:
        x_plain = x
    w_plain = w.permute(0, 5, 1, 4, 2, 3).reshape(kblocks * kb, cblocks * cb, kh, kw)
    g_plain = g if g.ndim == 4 else g.permute(0, 1, 4, 2, 3).reshape(g.shape[0], kblocks * kb, g.shape[2], g.shape[3])
    conv_attrs = {"groups": groups, "stride": attrs["stride"], "padding": attrs["padding"],
                  "dilation": attrs["dilation"]}
    gx, gw = _conv2d_gradient(g_plain, (x_plain, w_plain), None, conv_attrs, needs, build)
    if gx is not None and x.ndim == 5:
        gx = gx.reshape(x.shape[0], xblocks, xb, x.shape[2], x.shape[3]).permute(0, 1, 3, 4, 2)
    if gw is not None:
        gw = gw.reshape(kblocks, kb, cblocks, cb, kh, kw).permute(0, 2, 4, 5, 3, 1)
    return gx, gw


# A (..., M, K) @ B (K x N) with B given in the GEMM micro-kernel's panels (ceil(N/NR), K, NR)
# (ir/ops/gemm_panels.py). Made by the packed_weights pass for constant weights, packed once at compile time.
register("matmul_packed", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _matmul_packed_infer,
         _matmul_packed_reference, 2, backend_only=True,
         doc="matmul whose right operand is given as GEMM micro-panels (ceil(N/NR), K, NR); attr n",
         gradient=_matmul_packed_gradient)
# conv2d (groups 1) computed in channel blocks: x[N, C/cb, H, W, cb] (or x[N, C, H, W]) *
# w[K/kb, C/cb, KH, KW, cb, kb] -> y[N, K/kb, OH, OW, kb] (out_layout "nchwc") or y[N, K, OH, OW]
# ("nchw", at the end of a chain); depthwise (attr groups = C): x[N, C/kb, H, W, kb] (or NCHW) *
# w[C/kb, 1, KH, KW, 1, kb]. Made by the layout pass (passes/layout.py), never by the front-end.
register("conv2d_nchwc", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _conv2d_nchwc_infer,
         _conv2d_nchwc_reference, 2, backend_only=True,
         doc="2-D convolution computed in channel blocks (NCHW[x]c), groups 1 or depthwise; attrs stride, "
             "padding, dilation, out_layout, groups (optional, default 1)",
         gradient=_conv2d_nchwc_gradient)
# A 3x3 stride-1 conv2d by Winograd F(m x m, 3 x 3) whose weights are given transformed:
# x[N, C, H, W] with U = G w G^T in the GEMM's panels u[(m+2)^2, ceil(K/MR), C, MR] (ir/ops/winograd_math.py:
# weight_panels), attr out_channels = K -> y[N, K, OH, OW]. Made by the winograd_weights pass for constant
# weights (the transform then runs once, at compile time).
register("conv2d_winograd", OpKind.CONTRACTION, MappingType.MANY_TO_MANY, _conv2d_winograd_infer,
         _conv2d_winograd_reference, 2, backend_only=True,
         doc="3x3 stride-1 convolution by Winograd F(m x m, 3 x 3) with transformed weights in GEMM panels; "
             "attrs m, padding, out_channels",
         gradient=_conv2d_winograd_gradient)
