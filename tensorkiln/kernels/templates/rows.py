"""Row kernels: softmax and layer norm in one pass over each row, reductions included.

A group whose elementwise root reads row reductions (reductions over the
trailing k axes, kept as size-1 dims) becomes, for each row:

    for each inner reduction, in order:  acc_i = reduce over the row of its input
    for each per-row value (e.g. rsqrt(var + eps)):  let v = ... (computed once per row)
    for each element of the row:  out = root's expression, reading acc_i and v as scalars

so the row is read once per reduction and written once, and no per-row
intermediate goes to memory. The first pass streams the row from memory; the
later ones find it in the cache (a row of 4096 float32 is 16 KiB).

What keeps each pass at the speed of the memory rather than of one
dependency chain or of the arithmetic:

- a reduction over a long row accumulates into `LANE_VECTORS` vectors of
  partial results (`acc_lanes[lanes]`, one lane per SIMD lane of each vector,
  combined after the row): with a single vector accumulator every step waits
  for the previous add or max to finish (3-4 cycles), several times the cost
  of the step itself; a float max/min whose NaNs are counted on the side
  compares plainly in its lanes;
- softmax's `e / sum(e)` writes e during the sum pass and the last pass only
  multiplies by the reciprocal of the sum, so exp runs once per element and no
  element pays a division;
- passes over long rows are block loops (blocks of `lanes` elements, then a
  tail), where the C backend prefetches the next row during the second pass
  (codegen/c_prefetch.py, `RowPrefetch`);
- a float sum's lanes add in blocks of LANE_BLOCK steps (reduction.py's
  blocked_nest): rows up to LANE_BLOCK * lanes elements (16K float32 with
  AVX-512) are the loops they were, a longer row keeps the precision of a
  short one.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...ir.graph import Node
from ...ir.ops.registry import OpKind
from ...loops import expr as E
from ...loops.buffer import Buffer
from ..inline import ValueBuilder, delinearize
from ..reduction import LANE_BLOCK, Partials, blocked_nest
from ...loops.ir import Alloc, Assign, For, If, Let, Stmt, Store, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..run_time_choice import all_of, at_least, may_be_parallel, threads_if
from ..stream import MIN_STREAM_BYTES, STAGE_BYTES, streams_output
from ...loops.types import compute_dtype, is_float, itemsize
from ..target import cpu_target
from ...shapes import is_symbolic, prod

LANE_VECTORS = 4  # independent vector accumulators per reduction: covers the add latency at 1-2 adds per cycle
_LANE_OPS = ("add", "mul", "min", "max")


def row_body(root: Node, members: list[Node], out: Buffer, buffers: dict[int, Buffer], accumulate) -> Stmt | None:
    """Loop IR of a row kernel (see the module docstring)."""
    inner = [n for n in members if n.kind == OpKind.REDUCTION and n is not root]
    k = len(inner[0].attrs["axes"])
    full = inner[0].inputs[0].shape
    lead, tail = full[:len(full) - k], full[len(full) - k:]
    row_shape = lead + (1,) * k
    rows = prod(lead) if lead else 1
    width = prod(tail)
    if rows * width == 0:
        return None
    r = E.Var("row")
    lead_index = delinearize(r, lead) if lead else []
    known: dict[int, E.Expr] = {}
    stmts: list[Stmt] = []
    counter = 0
    normalizer = _row_normalizer(root, inner, out)
    # a large output is written through a local copy of the row and streamed to memory (c_stream.py)
    staged = Buffer("row_stage", out.dtype, (width,), scope="local") if _streams_rows(out, width) else None
    target, target_start = (staged, E.const(0)) if staged is not None else (out, r * width)

    for n in members:
        if n is root and n.kind != OpKind.REDUCTION:
            continue
        values = ValueBuilder(buffers, inline_root=n, known=known)
        if n.kind == OpKind.REDUCTION:
            counter += 1
            dtype = compute_dtype(n.inputs[0].dtype.name)
            acc = E.Var(f"acc{counter}", dtype)

            def element(e: E.Expr, n=n, values=values) -> E.Expr:
                return values.value(n.inputs[0], lead_index + delinearize(e, tail))

            reduce_stmts, result = reduction_pass(n, acc, element, accumulate, width, f"e{counter}",
                                                  target if n is normalizer else None, target_start)
            stmts += reduce_stmts
            if result is not acc:  # a final fix-up (NaN seen): computed once per row
                fixed = E.Var(f"r{counter}", dtype)
                stmts.append(Let(fixed, result))
                result = fixed
            known[n.id] = result
            if n is root:
                stmts.append(Store(out, r, E.cast(result, out.value_dtype)))
        elif n.kind == OpKind.ELEMENTWISE and n.shape == row_shape and _depends_on(n, known):
            counter += 1
            v = E.Var(f"v{counter}", compute_dtype(n.dtype.name))
            stmts.append(Let(v, values.value(n, lead_index + [E.const(0)] * k)))
            known[n.id] = v
    if normalizer is not None:
        stmts += _normalize_pass(target, target_start, width, known[normalizer.id])
    elif root.kind != OpKind.REDUCTION:
        values = ValueBuilder(buffers, inline_root=root, known=known)

        def store(e: E.Expr) -> Stmt:
            return Store(target, target_start + e, E.cast(values.value(root, lead_index + delinearize(e, tail)),
                                                          out.value_dtype))

        stmts += _element_pass(store, width, _lane_count(out.value_dtype), "e0")
    body = block(*stmts)
    if staged is not None:
        e = E.Var("e_stream")
        body = Alloc(staged, block(body, For(e, E.const(width), Store(out, r * width + e, E.Load(staged, e)),
                                             "streamed")))
    # a run-time row count decides serial or parallel per call (one program for all sizes)
    choice = all_of(at_least(rows, 2), at_least(rows * width * (len(inner) + 1), PARALLEL_MIN_ELEMENTS))
    return For(r, E.const(rows), body, "parallel" if may_be_parallel(choice) else "serial", threads_if(choice))


def _streams_rows(out: Buffer, width: int) -> bool:
    """Stage each row locally and stream it out (kernels/stream.py): an output larger than the
    last-level cache whose row fits the stage."""
    return streams_output(out) and MIN_STREAM_BYTES <= width * itemsize(out.dtype) <= STAGE_BYTES


def reduction_pass(node: Node, acc: E.Var, element: Callable[[E.Expr], E.Expr], accumulate, width: int,
                   name: str, store_to: Buffer | None, row_start: E.Expr) -> tuple[list[Stmt], E.Expr]:
    """One pass over the row reducing `element` into the scalar `acc` (declared here), and the
    expression of the reduction's result after the pass (`acc`, or a NaN fix-up reading it).

    With `store_to`, the pass also writes each element there (softmax's e):
    the value is computed once into a local and both stored and reduced.
    """
    def body(e: E.Expr) -> tuple[list[Stmt], list[Assign]]:
        """The statements of the element at row offset `e`: (stores and locals, reduction updates)."""
        value = element(e)
        before: list[Stmt] = []
        if store_to is not None:
            local = E.Var(f"{name}_value", value.dtype)
            before = [Let(local, value), Store(store_to, row_start + e, E.cast(local, store_to.value_dtype))]
            value = local
        return before, accumulate(node.op, acc, value)[1]

    flat = E.Var(name)
    declarations, _, result = accumulate(node.op, acc, element(flat))
    lanes = _lane_count(acc.dtype)
    before, updates = body(flat)
    if width < 2 * lanes or not _lane_reducible(declarations, updates):
        return declarations + [For(flat, E.const(width), block(*before, *updates), "vectorized")], result
    return declarations + _lane_reduction(declarations, body, width, lanes, name), result


def _lane_reduction(declarations: list[Stmt], body: Callable[[E.Expr], tuple[list[Stmt], list[Assign]]],
                    width: int, lanes: int, name: str) -> list[Stmt]:
    """The pass as `acc_lanes[lanes]` partial accumulators over whole blocks of `lanes` elements, a
    scalar tail for the rest of the row, and the lanes folded into the scalars at the end."""
    blocks, rest = divmod(width, lanes)
    outer, lane = E.Var(f"{name}_block"), E.Var(f"{name}_lane")
    scalars = [d for d in declarations if isinstance(d, Let)]
    partial = {d.var.name: Buffer(f"{d.var.name}_lanes", d.var.dtype, (lanes,), scope="local") for d in scalars}

    _, updates = body(outer * lanes + lane)
    counted = _nan_counted(updates)
    # float sums add in blocks of LANE_BLOCK steps (kernels/reduction.py): a long row's sum keeps its precision
    summed = tuple(u.var.name for u in updates if u.value.operator == "add" and is_float(u.var.dtype))

    def step(index: dict[str, E.Expr], into: Partials) -> Stmt:
        before, updates = body(index[outer.name] * lanes + lane)
        target = {**partial, **dict(zip(summed, into.sums))}
        lane_updates = [Store(target[u.var.name], lane, _lane_update(u, E.Load(target[u.var.name], lane),
                                                                     u.var.name in counted)) for u in updates]
        return For(lane, E.const(lanes), block(*before, *lane_updates), "vectorized")

    main = blocked_nest([(outer, blocks, "serial")], step, Partials(tuple(partial[n] for n in summed), lane),
                        LANE_BLOCK)
    inits = [For(lane, E.const(lanes), Store(partial[d.var.name], lane, d.value), "vectorized") for d in scalars]
    passes: list[Stmt] = [*inits, main]
    if is_symbolic(rest) or rest:  # a symbolic row length always gets the tail loop (it may run 0 times)
        tail = E.Var(f"{name}_tail")
        before, updates = body(E.const(blocks * lanes) + tail)
        passes.append(For(tail, E.const(rest), block(*before, *updates), "vectorized"))
    op = {u.var.name: u.value.operator for u in updates}
    folds = [Assign(d.var, E.BinOp(op[d.var.name], d.var, E.Load(partial[d.var.name], lane))) for d in scalars]
    passes.append(For(lane, E.const(lanes), block(*folds), "vectorized"))
    nest: Stmt = block(*passes)
    for d in reversed(scalars):
        nest = Alloc(partial[d.var.name], nest)
    return [nest]


def _lane_reducible(declarations: list[Stmt], updates: list[Stmt]) -> bool:
    """Every declared scalar is updated once, as `acc = acc op x` with op one of + * min max."""
    names = [d.var.name for d in declarations if isinstance(d, Let)]
    if len(names) != len(declarations) or len(updates) != len(names):
        return False
    for u in updates:
        if not (isinstance(u, Assign) and u.var.name in names and isinstance(u.value, E.BinOp)
                and u.value.operator in _LANE_OPS and u.value.a == u.var
                and u.var.name not in E.free_vars(u.value.b)):
            return False
    return len({u.var.name for u in updates}) == len(names)


def _operand(update: Assign) -> E.Expr:
    """x of `acc = acc op x`."""
    return update.value.b


def _lane_update(update: Assign, partial: E.Expr, nan_counted: bool) -> E.Expr:
    """The new value of one lane: `partial op x`; a float max/min whose NaNs are counted on the side
    compares plainly (`x > partial ? x : partial`, one vmaxps) instead of propagating NaN itself."""
    x, op = _operand(update), update.value.operator
    if nan_counted and op in ("max", "min"):
        return E.Select(E.gt(x, partial) if op == "max" else E.lt(x, partial), x, partial)
    return E.BinOp(op, partial, x)


def _nan_counted(updates: list[Assign]) -> set[str]:
    """Scalars reduced by max/min whose operand x is also counted as `nans = nans + (x != x ? 1 : 0)` in
    the same pass (kernels/lower.py's accumulate): their result is NaN by the count, not by the max."""
    counted = set()
    for u in updates:
        x = _operand(u)
        if u.value.operator in ("max", "min") and any(
                v.value.operator == "add" and _operand(v) == E.Select(E.ne(x, x), E.Const(1.0, x.dtype),
                                                                        E.Const(0.0, x.dtype))
                for v in updates if v is not u):
            counted.add(u.var.name)
    return counted


def _lane_count(dtype: str) -> int:
    """Partial accumulators per reduction: LANE_VECTORS vectors of the target's width."""
    return LANE_VECTORS * max(cpu_target().vector_bytes // itemsize(dtype), 1)


def _element_pass(body: Callable[[E.Expr], Stmt], width: int, lanes: int, name: str) -> list[Stmt]:
    """A pass over the row with no reduction: one vectorized loop, or for a long row blocks of
    `lanes` elements and a tail (the block loop is where the C backend prefetches the next row)."""
    if width < 2 * lanes:
        flat = E.Var(name)
        return [For(flat, E.const(width), body(flat), "vectorized")]
    blocks, rest = divmod(width, lanes)
    outer, lane = E.Var(f"{name}_block"), E.Var(f"{name}_lane")
    loops: list[Stmt] = [For(outer, E.const(blocks), For(lane, E.const(lanes), body(outer * lanes + lane),
                                                          "vectorized"))]
    if is_symbolic(rest) or rest:  # a symbolic row length always gets the tail loop
        tail = E.Var(f"{name}_tail")
        loops.append(For(tail, E.const(rest), body(E.const(blocks * lanes) + tail), "vectorized"))
    return loops


def _normalize_pass(out: Buffer, row_start: E.Expr, width: int, total: E.Expr) -> list[Stmt]:
    """out[row] = out[row] / total, as a multiplication by 1 / total where that reciprocal is finite
    (a division costs several multiplications; a total below ~1e-38 keeps the division)."""
    dtype = out.value_dtype
    inverse = E.Var("inverse", dtype)
    lanes = _lane_count(dtype)

    def scale(by_inverse: bool) -> Stmt:
        def element(e: E.Expr) -> Stmt:
            value = E.Load(out, row_start + e)
            return Store(out, row_start + e, value * inverse if by_inverse else value / total)
        return block(*_element_pass(element, width, lanes, "e0"))

    finite = E.logical_and(E.lt(inverse, E.Const(float("inf"), dtype)), E.gt(inverse, E.Const(float("-inf"), dtype)))
    return [Let(inverse, E.Const(1.0, dtype) / total), If(finite, scale(True), scale(False))]


def _row_normalizer(root: Node, inner: list[Node], out: Buffer) -> Node | None:
    """The sum s when the root is e / s with s = sum(e) over the row, the last inner reduction."""
    if root.op != "div" or out.dtype not in ("float32", "float64") or not inner:
        return None
    e, s = root.inputs
    last = inner[-1]
    if s is not last or last.op != "reduce_sum" or last.inputs[0] is not e or e.shape != root.shape:
        return None
    return last


def _depends_on(node: Node, known: dict[int, E.Expr]) -> bool:
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.id in known:
            return True
        if n.id in seen:
            continue
        seen.add(n.id)
        stack.extend(n.inputs)
    return False
