"""A kernel storing a concat of many pieces writes one loop nest per piece instead of a select chain."""
from __future__ import annotations

import numpy as np

import tensorkiln as tk


def _kernels(f, *args) -> list[str]:
    return [k.loop_ir for k in f.report(*args).kernels]


def test_stack_of_many_steps_under_reshapes_and_a_second_concat():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3, 5)).astype(np.float32)

    def fn(x):
        forward = tk.stack([x[t].exp() for t in range(6)], 0).reshape(6, 1, 3, 5)
        backward = tk.stack([x[t] * float(t) for t in reversed(range(6))], 0).reshape(6, 1, 3, 5)
        return tk.concat([forward, backward], 1)  # (6, 2, 3, 5), as a bidirectional RNN's Y
    f = tk.jit(fn)
    np.testing.assert_allclose(f(x).numpy(), tk.jit(fn, backend="interpreter")(x).numpy(), rtol=1e-6)
    stored = [ir for ir in _kernels(f, x) if "where(" not in ir and ir.count("for ") >= 12]
    assert stored, "the 12 pieces should be written by 12 loop nests, without selects"


def test_few_pieces_keep_one_nest():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = tk.jit(lambda x: tk.concat([x.exp(), x * 2.0], 0))
    np.testing.assert_allclose(f(x).numpy(), np.concatenate([np.exp(x), x * 2]), rtol=1e-6)
    assert any("where(" in ir for ir in _kernels(f, x))


def test_a_reshaped_concat_of_many_pieces_is_written_piecewise():
    x = np.arange(40, dtype=np.float32).reshape(8, 5)
    f = tk.jit(lambda x: tk.concat([x[i:i + 1] * float(i) for i in range(8)], 0).reshape(4, 10))
    np.testing.assert_allclose(f(x).numpy(), (x * np.arange(8, dtype=np.float32)[:, None]).reshape(4, 10))
    assert any("where(" not in ir and ir.count("for ") >= 8 for ir in _kernels(f, x))
