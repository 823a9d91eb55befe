"""A padded 2-D plane stored in column phases, for window kernels (depthwise convolution, pooling).

A kernel sliding a KH x KW window with stride (sh, sw) and dilation (dh, dw)
over one plane copies the part of the padded plane its windows reach (HP x WP)
into a local buffer first: every tap is then a plain load at a constant offset
from the output pixel, with no bounds test. With a column stride the copy is
split into sw phases (padded column c at c // sw of phase c % sw), so the
loads of one tap for consecutive output columns are contiguous for any
stride and the output loop vectorizes.

The copy runs phase by phase with contiguous stores (computing each input
column's phase and position with a modulo and a division per element kept a
stride-2 copy scalar), and only the border the copy does not cover is
filled with the padding value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import For, If, Stmt, Store, block
from ...shapes.symint import is_symbolic


@dataclass(frozen=True)
class PhasedPlane:
    """Geometry of the buffer: HP rows and WP columns, stored as sw phases of WQ columns."""

    buffer: Buffer
    hp: int
    wp: int
    sw: int

    @property
    def wq(self) -> int:
        return -(-self.wp // self.sw)

    def at(self, phase: E.Expr | int, row: E.Expr | int, col: E.Expr | int) -> E.Expr:
        """Flat index of padded (row, column) = (row, phase + col * sw)."""
        index = row * self.wq + col if self.sw == 1 else (phase * self.hp + row) * self.wq + col
        return index if isinstance(index, E.Expr) else E.const(index)

    def tap(self, y: E.Expr, x: E.Expr, r: int, s: int, stride: tuple[int, int],
            dilation: tuple[int, int]) -> E.Expr:
        """The element under tap (r, s) of the window of output pixel (y, x)."""
        sh, sw = stride
        dh, dw = dilation
        return E.Load(self.buffer, self.at(s * dw % sw, y * sh + r * dh, x + s * dw // sw))


def phased_plane(name: str, dtype: str, out_hw: tuple[int, int], kernel: tuple[int, int],
                 stride: tuple[int, int], dilation: tuple[int, int]) -> PhasedPlane:
    """The plane buffer (scope local) that the windows of an OH x OW output reach."""
    (oh, ow), (kh, kw) = out_hw, kernel
    hp = (oh - 1) * stride[0] + (kh - 1) * dilation[0] + 1
    wp = (ow - 1) * stride[1] + (kw - 1) * dilation[1] + 1
    wq = -(-wp // stride[1])
    return PhasedPlane(Buffer(name, dtype, (stride[1] * hp * wq,), scope="local"), hp, wp, stride[1])


def is_run_time(*values) -> bool:
    """Some of the values are run-time sizes: the plane's spans are then computed per call (expressions),
    since comparing them at trace time would guard on the image size's parity or range."""
    return any(isinstance(v, E.Expr) or is_symbolic(v) for v in values)


def run_time_min(a, b):
    """min(a, b): a number for numbers, else an expression evaluated per call (no guard)."""
    return E.minimum(as_expr(a), b) if is_run_time(a, b) else min(a, b)


def run_time_max(a, b):
    """max(a, b): a number for numbers, else an expression evaluated per call (no guard)."""
    return E.maximum(as_expr(a), b) if is_run_time(a, b) else max(a, b)


def as_expr(value) -> E.Expr:
    """An index expression of a number, a size or an expression."""
    return value if isinstance(value, E.Expr) else E.const(value)


def _inside_rows(h, hp, pt):
    """Rows of the plane that come from the source: max(min(h, hp - pt), 0)."""
    return run_time_max(run_time_min(h, hp - pt), 0)


