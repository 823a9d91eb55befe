"""The iota op (arange of a symbolic length): reference, compiled code at many lengths, folding, errors."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.errors import DTypeError, ShapeError
from tensorkiln.frontend.tensor import apply
from tensorkiln.ir.graph import Graph, input_node, make_node
from tensorkiln.ir.ops import TensorType
from tensorkiln.passes.constant_fold import fold_constants

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("dtype", [tk.int64, tk.int32, tk.float32, tk.float64])
def test_eager_iota_is_numpys_arange(dtype):
    for _ in range(6):
        length, start, step = int(RNG.integers(0, 40)), int(RNG.integers(-9, 9)), int(RNG.choice([-3, -1, 1, 2, 5]))
        got = apply("iota", [], length=length, start=start, step=step, dtype=dtype).numpy()
        expected = np.arange(start, start + length * step, step)[:length].astype(got.dtype)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [tk.int64, tk.float32])
def test_arange_of_a_symbolic_length_compiles_once_for_ten_lengths(dtype):
    def positions(x):
        return x + tk.arange(x.shape[0], dtype=dtype).to(x.dtype)

    f = tk.jit(positions, dynamic=True)
    lengths = [2, 3, 5, 16, 17, 31, 64, 100, 129, 1000]  # odd sizes and tails past every vector width
    for n in lengths:
        x = RNG.standard_normal(n).astype(np.float32)
        np.testing.assert_allclose(f(x).numpy(), x + np.arange(n, dtype=np.float32), rtol=1e-6)
    assert f.compile_count == 1


@pytest.mark.parametrize("start, step", [(0, 1), (3, 2), (-5, 3), (7, -1), (20, -4)])
def test_arange_with_start_and_step_over_a_symbolic_end(start, step):
    def bounds(n):
        return (start, n + start * 2) if step > 0 else (n + start, start)

    def f(x):
        n = x.shape[1]
        return tk.arange(*bounds(n), step), tk.arange(n, n * 3, 2, dtype=tk.float32)

    g = tk.jit(f, dynamic=True)
    for n in (9, 10, 33, 70, 101):  # lengths of at least 2 (sizes 0 and 1 specialize, as in torch)
        x = np.zeros((1, n), np.float32)
        a, b = g(x)
        np.testing.assert_array_equal(a.numpy(), np.arange(*bounds(n), step))
        np.testing.assert_array_equal(b.numpy(), np.arange(n, n * 3, 2).astype(np.float32))
    assert g.compile_count == 1


def test_iota_feeding_a_gather_stays_symbolic():
    table = RNG.standard_normal((300, 5)).astype(np.float32)

    def embed(ids):
        positions = tk.arange(ids.shape[1])
        return tk.tensor(table)[positions] + ids.to(tk.float32).reshape(*ids.shape, 1)

    f = tk.jit(embed, dynamic=True)
    for n in (2, 7, 64, 255):
        ids = RNG.integers(0, 10, (1, n))
        np.testing.assert_allclose(f(ids).numpy(), table[:n] + ids.reshape(1, n, 1), rtol=1e-6)
    assert f.compile_count == 1


def test_a_causal_mask_from_iota_comparisons_traces_symbolically():
    def masked(x):
        n = x.shape[-1]
        rows, cols = tk.arange(n).reshape(n, 1), tk.arange(n).reshape(1, n)
        return tk.where(rows >= cols, x, tk.tensor(np.float32(0)))

    f = tk.jit(masked, dynamic=True)
    for n in (2, 5, 33):
        x = RNG.standard_normal((n, n)).astype(np.float32)
        np.testing.assert_array_equal(f(x).numpy(), np.tril(x))
    assert f.compile_count == 1


def test_static_iota_is_folded_into_a_constant():
    x = input_node("x", 0, TensorType((6,), tk.float32))
    iota = make_node("iota", [], dict(length=6, start=1, step=2, dtype=tk.float32))
    graph = Graph([x], [make_node("add", [x, iota])])
    folded, fired = fold_constants(graph)
    assert fired["iota"] == 1 and not any(n.op == "iota" for n in folded.nodes)
    constant = next(n for n in folded.nodes if n.op == "constant")
    np.testing.assert_array_equal(constant.attrs["value"].array, np.arange(1, 13, 2, dtype=np.float32))


def test_static_arange_is_unchanged():
    graph = tk.jit(lambda x: x + tk.arange(4)).graph(np.zeros(4, np.int64))
    assert not any(n.op == "iota" for n in graph.nodes)


def test_bad_iota_attributes_are_clear_errors():
    with pytest.raises(ShapeError, match="iota: length must be a non-negative integer"):
        apply("iota", [], length=-1, start=0, step=1, dtype=tk.int64)
    with pytest.raises(DTypeError, match="iota: a sequence of bool"):
        apply("iota", [], length=3, start=0, step=1, dtype=tk.bool_)
    with pytest.raises(DTypeError, match="integer start and step"):
        apply("iota", [], length=3, start=0.5, step=1, dtype=tk.int64)
    with pytest.raises(ValueError, match="step must not be zero"):
        tk.jit(lambda x: tk.arange(0, x.shape[0], 0), dynamic=True)(np.zeros(4, np.float32))
