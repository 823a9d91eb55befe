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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..loops import expr as E
from ..loops.buffer import Buffer
from .inline import delinearize
from ..loops.ir import Alloc, Assign, For, Let, Stmt, Store, block
from ..loops.simplify import simplify
from ..loops.types import is_float, is_int

# A lane accumulator pays when the innermost loop is at least this long (a vector's worth of lanes)
# and at most this long (beyond it the per-row horizontal sum is amortized; the array stays small).
LANES_MIN = 8
LANES_MAX = 1024


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
            extent = int(np.prod([shape[a] for a in group], dtype=np.int64))
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
    ranges = {name: (0, max(shape[a] - 1, 0)) for a, name in enumerate(names)}
    ranges[var.name] = (0, int(np.prod([shape[a] for a in group], dtype=np.int64)) - 1)
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
    outer = int(np.prod([loop.extent for loop in loops[:-1]], dtype=np.int64))
    return inner.axes[-1] == ndim - 1 and LANES_MIN <= inner.extent <= LANES_MAX and outer > 1


def lane_sum(loops: list[ReduceLoop], value: E.Expr, acc: E.Var, finish: Stmt) -> Stmt:
    """Sum `value` over `loops` into per-lane partial sums, then into the scalar `acc`; `finish`
    (which reads `acc`) follows."""
    inner = loops[-1]
    dtype = acc.dtype
    lanes = Buffer("acc_lanes", dtype, (inner.extent,), "local")
    zero = E.Const(0.0 if is_float(dtype) else 0, dtype)
    lane = inner.var
    clear = For(lane, E.const(inner.extent), Store(lanes, lane, zero), "vectorized")
    nest: Stmt = For(lane, E.const(inner.extent), Store(lanes, lane, E.Load(lanes, lane) + value), "vectorized")
    for loop in reversed(loops[:-1]):
        nest = For(loop.var, E.const(loop.extent), nest, "serial")
    total = For(lane, E.const(inner.extent), Assign(acc, acc + E.Load(lanes, lane)), "vectorized")
    return Alloc(lanes, block(clear, nest, Let(acc, zero), total, finish))


def scalar_nest(loops: list[ReduceLoop], step: Stmt, ndim: int, vectorize: bool) -> Stmt:
    """`step` inside the loops; the innermost is vectorized when it walks the contiguous last axis."""
    nest = step
    for i, loop in enumerate(reversed(loops)):
        kind = "vectorized" if vectorize and i == 0 and loop.axes[-1] == ndim - 1 else "serial"
        nest = For(loop.var, E.const(loop.extent), nest, kind)
    return nest
