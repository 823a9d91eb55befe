"""tk.quantize on PyTorch models: a torch.nn.Module (or tk.from_torch's program) is imported, quantized
onto the int8 kernels, and called as the module is, with its output structure."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorkiln as tk  # noqa: E402
from tensorkiln.importers.torch.quantize import QuantizedTorchProgram  # noqa: E402
from helpers import residual_cnn  # noqa: E402




def _int8_kernels(program, *args, **kwargs) -> list[str]:
    return [k.precision for k in program.report(*args, **kwargs).kernels if k.precision.startswith("int8")]


def _relative_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), want.detach().double().numpy()
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def test_a_torch_module_is_quantized_onto_the_int8_kernels():
    torch.manual_seed(0)
    model = residual_cnn(16, 10, pool="mean")
    rng = np.random.default_rng(0)
    calibration = [(rng.standard_normal((2, 3, 12, 12)).astype(np.float32),) for _ in range(4)]
    program = tk.quantize(model, calibration, method="percentile")
    assert isinstance(program, QuantizedTorchProgram)
    x = torch.from_numpy(rng.standard_normal((2, 3, 12, 12)).astype(np.float32))
    with torch.no_grad():
        want = model(x)
    assert _relative_error(program(x).numpy(), want) < 0.05
    np.testing.assert_array_equal(program(x.numpy()).numpy(), program(x).numpy())  # arrays as well as tensors
    assert len(_int8_kernels(program, x)) == 3  # both convolutions and the linear layer
    report = program.quantization_report()
    assert [layer.op for layer in report.layers if layer.quantized] == ["conv2d", "conv2d", "matmul"]
    assert [layer.name for layer in report.layers] == ["stem", "body", "head"]  # the modules' paths


def test_layers_are_named_by_module_path_and_kept_float_by_it():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()),
                                torch.nn.Linear(16, 4)).eval()
    scale = torch.nn.Parameter(torch.randn(4, 4))  # a weight that is no module's: named by op and position
    model.register_parameter("mix", scale)
    forward = model.forward
    model.forward = lambda x: forward(x) @ model.mix
    rng = np.random.default_rng(1)
    calibration = [(rng.standard_normal((8, 12)).astype(np.float32),) for _ in range(3)]
    program = tk.quantize(model, calibration, keep_float=["2.0"])
    report = program.quantization_report()
    assert [layer.name for layer in report.layers] == ["0", "2.0", "3", "matmul_3"]
    assert not report.layer("2.0").quantized and report.layer("3").quantized
    x = torch.from_numpy(rng.standard_normal((8, 12)).astype(np.float32))
    with torch.no_grad():
        assert _relative_error(program(x).numpy(), model(x)) < 0.05
    with pytest.raises(ValueError, match="2.1.*matches no quantizable layer.*2.0"):
        tk.quantize(model, calibration, keep_float="2.1")


def test_from_torch_programs_and_keyword_batches():
    """A Hugging Face model's batch as a dict of keyword arguments; tk.from_torch's program as the model."""
    transformers = pytest.importorskip("transformers")
    from tensorkiln.tools import hf_zoo
    model, (ids,), kwargs = hf_zoo.ARCHITECTURES["bert"].build("tiny")
    batch = {"input_ids": ids, **kwargs}
    with torch.no_grad():
        want = model(**batch).last_hidden_state
    for source in (model, tk.from_torch(model, (), batch)):
        program = tk.quantize(source, [batch])
        got = program(**batch)
        assert isinstance(got, transformers.modeling_outputs.BaseModelOutputWithPoolingAndCrossAttentions)
        assert _relative_error(got.last_hidden_state.numpy(), want) < 0.05
        assert len(_int8_kernels(program, **batch)) >= 6  # the attention and feed-forward projections


def test_empty_calibration_is_refused():
    with pytest.raises(ValueError, match="calibration data is empty"):
        tk.quantize(residual_cnn(16, 10), [])
