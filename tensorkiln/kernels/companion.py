"""Two-output kernels: a bf16 rounding stored by the kernel that computes the value it rounds.

With precision="bf16" one value x is often read twice: unrounded (float32) by one reader and
rounded to bf16 by another that reads its operand from a buffer. An inverted residual block's
output is the example: the next block's residual add reads it as it is, the next 1x1 convolution
reads its rounding. The fusion policy then stores both x and its rounding r, and r's kernel would
do nothing but round: read x back, write r. Instead the kernel computing x stores r too: after
every store of an element of x it stores that element's rounding (`with_companion_stores`), and
r's own kernel is not emitted. No kernel exists only to round.

grouping.companion_roundings finds the kernels that only round the output of another: one
stored input, x, and a chain of one-operand elementwise ops that is x's bf16 rounding held in
float32 (bf16_storage.rounded_input). Lowering adds the stores to x's kernel where every write
of x is a loop-IR Store; a kernel writing x through a native helper's pointer keeps r's kernel
as it was. A graph without bf16 roundings (precision="fp32") has no such kernel: its program is
unchanged.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..ir.graph import Node
from ..loops import expr as E
from ..loops.buffer import Buffer
from ..loops.ir import (Alloc, Block, Concurrent, For, If, Kernel, NativeCall, ProgramCall, RuntimeCall, Stmt,
                        Store, While, block, iter_stmts)
from .inline import ValueBuilder


def rounding_of(root: Node, x: Node, buffers: dict[int, Buffer]) -> Callable[[E.Expr], E.Expr]:
    """The function from an element of x to the element of `root`, a chain of one-operand elementwise
    ops over x at x's index (grouping.companion_roundings)."""
    out = buffers[root.id]

    def element(x_value: E.Expr) -> E.Expr:
        # every op between root and x reads x at its own index: the index is unused
        values = ValueBuilder(buffers, inline_root=root, known={x.id: x_value})
        return E.cast(values.value(root, [E.const(0)] * root.ndim), out.value_dtype)

    return element


def writes_only_by_stores(kernel: Kernel, out: Buffer) -> bool:
    """Every write of `out` in `kernel` is a Store (none through a helper's or sub-program's pointer)."""
    for s in iter_stmts(kernel.body):
        if isinstance(s, (NativeCall, ProgramCall)) and out.name in s.writes:
            return False
        if isinstance(s, RuntimeCall) and any(b.name == out.name for b in s.writes):
            return False
    return any(isinstance(s, Store) and s.buffer.name == out.name for s in iter_stmts(kernel.body))


def with_companion_stores(kernel: Kernel, out: Buffer, companion: Buffer,
                          element: Callable[[E.Expr], E.Expr], comment: str) -> Kernel | None:
    """`kernel` (its comment now `comment`) storing element(out[i]) into `companion[i]` after each store
    of out[i], or None where some write of `out` is not a Store. The stored value is read back at once
    (the C compiler keeps it in a register): the last store of each element decides both buffers,
    whatever the kernel's order of stores."""
    if not writes_only_by_stores(kernel, out) or companion.shape != out.shape:
        return None

    def add(s: Store) -> Stmt:
        return block(s, Store(companion, s.index, element(E.Load(out, s.index))))

    body = _map_stores(kernel.body, out.name, add)
    return Kernel(kernel.name, kernel.params + (companion,), body, comment)


def _map_stores(s: Stmt, name: str, fn: Callable[[Store], Stmt]) -> Stmt:
    """`s` with every Store into buffer `name` replaced by fn(store)."""
    if isinstance(s, Store):
        return fn(s) if s.buffer.name == name else s
    if isinstance(s, (For, Alloc, While)):
        return dataclasses.replace(s, body=_map_stores(s.body, name, fn))
    if isinstance(s, If):
        else_ = None if s.else_ is None else _map_stores(s.else_, name, fn)
        return If(s.cond, _map_stores(s.then, name, fn), else_)
    if isinstance(s, Block):
        return Block(tuple(_map_stores(t, name, fn) for t in s.stmts))
    if isinstance(s, Concurrent):
        return Concurrent(tuple(_map_stores(t, name, fn) for t in s.parts))
    return s


__all__ = ["rounding_of", "with_companion_stores", "writes_only_by_stores"]
