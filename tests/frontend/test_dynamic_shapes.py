"""Symbolic (dynamic) sizes in tk.jit: programs that serve many input sizes, guards, retraces, explain()."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import tensorkiln as tk
from tensorkiln.kernels.templates.rows import _lane_count
from tensorkiln.errors import ShapeError

from helpers import assert_same_structure
from strategies import RandomProgram, random_programs

RNG = np.random.default_rng(7)


# ---- tk.jit -----------------------------------------------------------------------------------------
def test_dynamic_true_compiles_once_for_many_sizes():
    b = RNG.standard_normal(19).astype(np.float32)

    @tk.jit(dynamic=True)
    def f(x, b):
        return ((x * 2 + b).relu() - 0.5).sum(-1)

    for n in range(2, 36):  # odd sizes, and rows that are not a multiple of the vector width
        x = RNG.standard_normal((n, 19)).astype(np.float32)
        np.testing.assert_allclose(f(x, b).numpy(), (np.maximum(x * 2 + b, 0) - 0.5).sum(-1), rtol=1e-5, atol=1e-5)
    assert f.compile_count == 1


def test_symbolic_reductions_and_softmax_match_numpy_at_every_size():
    @tk.jit(dynamic={"x": {0: "rows", 1: "cols"}})
    def f(x):
        return x.sum(0), x.softmax(-1), x.reshape(-1).sum()

    # one size class: rows*cols >= 8 (a vectorized reduction) and cols below the rows' lane blocks
    # (2 * _lane_count: 128 floats with 512-bit vectors, 64 with 256-bit ones)
    blocks = 2 * _lane_count("float32")
    for rows, cols in [(3, 5), (17, 33), (4, 2), (40, 7), (5, blocks - 1), (2, blocks * 3 // 4 + 3)]:
        x = RNG.standard_normal((rows, cols)).astype(np.float32)
        total, soft, flat = f(x)
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(total.numpy(), x.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(soft.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(flat.numpy(), x.sum(), rtol=1e-4, atol=1e-4)
    assert f.compile_count == 1


def test_automatic_dynamic_compiles_at_most_twice():
    @tk.jit
    def f(x):
        return (x * x + 1).sum(-1)

    for n in [4, 9, 2, 31, 17, 8, 25, 3]:
        x = RNG.standard_normal((n, 12)).astype(np.float32)
        np.testing.assert_allclose(f(x).numpy(), (x * x + 1).sum(-1), rtol=1e-5)
    assert f.compile_count == 2


def test_a_symbolic_program_is_held_once_for_all_its_shapes():
    f = tk.jit(lambda x: x * 2, dynamic={"x": {0: "n"}}, cache_limit=2)
    for n in range(2, 12):
        np.testing.assert_array_equal(f(np.ones((n, 3), np.float32)).numpy(), 2)
    assert f.cache_size() == 1 and f.compile_count == 1


def test_dynamic_false_keeps_one_program_per_shape():
    f = tk.jit(lambda x: x + 1, dynamic=False)
    for n in (3, 4, 5):
        f(np.ones((n, 2), np.float32))
    assert f.compile_count == 3


def test_a_broken_guard_traces_again_with_the_right_answer():
    @tk.jit(dynamic={"x": {0: "n"}})
    def f(x):
        return x * 2 if x.shape[0] > 8 else x + 100  # a Python branch on the size: a range guard

    small, large = np.ones((4, 3), np.float32), np.ones((12, 3), np.float32)
    np.testing.assert_array_equal(f(small).numpy(), small + 100)
    np.testing.assert_array_equal(f(large).numpy(), large * 2)
    np.testing.assert_array_equal(f(np.ones((6, 3), np.float32)).numpy(), np.full((6, 3), 101, np.float32))
    assert f.compile_count == 2


def test_a_specialized_size_is_guarded_not_baked_in():
    @tk.jit(dynamic={"x": {0: "n"}})
    def f(x):
        return x * float(x.shape[0])  # a conversion: specializes n, with a guard

    np.testing.assert_array_equal(f(np.ones((3, 2), np.float32)).numpy(), np.full((3, 2), 3.0))
    np.testing.assert_array_equal(f(np.ones((5, 2), np.float32)).numpy(), np.full((5, 2), 5.0))
    assert f.compile_count == 2
    assert "n == 5" in f.explain(np.ones((5, 2), np.float32))


def test_inputs_sharing_a_symbol_must_agree():
    f = tk.jit(lambda x, y: x + y, dynamic={"x": {0: "n"}, "y": {0: "n"}})
    np.testing.assert_array_equal(f(np.ones((5, 3), np.float32), np.ones((5, 3), np.float32)).numpy(), 2)
    with pytest.raises(ShapeError, match="share the size n"):
        f(np.ones((5, 3), np.float32), np.ones((6, 3), np.float32))
    g = tk.jit(lambda x, y: x * y, dynamic={"x": {0: "n"}, "y": {0: "n"}})
    with pytest.raises(ShapeError, match="x and y"):
        g(np.ones((4, 3), np.float32), np.ones((7, 3), np.float32))


def test_dim_bounds_are_enforced():
    f = tk.jit(lambda x: x + 1, dynamic={"x": {0: tk.Dim("batch", max=16)}})
    f(np.ones((8, 2), np.float32))
    with pytest.raises(ShapeError, match="outside the bounds"):
        f(np.ones((20, 2), np.float32))


def test_dynamic_naming_no_argument_is_refused():
    """A misspelt argument in dynamic= would leave every size static without a word: it is an error."""
    def scale(x, factor):
        return x * factor

    f = tk.jit(scale, dynamic={"y": {0: "batch"}})
    with pytest.raises(ValueError, match=r"'y' is not an argument of scale; its parameters are x, factor"):
        f(np.ones((3, 2), np.float32), np.ones((3, 2), np.float32))
    # an optional argument left out of this call is no error, and **kwargs may take any name
    g = tk.jit(lambda x, bias=None: x if bias is None else x + bias, dynamic={"x": {0: "n"}, "bias": {0: "n"}})
    assert g(np.ones((3, 2), np.float32)).shape == (3, 2) and g.cache_size() == 1
    h = tk.jit(lambda **inputs: inputs["x"] + 1, dynamic={"x": {0: "n"}})
    assert h(x=np.ones((4, 2), np.float32)).shape == (4, 2)


def test_mlp_with_symbolic_batch_compiles_once():
    w1 = RNG.standard_normal((24, 40)).astype(np.float32)
    b1 = RNG.standard_normal(40).astype(np.float32)
    w2 = RNG.standard_normal((40, 10)).astype(np.float32)
    tw1, tb1, tw2 = tk.tensor(w1), tk.tensor(b1), tk.tensor(w2)

    @tk.jit(dynamic={"x": {0: "batch"}})
    def mlp(x):
        return ((x @ tw1 + tb1).relu() @ tw2).softmax(-1)

    for n in range(40, 75, 3):  # one size class of the GEMM (its blocking's range guards hold)
        x = RNG.standard_normal((n, 24)).astype(np.float32)
        logits = np.maximum(x @ w1 + b1, 0) @ w2
        e = np.exp(logits - logits.max(-1, keepdims=True))
        np.testing.assert_allclose(mlp(x).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)
    assert mlp.compile_count == 1


def test_explain_lists_symbols_and_guards():
    f = tk.jit(lambda x: (x @ x.transpose(0, 1)).relu(), dynamic={"x": {0: "rows"}})
    text = f.explain(np.ones((6, 8), np.float32))
    assert "size symbols:" in text and "rows = x.shape[0] (hint 6)" in text and "guards (" in text
    assert "s_rows" in text  # the loop IR reads the symbol


# ---- random programs: every input dimension symbolic, compiled to C --------------------------------
@settings(max_examples=12, deadline=None)
@given(program=random_programs(dtypes=(tk.float32,)))
def test_random_programs_with_symbolic_dims_match_eager(program: RandomProgram):
    """Traced with every dimension of size >= 2 a symbol: whatever the ops do with the sizes
    (propagate them, or specialize with a guard), the compiled program matches eager mode."""
    tensors = program.tensors()
    jitted = tk.jit(program, dynamic=True, backend="c")
    assert_same_structure(program(*tensors), jitted(*tensors), exact=False)
    assert_same_structure(program(*tensors), jitted(*tensors), exact=False)
    assert jitted.compile_count == 1


def test_onnx_dim_params_are_size_symbols():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    w = RNG.standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch size", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch size", 8])], [numpy_helper.from_array(w, "W")])
    model = tk.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    assert model.dim_params == {"x": {0: "batch_size"}}
    for n in (4, 9, 17, 33):
        x = RNG.standard_normal((n, 16)).astype(np.float32)
        r = np.maximum(x @ w, 0)
        e = np.exp(r - r.max(-1, keepdims=True))
        np.testing.assert_allclose(model(x)[0], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert model.compile_count == 1


def test_attention_with_a_symbolic_sequence_length_compiles_once():
    import tensorkiln.nn.functional as F
    seq = {"q": {2: "seq"}, "k": {2: "seq"}, "v": {2: "seq"}}
    attention = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), dynamic=seq)
    for s in (130, 128, 201, 64, 97):  # key blocks of 64: whole ones, and a last one of 0..63 keys
        q, k, v = (RNG.standard_normal((1, 2, s, 16)).astype(np.float32) for _ in range(3))
        expected = F.scaled_dot_product_attention(tk.tensor(q), tk.tensor(k), tk.tensor(v)).numpy()
        np.testing.assert_allclose(attention(q, k, v).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert attention.compile_count == 1
    assert [k.kind for k in attention.report(q, k, v).kernels] == ["attention"]  # the fused kernel


def test_export_of_a_dynamic_function_builds_a_static_library(tmp_path):
    f = tk.jit(lambda x: (x * 3).relu(), dynamic=True)
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    f(x)
    exported = f.export(tmp_path / "lib", x, name="relu3")  # an exported library's C API has static shapes
    np.testing.assert_allclose(tk.load_compiled(exported.directory)(x)[0], np.maximum(x * 3, 0), rtol=1e-6)


def test_warm_calls_of_a_symbolic_program_go_through_c_callers_that_follow_the_growing_arena():
    w = RNG.standard_normal((6, 5)).astype(np.float32)

    @tk.jit(dynamic={"x": {0: "n"}})
    def f(x):
        h = (x @ w).tanh() * 2 + 1  # intermediates in the arena, which grows with n
        return h.softmax(-1), (h * h).sum(0)

    def expected(x):
        h = np.tanh(x @ w) * 2 + 1
        e = np.exp(h - h.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True), (h * h).sum(0)

    kept = []
    for n in [3, 3, 3, 40, 40, 3, 257, 3, 40, 257, 7, 7]:  # callers made at 3 and 40 before the arena grows
        x = RNG.standard_normal((n, 6)).astype(np.float32)
        got = f(x)
        kept.append((got, expected(x)))
        for g, want in zip(got, expected(x)):
            np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-5)
    for got, want in kept:  # results held by the caller are never recycled under it
        for g, w_ in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w_, rtol=1e-5, atol=1e-5)
    assert f.compile_count == 1
    compiled = f._programs()[0].compiled
    assert {shapes[0][0] for shapes in compiled._sized_callers} == {3, 40, 257, 7}
