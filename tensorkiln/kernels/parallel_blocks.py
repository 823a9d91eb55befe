"""Threads for a reduction to a few values: its outer block loop runs in parallel.

A full reduction (`x.sum()`, a loss) has no output rows to spread over threads,
so the default nest (schedule_defaults.output_nest) leaves it on one core. Its
sum is blocked (reduction.py): `acc = acc + part` once per outer block, `part`
summed inside. Here that outer loop becomes parallel: each block stores its
`part` into a local array, and one thread then combines the array in block
order, the same additions in the same order as the serial loop, so the result
is bit-identical whatever the thread count.
"""
from __future__ import annotations

from ..loops import expr as E
from ..loops.buffer import Buffer
from ..loops.ir import Alloc, Assign, Block, For, Kernel, Let, Store, iter_stmts, stmt_exprs
from ..loops.nest import substitute_expr
from .schedule_defaults import PARALLEL_MIN_ELEMENTS, thread_count


def parallelize_blocks(kernel: Kernel) -> Kernel:
    """`kernel` with its top-level block loop of partial reductions made parallel, when it has no parallel
    loop yet, enough work and the pattern above; else as it is."""
    if thread_count() < 2 or any(isinstance(s, For) and s.kind == "parallel" for s in iter_stmts(kernel.body)):
        return kernel
    stmts = list(kernel.body.stmts) if isinstance(kernel.body, Block) else [kernel.body]
    for k, loop in enumerate(stmts):
        rewritten = _parallel_block_loop(loop, {s.var.name for s in stmts[:k] if isinstance(s, Let)})
        if rewritten is not None:
            stmts[k] = rewritten
            return Kernel(kernel.name, kernel.params, Block(tuple(stmts)), kernel.comment)
    return kernel


def _parallel_block_loop(loop, outer_scalars: set[str]):
    """The parallel form of `for b: ...; acc = combine(acc, part)`, or None when `loop` is not one."""
    if not (isinstance(loop, For) and loop.kind == "serial" and isinstance(loop.extent, E.Const)
            and isinstance(loop.body, Block) and loop.body.stmts):
        return None
    blocks = int(loop.extent.value)
    if blocks < thread_count() or blocks * _inner_work(loop.body) < PARALLEL_MIN_ELEMENTS:
        return None
    *work, combine = loop.body.stmts
    if not (isinstance(combine, Assign) and combine.var.name in outer_scalars):
        return None
    acc = combine.var.name
    parts = E.free_vars(combine.value) - {acc}
    declared = {s.var.name: s for s in work if isinstance(s, Let)}
    if len(parts) != 1 or next(iter(parts)) not in declared:
        return None
    part = declared[next(iter(parts))].var
    for s in (x for w in work for x in iter_stmts(w)):
        if isinstance(s, Assign) and s.var.name in outer_scalars:
            return None  # another outer scalar updated per block: not one reduction
        if isinstance(s, Store) and s.buffer.scope != "local":
            return None  # a block writes memory others may read
        if any(acc in E.free_vars(e) for e in stmt_exprs(s)):
            return None
    partial = Buffer(f"{acc}_blocks", part.dtype, (blocks,), scope="local")
    fill = For(loop.var, loop.extent, Block(tuple(work) + (Store(partial, loop.var, part),)), "parallel")
    b = E.Var(f"{acc}_block")
    merge = For(b, loop.extent, Assign(combine.var, substitute_expr(combine.value, {part.name: E.Load(partial, b)})))
    return Alloc(partial, Block((fill, merge)))


def _inner_work(stmt) -> int:
    """Iterations of the deepest loop nest inside `stmt` (constant extents; a symbolic one counts as 1)."""
    best = 1
    for s in iter_stmts(stmt):
        if isinstance(s, For):
            extent = int(s.extent.value) if isinstance(s.extent, E.Const) else 1
            best = max(best, extent * _inner_work(s.body))
    return best
