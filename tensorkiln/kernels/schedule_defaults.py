"""Default loop structure for a kernel's output space: rows in parallel, a vectorized inner loop.

An output of shape (d0, ..., dn-1) is walked as rows x columns, the column
being the contiguous last axis. Rows run on OpenMP threads when there is
enough work to pay for starting them; the column loop is marked vectorized.
A long column is split into blocks so a 1-D array still spreads over threads.
"""
from __future__ import annotations

import os
from typing import Callable

from ..loops import expr as E
from .inline import delinearize
from .run_time_choice import at_least, may_be_parallel, threads_if
from ..loops.ir import For, Stmt

PARALLEL_MIN_ELEMENTS = 1 << 15  # below this, starting threads costs more than it saves
COLUMN_BLOCK = 4096
# Even a 2-element column gets `omp simd`: left serial, GCC 12's -O3 vectorizes the row loop around
# it instead, and miscompiles `r < k ? a[r*2 + c] : b[(r-k)*2 + c]` (a concat) that way.
VECTOR_MIN_EXTENT = 2


def thread_count() -> int:
    """Cores OpenMP will use."""
    env = os.environ.get("OMP_NUM_THREADS")
    return int(env) if env and env.isdigit() else (os.cpu_count() or 1)


def output_nest(shape: tuple[int, ...], body: Callable[[list[E.Expr], E.Expr], Stmt], prefix: str,
                work_per_element: int = 1, vectorize: bool = True) -> Stmt | None:
    """Loops over every element of `shape`; body(index, flat_index) makes the innermost statement.

    vectorize=False leaves the column loop serial (its body has a SIMD loop of its own).
    Returns None for an empty shape (nothing to do).
    """
    if any(d == 0 for d in shape):
        return None
    if not shape:
        return body([], E.const(0))
    if not vectorize and shape[-1] != 1:
        # no SIMD columns: every element is a row, so all of them can spread over threads
        return output_nest(shape + (1,), lambda index, flat: body(index[:-1], flat), prefix, work_per_element,
                           vectorize)
    if vectorize and shape[-1] == 1 and any(d != 1 for d in shape):
        # trailing size-1 axes (a keepdims reduction's output) leave the flat index as it is:
        # loop over the axes before them, so the column loop has more than one element
        ones = len(shape) - max(i for i, d in enumerate(shape) if d != 1) - 1
        return output_nest(shape[:-ones], lambda index, flat: body(index + [E.const(0)] * ones, flat), prefix,
                           work_per_element, vectorize)
    rows_shape, cols = shape[:-1], shape[-1]
    rows = 1
    for d in rows_shape:
        rows *= d
    # with a run-time size, serial or parallel is decided per call (no size class)
    choice = at_least(rows * cols * work_per_element, PARALLEL_MIN_ELEMENTS)
    parallel, when = may_be_parallel(choice), threads_if(choice)
    r, c = E.Var(f"{prefix}r"), E.Var(f"{prefix}c")
    # few rows: their columns are cut in blocks for the threads (only where parallel is decided now,
    # so a run-time choice asks nothing more of the sizes)
    split = choice is True and cols > COLUMN_BLOCK and rows < 2 * thread_count()
    if split:
        cb = E.Var(f"{prefix}cb")
        column: E.Expr = cb * COLUMN_BLOCK + c
        n_blocks = -(-cols // COLUMN_BLOCK)
        extent = E.minimum(E.const(COLUMN_BLOCK), E.const(cols) - cb * COLUMN_BLOCK) \
            if cols % COLUMN_BLOCK else E.const(COLUMN_BLOCK)
    else:
        column, extent = c, E.const(cols)
    index = delinearize(r, rows_shape) + [column] if rows_shape else [column]
    flat = r * cols + column if rows_shape else column
    inner = For(c, extent, body(index, flat), "vectorized" if vectorize and cols >= VECTOR_MIN_EXTENT else "serial")
    if split:
        inner = For(cb, E.const(n_blocks), inner, "parallel", when)
    if not rows_shape:
        return inner
    row_parallel = parallel and rows > 1
    return For(r, E.const(rows), inner, "parallel" if row_parallel else "serial", when if row_parallel else None)
