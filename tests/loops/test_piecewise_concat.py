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


def test_flattened_transposes_are_tiled_and_exact():
    """A DDP bucket flattens weight gradients that are transposes: each piece walks its own rows and
    columns, and those read transposed are tiled (transposed.py: a packed block, contiguous reads)."""
    rng = np.random.default_rng(3)
    cases = [([(512, 128), (128, 1), (1, 129), (1000, 33)], True),
             ([(130, 191), (3, 5), (191, 130), (64, 96)], False)]  # odd tiles: exact, tiled or not
    for shapes, tiled in cases:
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]

        def fn(*xs):
            flat = [x.permute(1, 0).reshape(-1) for x in xs]
            return tk.concat(flat + [(xs[0] * 2.0).permute(1, 0).reshape(-1), xs[-1].reshape(-1)])
        f = tk.jit(fn)
        expected = np.concatenate([x.T.ravel() for x in xs] + [(xs[0] * 2).T.ravel(), xs[-1].ravel()])
        np.testing.assert_array_equal(f(*xs).numpy(), expected)
        concat = [ir for ir in _kernels(f, *xs) if "concat" in ir.splitlines()[0]]
        assert concat and "where(" not in concat[0], concat
        assert "_pack" in concat[0] or not tiled, concat
