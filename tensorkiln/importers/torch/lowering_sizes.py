"""Lowerings of size queries and size arithmetic: the integer part of a graph.

A graph torch.export made with dynamic shapes (`dynamic_shapes=`) reads sizes
with `aten.sym_size`, computes with them through Python's operators
(`operator.mul(s0, 4)`) and checks its assumptions with `aten._assert_scalar`.
Traced by tk.jit with size symbols, the same queries give tensorkiln SymInts
(tensorkiln/shapes), whose arithmetic stays symbolic; traced with static
shapes they are plain ints. An assertion becomes a guard of the compiled
program: a call that breaks it is traced again with its own sizes, where the
assertion fails with PyTorch's message.
"""
from __future__ import annotations

import math
import operator

import torch

from ...errors import ShapeError
from .lowering import register_lowering

aten = torch.ops.aten


@register_lowering(aten.sym_size.int)
def sym_size(x, dim):
    return x.shape[dim]


@register_lowering(aten.sym_numel.default)
def sym_numel(x):
    return math.prod(x.shape)


# torch.export's graphs name Python's operators (and torch's sym_* helpers) as call targets
SIZE_OPERATORS = (operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg,
                  operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
                  operator.and_, operator.or_)
for _operator in SIZE_OPERATORS:
    register_lowering(_operator)(_operator)
register_lowering(torch.sym_max)(max)
register_lowering(torch.sym_min)(min)


@register_lowering(aten._assert_scalar.default)
def assert_scalar(condition, message):
    """bool() of a symbolic condition records it as a guard; a concrete False is the model's own error."""
    if not bool(condition):
        raise ShapeError(f"the exported model's check failed: {message}")


@register_lowering(aten.sym_constrain_range_for_size.default, aten.sym_constrain_range.default)
def constrain_range(size, *, min=None, max=None):  # noqa: A002  (ATen's argument names)
    """Value ranges of data-dependent sizes: tensorkiln's symbols carry their own bounds."""
    return None
