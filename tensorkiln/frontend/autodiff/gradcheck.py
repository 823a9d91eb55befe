"""Testing utilities the project keeps: gradcheck compares autodiff with finite differences."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ... import dtypes as dt
from ..tensor import Tensor, as_tensor
from .functional import value_and_grad
from .mode import no_grad


def gradcheck(fn: Callable, *inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              seed: int = 0, raise_exception: bool = True) -> bool:
    """Check the gradients of `fn` w.r.t. every floating input against central finite differences.

    Inputs (arrays or tensors) are converted to float64; non-floating inputs
    (indices) are passed through. A tensor-valued fn is reduced to a scalar by
    a fixed random projection, so every output element takes part. Raises
    AssertionError naming the input and the worst element (or returns False
    with raise_exception=False); returns True when all gradients match.
    """
    values = []
    for x in inputs:
        t = x if isinstance(x, Tensor) else as_tensor(np.asarray(x))
        values.append(t.to(dt.float64) if t.dtype.is_floating else t)
    positions = [i for i, t in enumerate(values) if t.dtype.is_floating]
    rng = np.random.default_rng(seed)
    with no_grad():
        probe = fn(*values)
    weights = as_tensor(rng.standard_normal(tuple(probe.shape)), dt.float64)

    def scalar(*args):
        return (fn(*args).to(dt.float64) * weights).sum()

    def numeric(*args):
        with no_grad():
            return float(scalar(*args).item())

    _, analytic = value_and_grad(scalar, argnums=tuple(positions))(*values)
    for position, grad in zip(positions, analytic):
        base = values[position].numpy().astype(np.float64)
        expected = np.zeros_like(base)
        flat = expected.reshape(-1)
        for k in range(base.size):
            shifted = []
            for sign in (1.0, -1.0):
                probe_value = base.copy().reshape(-1)
                probe_value[k] += sign * eps
                args = list(values)
                args[position] = as_tensor(probe_value.reshape(base.shape), dt.float64)
                shifted.append(numeric(*args))
            flat[k] = (shifted[0] - shifted[1]) / (2 * eps)
        got = grad.numpy().astype(np.float64)
        if got.shape != expected.shape or not np.allclose(got, expected, rtol=rtol, atol=atol):
            if not raise_exception:
                return False
            error = np.abs(got - expected) if got.shape == expected.shape else None
            worst = np.unravel_index(np.argmax(error), error.shape) if error is not None and error.size else None
            raise AssertionError(
                f"gradcheck: gradient of input {position} (shape {list(base.shape)}) differs from finite "
                f"differences" + (f"; worst at {worst}: analytic {got[worst]!r}, numeric {expected[worst]!r}"
                                  if worst is not None else f"; shapes {got.shape} vs {expected.shape}"))
    return True
