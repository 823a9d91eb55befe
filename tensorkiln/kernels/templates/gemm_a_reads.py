"""How the GEMM's micro-kernel can read A where it lies instead of packing it.

The micro-kernel broadcasts one element of each of its MR rows per depth
step, so A needs no contiguity, only an index that is cheap to step along k.
Two cases qualify:

- `a_reads_rows`: A's element (row, k) is a plain load whose index steps by
  one along k (a row-major matrix, or a slice of one).
- `a_row_piece`: A's rows are contiguous in pieces of c elements: with
  k = q*c + r the index is some f(row, q) + r. Attention's output read as
  [seq, heads * head_dim] through a permute of [heads, seq, head_dim] is such
  an A (c = head_dim): the depth loop then runs as q over pieces and r within
  one, and the index steps by one along r. Packing it instead costs every
  thread an element-by-element gather of the whole A per call.
"""
from __future__ import annotations

import functools
from typing import Callable

from ...loops import expr as E
from ...loops.simplify import simplify
from ..target import CACHE_LINE

IndexFn = Callable[..., E.Expr]

PIECE_MIN = 16  # shorter pieces leave the depth loop too short to hide its own overhead


def a_reads_rows(a_value: IndexFn, probe: E.Var) -> bool:
    """True when A's element (row, k) is a plain load whose index steps by one along k: A's rows
    lie contiguous in memory and the micro-kernel can broadcast from them directly."""
    return _steps_by_one(a_value(E.const(0), E.Var(probe.name + "_row"), probe), probe.name)


def b_reads_columns(b_value: IndexFn, probe: E.Var) -> bool:
    """True when B's element (k, col) is a plain load whose index steps by one along k: B is stored
    transposed ([N, K], a linear layer's weight), so packing it gathers each panel row from NR rows of
    memory. The tuner keeps such a GEMM apart from one whose B rows are contiguous (its workload's
    `bt=1`): the two packs cost differently and favour different blocks."""
    return _steps_by_one(b_value(E.const(0), probe, E.Var(probe.name + "_col")), probe.name)


def a_row_piece(a_value: IndexFn, k: int, kc: int, probe: E.Var) -> int | None:
    """The longest piece c (dividing k and the depth block kc, at least PIECE_MIN, below kc) such that
    A's element (row, q*c + r) for 0 <= r < c is a plain load stepping by one along r; None if none.
    Only for a constant k: every depth block is then a whole number of pieces."""
    if not isinstance(k, int) or k <= 0:
        return None
    row, piece, within = E.Var(probe.name + "_row"), E.Var(probe.name + "_q"), E.Var(probe.name + "_r")
    for c in sorted((c for c in range(PIECE_MIN, kc) if k % c == 0 and kc % c == 0), reverse=True):
        value = a_value(E.const(0), row, piece * c + within)
        if isinstance(value, E.Load):
            value = E.Load(value.buffer, simplify(value.index, {piece.name: (0, k // c - 1), within.name: (0, c - 1)}))
        if _steps_by_one(value, within.name):
            return c
    return None


def _steps_by_one(value: E.Expr, var: str) -> bool:
    """`value` is a load whose index is (rest + var) with no division by a run-time size: a division
    there (a symbolic M) would cost every element what packing pays once."""
    if not isinstance(value, E.Load):
        return False
    divides = any(isinstance(x, E.BinOp) and x.operator in ("floordiv", "mod") and not isinstance(x.b, E.Const)
                  for x in E.walk(value.index))
    return _unit_summand(value.index, var) and not divides


def _unit_summand(index: E.Expr, var: str) -> bool:
    """`var` occurs in `index` exactly once, reached through additions only (index = rest + var)."""
    if isinstance(index, E.Var):
        return index.name == var
    if isinstance(index, E.BinOp) and index.operator == "add":
        a_has, b_has = (var in E.free_vars(index.a)), (var in E.free_vars(index.b))
        if a_has != b_has:
            return _unit_summand(index.a if a_has else index.b, var)
    return False


@functools.lru_cache(maxsize=256)
def rows_sharing_l2(rows: int, row_stride_bytes: int, row_bytes: int, l2_bytes: int, ways: int) -> int:
    """How many lines of `rows` rows of A (each `row_bytes` long, one every `row_stride_bytes`) land in the
    fullest set of an L2 of `l2_bytes` with `ways` ways: the rows' lines compete for that set's ways.

    An A read in place keeps its rows where they lie, and a power-of-two stride (K = 1024 or 2048 floats)
    sends row r and row r + sets*64/stride to the same sets: a block of 240 rows of K = 2048 asked 30
    lines of sets that hold 8, so it never stayed in L2 (gemm.a_block_rows keeps it within half the ways).
    """
    sets = max(l2_bytes // (ways * CACHE_LINE), 1)
    lines = min(-(-row_bytes // CACHE_LINE), sets)
    per_set = [0] * (sets + 1)  # a difference array over the sets, one extra slot for wrapped ranges
    for r in range(rows):
        start = (r * row_stride_bytes // CACHE_LINE) % sets
        end = start + lines
        per_set[start] += 1
        if end <= sets:
            per_set[end] -= 1
        else:  # the row's lines wrap past the last set
            per_set[sets] -= 1
            per_set[0] += 1
            per_set[end - sets] -= 1
    fullest, running = 0, 0
    for count in per_set[:sets]:
        running += count
        fullest = max(fullest, running)
    return fullest
