"""Loop partitioning for boundary conditions: a tile that lies inside the image runs without its clamps.

A boundary condition reads `input[clamp(x - 2, 0, W - 1)]`: in a vectorized
loop that clamped index is a gather. Halide partitions loops into a steady
state, where the clamps provably do nothing, and the edges. Here the same is
done one tile at a time: at the outermost loop whose body can be inside the
clamps' ranges (bounds inference over the loops in the body says when), the
body becomes

    if every clamped coordinate stays in its range over this body:
        body without those clamps    (contiguous loads, vectorized)
    else:
        body as it was

so interior tiles load contiguously and only edge tiles pay for the clamps.
"""
from __future__ import annotations

from typing import Optional

from tensorkiln.loops import expr as L
from tensorkiln.loops.ir import Alloc, Block, For, If, Let, Stmt, Store, iter_stmts, stmt_exprs
from tensorkiln.loops.simplify import simplify
from tensorkiln.pipeline.bounds import interval

MAX_CLAMPS = 64  # a condition of more clamps than this is not worth its test


def _bound_parts(e: L.Expr, inner: set[str]) -> Optional[tuple[L.Expr, Optional[L.Expr], Optional[L.Expr]]]:
    """(value, low, high) when `e` is max(value, low) or min(value, high) with the bound fixed over the
    loops `inner` and the value varying with them (a clamp split by the simplifier has one side left)."""
    if not (isinstance(e, L.BinOp) and e.operator in ("max", "min")):
        return None
    for value, bound in ((e.a, e.b), (e.b, e.a)):
        if L.free_vars(value) & inner and not L.free_vars(bound) & inner and not _has_load(bound):
            return (value, bound, None) if e.operator == "max" else (value, None, bound)
    return None


def _has_load(e: L.Expr) -> bool:
    return any(isinstance(n, L.Load) for n in L.walk(e))


def _clamps(stmt: Stmt, inner: set[str]) -> list[L.Expr]:
    found: dict[L.Expr, None] = {}
    for s in iter_stmts(stmt):
        for e in stmt_exprs(s):
            for load in L.walk(e):
                if isinstance(load, L.Load):
                    for node in L.walk(load.index):
                        if _bound_parts(node, inner) is not None:
                            found[node] = None
    return list(found)


def _loops_inside(stmt: Stmt) -> list[For]:
    return [s for s in iter_stmts(stmt) if isinstance(s, For)]


def _condition(clamps: list[L.Expr], body: Stmt, ranges: dict) -> tuple[Optional[L.Expr], list[L.Expr]]:
    """The test that every clamp in `clamps` is a no-op throughout `body`, and the clamps it covers."""
    loops = _loops_inside(body)
    inner = {l.var.name for l in loops}
    tests, covered = [], []
    for clamp in clamps:
        value, low, high = _bound_parts(clamp, inner)
        if _has_load(value):
            continue
        span: Optional[tuple] = (value, value)
        for loop in reversed(loops):  # innermost first: an inner extent may use an outer loop
            if span is None:
                break
            lo_end = interval(span[0], loop.var.name, L.const(0), loop.extent - 1)
            hi_end = interval(span[1], loop.var.name, L.const(0), loop.extent - 1)
            span = None if lo_end is None or hi_end is None else (lo_end[0], hi_end[1])
        if span is None or any(v in inner for v in L.free_vars(span[0]) | L.free_vars(span[1])):
            continue
        test = simplify(L.ge(span[0], low) if low is not None else L.le(span[1], high), ranges)
        if isinstance(test, L.Const):
            if test.value:
                covered.append(clamp)  # always inside: drop it everywhere below
            continue
        tests.append(test)
        covered.append(clamp)
    if len(tests) > MAX_CLAMPS:
        return None, []
    if not tests:
        return (L.Const(True, "bool") if covered else None), covered
    cond = tests[0]
    for t in dict.fromkeys(tests[1:]):
        cond = L.logical_and(cond, t)
    return cond, covered


def _without(stmt: Stmt, clamps: list[L.Expr], inner: set[str]) -> Stmt:
    drop = {c: (c.a if L.free_vars(c.a) & inner else c.b) for c in clamps}

    def expr(e: L.Expr) -> L.Expr:
        if e in drop:
            return expr(drop[e])
        kids = tuple(expr(c) for c in e.children)
        return e.with_children(kids) if kids else e

    def visit(s: Stmt) -> Stmt:
        if isinstance(s, Store):
            return Store(s.buffer, expr(s.index), expr(s.value))
        if isinstance(s, For):
            return For(s.var, s.extent, visit(s.body), s.kind)
        if isinstance(s, Let):
            return Let(s.var, expr(s.value))
        if isinstance(s, Alloc):
            return Alloc(s.buffer, visit(s.body))
        if isinstance(s, If):
            return If(s.cond, visit(s.then), None if s.else_ is None else visit(s.else_))
        if isinstance(s, Block):
            return Block(tuple(visit(x) for x in s.stmts))
        return s
    return visit(stmt)


def partition_clamps(stmt: Stmt, ranges: Optional[dict] = None) -> Stmt:
    """`stmt` with each tile's body split into a clamp-free steady state and the edge case."""
    ranges = dict(ranges or {})
    if isinstance(stmt, For):
        inner = dict(ranges)
        inner[stmt.var.name] = (0, 1 << 40)
        body = stmt.body
        inside = {l.var.name for l in _loops_inside(body)}
        clamps = _clamps(body, inside)
        if clamps and inside:
            cond, covered = _condition(clamps, body, inner)
            if cond is not None:
                steady = _without(body, covered, inside)
                if isinstance(cond, L.Const):
                    return For(stmt.var, stmt.extent, partition_clamps(steady, inner), stmt.kind)
                return For(stmt.var, stmt.extent, If(cond, partition_clamps(steady, inner), partition_clamps(body, inner)),
                           stmt.kind)
        return For(stmt.var, stmt.extent, partition_clamps(body, inner), stmt.kind)
    if isinstance(stmt, Alloc):
        return Alloc(stmt.buffer, partition_clamps(stmt.body, ranges))
    if isinstance(stmt, Block):
        return Block(tuple(partition_clamps(s, ranges) for s in stmt.stmts))
    return stmt
