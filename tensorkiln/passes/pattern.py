"""Graph patterns for declarative rewrite rules: `P("mul", X("x"), K(1))` matches x * 1.

A pattern is an op with sub-patterns, a named wildcard `X(name)` (the same
name twice must match the same node), a constant `C(name)` or a constant
whose every element equals a value `K(value)`. Commutative ops match their
operands in either order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import dtypes as dt
from ..ir.graph import Node

COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum", "eq", "ne", "and", "or", "xor"})


@dataclass(frozen=True)
class Pat:
    """A node pattern; see the module docstring."""

    op: str | None = None
    inputs: tuple["Pat", ...] = ()
    name: str | None = None
    constant: bool = False
    value: float | None = None
    test: Callable[[Node], bool] | None = field(default=None, compare=False)


def P(op: str, *inputs: Pat, name: str | None = None) -> Pat:  # noqa: N802 (pattern constructor)
    """Match an `op` node whose inputs match `inputs`."""
    return Pat(op=op, inputs=tuple(inputs), name=name)


def X(name: str, test: Callable[[Node], bool] | None = None) -> Pat:  # noqa: N802
    """Match any node, binding it to `name`."""
    return Pat(name=name, test=test)


def C(name: str) -> Pat:  # noqa: N802
    """Match any constant node."""
    return Pat(name=name, constant=True)


def K(value: float, name: str | None = None) -> Pat:  # noqa: N802
    """Match a constant whose every element equals `value`."""
    return Pat(name=name, constant=True, value=value)


def constant_array(node: Node) -> np.ndarray:
    """A constant node's values in its compute type (bfloat16 widened)."""
    return dt.to_compute(node.attrs["value"].array, node.dtype)


def match(pattern: Pat, node: Node, bindings: dict[str, Node]) -> bool:
    """Try to match `node`; on success `bindings` holds the named parts."""
    if pattern.name is not None and pattern.name in bindings:
        return bindings[pattern.name] is node
    if pattern.constant:
        if node.op != "constant":
            return False
        if pattern.value is not None:
            values = constant_array(node)
            if values.size == 0 or not np.all(values == pattern.value):
                return False
    elif pattern.op is not None:
        if node.op != pattern.op or len(node.inputs) != len(pattern.inputs):
            return False
    if pattern.test is not None and not pattern.test(node):
        return False
    if pattern.op is not None and not pattern.constant:
        orders = [node.inputs]
        if node.op in COMMUTATIVE and len(node.inputs) == 2:
            orders.append(node.inputs[::-1])
        for inputs in orders:
            trial = dict(bindings)
            if all(match(p, i, trial) for p, i in zip(pattern.inputs, inputs)):
                bindings.clear()
                bindings.update(trial)
                break
        else:
            return False
    if pattern.name is not None:
        bindings[pattern.name] = node
    return True
