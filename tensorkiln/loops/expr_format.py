"""Printing an expression as Python-like text (`a[i*64 + j] + max(b[j], 0.0)`); C printing lives in codegen.

The printer reads only what every node offers (`op`, `children`) and the
fields of each kind (a variable's name, a constant's value, a load's buffer),
never the node classes themselves: expr_nodes.py imports it for `str(expr)`.
"""
from __future__ import annotations

import numpy as np

from tensorkiln.loops.math import MATH_FUNCTIONS

# binary operator -> (Python symbol, precedence); min and max print as calls
_INFIX = {
    "add": ("+", 5), "sub": ("-", 5), "mul": ("*", 6), "div": ("/", 6),
    "floordiv": ("//", 6), "mod": ("%", 6),
    "lt": ("<", 4), "le": ("<=", 4), "eq": ("==", 4), "ne": ("!=", 4),
    "and": ("and", 2), "or": ("or", 1),
    "bitand": ("&", 4), "bitor": ("|", 4), "bitxor": ("^", 4), "shl": ("<<", 4), "shr": (">>", 4),
}
_ATOM = 9


def format_const(value: int | float | bool, dtype: str) -> str:
    """A readable literal: shortest float32 repr for float32, repr otherwise."""
    if dtype == "bool":
        return "true" if value else "false"
    if dtype == "float32":
        text = str(np.float32(value))
        return text if any(ch in text for ch in ".eni") else text + ".0"
    return repr(value)


def _format(expr) -> tuple[str, int]:
    """The text of `expr` and the precedence of its outermost operator (_ATOM for a name, call or literal)."""
    op = getattr(expr, "op", None)
    if op == "var":
        return expr.name, _ATOM
    if op == "const":
        text = format_const(expr.value, expr.dtype)
        return text, (7 if text.startswith("-") else _ATOM)
    if op in ("min", "max"):
        a, b = expr.children
        return f"{op}({_format(a)[0]}, {_format(b)[0]})", _ATOM
    if op in _INFIX:
        a, b = expr.children
        symbol, prec = _INFIX[op]
        left, left_prec = _format(a)
        right, right_prec = _format(b)
        # left-associative: the right operand needs parentheses at equal precedence
        if left_prec < prec or (prec == 4 and left_prec == 4):
            left = f"({left})"
        if right_prec <= prec:
            right = f"({right})"
        spaced = prec <= 5 or symbol in ("and", "or")
        return (f"{left} {symbol} {right}" if spaced else f"{left}{symbol}{right}"), prec
    if op in ("neg", "not"):
        inner, inner_prec = _format(expr.children[0])
        if op == "not":
            return f"not {inner if inner_prec > 3 else f'({inner})'}", 3
        return f"-{inner if inner_prec >= 7 else f'({inner})'}", 7
    if op == "where":
        cond, a, b = expr.children
        return f"where({_format(cond)[0]}, {_format(a)[0]}, {_format(b)[0]})", _ATOM
    if op == "cast":
        return f"{expr.dtype}({_format(expr.children[0])[0]})", _ATOM
    if op == "bitcast":
        return f"bitcast_{expr.dtype}({_format(expr.children[0])[0]})", _ATOM
    if op == "load":
        return f"{expr.buffer.name}[{_format(expr.children[0])[0]}]", _ATOM
    if op in MATH_FUNCTIONS:  # a Call's op is its function's name
        return f"{op}({', '.join(_format(a)[0] for a in expr.children)})", _ATOM
    raise TypeError(f"not an expression: {expr!r}")


def format_expr(expr) -> str:
    """Render expression `expr` as Python-like text: `a[i*64 + j] + max(b[j], 0.0)`."""
    return _format(expr)[0]
