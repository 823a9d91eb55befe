"""Convolution (NCHW): implicit GEMM through the BLIS template, a depthwise nest, or a direct nest.

The algorithm per layer (`conv_algorithm`, the rule written down in docs/kernels.md):

- **implicit GEMM** (`gemm`): float32/float64 convolutions with at least 4
  output channels per group and enough work (the matmul rule of matmul.py
  on the GEMM shape). Per (image, group), C[o, pixel] = W[o, (c, r, s)] @
  X[(c, r, s), pixel]: M = output channels of the group, N = OH*OW,
  K = Cg*KH*KW. The im2col matrix is never materialized: its elements are the
  `b_value` of the GEMM, so packing the B panels gathers the shifted, strided,
  dilated, zero-padded input directly. A 1x1 stride-1 unpadded convolution
  is the same code, where packing reads contiguous rows: a plain GEMM.
- **padded-row implicit GEMM** (`gemm_rows`): stride-1 layers (not an
  unpadded 1x1) whose junk columns add at most half of N: the input is
  copied zero-padded once, the GEMM runs over N' = (OH-1)*Wp + OW columns
  y*Wp + x so every im2col row is a contiguous slice of the padded input
  (B packing is a copy), into a scratch C' from which one (y, x) pass applies
  the epilogue and drops the junk columns (`_implicit_gemm_rows`).
- **depthwise** (`depthwise`): one input and one output channel per group.
  For each (image, channel) plane, each output row is computed with the
  taps unrolled and the output columns vectorized.
- **direct** (`direct`): everything else (integer-free small layers, a
  float16 output with K over one depth block, few output channels per
  group): one output plane per (image, channel) accumulated locally, the
  first template.

Out-of-image taps read zero (the padding) through a select whose load index
is clamped, so the code never reads out of bounds.
"""
from __future__ import annotations

from ...graph import Node
from .. import expr as E
from ..buffer import Buffer
from ..inline import ValueBuilder
from ..ir import Alloc, Assign, For, Let, Store, Stmt, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..types import compute_dtype
from .depthwise import depthwise_body
from .gemm import blis_gemm, gemm_blocking, gemm_needs_partial_sums
from .matmul import BLIS_MIN_FLOPS


def conv_algorithm(root: Node, out: Buffer) -> str:
    """"gemm_rows", "gemm", "depthwise" or "direct" for this conv2d node (see the module docstring)."""
    x_node, w_node = root.inputs
    n_img, c_in, h, w = x_node.shape
    c_out, c_group, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    groups = root.attrs["groups"]
    dtype = compute_dtype(root.dtype.name)
    if dtype not in ("float32", "float64"):
        return "direct"
    if groups > 1 and c_group == 1 and c_out == groups:
        return "depthwise"
    m, n, k = c_out // groups, oh * ow, c_group * kh * kw
    if m < 4 or n < 8 or n_img * groups * m * n * k < BLIS_MIN_FLOPS:
        return "direct"
    if _padded_rows_n(root) is not None:
        return "gemm_rows"  # partial sums go through a scratch buffer of the compute dtype
    if out.dtype != dtype and gemm_needs_partial_sums(k, gemm_blocking(m, n, k, dtype)):
        return "direct"
    return "gemm"


def _padded_rows_n(root: Node) -> int | None:
    """GEMM width N' = (OH-1)*Wp + OW of the padded-row form, or None where it does not apply.

    Applies to stride-1 convolutions with a kernel wider than 1x1 (or padded)
    whose junk columns (Wp - OW per output row) add at most half of N.
    """
    x_node, w_node = root.inputs
    _, _, h, w = x_node.shape
    _, _, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    pt, pb, pl, pr = root.attrs["padding"]
    if tuple(root.attrs["stride"]) != (1, 1) or (kh * kw == 1 and not (pt or pb or pl or pr)):
        return None
    wp = w + pl + pr
    rows = (oh - 1) * wp + ow
    return rows if 2 * rows <= 3 * oh * ow else None


