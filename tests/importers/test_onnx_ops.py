"""Hand-built one-node ONNX models for the important operators and their old-opset forms, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_build import single  # noqa: E402

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
M = rng.standard_normal((3, 4)).astype(np.float32)
I64 = lambda *v: np.asarray(v, dtype=np.int64)  # noqa: E731


def run(model, *inputs, backend="interpreter", **kw):
    return tk.onnx.load(model, backend=backend)(*inputs, **kw)


def check(model, inputs, expected, backend="interpreter", rtol=1e-5, atol=1e-6):
    outputs = run(model, *inputs, backend=backend)
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    for out, ref in zip(outputs, expected):
        assert out.shape == np.shape(ref)
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


CASES = {
    # opset 13 axis semantics vs opset < 13 "coerce to 2-D at axis"
    "softmax13": (single("Softmax", ["x"], {"axis": 1}, opset=13), [X], _softmax(X, 1)),
    "softmax11_coerce": (single("Softmax", ["x"], {"axis": 1}, opset=11), [X],
                         _softmax(X.reshape(2, 60), 1).reshape(X.shape)),
    "logsoftmax_default12": (single("LogSoftmax", ["x"], opset=12), [X],
                             np.log(_softmax(X.reshape(2, 60), 1)).reshape(X.shape)),
    "reshape_attr_opset4": (single("Reshape", ["x"], {"shape": [6, -1]}, opset=4), [X], X.reshape(6, 20)),
    "reshape_zero": (single("Reshape", ["x", "s"], initializers={"s": I64(0, -1)}), [X], X.reshape(2, 60)),
    "slice_attrs_opset9": (single("Slice", ["x"], {"starts": [1, 0], "ends": [3, -1], "axes": [1, 3]}, opset=9),
                           [X], X[:, 1:3, :, 0:-1]),
    "slice_steps": (single("Slice", ["x", "s", "e", "a", "st"],
                           initializers={"s": I64(-1, 0), "e": I64(-100, 5), "a": I64(2, 3), "st": I64(-2, 2)}),
                    [X], X[:, :, ::-2, 0:5:2]),
    "pad_attr_opset2": (single("Pad", ["x"], {"pads": [0, 0, 1, 2, 0, 0, 0, 1], "value": 1.5}, opset=2), [X],
                        np.pad(X, ((0, 0), (0, 0), (1, 0), (2, 1)), constant_values=1.5)),
    "pad_reflect": (single("Pad", ["x", "p"], {"mode": "reflect"}, initializers={"p": I64(0, 0, 1, 2, 0, 0, 2, 1)}),
                    [X], np.pad(X, ((0, 0), (0, 0), (1, 2), (2, 1)), mode="reflect")),
    "pad_edge": (single("Pad", ["x", "p"], {"mode": "edge"}, initializers={"p": I64(0, 0, 1, 2, 0, 0, 2, 1)}),
                 [X], np.pad(X, ((0, 0), (0, 0), (1, 2), (2, 1)), mode="edge")),
    "clip_attrs_opset6": (single("Clip", ["x"], {"min": -0.5, "max": 0.5}, opset=6), [X], np.clip(X, -0.5, 0.5)),
    "clip_inputs": (single("Clip", ["x", "lo", "hi"], initializers={"lo": np.float32(-0.2), "hi": np.float32(0.3)}),
                    [X], np.clip(X, -0.2, 0.3)),
    "squeeze_attr_opset11": (single("Squeeze", ["x"], {"axes": [0]}, opset=11), [X[:1]], X[0]),
    "unsqueeze_attr_opset11": (single("Unsqueeze", ["x"], {"axes": [0, -1]}, opset=11), [M], M[None, :, :, None]),
    "unsqueeze_input": (single("Unsqueeze", ["x", "a"], initializers={"a": I64(1)}), [M], M[:, None]),
    "reducesum_attr_opset11": (single("ReduceSum", ["x"], {"axes": [1, 3], "keepdims": 0}, opset=11), [X],
                               X.sum((1, 3))),
    "reducesum_noop": (single("ReduceSum", ["x", "a"], {"noop_with_empty_axes": 1},
                              initializers={"a": np.zeros(0, np.int64)}), [X], X),
    "reducemean_attr": (single("ReduceMean", ["x"], {"axes": [-1]}), [X], X.mean(-1, keepdims=True)),
    "reducel2": (single("ReduceL2", ["x", "a"], initializers={"a": I64(2)}, opset=18), [X],
                 np.sqrt((X * X).sum(2, keepdims=True))),
    "reducelogsumexp": (single("ReduceLogSumExp", ["x"], {"axes": [1]}), [X],
                        np.log(np.exp(X).sum(1, keepdims=True))),
    "split_attr_opset11": (single("Split", ["x"], {"axis": 3, "split": [2, 3]}, opset=11, n_outputs=2), [X],
                           [X[..., :2], X[..., 2:]]),
    "split_input": (single("Split", ["x", "s"], {"axis": 3}, initializers={"s": I64(4, 1)}, n_outputs=2), [X],
                    [X[..., :4], X[..., 4:]]),
    "split_num_outputs18": (single("Split", ["x"], {"axis": 3, "num_outputs": 2}, opset=18, n_outputs=2), [X],
                            [X[..., :3], X[..., 3:]]),
    "gemm": (single("Gemm", ["a", "b", "c"], {"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1},
                    initializers={"b": M, "c": np.ones(3, np.float32)}), [M.T.copy()],
             0.5 * (M @ M.T) + 2.0),
    "matmul_batched": (single("MatMul", ["a", "b"]), [X, X.transpose(0, 1, 3, 2).copy()],
                       X @ X.transpose(0, 1, 3, 2)),
    "batchnorm_opset6_spatial": (single("BatchNormalization", ["x", "s", "b", "m", "v"],
                                        {"epsilon": 1e-3, "is_test": 1, "spatial": 1}, opset=6,
                                        initializers={"s": np.full(3, 2, np.float32), "b": np.ones(3, np.float32),
                                                      "m": np.full(3, 0.5, np.float32),
                                                      "v": np.full(3, 4, np.float32)}),
                                 [X], (X - 0.5) / np.sqrt(4 + 1e-3) * 2 + 1),
    "dropout_opset6_is_test": (single("Dropout", ["x"], {"is_test": 1, "ratio": 0.3}, opset=6), [X], X),
    "dropout_opset12": (single("Dropout", ["x", "r"], initializers={"r": np.float32(0.5)}, opset=12), [X], X),
    "argmax_last": (single("ArgMax", ["x"], {"axis": 0, "select_last_index": 1, "keepdims": 0}),
                    [np.array([[1, 3], [3, 1], [3, 3]], np.float32)], np.array([2, 2])),
    "where": (single("Where", ["c", "a", "b"], shapes=None, dtype=TensorProto.FLOAT,
                     initializers={"c": np.array([True, False, True, False, True])}), [X, -X],
              np.where([True, False, True, False, True], X, -X)),
    "mod_fmod": (single("Mod", ["a", "b"], {"fmod": 1}), [np.array([-7.5, 7.5, -3], np.float32),
                                                            np.array([2, -2, 3], np.float32)],
                 np.fmod(np.array([-7.5, 7.5, -3], np.float32), np.array([2, -2, 3], np.float32))),
    "gelu20_tanh": (single("Gelu", ["x"], {"approximate": "tanh"}, opset=20), [X],
                    0.5 * X * (1 + np.tanh(np.sqrt(2 / np.pi) * (X + 0.044715 * X ** 3)))),
    "hardswish": (single("HardSwish", ["x"]), [X], X * np.clip(X / 6 + 0.5, 0, 1)),
    "expand_bidirectional": (single("Expand", ["x", "s"], initializers={"s": I64(2, 1, 1)}), [M],
                             np.broadcast_to(M, (2, 3, 4))),
    "tile": (single("Tile", ["x", "r"], initializers={"r": I64(2, 1)}), [M], np.tile(M, (2, 1))),
    "gather_negative": (single("Gather", ["x", "i"], {"axis": 1}, initializers={"i": I64(-1, 0)}), [M],
                        M[:, [-1, 0]]),
    "layernorm17": (single("LayerNormalization", ["x", "s", "b"], {"axis": -1, "epsilon": 1e-5},
                           initializers={"s": np.full(5, 2, np.float32), "b": np.ones(5, np.float32)}), [X],
                    (X - X.mean(-1, keepdims=True)) / np.sqrt(X.var(-1, keepdims=True) + 1e-5) * 2 + 1),
    "maxpool_ceil": (single("MaxPool", ["x"], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}), [X],
                     np.array([[[[X[n, c, i:i + 3, j:j + 3].max() for j in (0, 2)] for i in (0, 2)]
                                for c in range(3)] for n in range(2)])),
    "averagepool_exclude_pad": (single("AveragePool", ["x"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}), [X],
                                np.array([[[[X[n, c, max(i - 1, 0):i + 2, max(j - 1, 0):j + 2].mean()
                                             for j in range(5)] for i in range(4)]
                                           for c in range(3)] for n in range(2)])),
    "conv_same_upper_groups": (single("Conv", ["x", "w"], {"auto_pad": "SAME_UPPER", "group": 3, "strides": [2, 2]},
                                      initializers={"w": np.ones((3, 1, 2, 2), np.float32)}), [X], None),
    "constant_value_floats": (single("Constant", [], {"value_floats": [1.0, 2.0]}), [],
                              np.array([1.0, 2.0], np.float32)),
    "shape_start_end": (single("Shape", ["x"], {"start": 1, "end": -1}, opset=15), [X], np.array([3, 4])),
    "range": (single("Range", ["a", "b", "c"], initializers={"a": np.float32(1), "b": np.float32(2),
                                                            "c": np.float32(0.25)}), [],
              np.arange(1, 2, 0.25, dtype=np.float32)),
    "einsum": (single("Einsum", ["a", "b"], {"equation": "bij,bjk->bik"}), [X[0], X[1].transpose(0, 2, 1).copy()],
               np.einsum("bij,bjk->bik", X[0], X[1].transpose(0, 2, 1))),
    "einsum_repeated_index": (single("Einsum", ["a", "b"], {"equation": "bii,bij->bj"}), [X[:, 0, :3, :3], X[:, 1, :3]],
                              np.einsum("bii,bij->bj", X[:, 0, :3, :3], X[:, 1, :3])),
    "upsample_nearest_opset7": (single("Upsample", ["x"], {"scales": [1.0, 1.0, 2.0, 2.0]}, opset=7), [X],
                                X.repeat(2, 2).repeat(2, 3)),
}


def _conv_reference():
    xp = np.pad(X, ((0, 0), (0, 0), (0, 0), (0, 1)))  # SAME_UPPER, stride 2: 4x5 -> 2x3, extra pad at the end
    out = np.zeros((2, 3, 2, 3), np.float32)
    for i in range(2):
        for j in range(3):
            out[:, :, i, j] = xp[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2].sum((2, 3))
    return out


CASES["conv_same_upper_groups"] = CASES["conv_same_upper_groups"][:2] + (_conv_reference(),)


def _conv3d_reference(x, w, pads, strides, dilations, group):
    """Direct 3-d cross-correlation; pads as ONNX lists them (begins, then ends)."""
    x = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + 3]) for i in range(3)])
    n, c, *size = x.shape
    o, cg, *kernel = w.shape
    outs = [(s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(size, kernel, strides, dilations)]
    out = np.zeros((n, o, *outs), np.float64)
    for f in range(o):
        g = f // (o // group)
        for taps in np.ndindex(*kernel):
            starts = [t * d for t, d in zip(taps, dilations)]
            window = x[:, g * cg:(g + 1) * cg, starts[0]::strides[0], starts[1]::strides[1], starts[2]::strides[2]]
            window = window[:, :, :outs[0], :outs[1], :outs[2]]
            out[:, f] += np.einsum("ncdhw,c->ndhw", window, w[f, :, taps[0], taps[1], taps[2]])
    return out.astype(np.float32)


V5 = rng.standard_normal((2, 4, 5, 6, 7)).astype(np.float32)
W5 = rng.standard_normal((6, 2, 3, 2, 3)).astype(np.float32)
CASES["conv3d_pads_strides_groups"] = (
    single("Conv", ["x", "w"], {"pads": [1, 0, 2, 0, 1, 1], "strides": [2, 1, 2], "dilations": [1, 2, 1], "group": 2},
           initializers={"w": W5}), [V5], _conv3d_reference(V5, W5, [1, 0, 2, 0, 1, 1], [2, 1, 2], [1, 2, 1], 2))


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_interpreter(name):
    model, inputs, expected = CASES[name]
    check(model, inputs, expected)


@pytest.mark.parametrize("name", ["softmax11_coerce", "slice_steps", "pad_reflect", "reducesum_attr_opset11",
                                  "gemm", "conv_same_upper_groups", "maxpool_ceil", "averagepool_exclude_pad",
                                  "layernorm17", "conv3d_pads_strides_groups",
                                  "einsum_repeated_index"])
def test_op_compiled(name):
    model, inputs, expected = CASES[name]
    check(model, inputs, expected, backend="c", rtol=1e-4, atol=1e-5)


def test_dynamic_batch_retraces():
    model = single("Relu", ["x"], shapes={"x": ["N", 3]})
    module = tk.onnx.load(model, backend="interpreter")
    for n in (1, 4, 2):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_array_equal(module(x)[0], np.maximum(x, 0))
    assert module.cache_size() == 3


def test_shape_subgraph_is_eager():
    """Shape -> Gather -> Concat -> Reshape folds to constants: the traced graph holds one reshape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "first"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    from onnx_build import model as build
    m = build(nodes, [("x", TensorProto.FLOAT, ["N", 3, 4])], [("y", TensorProto.FLOAT, None)],
              {"first": np.int64(0), "zero": I64(0), "minus1": I64(-1)})
    module = tk.onnx.load(m, backend="interpreter")
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(module(x)[0], x.reshape(2, 12))
    assert [n.op for n in module.graph(x).nodes] == ["input", "reshape"]


