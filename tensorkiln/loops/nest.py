"""What the schedule primitives (schedule.py) and tensorize (tensorize.py) ask of a loop nest:
finding and replacing loops, renaming and substituting, the names a kernel uses, and the
dependences between iterations that decide which transformations are legal."""
from __future__ import annotations

import math
from typing import Callable, Optional

from tensorkiln.errors import TensorKilnError
from tensorkiln.loops import expr as E
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.ir import (
    Alloc, Assign, Block, Concurrent, For, If, Kernel, Let, LoopIRError, NativeCall, Stmt, Store, block, iter_stmts,
    simplify_kernel, stmt_exprs, verify_kernel,
)
from tensorkiln.loops.types import int_range


class ScheduleError(TensorKilnError, ValueError):
    """A schedule primitive refused a transformation that is malformed or would change the result."""


# ================================================================ IR helpers


def _children(s: Stmt) -> tuple[Stmt, ...]:
    if isinstance(s, (For, Alloc)):
        return (s.body,)
    if isinstance(s, If):
        return (s.then,) if s.else_ is None else (s.then, s.else_)
    if isinstance(s, Block):
        return s.stmts
    if isinstance(s, Concurrent):
        return s.parts
    return ()


def _with_children(s: Stmt, children: tuple[Stmt, ...]) -> Stmt:
    if isinstance(s, For):
        return For(s.var, s.extent, children[0], s.kind)
    if isinstance(s, Alloc):
        return Alloc(s.buffer, children[0])
    if isinstance(s, If):
        return If(s.cond, children[0], children[1] if len(children) > 1 else None)
    if isinstance(s, Block):
        return block(*children) if children else Block(())
    if isinstance(s, Concurrent):
        return Concurrent(children)
    return s


def _rewrite(s: Stmt, fn: Callable[[Stmt], Optional[Stmt]]) -> Stmt:
    """Rebuild `s` top-down: where fn(node) returns a statement it replaces the node (not revisited)."""
    new = fn(s)
    if new is not None:
        return new
    kids = _children(s)
    if not kids:
        return s
    new_kids = tuple(_rewrite(k, fn) for k in kids)
    return s if all(a is b for a, b in zip(kids, new_kids)) else _with_children(s, new_kids)


def _map_expr_tree(e: E.Expr, fn: Callable[[E.Expr], Optional[E.Expr]]) -> E.Expr:
    new = fn(e)
    if new is not None:
        return new
    kids = e.children
    if not kids:
        return e
    return e.with_children(tuple(_map_expr_tree(k, fn) for k in kids))


def _map_all_exprs(s: Stmt, fn: Callable[[E.Expr], Optional[E.Expr]]) -> Stmt:
    """Apply an expression rewrite to every expression of every statement in `s`."""
    def visit(node: Stmt) -> Optional[Stmt]:
        m = lambda e: _map_expr_tree(e, fn)  # noqa: E731
        if isinstance(node, For):
            return For(node.var, m(node.extent), _map_all_exprs(node.body, fn), node.kind)
        if isinstance(node, Store):
            return Store(node.buffer, m(node.index), m(node.value))
        if isinstance(node, Let):
            return Let(node.var, m(node.value))
        if isinstance(node, Assign):
            return Assign(node.var, m(node.value))
        if isinstance(node, If):
            return If(m(node.cond), _map_all_exprs(node.then, fn),
                      None if node.else_ is None else _map_all_exprs(node.else_, fn))
        if isinstance(node, NativeCall):
            return node.with_exprs(m)
        return None
    return _rewrite(s, visit)


def substitute(s: Stmt, mapping: dict[str, E.Expr]) -> Stmt:
    """`s` with every read of the variables in `mapping` replaced by their expressions."""
    return _map_all_exprs(s, lambda e: mapping.get(e.name) if isinstance(e, E.Var) else None)


def _substitute_expr(e: E.Expr, mapping: dict[str, E.Expr]) -> E.Expr:
    return _map_expr_tree(e, lambda x: mapping.get(x.name) if isinstance(x, E.Var) else None)


def substitute_expr(e: E.Expr, mapping: dict[str, E.Expr]) -> E.Expr:
    """`e` with every variable named in `mapping` replaced by its expression."""
    return _substitute_expr(e, mapping)


def _rename_loops(s: Stmt, renames: dict[str, E.Expr]) -> Stmt:
    """Rename the variables of loops and lets in `s` (their uses must be substituted separately)."""
    def visit(x: Stmt) -> Optional[Stmt]:
        if isinstance(x, For) and x.var.name in renames:
            return For(renames[x.var.name], x.extent, _rename_loops(x.body, renames), x.kind)
        if isinstance(x, Let) and x.var.name in renames:
            return Let(E.Var(renames[x.var.name].name, x.var.dtype), x.value)
        return None
    return _rewrite(s, visit)


def _loops(kernel: Kernel, name: str) -> For:
    found = [s for s in iter_stmts(kernel.body) if isinstance(s, For) and s.var.name == name]
    if not found:
        names = sorted({s.var.name for s in iter_stmts(kernel.body) if isinstance(s, For)})
        raise ScheduleError(f"kernel {kernel.name}: no loop {name!r} (loops: {', '.join(names) or 'none'})")
    if len(found) > 1:
        raise ScheduleError(f"kernel {kernel.name}: {len(found)} loops are named {name!r}; the name must "
                            "pick one loop")
    return found[0]


