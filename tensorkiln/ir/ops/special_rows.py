"""How a special function becomes a row of the op table: its scalar algorithm as a loop-IR math
function (C from the same text, loops/scalar_c.py) and as the row's numpy reference."""
from __future__ import annotations

from ...loops import expr as E
from ...loops.math import math_function
from ...loops.scalar_c import ScalarFunction
from .elementwise import FLOAT_ONLY, binary, unary


def special_math_function(fn: ScalarFunction) -> None:
    """Register `fn` as a loop-IR math function: C calls tk_<name> (double) or tk_<name>f (float)."""
    math_function(fn.name, fn.arity, lambda *args: type(args[0])(fn(*args)),
                  {"float32": f"{fn.c_name}f({{args}})", "float64": f"{fn.c_name}({{args}})"},
                  source=fn.c_pieces())


def special_unary(name: str, fn: ScalarFunction, grad, doc: str, **facts) -> None:
    """A float-only one-operand row computed by the algorithm `fn`."""
    special_math_function(fn)
    unary(name, fn.reference, FLOAT_ONLY, lambda args, node: E.call(fn.name, *args), grad, doc=doc, **facts)


def special_binary(name: str, fn: ScalarFunction, grads, doc: str, **facts) -> None:
    """A float-only two-operand row (broadcast) computed by the algorithm `fn`."""
    special_math_function(fn)
    binary(name, fn.reference, FLOAT_ONLY, lambda args, node: E.call(fn.name, *args), grads, doc=doc, **facts)
