"""Storage folding: a producer stored at an outer loop keeps only the rows its window needs, in a circle.

Under `store_at(g, yo).compute_at(g, yi)` the producer's buffer lives at yo
and covers every row computed inside it; but one iteration of yi reads only a
window of a few rows (3 for a 3-tap vertical stencil), and the window moves
forward with yi. Halide's automatic storage folding then keeps a buffer of
`fold` rows, `fold` the window's extent rounded up to a power of two, and
addresses row r at slot `r & (fold - 1)`:

    before:  alloc blur_x[6, W]          after:  alloc blur_x[4, W]
             blur_x[(y - y0)*W + x]              blur_x[(y & 3)*W + x]

Why it is correct: an iteration reads rows [lo, hi] with hi - lo < fold.
Each of them was computed in this iteration or an earlier one of the same
run of the loop, and a later write that could overwrite row r lands on a row
r' > r with r' = r (mod fold), so r' >= r + fold > hi: no row of the window
is overwritten before it is read. A Func with update definitions reads
itself while it is computed, so it is never folded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from tensorkiln.loops import expr as L
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.simplify import simplify
from tensorkiln.pipeline.bounds import Box


@dataclass(frozen=True)
class Fold:
    """Dimension `dim` of a Func's buffer kept as a circle of `extent` (a power of two) slots."""

    dim: int
    extent: int


@dataclass(frozen=True)
class StorageNote:
    """One buffer of a lowered pipeline, for explain(): where it lives, its shape and bytes, its fold."""

    func: str
    where: str                  # "computed at blur_y.x", "stored at blur_y.yo"
    shape: tuple[int, ...]      # as allocated, outermost dimension first
    itemsize: int
    fold: Optional[Fold] = None
    unfolded_extent: int = 0    # the folded dimension's extent had it not been folded

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def __str__(self) -> str:
        text = f"{self.func}: {'x'.join(map(str, self.shape))} {self.where}, {self.bytes} bytes"
        if self.fold is not None:
            unfolded = self.bytes // self.fold.extent * self.unfolded_extent
            text += (f", folded in dimension {self.fold.dim}: {self.fold.extent} of {self.unfolded_extent} "
                     f"(unfolded: {unfolded} bytes)")
        return text


def window_fold(box: Box, loop_var: str, ranges: dict) -> Optional[Fold]:
    """The fold of a producer whose region per iteration of `loop_var` is `box`: the one dimension that
    moves with the loop, its window's largest extent rounded up to a power of two; None if no single
    dimension moves or its extent has no constant bound."""
    moving = [d for d, dim in enumerate(box)
              if dim is not None and loop_var in L.free_vars(dim[0]) | L.free_vars(dim[1])]
    if len(moving) != 1:
        return None
    lo, hi = box[moving[0]]
    top = Bounds(ranges)(simplify(hi - lo + 1, ranges))[1]
    if math.isinf(top) or top < 1:
        return None
    return Fold(moving[0], 1 << (int(top) - 1).bit_length())


def merge_folds(a: Optional[Fold], b: Optional[Fold]) -> Optional[Fold]:
    """One fold for two places that compute the Func: the larger, if both fold the same dimension."""
    if a is None or b is None or a.dim != b.dim:
        return None
    return a if a.extent >= b.extent else b


def fold_mask_name(func: str, dim: int) -> str:
    """The placeholder variable of dimension `dim`'s mask (fold - 1) in `func`'s index."""
    return f"{func}_fold_mask_{dim}"


def unfold(e: L.Expr, masks: set[str]) -> L.Expr:
    """`e` with every `x & mask` whose mask is in `masks` replaced by x (the dimension is not folded)."""
    kids = tuple(unfold(c, masks) for c in e.children)
    if isinstance(e, L.BinOp) and e.operator == "bitand" and isinstance(e.b, L.Var) and e.b.name in masks:
        return kids[0]
    return e.with_children(kids) if kids else e