def _replace(kernel: Kernel, old: Stmt, new: Stmt) -> Kernel:
    body = _rewrite(kernel.body, lambda s: new if s is old else None)
    result = simplify_kernel(Kernel(kernel.name, kernel.params, body, kernel.comment))
    try:
        verify_kernel(result)
    except LoopIRError as err:  # a primitive must never produce malformed IR; say which
        raise ScheduleError(f"the transformation would produce malformed IR: {err}") from None
    return result


def _fresh(kernel: Kernel, base: str, taken: Optional[set[str]] = None) -> str:
    taken = kernel.declared_names() if taken is None else taken
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    taken.add(name)
    return name


def _single_body(s: For) -> Stmt:
    body = s.body
    while isinstance(body, Block) and len(body.stmts) == 1:
        body = body.stmts[0]
    return body


def _const_extent(loop: For, what: str) -> int:
    if not isinstance(loop.extent, E.Const):
        raise ScheduleError(f"loop {loop.var.name}: {what} needs a constant extent, got {E.format_expr(loop.extent)}")
    return int(loop.extent.value)


def _loop_ranges(kernel: Kernel) -> dict[str, tuple[int, int]]:
    """Inclusive range of every loop variable of `kernel` (outer loops first, so extents can use them)."""
    ranges: dict[str, tuple[int, int]] = {}
    for s in iter_stmts(kernel.body):
        if isinstance(s, For):
            hi = Bounds(ranges)(s.extent)[1]
            ranges[s.var.name] = (0, max(hi - 1, 0)) if not math.isinf(hi) else (0, int_range("int64")[1])
    return ranges


def _uses(e: E.Expr, names: set[str]) -> bool:
    return bool(E.free_vars(e) & names)


def _loop_vars_inside(s: Stmt) -> set[str]:
    return {x.var.name for x in iter_stmts(s) if isinstance(x, For)}


def _loads(s: Stmt) -> list[E.Load]:
    return [n for x in iter_stmts(s) for e in stmt_exprs(x) for n in E.walk(e) if isinstance(n, E.Load)]


def _allocated_inside(s: Stmt) -> set[str]:
    return {x.buffer.name for x in iter_stmts(s) if isinstance(x, Alloc)}


def _declared_inside(s: Stmt) -> set[str]:
    return {x.var.name for x in iter_stmts(s) if isinstance(x, Let)}


# ================================================================ dependence analysis


def carried_dependences(loop: For) -> list[str]:
    """Why iterations of `loop` are not independent (empty list: they are).

    An iteration may own what it writes: a store whose index uses the loop's
    variable, into a buffer that the loop reads only at the stored index. A
    store whose index is read from memory (a scatter, a histogram's bin) may
    repeat an element between iterations, so it counts as a dependence. A
    store whose index does not use the variable (a reduction axis or an
    overwrite), a scalar declared outside that the loop assigns, or a read of
    a written buffer at another index makes the iterations dependent.
    """
    v = loop.var.name
    private = _allocated_inside(loop.body)
    local_scalars = _declared_inside(loop.body)
    reasons: list[str] = []
    stores = [s for s in iter_stmts(loop.body) if isinstance(s, Store) and s.buffer.name not in private]
    for s in stores:
        if any(isinstance(n, E.Load) for n in E.walk(s.index)):
            # a scatter: the index is data, so two iterations may store into the same element
            reasons.append(f"it scatters into {s.buffer.name}[{E.format_expr(s.index)}]: an index read from "
                           "memory may repeat between iterations")
            continue
        if v not in E.free_vars(s.index):
            accumulates = any(ld.buffer.name == s.buffer.name and ld.index == s.index for ld in E.walk(s.value)
                              if isinstance(ld, E.Load))
            what = "accumulates into" if accumulates else "writes"
            reasons.append(f"it is a reduction axis: every iteration {what} {s.buffer.name}"
                           f"[{E.format_expr(s.index)}], which {v} does not index")
    written = {s.buffer.name: {s.index for s in stores if s.buffer.name == b} for b in {s.buffer.name for s in stores}}
    for ld in _loads(loop.body):
        if ld.buffer.name in written and ld.index not in written[ld.buffer.name]:
            reasons.append(f"{ld.buffer.name} is written and read at another index "
                           f"({E.format_expr(ld.index)}): a dependence between iterations")
    for s in iter_stmts(loop.body):
        if isinstance(s, Assign) and s.var.name not in local_scalars:
            reasons.append(f"it is a reduction axis: every iteration updates the scalar {s.var.name}, "
                           "declared outside the loop")
    return list(dict.fromkeys(reasons))


def _order_dependences(nest_body: Stmt) -> list[str]:
    """Dependences that forbid reordering loops around `nest_body` (reductions in any order are allowed)."""
    reasons = []
    private = _allocated_inside(nest_body)
    stores = [s for s in iter_stmts(nest_body) if isinstance(s, Store) and s.buffer.name not in private]
    written: dict[str, set] = {}
    for s in stores:
        written.setdefault(s.buffer.name, set()).add(s.index)
    for ld in _loads(nest_body):
        if ld.buffer.name in written and ld.index not in written[ld.buffer.name]:
            reasons.append(f"{ld.buffer.name} is written and read at another index ({E.format_expr(ld.index)})")
    local = _declared_inside(nest_body)
    for s in iter_stmts(nest_body):
        if isinstance(s, Assign) and s.var.name not in local:
            v = s.value
            ok = isinstance(v, E.BinOp) and v.operator in ("add", "mul", "min", "max") and v.a == s.var \
                and s.var.name not in E.free_vars(v.b)
            if not ok:
                reasons.append(f"scalar {s.var.name} is updated by a non-reduction ({E.format_expr(v)})")
    return reasons
