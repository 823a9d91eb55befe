"""Software prefetch of the next row, for row loops that make several passes over one row (codegen/c_kernel.py
emits the `__builtin_prefetch` lines this plans)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tensorkiln.codegen.c_names import c_name
from tensorkiln.loops.expr import BinOp, Const, Expr, Load, Select, Unary, Var, walk
from tensorkiln.loops.ir import Alloc, Block, For, Stmt, iter_stmts, stmt_exprs
from tensorkiln.loops.simplify import linear_form, simplify as simplify_expr
from tensorkiln.loops.types import itemsize

CACHE_LINE_BYTES = 64
PREFETCH_MIN_ROW_BYTES = 1024  # shorter rows: the hardware prefetcher runs ahead across them by itself


@dataclass(frozen=True)
class RowPrefetch:
    """Next-row prefetch for a loop over rows whose body makes several passes over one row.

    The first pass streams the row from memory; the later passes find it in
    the cache, and while they compute the memory would sit idle. So the
    second pass prefetches row r+1 of every buffer the first pass streamed
    (`streams`: buffer name -> row stride in elements), one cache line per
    64 bytes, from its first block loop (a serial loop over blocks whose body
    is a vectorized loop over the block: a prefetch inside a SIMD loop would
    stop its vectorization).
    """

    row: Var
    rows: int
    pass_stmt: Stmt
    streams: dict

    def lines(self, block_loop: For, writer) -> list[str]:
        """`__builtin_prefetch` lines for one block of `block_loop`; [] when it is no block loop."""
        inner = block_loop.body.stmts[0] if isinstance(block_loop.body, Block) and len(block_loop.body.stmts) == 1 \
            else block_loop.body
        if not (isinstance(inner, For) and inner.kind == "vectorized" and isinstance(inner.extent, Const)):
            return []
        following = BinOp("add", self.row, Const(1, self.row.dtype))
        next_row = Select(BinOp("lt", following, Const(self.rows, self.row.dtype)), following, self.row)
        out, seen = [], set()
        for load in _loads_in(inner.body):
            name = load.buffer.name
            if name not in self.streams or name in seen:
                continue
            terms, _ = linear_form(load.index)
            if (not _affine(terms) or _coefficient(terms, self.row.name) != self.streams[name]
                    or _coefficient(terms, inner.var.name) != 1):
                continue
            seen.add(name)
            step = max(CACHE_LINE_BYTES // itemsize(load.buffer.dtype), 1)
            for offset in range(0, int(inner.extent.value), step):
                index = simplify_expr(_substitute_vars(load.index, {self.row.name: next_row,
                                                               inner.var.name: Const(offset, inner.var.dtype)}))
                out.append(f"__builtin_prefetch(&{c_name(name)}[{writer.expr(index)[0]}]);")
        return out


def row_prefetch(row: For) -> Optional[RowPrefetch]:
    """The next-row prefetch plan of loop `row` (see RowPrefetch), or None."""
    body = row.body
    while isinstance(body, Alloc):  # a row staged in a local buffer (streaming stores)
        body = body.body
    if not isinstance(body, Block) or not isinstance(row.extent, Const) or int(row.extent.value) < 2:
        return None
    passes = [s for s in body.stmts if any(isinstance(x, For) for x in iter_stmts(s))]
    if len(passes) < 2:
        return None
    streams = _row_streams(passes[0], row.var.name)
    for later in passes[1:]:
        shared = {name: stride for name, stride in _row_streams(later, row.var.name).items()
                  if streams.get(name) == stride}
        if shared:
            return RowPrefetch(row.var, int(row.extent.value), later, shared)
    return None


def _row_streams(s: Stmt, row: str) -> dict[str, int]:
    """Buffers `s` reads a whole row of: name -> row stride (elements), rows of at least 1 KiB only."""
    streams = {}
    for load in _loads_in(s):
        terms = linear_form(load.index)[0]
        stride = _coefficient(terms, row)
        if load.buffer.scope == "global" and _affine(terms) and \
                stride * itemsize(load.buffer.dtype) >= PREFETCH_MIN_ROW_BYTES:
            streams.setdefault(load.buffer.name, stride)
    return streams


def _loads_in(s: Stmt) -> list[Load]:
    return [n for x in iter_stmts(s) for e in stmt_exprs(x) for n in walk(e) if isinstance(n, Load)]


def _affine(terms: dict) -> bool:
    """An index whose linear form has only loop variables as terms (no div/mod, no gathered index)."""
    return all(isinstance(t, Var) for t in terms)


def _coefficient(terms: dict, var: str) -> int:
    """The coefficient of variable `var` in a linear form's terms (0 when absent)."""
    return sum(c for t, c in terms.items() if isinstance(t, Var) and t.name == var)


def _substitute_vars(e: Expr, values: dict[str, Expr]) -> Expr:
    """Affine index `e` (variables, constants, + - * and negation) with the named variables replaced."""
    if isinstance(e, Var):
        return values.get(e.name, e)
    if isinstance(e, BinOp):
        return BinOp(e.operator, _substitute_vars(e.a, values), _substitute_vars(e.b, values))
    if isinstance(e, Unary):
        return Unary(e.operator, _substitute_vars(e.x, values))
    return e
