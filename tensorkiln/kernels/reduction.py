"""The loops of a reduction over several axes: which axes share a loop, and a lane accumulator.

A reduction keeps one accumulator per output element and loops over the
reduced axes of its (inlined) input. Walked axis by axis, a batch-norm
statistic over NCHW (axes 0, 2, 3 of [64, 16, 8, 8]) runs a SIMD loop of 8
elements 512 times per channel and folds the vector into the scalar after
each one: the kernel is bound by that horizontal sum, not by memory. Two
changes fix it:

- Adjacent reduced axes become one loop when the input's index stays affine
  in the merged variable (`k2*8 + k3` is `k23` over 64 elements): decided by
  simplifying the input's element expression, so a window or a gather whose
  index would need a division keeps its own loops.
- When the innermost (contiguous, vectorized) loop is short and runs many
  times, a sum keeps one partial sum per lane of it in a local array
  (`lanes[k] += x[..., k]`) and adds the lanes up once at the end: the
  loads vectorize without a horizontal sum per row.

Float sums add in blocks (`blocked_loop`, `blocked_nest`): a running float32
sum stops growing once it is 2**24 times the size of what is added (a sum of
3 * 2**31 ones gave 2**28), and its error grows like n. Each block of
`BLOCK` elements (`SERIAL_BLOCK` in a serial loop, `LANE_BLOCK` steps of an
array of lane sums) adds into a
partial sum of its own, which is added to the next level when the block
ends; `FAN_IN` partials make one of the next level. The error then grows
like BLOCK + FAN_IN * levels instead of n, and a reduction of at most one
block is the plain loop it was.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

import numpy as np

from ..loops import expr as E
from ..loops.buffer import Buffer
from .inline import delinearize
from ..loops.ir import Alloc, Assign, For, Let, Stmt, Store, block
from ..loops.schedule import substitute
from ..loops.simplify import simplify
from ..loops.types import is_float, is_int
from ..shapes import hint_of, is_symbolic, prod, upper_bound

# A lane accumulator pays when the innermost loop is at least this long (a vector's worth of lanes)
# and at most this long (beyond it the per-row horizontal sum is amortized; the array stays small).
LANES_MIN = 8
LANES_MAX = 1024
# A scalar float sum adds this many elements into a partial before folding it into the next level: the SIMD
# loop over a block still runs in vector registers (128-256 adds per register lane), one horizontal sum per block.
BLOCK = 4096
# A sum whose loops are all serial (the SIMD lanes are the output's columns) adds this many per partial: per
# accumulator, about as many as a vectorized block's register lanes do.
SERIAL_BLOCK = 256
# An array of lane partial sums takes this many steps (one element per lane each) before it is folded.
LANE_BLOCK = 256
# Partials folded into one of the next level: few levels (4 for 3 * 2**31 elements), each adding at most this many.
FAN_IN = 64


@dataclass(frozen=True)
class ReduceLoop:
    """One loop over reduced axes: `var` runs over the product of their extents."""

    var: E.Var
    axes: tuple[int, ...]
    extent: int


def _runs(axes: list[int]) -> list[list[int]]:
    """Maximal runs of consecutive axes, in order: [0, 2, 3] -> [[0], [2, 3]]."""
    runs: list[list[int]] = []
    for a in axes:
        if runs and runs[-1][-1] == a - 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    return runs


def _affine_in(expr: E.Expr, var: str) -> bool:
    """True when `var` appears in no division or remainder of `expr` (its loads stay strided)."""
    return not any(isinstance(x, E.BinOp) and x.operator in ("floordiv", "mod") and var in E.free_vars(x.a)
                   for x in E.walk(expr))


def reduce_loops(shape: tuple[int, ...], axes: tuple[int, ...], element: Callable[[list[E.Expr]], E.Expr],
                 merge: bool = True) -> list[ReduceLoop]:
    """The loops over `axes` of an input of `shape`, outermost first.

    `element(index)` is the input's element at a full index. Within each run
    of adjacent axes, the longest tail whose merged index keeps `element`
    affine shares one loop; merge=False gives one loop per axis.
    """
    loops: list[ReduceLoop] = []
    for run in _runs(sorted(axes)):
        while run:
            size = len(run) if merge else 1
            while size > 1 and not _merges(shape, axes, run[-size:], element):
                size -= 1
            group = tuple(run[-size:])
            extent = prod([shape[a] for a in group])
            loops.append(ReduceLoop(E.Var(f"k{group[0]}"), group, extent))
            run = run[:-size]
    return sorted(loops, key=lambda loop: loop.axes[0])


def _merges(shape: tuple[int, ...], axes: tuple[int, ...], group: list[int],
            element: Callable[[list[E.Expr]], E.Expr]) -> bool:
    """Whether one loop over `group` (adjacent axes) keeps the element's index affine.

    Every other axis gets a variable of its own range: how the reduced axes
    enter the index does not depend on which output element is computed.
    """
    var = E.Var(f"k{group[0]}")
    names = [f"k{a}" if a in axes else f"probe{a}" for a in range(len(shape))]
    index: list[E.Expr] = [E.Var(name) for name in names]
    for a, sub in zip(group, delinearize(var, tuple(shape[a] for a in group))):
        index[a] = sub
    ranges = {name: (0, max(upper_bound(shape[a]) - 1, 0)) for a, name in enumerate(names)}
    ranges[var.name] = (0, upper_bound(prod([shape[a] for a in group])) - 1)
    return _affine_in(simplify(element(index), ranges), var.name)


def loop_index(shape: tuple[int, ...], loops: list[ReduceLoop]) -> dict[int, E.Expr]:
    """Each reduced axis's index in terms of the loop variables."""
    index: dict[int, E.Expr] = {}
    for loop in loops:
        for a, sub in zip(loop.axes, delinearize(loop.var, tuple(shape[a] for a in loop.axes))):
            index[a] = sub
    return index


