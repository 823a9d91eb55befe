"""In-place updates that change a few elements store only those.

A state update `new = where(mask, value, old)` whose output overwrites its
input (the pipeline's in-place pairs: a KV cache written at one position)
would store every element, almost all of them the value already there. Its
store `out[i] = select(c, a, old[i])` becomes `if (c) out[i] = a`, and the
`if` moves out of the loops whose variables it does not depend on: GPT-2's
decode step writes one row of each layer's cache (768 floats) instead of
rewriting all of it (12 x L x 64), 24 times per token.

The skipped elements must already hold the old values: the runtime gives
such an output its input's memory, and where it cannot (a read-only or
repeated argument) fills the fresh output with the input's values before
the call (`CompiledGraph._run`).
"""
from __future__ import annotations

from dataclasses import replace

from .expr import Expr, Load, Select, free_vars, logical_not, walk
from .index_equality import Extents, loop_extents, provably_equal
from .ir import Alloc, Block, For, If, Stmt, Store, iter_stmts
from .program import Program


def skip_unchanged_stores(program: Program, pairs: list[tuple[str, str]]) -> Program:
    """`program` with the stores of each (output, input) in-place pair that keep the input's value skipped."""
    kernels = []
    for kernel in program.kernels:
        body = kernel.body
        extents = loop_extents(body)
        for out_name, in_name in pairs:
            body = _rewrite(body, out_name, in_name, extents)
        kernels.append(kernel if body is kernel.body else replace(kernel, body=body))
    return replace(program, kernels=tuple(kernels))


def _rewrite(stmt: Stmt, out_name: str, in_name: str, extents: Extents) -> Stmt:
    if isinstance(stmt, Store):
        return _conditional_store(stmt, out_name, in_name, extents)
    if isinstance(stmt, For):
        body = _rewrite(stmt.body, out_name, in_name, extents)
        if body is stmt.body:
            return stmt
        if isinstance(body, If) and body.else_ is None and _invariant(body.cond, stmt.var.name, body.then):
            # the condition is the same on every iteration: test it once, around the loop
            return If(body.cond, replace(stmt, body=body.then))
        return replace(stmt, body=body)
    if isinstance(stmt, Alloc):
        body = _rewrite(stmt.body, out_name, in_name, extents)
        return stmt if body is stmt.body else replace(stmt, body=body)
    if isinstance(stmt, If):
        then = _rewrite(stmt.then, out_name, in_name, extents)
        else_ = None if stmt.else_ is None else _rewrite(stmt.else_, out_name, in_name, extents)
        return stmt if then is stmt.then and else_ is stmt.else_ else If(stmt.cond, then, else_)
    if isinstance(stmt, Block):
        stmts = tuple(_rewrite(s, out_name, in_name, extents) for s in stmt.stmts)
        return stmt if all(a is b for a, b in zip(stmts, stmt.stmts)) else Block(stmts)
    return stmt


def _conditional_store(store: Store, out_name: str, in_name: str, extents: Extents) -> Stmt:
    """`out[i] = select(c, a, in[i])` as `if (c) out[i] = a` (and the mirror case); other stores unchanged.

    `in[i]` may be spelled apart from the store's index: equal is proven over the loops' `extents`."""
    value = store.value
    if store.buffer.name != out_name or not isinstance(value, Select):
        return store
    old = lambda e: isinstance(e, Load) and e.buffer.name == in_name \
        and provably_equal(e.index, store.index, extents)  # noqa: E731
    if old(value.b) and not old(value.a):
        return If(value.cond, Store(store.buffer, store.index, value.a))
    if old(value.a) and not old(value.b):
        return If(logical_not(value.cond), Store(store.buffer, store.index, value.b))
    return store


def _invariant(cond: Expr, var: str, body: Stmt) -> bool:
    """`cond` does not change while a loop over `var` runs `body`: not its variable, not a buffer it stores."""
    written = {s.buffer.name for s in iter_stmts(body) if isinstance(s, Store)}
    reads = {e.buffer.name for e in walk(cond) if isinstance(e, Load)}
    return var not in free_vars(cond) and not (reads & written)
