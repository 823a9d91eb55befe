"""Constant GEMM weights packed at compile time (passes/packed_weights.py, op matmul_packed), against the reference.

Shapes are not multiples of the register tile or the cache blocks: N past the
last whole panel (zero-padded columns), K over several depth blocks, a
batched left operand folded into the rows, two threads cutting by columns.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln import dtypes as dt
from tensorkiln.ir.graph import input_node, make_node
from tensorkiln.ir.ops import get_op
from tensorkiln.ir.ops.gemm_panels import pack_panels, unpack_panels
from tensorkiln.ir.ops.registry import TensorType
from tensorkiln.frontend.tensor import apply

from .compiled import check_compiled

RNG = np.random.default_rng(11)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def packed_count(f, *args) -> int:
    return sum(s.fired.get("matmul -> matmul_packed", 0) for s in f.report(*args).passes if s.name == "packed_weights")


@pytest.mark.parametrize("a_shape, k, n", [((37, 33), 33, 77), ((64, 1000), 1000, 130), ((3, 37, 100), 100, 200),
                                           ((2, 9, 64), 64, 1024), ((128, 40), 40, 31)])
def test_linear_layers_with_packed_weights_match_the_reference(a_shape, k, n):
    w, bias = tk.tensor(rand(n, k)), tk.tensor(rand(n))
    with tk.no_grad():
        f = check_compiled(lambda x: F.linear(x, w, bias).relu(), rand(*a_shape))
    assert packed_count(f, rand(*a_shape)) == 1
    kernel = f.report(rand(*a_shape)).kernels[0].loop_ir
    assert "g_bpack" not in kernel  # the micro-kernel reads the panels: nothing packs B per call


def test_packed_weights_on_two_threads(monkeypatch):
    """Column chunks (N >= 2M) start at a whole panel of their own."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    w = tk.tensor(rand(64, 700))
    with tk.no_grad():
        check_compiled(lambda x: x @ w, rand(16, 64))
        check_compiled(lambda x: x @ w, rand(300, 64))


def test_small_and_weight_input_matmuls_are_not_packed():
    w = rand(8, 8)
    with tk.no_grad():
        f = check_compiled(lambda x: x @ tk.tensor(w), rand(2, 8))  # under the GEMM's and the panels' sizes
    assert packed_count(f, rand(2, 8)) == 0
    g = check_compiled(lambda x, w: x @ w, rand(64, 100), rand(100, 64))  # weights as inputs: packed per call
    assert packed_count(g, rand(64, 100), rand(100, 64)) == 0