def use_lanes(op: str, dtype: str, loops: list[ReduceLoop], ndim: int) -> bool:
    """A sum whose innermost loop is the contiguous last axis, short, and run more than once."""
    if op != "reduce_sum" or not (is_float(dtype) or is_int(dtype)) or len(loops) < 2:
        return False
    inner = loops[-1]
    outer = prod([loop.extent for loop in loops[:-1]])
    return inner.axes[-1] == ndim - 1 and LANES_MIN <= inner.extent <= LANES_MAX and outer > 1


def lane_sum(loops: list[ReduceLoop], value: E.Expr, acc: E.Var, finish: Stmt) -> Stmt:
    """Sum `value` over `loops` into per-lane partial sums, then into the scalar `acc`; `finish`
    (which reads `acc`) follows. Float lanes add in blocks of LANE_BLOCK steps (blocked_nest)."""
    inner = loops[-1]
    dtype = acc.dtype
    lanes = Buffer("acc_lanes", dtype, (inner.extent,), "local")
    zero = _zero(dtype)
    lane = inner.var
    clear = For(lane, E.const(inner.extent), Store(lanes, lane, zero), "vectorized")

    def step(index: dict[str, E.Expr], into: Partials) -> Stmt:
        sums = into.sums[0]
        return For(lane, E.const(inner.extent), Store(sums, lane, E.Load(sums, lane) + _at(value, index)),
                   "vectorized")

    outer = [(loop.var, loop.extent, "serial") for loop in loops[:-1]]
    nest = blocked_nest(outer, step, Partials((lanes,), lane), LANE_BLOCK if is_float(dtype) else None)
    total = For(lane, E.const(inner.extent), Assign(acc, acc + E.Load(lanes, lane)), "vectorized")
    return Alloc(lanes, block(clear, nest, Let(acc, zero), total, finish))


def scalar_nest(loops: list[ReduceLoop], step: Stmt, ndim: int, vectorize: bool,
                acc: Optional[E.Var] = None) -> Stmt:
    """`step` inside the loops; the innermost is vectorized when it walks the contiguous last axis.

    With `acc` (a float sum's accumulator, which `step` updates as `acc = acc + x`),
    the loops add in blocks of BLOCK elements, SERIAL_BLOCK when none is vectorized (blocked_nest).
    """
    kinds = ["vectorized" if vectorize and i == len(loops) - 1 and loop.axes[-1] == ndim - 1 else "serial"
             for i, loop in enumerate(loops)]
    plan = [(loop.var, loop.extent, kind) for loop, kind in zip(loops, kinds)]
    if acc is None or not is_float(acc.dtype) or not loops:  # no loops: a 0-d input's sum is its element
        nest = step
        for var, extent, kind in reversed(plan):
            nest = For(var, E.const(extent), nest, kind)
        return nest
    if not (isinstance(step, Assign) and step.var == acc):
        raise ValueError(f"a blocked sum needs the step acc = acc + x, got {step}")
    addend = step.value.b

    def add(index: dict[str, E.Expr], into: Partials) -> Stmt:
        return Assign(into.sums[0], into.sums[0] + _at(addend, index))

    return blocked_nest(plan, add, Partials((acc,)), BLOCK if kinds[-1] == "vectorized" else SERIAL_BLOCK)


Sum = Union[E.Var, Buffer]


