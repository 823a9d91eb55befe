"""Loop IR: expression trees (expr), statements and kernels (ir), programs (program), the simplifier.

The names most used to build kernels by hand are re-exported here; see ir.py
for the overview.
"""
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import (
    BinOp, Call, Cast, Const, Expr, Load, Select, Unary, Var, call, cast, const, eq, evaluate, ge, gt, le,
    logical_and, logical_not, logical_or, lt, maximum, minimum, ne, where,
)
from tensorkiln.loops.ir import (
    Alloc, Assign, Block, For, If, Kernel, Let, LoopIRError, Stmt, Store, block, simplify_kernel, verify_kernel,
)
from tensorkiln.loops.program import Program
from tensorkiln.loops.simplify import simplify

__all__ = [
    "Buffer", "BinOp", "Call", "Cast", "Const", "Expr", "Load", "Select", "Unary", "Var", "call", "cast", "const",
    "eq", "evaluate", "ge", "gt", "le", "logical_and", "logical_not", "logical_or", "lt", "maximum", "minimum",
    "ne", "where", "Alloc", "Assign", "Block", "For", "If", "Kernel", "Let", "LoopIRError", "Stmt", "Store",
    "block", "simplify_kernel", "verify_kernel", "Program", "simplify",
]
