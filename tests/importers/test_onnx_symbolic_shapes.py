"""ONNX shape arithmetic on symbolic sizes: Shape -> Gather/Slice -> Unsqueeze/Concat -> Reshape/Expand,
Range and ConstantOfShape keep a dim_param's symbol, so one program serves many sizes."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from onnx_build import model  # noqa: E402

RNG = np.random.default_rng(17)
INT64 = TensorProto.INT64


def _const(name: str, values) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(values, np.int64)))


def _load(proto) -> tk.onnx.OnnxModule:
    return tk.onnx.load(proto.SerializeToString())


def test_reshape_by_a_shape_computed_from_symbolic_sizes():
    """y = x.reshape(b, s * 4, 2) + arange(s * 4) broadcast, every size computed from Shape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        _const("i0", 0), _const("i1", 1), _const("four", 4), _const("two", [2]), _const("zero", 0), _const("one", 1),
        helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["shape", "i1"], ["s"], axis=0),
        helper.make_node("Mul", ["s", "four"], ["s4"]),
        _const("axes", [0]),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Unsqueeze", ["s4", "axes"], ["s41"]),
        helper.make_node("Concat", ["b1", "s41", "two"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Range", ["zero", "s4", "one"], ["positions"]),
        helper.make_node("Cast", ["positions"], ["pf"], to=TensorProto.FLOAT),
        _const("column", [-1, 1]),
        helper.make_node("Reshape", ["pf", "column"], ["pcol"]),
        helper.make_node("Add", ["r", "pcol"], ["y"]),
    ]
    proto = model(nodes, [("x", TensorProto.FLOAT, ["batch", "seq", 8])], [("y", TensorProto.FLOAT, None)])
    m = _load(proto)
    for b, s in [(2, 5), (3, 9), (4, 17)]:
        x = RNG.standard_normal((b, s, 8)).astype(np.float32)
        expected = x.reshape(b, s * 4, 2) + np.arange(s * 4, dtype=np.float32).reshape(-1, 1)
        np.testing.assert_allclose(m(x)[0], expected, rtol=1e-6)
    assert m.compile_count == 1


def test_expand_and_constant_of_shape_with_symbolic_sizes():
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        _const("start", [0]), _const("end", [1]), _const("axes", [0]),
        helper.make_node("Slice", ["shape", "start", "end", "axes"], ["rows"]),  # [n]
        _const("three", [3]),
        helper.make_node("Concat", ["rows", "three"], ["target"], axis=0),  # [n, 3]
        helper.make_node("Expand", ["x", "target"], ["wide"]),  # x is (n, 1)
        helper.make_node("ConstantOfShape", ["target"], ["ones"],
                         value=onnx.numpy_helper.from_array(np.array([1.5], np.float32))),
        helper.make_node("Add", ["wide", "ones"], ["y"]),
    ]
    m = _load(model(nodes, [("x", TensorProto.FLOAT, ["n", 1])], [("y", TensorProto.FLOAT, None)]))
    for n in (2, 7, 30):
        x = RNG.standard_normal((n, 1)).astype(np.float32)
        np.testing.assert_allclose(m(x)[0], np.broadcast_to(x, (n, 3)) + 1.5, rtol=1e-6)
    assert m.compile_count == 1


def test_a_size_read_as_a_number_specializes_with_a_guard():
    """Cast of a shape to float is not shape arithmetic: it pins the size, and a new size traces again."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), _const("i0", [0]),
             helper.make_node("Gather", ["shape", "i0"], ["n"], axis=0),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["x", "nf"], ["y"])]
    m = _load(model(nodes, [("x", TensorProto.FLOAT, ["n"])], [("y", TensorProto.FLOAT, None)]))
    for n in (3, 8, 3):
        x = RNG.standard_normal(n).astype(np.float32)
        np.testing.assert_allclose(m(x)[0], x / n, rtol=1e-6)
    assert m.compile_count == 2


def test_an_exported_transformer_block_compiles_once_for_several_batch_and_sequence_sizes(tmp_path):
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.heads, self.qkv, self.out = heads, torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.norm = torch.nn.LayerNorm(d)

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.qkv(self.norm(x)).chunk(3, -1)
            split = lambda t: t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
            a = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v))
            positions = torch.arange(n).to(x.dtype).reshape(1, n, 1)
            return x + self.out(a.transpose(1, 2).reshape(b, n, d)) + positions * 0.01

    torch.manual_seed(0)
    block = Block().eval()
    path = str(tmp_path / "block.onnx")
    torch.onnx.export(block, (torch.randn(2, 7, 32),), path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}, dynamo=False,
                      opset_version=17)
    m = tk.onnx.load(path)
    assert m.dim_params == {"x": {0: "batch", 1: "seq"}}
    # batch x seq within one size class of the GEMMs and row kernels (their guards are ranges)
    for b, n in [(2, 50), (3, 55), (4, 60), (2, 97)]:
        x = RNG.standard_normal((b, n, 32)).astype(np.float32)
        with torch.no_grad():
            expected = block(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(m(x)[0], expected, rtol=1e-4, atol=1e-5)
    assert m.compile_count == 1