def test_value_input_is_specialized():
    """A graph input feeding Reshape's shape is part of the signature: each value traces again."""
    from onnx_build import model as build
    m = build([helper.make_node("Reshape", ["x", "s"], ["y"])],
              [("x", TensorProto.FLOAT, [2, 6]), ("s", TensorProto.INT64, [2])], [("y", TensorProto.FLOAT, None)])
    module = tk.onnx.load(m, backend="interpreter")
    assert module.value_inputs == {"s"}
    x = rng.standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_array_equal(module(x, I64(3, 4))[0], x.reshape(3, 4))
    np.testing.assert_array_equal(module(x, I64(4, 3))[0], x.reshape(4, 3))


def test_call_conventions():
    module = tk.onnx.load(single("Add", ["a", "b"]), backend="interpreter")
    a, b = M, M * 2
    assert module.input_names == ["a", "b"] and module.output_names == ["y0"]
    np.testing.assert_array_equal(module(a, b)[0], a + b)
    np.testing.assert_array_equal(module(a, b=b)[0], a + b)
    np.testing.assert_array_equal(module(b=b, a=tk.tensor(a))[0], a + b)
    assert list(module(a, b, return_dict=True)) == ["y0"]
    with pytest.raises(TypeError, match="missing model input"):
        module(a)
    with pytest.raises(tk.DTypeError, match="expects float32"):
        module(a.astype(np.float64), b)


