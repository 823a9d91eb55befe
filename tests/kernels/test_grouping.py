"""Fusion policy (kernels/fusion_policy.py, kernels/grouping.py): which ops join a contraction's kernel as its epilogue.

The template stores the root's value at the contraction element's flat index,
so only index-preserving paths may fuse: elementwise ops without broadcasting
the contraction's value, and reshapes. A permute, slice or broadcast on the
path must leave the contraction in its own kernel (else the epilogue would
read the wrong element).
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk

RNG = np.random.default_rng(3)
A, B = RNG.standard_normal((48, 40), dtype=np.float32), RNG.standard_normal((40, 48), dtype=np.float32)
C = RNG.standard_normal((48, 48), dtype=np.float32)

CASES = {  # name: (function, the matmul fuses its epilogue)
    "bias": (lambda a, b, c: a @ b + c[0], True),
    "reshape then bias and gelu": (lambda a, b, c: ((a @ b).reshape(1, 48, 48) + c[0]).gelu(), True),
    "split heads": (lambda a, b, c: ((a @ b) * 0.5).reshape(48, 6, 8) + 1.0, True),
    "reshaped output": (lambda a, b, c: ((a @ b) + 1.0).reshape(2304), True),
    "transpose on the path": (lambda a, b, c: ((a @ b) + 1.0).T + c, True),  # + 1 fuses, .T + c does not
    "gelu reading the result thrice": (lambda a, b, c: (a @ b).gelu(approximate="tanh"), True),
    "several readers, one kernel": (lambda a, b, c: (a @ b).tanh() * (a @ b) + c, True),
    "readers in two kernels": (lambda a, b, c: ((a @ b).exp() @ c) + (a @ b).sum(), False),
    "slice on the path": (lambda a, b, c: (a @ b)[:, :24] + 1.0, False),
    "broadcast of the result": (lambda a, b, c: (a @ b).reshape(48, 48, 1) * c.reshape(48, 1, 48), False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_epilogue_fuses_only_along_index_preserving_paths(name):
    """Right numbers, and the matmul's kernel holds an epilogue exactly where one may fuse."""
    fn, fuses = CASES[name]
    f = tk.jit(fn)
    got = f(A, B, C).numpy()
    want = tk.jit(fn, backend="interpreter")(A, B, C).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    kernels = f.report(A, B, C).kernels
    matmul_kernel = next(k for k in kernels if any("matmul" in line for line in k.nodes))
    assert (len(matmul_kernel.nodes) > 1) == fuses, [k.nodes for k in kernels]


def test_epilogue_stops_where_a_row_kernel_starts():
    """linear + bias + residual, then layer norm: the epilogue ends at the residual add, the
    layer norm is one row kernel (not split into pieces around a stored contraction)."""
    x, w, bias = (RNG.standard_normal(s, dtype=np.float32) for s in ((64, 96), (96, 96), (96,)))

    def block(x, w, bias):
        y = (x @ w + bias).reshape(1, 64, 96) + x.reshape(1, 64, 96)
        return tk.nn.functional.layer_norm(y, (96,))

    f = tk.jit(block)
    np.testing.assert_allclose(f(x, w, bias).numpy(), tk.jit(block, backend="interpreter")(x, w, bias).numpy(),
                               rtol=1e-4, atol=1e-4)
    kinds = [k.kind for k in f.report(x, w, bias).kernels]
    assert kinds == ["contraction", "row"], kinds


def _batch_norm_like(x, expensive: bool = False):
    """Batch norm's statistics: x - mean is read by the variance and by the normalization."""
    mean = x.mean((0, 2, 3), keepdims=True)
    centered = x - mean
    if expensive:
        centered = centered.exp()
    var = (centered * centered).mean((0, 2, 3), keepdims=True)
    return centered * (var + 1e-5).rsqrt()


@pytest.mark.parametrize("shape", [(8, 4, 6, 6), (5, 3, 7, 9)])
def test_cheap_shared_values_are_recomputed_not_stored(shape):
    """x - mean (one full-size buffer and a per-channel one, one op) is inlined into both of its
    reader kernels; exp(x - mean) costs more than a load and is stored once."""
    x = RNG.standard_normal(shape, dtype=np.float32)
    for expensive in (False, True):
        fn = lambda x, e=expensive: _batch_norm_like(x, e)  # noqa: E731
        f = tk.jit(fn)
        np.testing.assert_allclose(f(x).numpy(), tk.jit(fn, backend="interpreter")(x).numpy(), rtol=1e-4,
                                   atol=1e-4)
        kernels = f.report(x).kernels
        roots = [k.nodes[-1] for k in kernels]
        centered_stored = any(" = sub(" in r or " = exp(" in r for r in roots)
        assert centered_stored == expensive, [k.nodes for k in kernels]
        readers = [k for k in kernels if any(" = sub(" in line for line in k.nodes)]
        assert len(readers) == (1 if expensive else 2), [k.nodes for k in kernels]
