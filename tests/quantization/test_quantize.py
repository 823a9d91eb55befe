"""tk.quantize: calibrated models run on the integer kernels, match a numpy fake-quant simulation
of the same quantization, stay close to float, and report per layer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tensorkiln as tk
import tensorkiln.nn as nn
from tensorkiln.errors import ShapeError


def mlp() -> nn.Module:
    tk.manual_seed(3)
    return nn.Sequential(nn.Linear(19, 33), nn.ReLU(), nn.Linear(33, 7))


def cnn() -> nn.Module:
    """Odd sizes, a stride, a depthwise layer and a linear head."""
    tk.manual_seed(4)
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 6, 3, groups=6), nn.ReLU(),
                         nn.Conv2d(6, 5, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(5 * 2 * 3, 4))


def calibration(rng, shape, count=6):
    return [rng.normal(size=shape).astype(np.float32) for _ in range(count)]


def fake_quant(x: np.ndarray, scale: float, zero: int, dtype: str) -> np.ndarray:
    """(clip(round(x / s) + z) - z) * s in float32, as the Q/DQ ops compute it."""
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    scale = np.asarray(scale, np.float32)
    q = np.clip(np.rint(x / scale) + zero, lo, hi)
    return ((q - zero) * scale).astype(np.float32)


def dynamic_params(x: np.ndarray, dtype: str, per_row: bool = False):
    """DynamicQuantizeLinear's scale and zero point of x (per_row: of each row, as (..., 1) arrays), in
    float32 as the graph computes them."""
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    axis = dict(axis=-1, keepdims=True) if per_row else {}
    high, low = np.maximum(x.max(**axis), 0).astype(np.float32), np.minimum(x.min(**axis), 0).astype(np.float32)
    span = (high - low).astype(np.float32)
    scale = ((span + (span == 0).astype(np.float32)) / np.float32(hi - lo)).astype(np.float32)
    return scale, np.rint(np.clip(np.float32(lo) - low / scale, lo, hi))


def simulate(model: nn.Module, plans: dict, x: np.ndarray) -> tuple[np.ndarray, float]:
    """The quantized model in numpy/torch float64 (each layer's input and weight fake-quantized),
    and the last layer's output quantum (input scale x weight scale)."""
    layer_index, quantum = 0, 0.0
    t = torch.from_numpy(x).double()
    for module in model._modules.values():
        name = type(module).__name__
        plan = plans.get(layer_index)
        depthwise = name == "Conv2d" and module.groups == module.in_channels == module.out_channels
        if name in ("Linear", "Conv2d") and (name == "Linear" or module.groups == 1 or depthwise):
            weight = module.weight.numpy().astype(np.float64)
            if plan is not None:
                x32 = t.numpy().astype(np.float32)
                x_scale, x_zero = dynamic_params(x32, plan.x_dtype, plan.per_token and name == "Linear") \
                    if plan.dynamic else (plan.x_scale, plan.x_zero)
                t = torch.from_numpy(fake_quant(x32, x_scale, x_zero, plan.x_dtype)).double()
                scale = plan.weight_scale.astype(np.float64)
                if name == "Linear":
                    weight = (plan.weight_q.astype(np.float64) * scale).T
                else:
                    weight = plan.weight_q.astype(np.float64) * scale.reshape(-1, 1, 1, 1)
                quantum = float(np.max(x_scale)) * float(scale.max())
            layer_index += 1
            bias = torch.from_numpy(module.bias.numpy().astype(np.float64))
            t = torch.nn.functional.linear(t, torch.from_numpy(weight), bias) if name == "Linear" else \
                torch.nn.functional.conv2d(t, torch.from_numpy(weight), bias, module.stride, module.padding,
                                           groups=module.groups)
        elif name == "Conv2d":
            t = torch.nn.functional.conv2d(t, torch.from_numpy(module.weight.numpy().astype(np.float64)),
                                           torch.from_numpy(module.bias.numpy().astype(np.float64)), module.stride,
                                           module.padding, groups=module.groups)
        elif name == "ReLU":
            t = t.relu()
        elif name == "Flatten":
            t = t.flatten(1)
    return t.numpy(), quantum


def sqnr(reference: np.ndarray, approximation: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / np.sum((reference - approximation) ** 2)))