@pytest.mark.parametrize("mode,coordinates,exclude_outside,shape,sizes", [
    ("linear", "half_pixel", 0, (2, 3, 11, 7), (5, 3)), ("cubic", "pytorch_half_pixel", 1, (1, 2, 9, 13), (4, 17)),
    ("linear", "align_corners", 1, (1, 1, 6, 16), (3, 5)), ("cubic", "asymmetric", 0, (1, 2, 15, 4), (7, 2))])
def test_resize_antialias_matches_onnx_reference(mode, coordinates, exclude_outside, shape, sizes):
    from onnx.reference import ReferenceEvaluator
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    model = single("Resize", ["x", "", "", "s"], {"mode": mode, "antialias": 1, "exclude_outside": exclude_outside,
                                               "coordinate_transformation_mode": coordinates}, opset=18,
                   initializers={"s": I64(*shape[:2], *sizes)})
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    check(model, [x], expected, backend="c", rtol=1e-4, atol=1e-5)


def test_repeated_plain_array_calls_keep_every_check():
    module = tk.onnx.load(single("Relu", ["x"], shapes={"x": ["N", 3]}))
    x = M.T.copy()
    for _ in range(3):  # the second and third calls take the shortcut for the arguments accepted before
        np.testing.assert_array_equal(module(x)[0], np.maximum(x, 0))
    with pytest.raises(tk.DTypeError, match="expects float32"):
        module(x.astype(np.float64))
    with pytest.raises(tk.ShapeError, match="expects shape"):
        module(np.ones((2, 4), np.float32))
    y = -np.arange(12, dtype=np.float32).reshape(4, 3) + 5
    np.testing.assert_array_equal(module(y)[0], np.maximum(y, 0))
    np.testing.assert_array_equal(module(x, return_dict=True)["y0"], np.maximum(x, 0))
    for _ in range(2):  # every input by name is the positional call, checks and shortcut included
        np.testing.assert_array_equal(module(x=y)[0], np.maximum(y, 0))
    with pytest.raises(tk.DTypeError, match="expects float32"):
        module(x=y.astype(np.float64))
    with pytest.raises(TypeError, match="no input 'z'"):
        module(z=y)