@pytest.mark.parametrize("a_shape, n", [((1, 768), 3072), ((1, 100), 77), ((3, 64), 200), ((2, 1, 64), 130),
                                        ((2, 3, 64), 80), ((1, 2, 50), 1000), ((1, 267), 145), ((2, 133), 150)])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_matrix_vector_products_stream_packed_panels(monkeypatch, a_shape, n, threads):
    """Fewer than 4 rows (decoding one token): B packed all the same, read panel by panel (bounds checked)."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    k = a_shape[-1]
    w, bias = tk.tensor(rand(n, k)), tk.tensor(rand(n))
    x = rand(*a_shape)
    with tk.no_grad():
        f = check_compiled(lambda x: F.linear(x, w, bias).gelu(), x, debug=True)
    assert packed_count(f, x) == 1
    loop_ir = f.report(x).kernels[0].loop_ir
    assert "pk" in loop_ir and "g_acc" not in loop_ir  # the panel order, not the GEMM


def test_matrix_vector_panels_are_shared_with_the_gemm():
    """A prefill (GEMM) and a decode step (panel order) of one model hold one packed copy of a weight."""
    w = tk.tensor(rand(96, 80))
    with tk.no_grad():
        f = tk.jit(lambda x: F.linear(x, w))
        f(rand(32, 80))
        f(rand(1, 80))
    optimized = [f._lookup((rand(*shape),), {})[0].compiled.graph for shape in ((32, 80), (1, 80))]
    panels = [n.attrs["value"].array for graph in optimized for n in graph.nodes
              if n.op == "constant" and n.ndim == 3]
    assert len(panels) == 2 and panels[0] is panels[1]


def test_graphs_share_the_panels_of_one_weight():
    w = tk.tensor(rand(96, 80))
    with tk.no_grad():
        f = tk.jit(lambda x: F.linear(x, w))
        f(rand(32, 80))
        f(rand(48, 80))  # another shape: another graph, the same weight
    optimized = [f._lookup((rand(*shape),), {})[0].compiled.graph for shape in ((32, 80), (48, 80))]
    panels = [n.attrs["value"].array for graph in optimized for n in graph.nodes
              if n.op == "constant" and n.ndim == 3]
    assert len(panels) == 2 and panels[0] is panels[1]


def test_panels_round_trip_and_the_op_is_a_matmul():
    b = rand(13, 70, dtype=np.float64)
    panels = pack_panels(b, 32)
    assert panels.shape == (3, 13, 32) and not panels[2, :, 6:].any()  # columns past 70 are zero
    np.testing.assert_array_equal(unpack_panels(panels, 70), b)
    a = rand(2, 5, 13, dtype=np.float64)
    got = get_op("matmul_packed").reference([a, panels], {"n": 70}, None)
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)


def test_matmul_packed_refuses_mismatched_panels():
    a = input_node("a", 0, TensorType((4, 13), dt.float32))
    panels = input_node("p", 1, TensorType((3, 13, 32), dt.float32))
    with pytest.raises(tk.ShapeError, match="matmul_packed"):
        make_node("matmul_packed", [a, panels], {"n": 64})  # 3 panels of 32 hold 65..96 columns
    wrong_k = input_node("p", 1, TensorType((3, 12, 32), dt.float32))
    with pytest.raises(tk.ShapeError, match="matmul_packed"):
        make_node("matmul_packed", [a, wrong_k], {"n": 70})


def test_matmul_packed_gradients_and_the_simple_nest():
    from tensorkiln.frontend.autodiff.gradcheck import gradcheck
    a, panels = rand(3, 4, 13, dtype=np.float64), pack_panels(rand(13, 10, dtype=np.float64), 8)
    op = lambda x, p: apply("matmul_packed", [x, p], n=10)  # noqa: E731
    assert gradcheck(op, a, panels)
    check_compiled(op, rand(2, 13), pack_panels(rand(13, 10), 8))  # too small for the GEMM: panel order


def test_packed_b_takes_deep_equal_k_blocks():
    """With B read in place, KC is bounded by A's micro-panel in 5/8 of L1d and K splits evenly;
    a K whose micro-panel fits 4/5 of L1d is one block."""
    from tensorkiln.kernels.templates.gemm import gemm_blocking
    from tensorkiln.kernels.target import cpu_target
    l1d = cpu_target().l1d
    for k in (100, 768, 784, 3072, 4001, 8 * (l1d * 4 // 5 // 256), 8 * (l1d * 4 // 5 // 256) + 8):
        bl = gemm_blocking(128, 768, k, "float32", panels_given=True)
        blocks = -(-k // bl.kc)
        whole = bl.mr * -(-k // 8) * 8 * 4 <= l1d * 4 // 5
        assert (blocks == 1) if whole else (bl.mr * bl.kc * 4 <= l1d * 5 // 8 + 8 * bl.mr * 4)
        assert bl.kc % 8 == 0 and blocks * bl.kc - k < 8 * blocks  # equal blocks: no short last one
    w = tk.tensor(rand(1700, 40))
    with tk.no_grad():
        check_compiled(lambda x: x @ w, rand(20, 1700), factor=10)  # several deep K blocks


def test_long_depth_with_packed_weights_still_shares_the_threads(monkeypatch):
    """K far above M and N: no depth split (B is read in place), so the rows or columns are cut."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    w = tk.tensor(rand(4096, 16))
    with tk.no_grad():
        f = check_compiled(lambda x: x @ w, rand(16, 4096), factor=10)
    loop_ir = f.report(rand(16, 4096)).kernels[0].loop_ir
    assert "g_task" in loop_ir and "(parallel)" in loop_ir and "g_partial" not in loop_ir


@pytest.mark.parametrize("threads", ["1", "2"])
def test_packed_weights_with_a_run_time_row_count_prefetch_the_next_panel(monkeypatch, threads):
    """A symbolic M over packed weights: rows past the register tile, N past the last whole panel (the
    last panel prefetches itself), K over several depth blocks; one program for every row count."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    w, bias = rand(77, 1000), rand(77)
    tw, tb = tk.tensor(w), tk.tensor(bias)
    with tk.no_grad():
        f = tk.jit(lambda x: F.linear(x, tw, tb), dynamic={"x": {0: "rows"}})
        for rows in (5, 16, 37, 130):
            x = rand(rows, 1000)
            got = f(x).numpy()
            np.testing.assert_allclose(got, x.astype(np.float64) @ w.T.astype(np.float64) + bias, rtol=1e-4, atol=1e-3)
        report = f.report(rand(16, 1000))
    assert f.compile_count == 1
    assert "tk_prefetch_l2" in open(report.source_path).read()


def test_streamed_panels_are_one_whole_matrix():
    from tensorkiln.kernels.templates.gemm import Panels
    from tensorkiln.loops.buffer import Buffer
    buffer = Buffer("w", "float32", (4 * 8 * 16,))
    with pytest.raises(ValueError, match="streamed panels"):
        Panels(buffer, 8 * 16, 16, offset=16, streamed=True)