@dataclass(frozen=True)
class Partials:
    """The running sums a blocked loop adds into: scalars, or (with `lane`) local arrays of lane sums."""

    sums: tuple[Sum, ...]
    lane: Optional[E.Var] = None

    def level(self, tag: str) -> "Partials":
        """Fresh partial sums like these, named with `tag` (unique per loop and nesting depth)."""
        if self.lane is None:
            return Partials(tuple(E.Var(f"{s.name}_{tag}", s.dtype) for s in self.sums))
        return Partials(tuple(Buffer(f"{s.name}_{tag}", s.dtype, s.shape, "local") for s in self.sums), self.lane)

    def around(self, body: Stmt, into: "Partials") -> Stmt:
        """Declare these sums as zero, run `body` (which adds into them), then add them into `into`."""
        if self.lane is None:
            return block(*[Let(s, _zero(s.dtype)) for s in self.sums], body,
                         *[Assign(t, t + s) for s, t in zip(self.sums, into.sums)])
        lane, n = self.lane, E.const(self.sums[0].shape[0])
        clear = For(lane, n, block(*[Store(s, lane, _zero(s.dtype)) for s in self.sums]), "vectorized")
        fold = For(lane, n, block(*[Store(t, lane, E.Load(t, lane) + E.Load(s, lane))
                                    for s, t in zip(self.sums, into.sums)]), "vectorized")
        stmt = block(clear, body, fold)
        for s in reversed(self.sums):
            stmt = Alloc(s, stmt)
        return stmt


Step = Callable[[dict[str, E.Expr], Partials], Stmt]


def blocked_nest(loops: list[tuple[E.Var, int, str]], step: Step, sums: Partials, block_size: Optional[int]) -> Stmt:
    """Loops (var, extent, kind), outermost first, around `step(index, into)`: the statement adding one
    element (one per lane) into `into`, with `index` mapping each loop variable to its value.

    Each loop is blocked (blocked_loop) so that a partial sum takes about
    `block_size` elements of the whole nest; block_size=None gives the plain
    loops, adding straight into `sums`.
    """
    def nest(i: int, index: dict[str, E.Expr], into: Partials) -> Stmt:
        if i == len(loops):
            return step(index, into)
        var, extent, kind = loops[i]

        def inner(at: E.Expr, part: Partials) -> Stmt:
            return nest(i + 1, {**index, var.name: at}, part)

        if block_size is None or not sums.sums:
            return For(var, E.const(extent), inner(var, into), kind)
        per_step = hint_of(prod([e for _, e, _ in loops[i + 1:]]))  # a block's length: a heuristic, no guard
        return blocked_loop(var, extent, kind, max(1, block_size // max(per_step, 1)), inner, into)
    return nest(0, {}, sums)


def blocked_loop(var: E.Var, extent: int, kind: str, leaf: int, step: Callable[[E.Expr, Partials], Stmt],
                 sums: Partials, depth: int = 0, offset: Optional[E.Expr] = None) -> Stmt:
    """`for var in 0..extent: step(offset + var, sums)` adding in blocks: `leaf` steps go into a partial of
    their own, FAN_IN partials into one of the next level, ...; the remainder (fewer steps than a chunk)
    adds into `sums` the same way. At most `leaf` steps are the plain loop.

    A symbolic extent (tensorkiln/shapes) is one level of blocks of `leaf` steps, the last one
    shorter (`min`), each added into a partial of its own: no guard on the extent's size."""
    if is_symbolic(extent):
        return _symbolic_blocked_loop(var, extent, kind, leaf, step, sums, depth, offset)
    if extent <= leaf:
        return For(var, E.const(extent), step(var if offset is None else offset + var, sums), kind)
    size = leaf
    while size * FAN_IN < extent:
        size *= FAN_IN
    chunks, rest = divmod(extent, size)
    chunk = E.Var(f"{var.name}_c{depth}")
    start = chunk * size if offset is None else offset + chunk * size
    partial = sums.level(f"{var.name}{depth}")
    inner = blocked_loop(var, size, kind, leaf, step, partial, depth + 1, start)
    stmts: list[Stmt] = [For(chunk, E.const(chunks), partial.around(inner, sums))]
    if rest:
        after = E.const(chunks * size) if offset is None else offset + chunks * size
        stmts.append(blocked_loop(var, rest, kind, leaf, step, sums, depth, after))
    return block(*stmts)


def _symbolic_blocked_loop(var: E.Var, extent, kind: str, leaf: int, step: Callable[[E.Expr, Partials], Stmt],
                           sums: Partials, depth: int, offset: Optional[E.Expr]) -> Stmt:
    """blocked_loop over a symbolic extent: ceil(extent / leaf) blocks, each its own partial sum."""
    chunk = E.Var(f"{var.name}_c{depth}")
    start = chunk * leaf if offset is None else offset + chunk * leaf
    partial = sums.level(f"{var.name}{depth}")
    length = E.minimum(E.const(leaf), E.const(extent) - chunk * leaf)  # the last block is shorter
    inner = For(var, length, step(start + var, partial), kind)
    return For(chunk, (extent + leaf - 1) // leaf, partial.around(inner, sums))


def _at(value: E.Expr, index: dict[str, E.Expr]) -> E.Expr:
    """`value` with the loop variables in `index` replaced by their values."""
    moved = {name: at for name, at in index.items() if not (isinstance(at, E.Var) and at.name == name)}
    if not moved:
        return value
    return substitute(Let(E.Var("tk_value", value.dtype), value), moved).value


def _zero(dtype: str) -> E.Const:
    return E.Const(0.0 if is_float(dtype) else 0, dtype)