def conv2d_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing epilogue(conv2d(x, w)): grouped, strided, dilated, padded.

    `epilogue(index, acc)` gives the stored value of output element `index`
    (n, o, y, x) whose convolution sum is `acc` (default: acc itself).
    """
    if epilogue is None:
        epilogue = lambda index, acc: E.cast(acc, out.value_dtype)  # noqa: E731
    if any(d == 0 for d in root.shape):
        return None
    algorithm = conv_algorithm(root, out)
    if algorithm == "gemm":
        return _implicit_gemm(root, out, values, epilogue)
    if algorithm == "gemm_rows":
        return _implicit_gemm_rows(root, out, values, epilogue)
    if algorithm == "depthwise":
        return depthwise_body(root, out, values, epilogue)
    return _direct(root, out, values, epilogue)


def _geometry(root: Node):
    x_node, w_node = root.inputs
    _, c_in, h, w = x_node.shape
    c_out, c_group, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    return x_node, w_node, c_out, c_group, kh, kw, h, w, oh, ow


def _pixel(values: ValueBuilder, x_node: Node, root: Node, img, channel, y, x, r, s, dtype):
    """Input element under tap (r, s) of output pixel (y, x), zero in the padding."""
    _, _, h, w = x_node.shape
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    pt, pb, pl, pr = root.attrs["padding"]
    iy, ix = y * sh + r * dh - pt, x * sw + s * dw - pl
    if not (pt or pb or pl or pr):
        return values.value(x_node, [img, channel, iy, ix])
    inside = E.logical_and(E.logical_and(E.ge(iy, 0), E.lt(iy, h)), E.logical_and(E.ge(ix, 0), E.lt(ix, w)))
    clamp = lambda i, size: E.minimum(E.maximum(i, 0), size - 1)  # noqa: E731
    return E.Select(inside, values.value(x_node, [img, channel, clamp(iy, h), clamp(ix, w)]), E.Const(0.0, dtype))


def _weight_value(values: ValueBuilder, w_node: Node, groups: int, og: int, k: int, split_k):
    """a_value(b, row, kk) of the implicit GEMM: weight [g*og + row, c, r, s] with kk = (c*KH + r)*KW + s.

    A weight held in a buffer is read at the flat index (g*og + row)*K + kk,
    so packing A has no div/mod per element.
    """
    buf = values.buffers.get(w_node.id) if w_node is not values.inline_root else None

    def a_value(b, row, kk):
        g = b % groups if groups > 1 else E.const(0)
        if buf is not None and w_node.id not in values.known:
            return E.Load(buf, (g * og + row) * k + kk)
        c, r, s = split_k(kk)
        return values.value(w_node, [g * og + row, c, r, s])
    return a_value


def _implicit_gemm(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt:
    x_node, w_node, c_out, c_group, kh, kw, h, w, oh, ow = _geometry(root)
    n_img = x_node.shape[0]
    groups = root.attrs["groups"]
    og = c_out // groups
    m, n, k = og, oh * ow, c_group * kh * kw
    dtype = compute_dtype(root.dtype.name)

    def split_k(kk):
        return kk // (kh * kw), (kk // kw) % kh, kk % kw

    a_value = _weight_value(values, w_node, groups, og, k, split_k)

    def b_value(b, kk, col):
        img, g = (b // groups, b % groups) if groups > 1 else (b, E.const(0))
        c, r, s = split_k(kk)
        return _pixel(values, x_node, root, img, g * c_group + c, col // ow, col % ow, r, s, dtype)

    def epi(b, row, col, acc):
        img, g = (b // groups, b % groups) if groups > 1 else (b, E.const(0))
        return epilogue([img, g * og + row, col // ow, col % ow], acc)

    return blis_gemm(out, dtype, n_img * groups, m, n, k, a_value, b_value,
                     lambda b, row, col: (b * m + row) * n + col, epi)


def _implicit_gemm_rows(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt:
    """Stride-1 implicit GEMM over padded input rows: B packing is a contiguous copy.

    The input is first copied, zero-padded, into xpad[image, channel, Hp, Wp]
    (each element computed once; the only selects are here). The GEMM then
    runs over N' = (OH-1)*Wp + OW columns col = y*Wp + x, x in [0, Wp): the
    im2col element of tap (c, r, s) is xpad[c, 0, 0] + r*dh*Wp + s*dw + col,
    contiguous in col, so packing has no div/mod and no select. Columns with
    x >= OW are junk (they straddle two rows): computed, never written back.
    The largest offset read is Hp*Wp - 1, so no read leaves the channel plane.
    """
    x_node, w_node, c_out, c_group, kh, kw, h, w, oh, ow = _geometry(root)
    n_img, c_in = x_node.shape[0], x_node.shape[1]
    groups = root.attrs["groups"]
    dh, dw = root.attrs["dilation"]
    pt, pb, pl, pr = root.attrs["padding"]
    og = c_out // groups
    hp, wp = h + pt + pb, w + pl + pr
    m, n, k = og, _padded_rows_n(root), c_group * kh * kw
    dtype = compute_dtype(root.dtype.name)
    zero = E.Const(0.0, dtype)

    xpad = Buffer("g_xpad", dtype, (n_img * c_in * hp * wp,), scope="local")
    plane, yy, xx = E.Var("g_plane"), E.Var("g_yy"), E.Var("g_xx")
    iy, ix = yy - pt, xx - pl
    if pt or pb or pl or pr:
        inside = E.logical_and(E.logical_and(E.ge(iy, 0), E.lt(iy, h)), E.logical_and(E.ge(ix, 0), E.lt(ix, w)))
        clamp = lambda i, size: E.minimum(E.maximum(i, 0), size - 1)  # noqa: E731
        elem = E.Select(inside, values.value(x_node, [plane // c_in, plane % c_in, clamp(iy, h), clamp(ix, w)]), zero)
    else:
        elem = values.value(x_node, [plane // c_in, plane % c_in, iy, ix])
    kind = "parallel" if n_img * c_in * hp * wp >= PARALLEL_MIN_ELEMENTS and n_img * c_in > 1 else "serial"
    fill = For(plane, E.const(n_img * c_in), For(yy, E.const(hp), For(xx, E.const(wp), Store(
        xpad, (plane * hp + yy) * wp + xx, elem), "vectorized")), kind)

    def split_k(kk):
        return kk // (kh * kw), (kk // kw) % kh, kk % kw

    def img_group(b):
        return (b // groups, b % groups) if groups > 1 else (b, E.const(0))

    a_value = _weight_value(values, w_node, groups, og, k, split_k)

    def b_value(b, kk, col):
        img, g = img_group(b)
        c, r, s = split_k(kk)
        return E.Load(xpad, (img * c_in + g * c_group + c) * (hp * wp) + r * (dh * wp) + s * dw + col)

    # The GEMM writes C'[b, row, col] (junk columns included, compute dtype, so
    # partial sums over K blocks need nothing of the output); one pass over
    # (y, x) then applies the epilogue and drops the junk columns.
    cbuf = Buffer("g_cbuf", dtype, (n_img * groups * m * n,), scope="local")
    gemm = blis_gemm(cbuf, dtype, n_img * groups, m, n, k, a_value, b_value,
                     lambda b, row, col: (b * m + row) * n + col, lambda b, row, col, acc: acc)
    bm, y, x = E.Var("g_bm"), E.Var("g_y"), E.Var("g_x")
    value = epilogue([bm // c_out, bm % c_out, y, x], E.Load(cbuf, bm * n + y * wp + x))
    kind = "parallel" if n_img * c_out * oh * ow >= PARALLEL_MIN_ELEMENTS and n_img * c_out > 1 else "serial"
    final = For(bm, E.const(n_img * c_out), For(y, E.const(oh), For(x, E.const(ow), Store(
        out, (bm * oh + y) * ow + x, value), "vectorized")), kind)
    return Alloc(xpad, Alloc(cbuf, block(fill, gemm, final)))


def _direct(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt | None:
    x_node, w_node = root.inputs
    n_img, c_in, h, w = x_node.shape
    c_out, c_group, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    if n_img * c_out * oh * ow == 0:
        return None
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    pt, _, pl, _ = root.attrs["padding"]
    out_per_group = c_out // root.attrs["groups"]
    dtype = compute_dtype(root.dtype.name)
    zero = E.Const(0.0, dtype)

    no, c, r, s, y, x, p, q = (E.Var(v) for v in ("no", "c", "r", "s", "y", "x", "p", "q"))
    img, o = no // c_out, no % c_out
    channel = (o // out_per_group) * c_group + c
    iy, ix = y * sh + r * dh - pt, x * sw + s * dw - pl
    inside = E.logical_and(E.logical_and(E.ge(iy, 0), E.lt(iy, h)), E.logical_and(E.ge(ix, 0), E.lt(ix, w)))
    clamp = lambda i, size: E.minimum(E.maximum(i, 0), size - 1)  # noqa: E731
    pixel = E.Select(inside, values.value(x_node, [img, channel, clamp(iy, h), clamp(ix, w)]), zero)

    acc = Buffer("acc", dtype, (oh * ow,), scope="local")
    tap = E.Var("tap", dtype)
    accumulate = For(c, E.const(c_group), For(r, E.const(kh), For(s, E.const(kw), block(
        Let(tap, values.value(w_node, [o, c, r, s])),
        For(y, E.const(oh), For(x, E.const(ow), Store(acc, y * ow + x, E.Load(acc, y * ow + x) + tap * pixel),
                                "vectorized"))))))
    plane = Alloc(acc, block(
        For(p, E.const(oh * ow), Store(acc, p, zero), "vectorized"),
        accumulate,
        For(q, E.const(oh * ow), Store(out, no * (oh * ow) + q,
                                       epilogue([img, o, q // ow, q % ow], E.Load(acc, q))),
            "vectorized")))
    work = n_img * c_out * oh * ow * c_group * kh * kw
    parallel = work >= PARALLEL_MIN_ELEMENTS and n_img * c_out > 1
    return For(no, E.const(n_img * c_out), plane, "parallel" if parallel else "serial")
