"""Expression trees of the loop IR: index arithmetic and scalar values.

An expression is an immutable tree of small nodes: `Var`, `Const`, `BinOp`,
`Unary`, `Call` (a math function), `Select`, `Cast`, `Bitcast` and `Load`. Every node
has a `dtype` (a compute dtype: never float16/bfloat16, see types.py), an
`op` name, its `children`, and `with_children` to rebuild it; the pattern
matcher and the simplifier only use that uniform interface.

Semantics are numpy's, not C's: `//` is floor division and `%` is floor
modulo (the C backend emits helpers unless the operands are provably
non-negative); integer division or modulo by zero gives 0; integer arithmetic
wraps at the dtype's width; float32 arithmetic rounds to float32 after every
operation; min/max propagate NaN. `evaluate` is the
reference implementation of these semantics.

Python operators build trees (`i * 64 + j`, `x // 4`, `-x`); `==` stays
structural equality, so comparisons are spelled `lt(a, b)`, `eq(a, b)`, ...

This module gathers the names; each idea lives in its own file:
expr_nodes.py (the node classes and operator names), expr_build.py
(constructors and traversal), expr_format.py (printing) and expr_eval.py
(the reference semantics).
"""
from __future__ import annotations

from tensorkiln.loops.expr_build import (call, cast, const, eq, free_vars, ge, gt, le, logical_and, logical_not,
                                         logical_or, lt, maximum, minimum, ne, walk, where)
from tensorkiln.loops.expr_eval import evaluate, wrap_int
from tensorkiln.loops.expr_format import format_const, format_expr
from tensorkiln.loops.expr_nodes import (ARITHMETIC_OPS, BINARY_OPS, BITCAST_PAIRS, BITWISE_OPS, COMMUTATIVE_OPS,
                                         COMPARISON_OPS, LOGICAL_OPS, SIZE_VAR_PREFIX, SIZE_VAR_RANGE, UNARY_OPS,
                                         BinOp, Bitcast, Call, Cast, Const, Expr, Load, Number, Select, Unary, Var,
                                         is_size_var, lift, symbolic_expr)
from tensorkiln.loops.types import INDEX_DTYPE, is_bool, is_float, is_int

__all__ = [
    "ARITHMETIC_OPS", "BINARY_OPS", "BITCAST_PAIRS", "BITWISE_OPS", "COMMUTATIVE_OPS", "COMPARISON_OPS",
    "INDEX_DTYPE", "LOGICAL_OPS", "SIZE_VAR_PREFIX", "SIZE_VAR_RANGE", "UNARY_OPS",
    "BinOp", "Bitcast", "Call", "Cast", "Const", "Expr", "Load", "Number", "Select", "Unary", "Var",
    "call", "cast", "const", "eq", "evaluate", "format_const", "format_expr", "free_vars", "ge", "gt",
    "is_bool", "is_float", "is_int", "is_size_var", "le", "lift", "logical_and", "logical_not", "logical_or",
    "lt", "maximum", "minimum", "ne", "symbolic_expr", "walk", "where", "wrap_int",
]