def integer_products(qf, *args) -> int:
    return sum(node.op in ("matmul_u8s8", "conv2d_u8s8", "depthwise_u8s8") for node in qf.optimized_graph(*args).nodes)


@pytest.mark.parametrize("method", ["minmax", "percentile", "kl", "mse"])
def test_mlp_runs_on_integers_matches_fake_quant_and_float(rng, method):
    model = mlp()
    data = calibration(rng, (8, 19))
    qf = tk.quantize(model, data, method=method)
    x = rng.normal(size=(5, 19)).astype(np.float32)
    assert integer_products(qf, x) == 2
    assert [k.precision.startswith("int8") for k in qf.report(x).kernels].count(True) == 2
    out = qf(x).numpy()
    expected, quantum = simulate(model, qf.plans, x)
    np.testing.assert_allclose(out, expected, rtol=0, atol=quantum * 1.01)
    with tk.no_grad():
        reference = model(tk.tensor(x)).numpy()
    assert sqnr(reference, out) > 25


def test_cnn_quantized_layers_depthwise_included(rng):
    model = cnn()
    data = calibration(rng, (2, 3, 5, 7))
    qf = tk.quantize(model, data)
    x = rng.normal(size=(3, 3, 5, 7)).astype(np.float32)  # another batch size: traced again, same scales
    graph = qf.optimized_graph(x)
    assert integer_products(qf, x) == 4
    assert [n.op for n in graph.nodes if "u8s8" in n.op].count("depthwise_u8s8") == 1
    assert not [n for n in graph.nodes if n.op == "conv2d"]  # every convolution on the integer kernels
    out = qf(x).numpy()
    expected, quantum = simulate(model, qf.plans, x)
    np.testing.assert_allclose(out, expected, rtol=0, atol=quantum * 1.01)
    with tk.no_grad():
        reference = model(tk.tensor(x)).numpy()
    assert sqnr(reference, out) > 30


