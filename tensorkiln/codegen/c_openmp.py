"""OpenMP clauses of a loop: which perfectly nested parallel loops collapse into one, and which
scalars the loop reduces (`reduction(op:acc)`) or why it must stay serial."""
from __future__ import annotations

from typing import Optional

from tensorkiln.codegen.c_names import c_name
from tensorkiln.loops.expr import BinOp, Var, walk
from tensorkiln.loops.ir import Assign, Block, For, Let, Stmt, iter_stmts, stmt_exprs

_REDUCTION_OPS = {"add": "+", "mul": "*", "min": "min", "max": "max"}


def collapsible(s: For) -> list[For]:
    """The perfectly nested parallel loops starting at `s` whose extents do not depend on each other."""
    nest = [s]
    while True:
        body = nest[-1].body
        if isinstance(body, Block) and len(body.stmts) == 1:
            body = body.stmts[0]
        if not (isinstance(body, For) and body.kind == "parallel"):
            return nest
        outer_vars = {loop.var.name for loop in nest}
        if any(isinstance(n, Var) and n.name in outer_vars for n in walk(body.extent)):
            return nest
        nest.append(body)


def nest_clauses(nest: list[For]) -> tuple[str, Optional[str]]:
    """The reduction clauses of a loop with `nest` (it and the loops collapsed into it), or the
    reason it cannot run in parallel or as SIMD."""
    return _reduction_clauses(nest[-1].body, [loop.var.name for loop in nest])


def _reduction_clauses(body: Stmt, loop_vars: list[str]) -> tuple[str, Optional[str]]:
    """OpenMP reduction clauses for scalars `body` carries across iterations, or a reason it cannot.

    A scalar declared outside the loop may only be updated as `acc = acc op x`
    (op in + * min max, one op per scalar, x not reading acc) and read nowhere
    else in the loop; each such scalar gets `reduction(op:acc)`.
    """
    declared_inside = {s.var.name for s in iter_stmts(body) if isinstance(s, Let)}
    ops: dict[str, str] = {}
    self_reads: dict[str, int] = {}
    for s in iter_stmts(body):
        if not isinstance(s, Assign) or s.var.name in declared_inside:
            continue
        name, v = s.var.name, s.value
        if name in loop_vars:
            return "", f"assigns loop variable {name}"
        if not (isinstance(v, BinOp) and v.operator in _REDUCTION_OPS):
            return "", f"scalar {name} is carried across iterations (not acc = acc op x)"
        other = v.b if v.a == s.var else (v.a if v.b == s.var else None)
        if other is None or any(isinstance(n, Var) and n.name == name for n in walk(other)):
            return "", f"scalar {name} is carried across iterations (not acc = acc op x)"
        if ops.setdefault(name, v.operator) != v.operator:
            return "", f"scalar {name} is reduced with two different operators"
        self_reads[name] = self_reads.get(name, 0) + 1
    for name in ops:
        reads = sum(1 for s in iter_stmts(body) for e in stmt_exprs(s) for n in walk(e)
                    if isinstance(n, Var) and n.name == name)
        if reads != self_reads[name]:
            return "", f"scalar {name} is read inside the loop while being reduced"
    clauses = "".join(f" reduction({_REDUCTION_OPS[op]}:{c_name(name)})" for name, op in sorted(ops.items()))
    return clauses, None
