"""The front-end's `Build` (ir/ops/gradient.py): what gradient rules make new tensors with.

The rules build with tensors, so backward runs eagerly, builds a backward
graph inside tk.jit, and lands on the tape again for higher order.
"""
from __future__ import annotations

import numpy as np

from ...ir.ops.gradient import Build
from ..creation import zeros
from ..tensor import apply, as_tensor


class TensorBuild:
    """`Build` over Tensors: `apply`, constants from arrays or scalars, and zeros."""

    __slots__ = ()

    @staticmethod
    def apply(op, inputs, **attrs):
        return apply(op, inputs, **attrs)

    @staticmethod
    def constant(array, dtype=None):
        return as_tensor(np.asarray(array), dtype)

    @staticmethod
    def zeros(shape, dtype):
        return zeros(tuple(shape), dtype=dtype)


TENSOR_BUILD: Build = TensorBuild()
