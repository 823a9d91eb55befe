"""An ONNX CNN exported with dim_param batch, height and width: the importer keeps the three sizes
symbolic, so many image sizes run on one or two programs, equal to PyTorch's results."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(16)
        self.down = torch.nn.Conv2d(16, 24, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(24, 5)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.norm(self.stem(x))), 2)
        x = torch.nn.functional.avg_pool2d(torch.relu(self.down(x)), 3, stride=2, padding=1)
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def test_dim_param_height_and_width_stay_symbolic(tmp_path):
    torch.manual_seed(0)
    net = Cnn().eval()
    path = str(tmp_path / "cnn.onnx")
    axes = {0: "batch", 2: "height", 3: "width"}
    torch.onnx.export(net, (torch.randn(2, 3, 16, 16),), path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": axes, "y": {0: "batch"}}, dynamo=False, opset_version=17)
    m = tk.onnx.load(path)
    assert m.dim_params == {"x": axes}
    rng = np.random.default_rng(0)
    for b, h, w in [(2, 19, 23), (3, 24, 17), (2, 31, 20)]:
        x = rng.standard_normal((b, 3, h, w)).astype(np.float32)
        with torch.no_grad():
            expected = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(m(x)[0], expected, rtol=1e-4, atol=1e-5)
    assert m.compile_count <= 2
    assert "specialized by a guard" not in m.explain(x)


@pytest.mark.parametrize("include_pad, dilation", [(0, 2), (1, 1)])
def test_average_pool_with_padding_at_symbolic_sizes_counts_each_window_per_call(include_pad, dilation):
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 2, 1],
                            dilations=[dilation, dilation], count_include_pad=include_pad)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    m, reference = tk.onnx.load(proto), ReferenceEvaluator(proto)
    rng = np.random.default_rng(include_pad + 2 * dilation)
    for n, h, w in [(2, 9, 7), (3, 12, 5), (2, 17, 10)]:
        x = rng.standard_normal((n, 2, h, w)).astype(np.float32)
        np.testing.assert_allclose(m(x)[0], reference.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert m.compile_count == 1