def integer_run_and_reference(quantized, model, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(quantized output, float output) of x, after checking that both layers ran on integer kernels and
    that the output is within one quantum of the simulated quantization."""
    assert integer_products(quantized, x) == 2
    out = quantized(x).numpy()
    expected, quantum = simulate(model, quantized.plans, x)
    np.testing.assert_allclose(out, expected, rtol=0, atol=quantum * 1.01)
    with tk.no_grad():
        return out, model(tk.tensor(x)).numpy()


@pytest.mark.parametrize("activations", ["uint8", "int8"])
def test_dynamic_activation_scales_follow_each_call(rng, activations):
    """activation_scales="dynamic": every call quantizes each layer's input by its own range (the
    integer kernels still run), so inputs far outside the calibration data keep their precision."""
    model = mlp()
    qf = tk.quantize(model, calibration(rng, (8, 19)), activation_scales="dynamic", activations=activations)
    static = tk.quantize(model, calibration(rng, (8, 19)), activations=activations)
    for size in (0.05, 1.0, 6.0):  # far inside, like, and far outside the calibrated range
        x = (rng.normal(size=(5, 19)) * size).astype(np.float32)
        out, reference = integer_run_and_reference(qf, model, x)
        assert sqnr(reference, out) > 25, size
        if size != 1.0:
            assert sqnr(reference, out) > sqnr(reference, static(x).numpy()) + 3, size
    assert "per call" in str(qf.quantization_report())
    x = np.zeros((2, 19), np.float32)  # a constant input: scale 1, as DynamicQuantizeLinear's
    np.testing.assert_allclose(qf(x).numpy(), simulate(model, qf.plans, x)[0], rtol=0, atol=1e-5)


def test_per_token_scales_follow_each_row(rng):
    """activation_scales="per_token": one scale and zero point per row of each matmul's input, so rows of
    very different magnitudes (tokens) each keep their precision; still on the integer kernels."""
    model = mlp()
    data = calibration(rng, (8, 19))
    per_token = tk.quantize(model, data, activation_scales="per_token")
    per_tensor = tk.quantize(model, data, activation_scales="dynamic")
    for shape in ((6, 19), (2, 3, 19), (1, 19)):  # batched rows too: a row is the last axis
        x = rng.normal(size=shape).astype(np.float32) * np.logspace(-2, 1, int(np.prod(shape[:-1])),
                                                                     dtype=np.float32).reshape(shape[:-1] + (1,))
        out, reference = integer_run_and_reference(per_token, model, x)
        if shape[0] > 1:  # the small rows lose their digits to one shared scale, not to their own
            small = np.abs(reference - out)[..., :1, :].max()
            assert small < np.abs(reference - per_tensor(x).numpy())[..., :1, :].max() / 4
    assert "per_token activation scales" in str(per_token.quantization_report())


def test_dynamic_activation_scales_on_convolutions(rng):
    model = cnn()
    qf = tk.quantize(model, calibration(rng, (2, 3, 5, 7)), activation_scales="dynamic")
    x = (rng.normal(size=(2, 3, 5, 7)) * 4).astype(np.float32)
    assert integer_products(qf, x) == 4
    expected, quantum = simulate(model, qf.plans, x)
    np.testing.assert_allclose(qf(x).numpy(), expected, rtol=0, atol=quantum * 1.01)


def test_report_lists_every_layer(rng):
    model = cnn()
    qf = tk.quantize(model, calibration(rng, (2, 3, 5, 7)), method="percentile", keep_float=["7"])
    report = qf.quantization_report()
    assert [(l.index, l.name, l.op, l.quantized) for l in report.layers] == [
        (0, "0", "conv2d", True), (1, "2", "conv2d", True), (2, "4", "conv2d", True), (3, "7", "matmul", False)]
    first = report.layer("0")
    assert first.method == "percentile" and first.x_dtype == "uint8" and 0 <= first.x_zero <= 255
    assert first.low < 0 < first.high and first.x_scale == pytest.approx((first.high - first.low) / 255, rel=1e-6)
    assert report.layer(1).low == 0.0  # after a ReLU
    assert all(l.sqnr_db > 30 for l in report.layers if l.quantized)
    assert report.end_to_end_sqnr_db > 30 and report.samples == 6
    text = str(report)
    assert "kept float" in text and "end to end" in text and "method percentile" in text


def test_keep_float_by_index_name_and_predicate(rng):
    x = rng.normal(size=(4, 19)).astype(np.float32)
    for keep in ([1], lambda layer: layer.name == "2"):
        qf = tk.quantize(mlp(), calibration(rng, (4, 19), 2), keep_float=keep)
        assert sorted(qf.plans) == [0]
        assert integer_products(qf, x) == 1
        assert [n.op for n in qf.optimized_graph(x).nodes].count("matmul") == 1


def test_a_function_with_constant_weights_per_tensor_int8_activations(rng):
    w1 = rng.normal(size=(12, 9)).astype(np.float32)
    w2 = rng.normal(size=(9, 5)).astype(np.float32)

    def f(x, y):
        return (x @ w1).relu() @ w2 + (x @ y.T).mean()  # x @ y.T has no constant weight: float

    data = [(rng.normal(size=(3, 12)).astype(np.float32), rng.normal(size=(4, 12)).astype(np.float32))
            for _ in range(4)]
    qf = tk.quantize(f, data, per_channel=False, activations="int8", method="kl")
    assert [l.name for l in qf.quantization_report().layers] == ["matmul_0", "matmul_1"]
    assert all(p.weight_scale.shape == () and p.x_dtype == "int8" for p in qf.plans.values())
    assert integer_products(qf, *data[0]) == 2
    x, y = data[0]
    reference = np.maximum(x @ w1, 0) @ w2 + (x @ y.T).mean()
    assert sqnr(reference, qf(x, y).numpy()) > 25


def test_errors_name_the_problem(rng):
    data = calibration(rng, (4, 19), 2)
    with pytest.raises(ValueError, match="calibration data is empty"):
        tk.quantize(mlp(), [])
    with pytest.raises(ShapeError, match=r"calibration sample 1, argument 0, is float32\[4, 18\] but sample 0's "
                                         r"is float32\[4, 19\]"):
        tk.quantize(mlp(), [data[0], data[1][:, :18]])
    with pytest.raises(ValueError, match="unknown method 'entropy'; expected one of minmax, percentile, kl, mse"):
        tk.quantize(mlp(), data, method="entropy")
    with pytest.raises(ValueError, match=r"keep_float names 'head', which matches no quantizable layer; the "
                                         r"layers are 0: 0, 1: 2"):
        tk.quantize(mlp(), data, keep_float="head")
    with pytest.raises(ValueError, match="keep_float names 5"):
        tk.quantize(mlp(), data, keep_float=5)
    with pytest.raises(ValueError, match="activations='int4'"):
        tk.quantize(mlp(), data, activations="int4")
    with pytest.raises(ValueError, match=r"percentile=0 is not in \(0, 100\]"):
        tk.quantize(mlp(), data, method="percentile", percentile=0)
    with pytest.raises(ValueError, match="activation_scales='per_channel'; expected 'static'"):
        tk.quantize(mlp(), data, activation_scales="per_channel")
    with pytest.raises(ValueError, match="symmetric_weights=False is not supported"):
        tk.quantize(mlp(), data, symmetric_weights=False)
    with pytest.raises(ShapeError):  # the function itself refuses the calibration shape
        tk.quantize(mlp(), calibration(rng, (4, 18), 1))


@pytest.mark.parametrize("bits", [7, 4])
def test_fewer_weight_bits_bound_the_weights_and_match_fake_quant(rng, bits, monkeypatch):
    """weight_bits=7 (reduce_range): every weight within +-63, so on an AVX2 target every quantized layer
    sums unwidened byte pairs (the maddubsw step); the outputs are the same simulation's as 8 bits'."""
    from tensorkiln.kernels.target import _cpu_flags, cpu_target
    if "avx2" in _cpu_flags():
        monkeypatch.setenv("TENSORKILN_INT8_DOT", "avx2")
    cpu_target.cache_clear()
    try:
        model = cnn()
        data = calibration(rng, (2, 3, 7, 6))
        qf = tk.quantize(model, data, weight_bits=bits)
        top = 2 ** (bits - 1) - 1
        assert all(np.abs(plan.weight_q).max() == top for plan in qf.plans.values())
        x = rng.normal(size=(2, 3, 7, 6)).astype(np.float32)
        out = qf(x).numpy()
        expected, quantum = simulate(model, qf.plans, x)
        np.testing.assert_allclose(out, expected, rtol=0, atol=quantum * 1.01)
        precisions = [k.precision for k in qf.report(x).kernels if k.precision.startswith("int8")]
        assert len(precisions) == 4, precisions
        if "avx2" in _cpu_flags():  # the dense layers; the depthwise kernel has one form per target
            assert precisions.count("int8 (maddubsw)") == 3, precisions
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()


@pytest.mark.parametrize("bits", [1, 9, 7.5])
def test_weight_bits_out_of_range_are_refused(rng, bits):
    with pytest.raises(ValueError, match="weight_bits"):
        tk.quantize(mlp(), calibration(rng, (8, 19)), weight_bits=bits)


def _quantized_like(x: np.ndarray, plan) -> np.ndarray:
    return fake_quant(x, plan.x_scale, plan.x_zero, plan.x_dtype).astype(np.float64)


def _conv(x: np.ndarray, plan, padding: int = 1) -> np.ndarray:
    """A quantized layer's float64 output on its already fake-quantized input (no bias)."""
    weight = plan.weight_q.astype(np.float64) * plan.weight_scale.astype(np.float64).reshape(-1, 1, 1, 1)
    return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(weight), padding=padding).numpy()


