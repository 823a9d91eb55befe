"""Where a pipeline Func's values live: its buffers, how a point is addressed in them, and the values that
address them once the region it is computed over is known.

A Func computed at a loop of a consumer is lowered before its region is known:
its `Realization` is a placeholder whose first point and strides are variables
(`Lowering._placeholder`). Once the region is known (lower.py's
`realize_here`, `store_here`), `finalize` replaces those variables with their
values and points every access at the local buffer allocated over the region.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from tensorkiln.loops import expr as L
from tensorkiln.loops import schedule as S
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Alloc, Block, For, Let, Stmt, Store
from tensorkiln.pipeline.bounds import Box, tighten
from tensorkiln.pipeline.fold import unfold
from tensorkiln.pipeline.lower_expr import loop_dtype
from tensorkiln.pipeline.names import PipelineError


@dataclass
class Realization:
    """Where a Func's values live while they are used: a buffer and the coordinates of its first element."""

    buffer: Buffer
    mins: list[L.Expr]      # per dimension, x first
    strides: list[L.Expr]   # constants, or variables until the region is known (see realize_here)
    masks: Optional[list[L.Var]] = None  # a Func that may be folded: each dimension's fold mask (fold.py)
    others: tuple[Buffer, ...] = ()      # a Tuple Func: the buffers of its values after the first

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        """One buffer per value (all addressed by the same index)."""
        return (self.buffer, *self.others)

    def index(self, args: Sequence[L.Expr]) -> L.Expr:
        """Flat element index of the point `args`."""
        index: L.Expr = L.const(0)
        for d, (arg, lo, stride) in enumerate(zip(args, self.mins, self.strides)):
            offset = arg - lo
            if self.masks is not None:
                offset = L.BinOp("bitand", offset, self.masks[d])
            index = index + offset * stride
        return index  # simplified once, with the whole kernel (Lowering.kernel)


def row_major_strides(extents: Sequence[int]) -> list[int]:
    """Row-major strides of `extents` (x, the first, varies fastest)."""
    strides, step = [], 1
    for e in extents:
        strides.append(step)
        step *= int(e)
    return strides


def value_buffers(f, shape: tuple, scope: str) -> list[Buffer]:
    """A buffer for each value of f: named f, or f_0, f_1 ... for a Tuple Func."""
    names = [f.name] if len(f.types) == 1 else [f"{f.name}_{k}" for k in range(len(f.types))]
    return [Buffer(n, "int32" if t == "int32" else loop_dtype(t), shape, scope) for n, t in zip(names, f.types)]


def alloc_all(buffers: Sequence[Buffer], body: Stmt) -> Stmt:
    """`body` inside an Alloc of each buffer (the first outermost)."""
    for buffer in reversed(buffers):
        body = Alloc(buffer, body)
    return body


def substitute_box(box: Box, values: dict[str, L.Expr], ranges: dict) -> Box:
    """`box` with the realization's variables replaced by their values."""
    return [None if d is None else (tighten(S.substitute_expr(d[0], values), ranges),
                                    tighten(S.substitute_expr(d[1], values), ranges)) for d in box]


def finalize(stmt: Stmt, values: dict[str, L.Expr], buffers: Sequence[Buffer],
             unfolded: frozenset = frozenset()) -> Stmt:
    """`stmt` with the variables in `values` replaced and every access to a buffer of `buffers` by its name
    using that buffer; the masks named in `unfolded` (dimensions that are not folded) are dropped."""
    by_name = {b.name: b for b in buffers}

    def expr(e: L.Expr) -> L.Expr:
        e = unfold(e, set(unfolded)) if unfolded else e
        done: dict[int, L.Expr] = {}  # by node identity: an inlined stencil shares its subtrees

        def visit(x: L.Expr) -> L.Expr:
            found = done.get(id(x))
            if found is not None:
                return found
            kids = tuple(visit(c) for c in x.children)
            if isinstance(x, L.Var) and x.name in values:
                result = values[x.name]
            elif isinstance(x, L.Load) and x.buffer.name in by_name:
                result = L.Load(by_name[x.buffer.name], kids[0])
            else:
                result = x.with_children(kids) if kids else x
            done[id(x)] = result
            return result
        return visit(e)

    def stmt_(s: Stmt) -> Stmt:
        if isinstance(s, Store):
            target = by_name.get(s.buffer.name, s.buffer)
            return Store(target, expr(s.index), expr(s.value))
        if isinstance(s, For):
            return For(s.var, expr(s.extent), stmt_(s.body), s.kind)
        if isinstance(s, Let):
            return Let(s.var, expr(s.value))
        if isinstance(s, Alloc):
            return Alloc(s.buffer, stmt_(s.body))
        if isinstance(s, Block):
            return Block(tuple(stmt_(x) for x in s.stmts))
        raise PipelineError(f"unexpected statement in a lowered pipeline: {s!r}")
    return stmt_(stmt)
