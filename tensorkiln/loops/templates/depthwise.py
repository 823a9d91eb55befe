"""Depthwise convolution (one input and one output channel per group) over a zero-padded plane.

For each (image, channel) plane, in parallel::

    alloc pad[SW][HP x WP / SW]              # the part of the padded plane the taps reach
    pad[border] = 0                          # only what the copy below does not write
    for iy, for each phase p: for j (vectorized):
        pad[p][pt + iy, j] = x[img, ch, iy, p + j*sw - pl]
    let w_rs = weight[ch, 0, r, s]           # the KH x KW taps, once per plane
    for y in OH: for x in OW (vectorized):
        acc = sum over r, s of w_rs * pad[s*dw % sw][y*sh + r*dh, x + s*dw // sw]   (unrolled, fma)
        out[img, ch, y, x] = epilogue(acc)

Padding the plane once removes every bounds test from the inner loop: each
tap is a plain load at a constant offset from the output pixel's position.
A column stride sw splits the padded columns into sw phases (column c at
c // sw of phase c % sw), so each tap's loads are contiguous along x for any
stride and the x loop becomes vector FMAs. The copy runs phase by phase,
so its stores are contiguous too (computing the phase and position of each
input column with a modulo and a division per element kept a stride-2
copy scalar: the 96-channel 112x112 layer of MobileNetV2 spent most of its
time there), and only the border the copy does not cover is zeroed. The
padded plane is at most a few hundred KiB and stays in L2 while its output
rows are computed.
"""
from __future__ import annotations

from ...graph import Node
from .. import expr as E
from ..buffer import Buffer
from ..inline import ValueBuilder
from ..ir import Alloc, For, Let, Stmt, Store, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..types import compute_dtype


def depthwise_body(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt:
    """Loop IR of epilogue(depthwise conv2d) for NCHW input, weight [C, 1, KH, KW] (see the module docstring)."""
    x_node, w_node = root.inputs
    n_img, channels, h, w = x_node.shape
    _, _, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    pt, _, pl, _ = root.attrs["padding"]
    dtype = compute_dtype(root.dtype.name)
    # Rows and columns of the padded plane that some tap of some output pixel reads.
    hp = (oh - 1) * sh + (kh - 1) * dh + 1
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    rows_in, cols_in = max(min(h, hp - pt), 0), max(min(w, wp - pl), 0)
    # With a column stride, padded column c is stored in phase c % sw at c // sw, so the
    # columns one tap reads for consecutive outputs are contiguous (no strided loads).
    wq = -(-wp // sw)

    plane, q, iy, ix, y, x = (E.Var(f"dw_{v}") for v in ("plane", "q", "iy", "ix", "y", "x"))
    img, ch = plane // channels, plane % channels
    pad = Buffer("dw_pad", dtype, (sw * hp * wq,), scope="local")

    def at(phase: E.Expr | int, row: E.Expr, col: E.Expr) -> E.Expr:
        return (phase * hp + row) * wq + col if sw > 1 else row * wq + col

    zero = E.Const(0.0, dtype)

    def clear(start: E.Expr, count: int) -> list[Stmt]:
        if count <= 1:
            return [Store(pad, start, zero)] * count
        return [For(q, E.const(count), Store(pad, start + q, zero), "vectorized")]

    # Phase p holds the padded columns p, p + sw, ...; those at j_lo..j_hi - 1 come from the
    # input. Rows above and below the input are zeroed whole, the others row by row: the
    # zeros left of the input, its columns, the zeros right of it.
    top = min(pt, hp)
    bottom = top + rows_in
    spans = [_phase_span(p, sw, pl, cols_in, wq) for p in range(sw)]
    edges: list[Stmt] = []
    row: list[Stmt] = []
    for p, (j_lo, j_hi) in enumerate(spans):
        edges += clear(E.const(at(p, 0, 0)), top * wq) + clear(E.const(at(p, bottom, 0)), (hp - bottom) * wq)
        row += clear(at(p, iy + top, 0), j_lo)
        if j_hi > j_lo:
            column = ix + j_lo  # position in the phase; the input column is p + column * sw - pl
            row.append(For(ix, E.const(j_hi - j_lo), Store(
                pad, at(p, iy + top, column),
                E.cast(values.value(x_node, [img, ch, iy, column * sw + (p - pl)]), dtype)), "vectorized"))
        row += clear(at(p, iy + top, E.const(j_hi)), wq - j_hi)
    rows = [For(iy, E.const(rows_in), block(*row))] if rows_in else []

    taps = [(r, s, E.Var(f"dw_w{r}_{s}", dtype)) for r in range(kh) for s in range(kw)]
    weights = [Let(var, E.cast(values.value(w_node, [ch, E.const(0), E.const(r), E.const(s)]), dtype))
               for r, s, var in taps]
    acc: E.Expr | None = None
    for r, s, var in taps:
        tap = E.Load(pad, at(s * dw % sw, y * sh + r * dh, x + s * dw // sw))
        acc = var * tap if acc is None else E.call("fma", var, tap, acc)
    pixel = Store(out, (plane * oh + y) * ow + x, epilogue([img, ch, y, x], acc))
    compute = For(y, E.const(oh), For(x, E.const(ow), pixel, "vectorized"))
    body = Alloc(pad, block(*edges, *rows, *weights, compute))
    work = n_img * channels * oh * ow * kh * kw
    kind = "parallel" if work >= PARALLEL_MIN_ELEMENTS and n_img * channels > 1 else "serial"
    return For(plane, E.const(n_img * channels), body, kind)


def _phase_span(phase: int, sw: int, pl: int, cols_in: int, wq: int) -> tuple[int, int]:
    """Positions j_lo..j_hi - 1 of column phase `phase` that hold input columns (0 <= phase + j*sw - pl < cols_in)."""
    j_lo = max(0, -(-(pl - phase) // sw))
    j_hi = min(wq, max(0, -(-(cols_in + pl - phase) // sw)))
    return j_lo, max(j_lo, j_hi)
