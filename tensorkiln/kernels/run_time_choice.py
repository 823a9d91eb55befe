"""Decisions on a size known only at run time, made in the generated code instead of by a guard.

A kernel template that asks `work >= PARALLEL_MIN_ELEMENTS` of a symbolic size
would record a range guard, and every size class would be another program.
Where the choice can be a branch of the generated code (an OpenMP `if`
clause), `at_least` gives the condition as a loop-IR expression instead, and
records nothing; when the symbols' bounds decide it, the answer is a plain bool.
"""
from __future__ import annotations

from typing import Union

from ..loops import expr as E
from ..shapes.poly import Poly
from ..shapes.symint import is_symbolic

Choice = Union[bool, E.Expr]  # decided now, or a bool expression the program evaluates per call


def at_least(value, minimum: int) -> Choice:
    """`value >= minimum`: a bool when `value` is an int or its symbols' bounds decide, else the
    run-time condition (no guard)."""
    if not is_symbolic(value):
        return value >= minimum
    lo, hi = value.env.interval(value.poly - Poly.constant(minimum))
    if lo >= 0:
        return True
    if hi < 0:
        return False
    return E.ge(value.symbolic_expr, E.const(minimum))


def threads_if(choice: Choice) -> E.Expr | None:
    """The `For.threads_if` of a parallel loop made for `choice` (None: always parallel)."""
    return choice if isinstance(choice, E.Expr) else None


def may_be_parallel(choice: Choice) -> bool:
    """True when the loop is parallel at some size: decided true, or decided per call."""
    return isinstance(choice, E.Expr) or bool(choice)


def loop_kind(choice: Choice) -> str:
    """The kind of a loop made for `choice`: "parallel" at some size (with `threads_if(choice)`), else "serial"."""
    return "parallel" if may_be_parallel(choice) else "serial"


def parallel_when(work, tasks, minimum_work: int) -> Choice:
    """Spread `tasks` over threads when there are at least two and `work` reaches `minimum_work` (the
    templates' rule, with schedule_defaults.PARALLEL_MIN_ELEMENTS), decided per call for run-time sizes."""
    return all_of(at_least(tasks, 2), at_least(work, minimum_work))


def all_of(*choices: Choice) -> Choice:
    """Every choice holds: False when one is decided false, else the run-time ones joined by `and`."""
    if any(c is False for c in choices):
        return False
    pending = [c for c in choices if isinstance(c, E.Expr)]
    if not pending:
        return True
    condition = pending[0]
    for c in pending[1:]:
        condition = E.logical_and(condition, c)
    return condition
