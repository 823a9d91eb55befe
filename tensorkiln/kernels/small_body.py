"""A loop body too small to share among threads runs on the thread that runs the loop.

Each parallel loop of a kernel is one OpenMP region: the other threads are
woken, given their share and waited for. Once per call of a graph that is
cheap next to the work, but a scan or while_loop enters its body's regions
once per step: an LSTM cell at batch 8 (an 8 x 128 by 128 x 512 product) is
about 10 us of one core's work, less than waking a sleeping thread costs. So
when all of a body's kernels together loop fewer than `SERIAL_BODY_MAX_WORK`
times per step, its parallel loops become serial; the step then runs without
synchronization, and independent loops can run side by side on the other
threads (kernels/concurrent.py).
"""
from __future__ import annotations

import dataclasses

from ..loops import expr as E
from ..loops.ir import Alloc, Block, Concurrent, For, If, Kernel, NativeCall, ProgramCall, RuntimeCall, Stmt, While
from ..loops.program import Program

# Innermost iterations of one step's kernels (about one multiply-add or element each) below which a
# step is cheaper on one core than split: about 40 us of one Zen 4 core's float32 FMAs, several times the
# cost of one parallel region whose threads wait passively.
SERIAL_BODY_MAX_WORK = 1 << 21


def iterations(stmt: Stmt) -> int | None:
    """Innermost statements `stmt` runs (constant loop extents multiplied, a block's parts added, an
    if's larger branch); None when unknown: a run-time extent, a while loop or a call of other code."""
    if isinstance(stmt, For):
        inner = iterations(stmt.body)
        if inner is None or not isinstance(stmt.extent, E.Const):
            return None
        return int(stmt.extent.value) * inner
    if isinstance(stmt, (Block, Concurrent)):
        parts = [iterations(s) for s in (stmt.stmts if isinstance(stmt, Block) else stmt.parts)]
        return None if None in parts else sum(parts)
    if isinstance(stmt, If):
        branches = [iterations(s) for s in (stmt.then, stmt.else_) if s is not None]
        return None if None in branches else max(branches)
    if isinstance(stmt, Alloc):
        return iterations(stmt.body)
    if isinstance(stmt, (While, ProgramCall, NativeCall, RuntimeCall)):
        return None
    return 1


def serial_if_small(program: Program) -> Program:
    """`program` (a loop's body) with its parallel loops serial when its kernels' work per step is known
    and below SERIAL_BODY_MAX_WORK; else unchanged."""
    works = [iterations(k.body) for k in program.kernels]
    if None in works or sum(works) >= SERIAL_BODY_MAX_WORK:
        return program
    kernels = tuple(Kernel(k.name, k.params, _serial(k.body), k.comment) for k in program.kernels)
    return dataclasses.replace(program, kernels=kernels)


def _serial(stmt: Stmt) -> Stmt:
    """`stmt` with every parallel loop serial (the loops, blocks, branches and allocations around them rebuilt)."""
    if isinstance(stmt, For):
        kind = "serial" if stmt.kind == "parallel" else stmt.kind
        threads_if = None if kind == "serial" else stmt.threads_if
        return For(stmt.var, stmt.extent, _serial(stmt.body), kind, threads_if)
    if isinstance(stmt, Block):
        return Block(tuple(_serial(s) for s in stmt.stmts))
    if isinstance(stmt, If):
        return If(stmt.cond, _serial(stmt.then), None if stmt.else_ is None else _serial(stmt.else_))
    if isinstance(stmt, Alloc):
        return Alloc(stmt.buffer, _serial(stmt.body))
    return stmt  # a leaf (iterations() refused the rest)


__all__ = ["SERIAL_BODY_MAX_WORK", "iterations", "serial_if_small"]
