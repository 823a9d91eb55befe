"""The precision rule (passes/precision.py) and the precision option reaching it."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.driver.options import CompileOptions
from tensorkiln.kernels.bf16_storage import rounded_input
from tensorkiln.passes.precision import is_bf16_rounding

RNG = np.random.default_rng(0)


def bf16(a: np.ndarray) -> np.ndarray:
    """`a` rounded to bfloat16 (nearest even), as float64."""
    return tk.dtypes.f32_from_bf16_bits(tk.dtypes.bf16_bits_from_f32(a.astype(np.float32))).astype(np.float64)


def optimized(fn, *args, **options):
    return tk.jit(fn, **options).optimized_graph(*args)


def test_precision_option_is_checked():
    assert CompileOptions().precision == "fp32"
    with pytest.raises(ValueError, match="precision must be 'fp32' or 'bf16'"):
        tk.jit(lambda x: x, precision="fp16")
    assert "precision=bf16" in CompileOptions(precision="bf16").cache_text()


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (37, 61, 29), (5, 300, 17), (64, 64, 64)])
def test_matmul_rounds_operands_and_accumulates_in_fp32(m, k, n):
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((k, n)).astype(np.float32)
    weight = tk.tensor(w)
    f = tk.jit(lambda x: (x @ weight).relu(), precision="bf16")
    expected = np.maximum(bf16(x) @ bf16(w), 0)
    np.testing.assert_allclose(f(x).numpy(), expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    # the weight was rounded once, at compile time: a constant, not a cast the code runs
    graph = f.optimized_graph(x)
    weights = [c for c in graph.nodes if c.op == "constant" and c.type.size >= k * n]
    assert weights
    for c in weights:  # float32 rounded values, or the bf16 GEMM's pairs (bfloat16 bits)
        values = c.attrs["value"].array
        values = tk.dtypes.f32_from_bf16_bits(values) if c.dtype is tk.bfloat16 else values
        assert np.array_equal(bf16(values), values)


def test_softmax_layer_norm_and_reductions_stay_fp32():
    def f(x, w):
        h = F.layer_norm(x @ w, (x.shape[-1],))
        return h.softmax(-1).sum(-1), h.mean()
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    w = RNG.standard_normal((16, 16)).astype(np.float32)
    graph = optimized(f, x, w, precision="bf16", opt_level=1)
    # (a cast pair, or round_bf16 where the float32 GEMM computes on it: passes/bf16_fp32_gemm.py)
    roundings = [n for n in graph.nodes if rounded_input(n) is not None]
    assert len(roundings) == 2  # the matmul's two operands, nothing else
    assert all(any(u.op == "matmul" for u in graph.nodes if r in u.inputs) for r in roundings)


def test_attention_rounds_q_k_v_but_not_the_probabilities():
    q, k, v = (RNG.standard_normal((2, 4, 24, 16)).astype(np.float32) for _ in range(3))
    f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), precision="bf16")
    kinds = [kernel.kind for kernel in f.report(q, k, v).kernels]
    assert "attention" in kinds  # still one fused kernel
    s = bf16(q) @ np.swapaxes(bf16(k), -1, -2) / 4.0
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expected = p @ bf16(v)
    graph = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), precision="bf16", backend="interpreter")
    np.testing.assert_allclose(graph(q, k, v).numpy(), expected, rtol=1e-4, atol=1e-5)
    # the fused kernel rounds each probability to bf16 for P V (2^-9 relative at most)
    bound = 2.0 ** -8 * (p @ np.abs(bf16(v))) + 1e-5
    assert np.all(np.abs(f(q, k, v).numpy() - expected) <= bound)


def test_float64_and_fp32_compiles_are_untouched():
    x = RNG.standard_normal((4, 8))
    graph = optimized(lambda x: x @ x.T, x, precision="bf16")
    assert not any(is_bf16_rounding(n) for n in graph.nodes)
    x32 = x.astype(np.float32)
    assert not any(is_bf16_rounding(n) for n in optimized(lambda x: x @ x.T, x32).nodes)


def test_conv2d_rounds_input_and_weight():
    x = RNG.standard_normal((1, 5, 9, 7)).astype(np.float32)
    w = RNG.standard_normal((6, 5, 3, 3)).astype(np.float32)
    weight = tk.tensor(w)
    f = tk.jit(lambda x: F.conv2d(x, weight, padding=1), precision="bf16")
    expected = tk.jit(lambda x, w: F.conv2d(x, w, padding=1))(bf16(x).astype(np.float32),
                                                              bf16(w).astype(np.float32)).numpy()
    np.testing.assert_allclose(f(x).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_onnx_load_and_from_torch_take_the_precision():
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    module = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    x = RNG.standard_normal((4, 12)).astype(np.float32)
    with torch.no_grad():
        reference = module(torch.from_numpy(x)).numpy()
    program = tk.from_torch(module, torch.from_numpy(x), precision="bf16")
    assert program.jit.options.precision == "bf16"
    np.testing.assert_allclose(np.asarray(program(x)), reference, rtol=5e-2, atol=5e-2)

    w = RNG.standard_normal((12, 3)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    result = tk.onnx.load(model, precision="bf16")(x)
    result = result[0] if isinstance(result, (list, tuple)) else result
    np.testing.assert_allclose(np.asarray(result), bf16(x) @ bf16(w), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="precision"):
        tk.onnx.load(model, precision="int3")


def test_torch_compile_backend_takes_the_precision():
    torch = pytest.importorskip("torch")
    module = torch.nn.Linear(64, 48).eval()
    x = torch.from_numpy(RNG.standard_normal((40, 64)).astype(np.float32))
    compiled = torch.compile(module, backend="tensorkiln", options={"precision": "bf16"})
    with torch.no_grad():
        result = compiled(x).numpy()
    expected = bf16(x.numpy()) @ bf16(module.weight.detach().numpy()).T + module.bias.detach().numpy()
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