def fill_plane(plane: PhasedPlane, read: Callable[[E.Expr, E.Expr], E.Expr], size: tuple[int, int],
               padding: tuple[int, int], fill: E.Expr, prefix: str) -> list[Stmt]:
    """Statements copying an H x W source (read(iy, ix)) into the plane at offset (pt, pl);
    the rest of the plane gets `fill` (the padding value)."""
    (h, w), (pt, pl) = size, padding
    hp, sw, wq = plane.hp, plane.sw, plane.wq
    rows_in, cols_in = _inside_rows(h, hp, pt), _inside_rows(w, plane.wp, pl)
    q, iy, ix = E.Var(f"{prefix}_q"), E.Var(f"{prefix}_iy"), E.Var(f"{prefix}_ix")

    def clear(start: E.Expr, count) -> list[Stmt]:
        if not is_run_time(count) and count <= 1:
            return [Store(plane.buffer, start, fill)] * count
        return [For(q, as_expr(count), Store(plane.buffer, start + q, fill), "vectorized")]

    # Phase p holds the padded columns p, p + sw, ...; those at j_lo..j_hi - 1 come from the
    # source. Rows above and below it are filled whole, the others row by row: the padding
    # left of the source, its columns, the padding right of it.
    top = min(pt, hp)
    bottom = top + rows_in
    edges: list[Stmt] = []
    row: list[Stmt] = []
    for p in range(sw):
        j_lo, j_hi = _phase_span(p, sw, pl, cols_in, wq)
        edges += clear(plane.at(p, 0, 0), top * wq) + clear(plane.at(p, bottom, 0), (hp - bottom) * wq)
        row += clear(plane.at(p, iy + top, 0), j_lo)
        if is_run_time(j_lo, j_hi) or j_hi > j_lo:
            column = ix + j_lo  # position in the phase; the source column is p + column * sw - pl
            row.append(For(ix, as_expr(j_hi - j_lo), Store(
                plane.buffer, plane.at(p, iy + top, column), read(iy, column * sw + (p - pl))), "vectorized"))
        row += clear(plane.at(p, iy + top, as_expr(j_hi)), wq - j_hi)
    return edges + ([For(iy, as_expr(rows_in), block(*row))] if is_run_time(rows_in) or rows_in else [])


def _phase_span(phase: int, sw: int, pl: int, cols_in: int, wq: int) -> tuple[int, int]:
    """Positions j_lo..j_hi - 1 of column phase `phase` that hold source columns (0 <= phase + j*sw - pl < cols_in)."""
    j_lo = max(0, -(-(pl - phase) // sw))
    if is_run_time(cols_in, wq):  # the count is never below -sw: (count + sw - 1) // sw is its ceiling
        return j_lo, run_time_max(j_lo, run_time_min(wq, run_time_max((cols_in + (pl - phase + sw - 1)) // sw, 0)))
    j_hi = min(wq, max(0, -(-(cols_in + pl - phase) // sw)))
    return j_lo, max(j_lo, j_hi)


def fill_plane_row(plane: PhasedPlane, base: E.Expr, yy: E.Expr, read: Callable[[E.Expr, E.Expr], E.Expr],
                   size: tuple[int, int], padding: tuple[int, int], fill: E.Expr, prefix: str) -> Stmt:
    """Padded row `yy` (every phase) of the plane starting at `base` of its buffer, as fill_plane does.

    For kernels that copy many planes into one buffer in parallel over rows
    (a plane per input channel of a shallow convolution: three RGB planes
    would keep two threads busy unevenly). `read(iy, ix)` is the source
    element; rows wholly in the margin get `fill` only.
    """
    (h, w), (pt, pl) = size, padding
    hp, sw, wq = plane.hp, plane.sw, plane.wq
    rows_in, cols_in = _inside_rows(h, hp, pt), _inside_rows(w, plane.wp, pl)
    top = min(pt, hp)
    q = E.Var(f"{prefix}_q")

    def clear(start: E.Expr, count) -> list[Stmt]:
        if not is_run_time(count) and count <= 1:
            return [Store(plane.buffer, start, fill)] * count
        return [For(q, as_expr(count), Store(plane.buffer, start + q, fill), "vectorized")]

    inside: list[Stmt] = []
    margin: list[Stmt] = []
    for p in range(sw):
        j_lo, j_hi = _phase_span(p, sw, pl, cols_in, wq)
        inside += clear(base + plane.at(p, yy, 0), j_lo)
        if is_run_time(j_lo, j_hi) or j_hi > j_lo:
            inside.append(For(q, as_expr(j_hi - j_lo), Store(
                plane.buffer, base + plane.at(p, yy, q + j_lo), read(yy - top, (q + j_lo) * sw + (p - pl))),
                "vectorized"))
        inside += clear(base + plane.at(p, yy, as_expr(j_hi)), wq - j_hi)
        margin += clear(base + plane.at(p, yy, 0), wq)
    if is_run_time(rows_in, hp):
        return If(E.logical_and(E.ge(yy, top), E.lt(yy, as_expr(top + rows_in))), block(*inside), block(*margin))
    if rows_in == 0:
        return block(*margin)
    if (top, top + rows_in) == (0, hp):
        return block(*inside)
    return If(E.logical_and(E.ge(yy, top), E.lt(yy, top + rows_in)), block(*inside), block(*margin))