def test_a_residual_add_reads_the_quantized_tensor_its_layer_reads(rng):
    """y is read by a quantized layer and by a residual add: quantized once, as a tensor (ONNX Runtime's QDQ
    files quantize it so), both readers see the same 8-bit values, and the producer stores them in 8 bits."""
    w1 = (rng.normal(size=(4, 4, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.normal(size=(4, 4, 3, 3)) * 0.3).astype(np.float32)

    def block(x):
        y = tk.nn.functional.relu(tk.nn.functional.conv2d(x, tk.tensor(w1), padding=1))
        return tk.nn.functional.conv2d(y, tk.tensor(w2), padding=1) + y

    data = calibration(rng, (1, 4, 6, 6), 3)
    qf = tk.quantize(block, data)
    x = data[0]
    first, second = qf.plans[0], qf.plans[1]
    y = np.maximum(_conv(_quantized_like(x, first), first), 0)
    y_q = _quantized_like(y.astype(np.float32), second)
    expected = _conv(y_q, second) + y_q
    quantum = second.x_scale * float(second.weight_scale.max())
    np.testing.assert_allclose(qf(x).numpy(), expected, rtol=0, atol=quantum * 1.01 + 1e-6)
    # with the add reading float y the output would move by up to half of y's step
    assert np.max(np.abs(expected - (_conv(y_q, second) + y))) > 4 * quantum
    # y's producer (the kernel applying its relu) stores it as uint8, which the add reads
    producer, = [k for k in qf.report(x).kernels if any(" relu(" in node for node in k.nodes)]
    assert "dtype=uint8" in producer.nodes[-1]


def test_a_max_pool_runs_on_the_quantized_values_with_the_same_result(rng):
    """The layer after a max pool reads Q(max_pool(y)); the quantization moves before the pool (max commutes with
    Q and DQ), so the pool runs on 8-bit values and the result is that of quantizing after it."""
    w0 = (rng.normal(size=(4, 3, 3, 3)) * 0.3).astype(np.float32)
    w1 = (rng.normal(size=(5, 4, 3, 3)) * 0.3).astype(np.float32)

    def pooled(x):
        y = tk.nn.functional.relu(tk.nn.functional.conv2d(x, tk.tensor(w0), padding=1))
        return tk.nn.functional.conv2d(tk.nn.functional.max_pool2d(y, 3, 2, 1), tk.tensor(w1), padding=1)

    data = calibration(rng, (1, 3, 9, 9), 3)
    qf = tk.quantize(pooled, data)
    x = data[1]
    first, second = qf.plans[0], qf.plans[1]
    y = np.maximum(_conv(_quantized_like(x, first), first), 0)
    pooled_y = torch.nn.functional.max_pool2d(torch.from_numpy(y), 3, 2, 1).numpy().astype(np.float32)
    expected = _conv(_quantized_like(pooled_y, second), second)
    # the first layer's sums round in float32 before the pool: allow its quantum too
    quantum = second.x_scale * float(second.weight_scale.max())
    np.testing.assert_allclose(qf(x).numpy(), expected, rtol=0, atol=quantum * 1.01 + 1e-5)
    pools = [k for k in qf.report(x).kernels if "max_pool" in k.name]
    assert pools and all(k.precision == "uint8" for k in pools)


def test_a_layer_kept_in_float_keeps_its_input_float_for_every_reader(rng):
    """x read by a quantized layer, a layer kept in float and an add: the kept layer and the add read float x."""
    w1 = rng.normal(size=(6, 6)).astype(np.float32)
    w2 = rng.normal(size=(6, 6)).astype(np.float32)

    def f(x):
        return x @ w1 + x @ w2 + x

    data = calibration(rng, (3, 6), 3)
    qf = tk.quantize(f, data, keep_float=[1])
    x = data[0]
    plan = qf.plans[0]
    x_q = _quantized_like(x, plan)
    w1_dq = plan.weight_q.astype(np.float64) * plan.weight_scale.astype(np.float64)
    expected = x_q @ w1_dq + x.astype(np.float64) @ w2 + x
    np.testing.assert_allclose(qf(x).numpy(), expected, rtol=1e-5, atol=plan.x_scale * float(plan.weight_scale.max()))
