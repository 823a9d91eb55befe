"""Hoisting a producer's buffer out of serial loops: allocated once per thread, not once per tile.

A Func computed at a consumer's tile loop is allocated inside that loop, so a
tile row of 25 tiles would allocate (a buffer too large for the stack: from
the heap) 25 times. Every iteration writes the whole region it then reads,
so the buffer can live outside a serial loop unchanged: the allocation moves
out through serial loops and stops at a parallel one (each thread keeps its
own). This is Halide's store_at of the loop it stops at, without the sliding
window.
"""
from __future__ import annotations

from tensorkiln.loops.ir import Alloc, Block, For, If, Stmt


def hoist_allocs(stmt: Stmt) -> Stmt:
    """`stmt` with allocations moved out of the serial loops around them (up to a parallel loop)."""
    if isinstance(stmt, For):
        body = hoist_allocs(stmt.body)
        if stmt.kind != "parallel":
            allocs = []
            while isinstance(body, Alloc):  # a buffer's shape is a constant: it never uses the loop
                allocs.append(body.buffer)
                body = body.body
            result: Stmt = For(stmt.var, stmt.extent, body, stmt.kind)
            for buffer in reversed(allocs):
                result = Alloc(buffer, result)
            return result
        return For(stmt.var, stmt.extent, body, stmt.kind)
    if isinstance(stmt, Alloc):
        return Alloc(stmt.buffer, hoist_allocs(stmt.body))
    if isinstance(stmt, Block):
        return Block(tuple(hoist_allocs(s) for s in stmt.stmts))
    if isinstance(stmt, If):
        return If(stmt.cond, hoist_allocs(stmt.then), None if stmt.else_ is None else hoist_allocs(stmt.else_))
    return stmt
