"""Scatter*, TensorScatter, CumProd, LpNormalization, ReverseSequence and MaxUnpool against onnx's reference.

The oracle is `onnx.reference.ReferenceEvaluator` on the same one-node model, over random shapes, axes,
index values (negative ones included) and seeds. Indices are graph inputs, so they are traced (runtime
data), unless a test makes them initializers. Most cases run on the reference interpreter; a few small
ones are compiled to C.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx.reference.ops.op_scatter_elements import scatter_elements  # noqa: E402
from onnx_build import model  # noqa: E402

from tensorkiln.importers.onnx import scatter as onnx_scatter  # noqa: E402

REDUCTIONS = ["none", "add", "mul", "max", "min"]


def node_model(op: str, feeds: dict, attrs=None, opset: int = 18, constants=(), n_outputs: int = 1):
    """A one-node model over `feeds` (name -> array, in input order; "" skips an optional input);
    names in `constants` become initializers."""
    node = helper.make_node(op, list(feeds), [f"y{i}" for i in range(n_outputs)], **(attrs or {}))
    inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
              for n, a in feeds.items() if n and n not in constants]
    outputs = [(f"y{i}", TensorProto.UNDEFINED, None) for i in range(n_outputs)]
    return model([node], inputs, outputs, {n: feeds[n] for n in constants}, opset)


def check(proto, feeds: dict, constants=(), backend: str = "interpreter", expected=None, rtol=1e-5, atol=1e-6):
    """tensorkiln's outputs equal the reference evaluator's (or `expected`): shape, dtype and values."""
    runtime = {n: a for n, a in feeds.items() if n and n not in constants}
    if expected is None:
        expected = ReferenceEvaluator(proto).run(None, {n: a for n, a in feeds.items() if n})
    outputs = tk.onnx.load(proto, backend=backend)(**runtime)
    for out, ref in zip(outputs, expected):
        ref = np.asarray(ref)
        assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, out.dtype, ref.shape, ref.dtype)
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)


def _values(rng, shape, dtype=np.float32):
    if np.issubdtype(dtype, np.floating):
        return rng.uniform(-2, 2, shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return rng.integers(-5, 6, shape).astype(dtype)


# ---- ScatterElements / Scatter ------------------------------------------------------------------

def _elements_case(seed: int, reduction: str, dtype=np.float32):
    """data, indices, updates and a (possibly negative) axis; unique indices per line for `none`."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    shape = [int(s) for s in rng.integers(1, 5, rank)]
    axis = int(rng.integers(-rank, rank))
    n = shape[axis]
    updates_shape = [int(rng.integers(1, s + 1)) for s in shape]
    updates_shape[axis] = int(rng.integers(1, n + 1)) if reduction == "none" else int(rng.integers(1, 6))
    if reduction == "none":  # distinct positions along the axis for each line of updates
        lines = np.moveaxis(np.zeros(updates_shape), axis, -1).shape
        index = np.stack([rng.permutation(n)[:lines[-1]] for _ in range(int(np.prod(lines[:-1])))])
        index = np.moveaxis(index.reshape(lines), -1, axis)
    else:
        index = rng.integers(0, n, updates_shape)
    index = np.where(rng.random(index.shape) < 0.3, index - n, index).astype(np.int64)  # some negative
    return _values(rng, shape, dtype), index, _values(rng, updates_shape, dtype), axis


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("seed", range(6))
def test_scatter_elements(reduction, seed):
    data, index, updates, axis = _elements_case(seed, reduction)
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterElements", feeds, {"axis": axis, "reduction": reduction}), feeds)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.bool_])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max"])
def test_scatter_elements_dtypes(dtype, reduction):
    data, index, updates, axis = _elements_case(7, reduction, dtype)
    feeds = {"data": data, "index": index.astype(np.int32), "updates": updates}
    check(node_model("ScatterElements", feeds, {"axis": axis, "reduction": reduction}), feeds)


def test_scatter_elements_duplicates_last_write_wins():
    data = np.zeros((2, 4), np.float32)
    index = np.array([[1, 3, 1, -3], [0, 0, 2, 2]], np.int64)
    updates = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterElements", feeds, {"axis": 1}), feeds)


@pytest.mark.parametrize("opset", [9, 10])
def test_scatter_deprecated(opset):
    data, index, updates, axis = _elements_case(3, "none")
    feeds = {"data": data, "index": index, "updates": updates}
    expected = scatter_elements(data, index, updates, axis)  # the evaluator has no Scatter: its helper
    check(node_model("Scatter", feeds, {"axis": axis}, opset=opset), feeds, expected=[expected])


def test_scatter_elements_constant_indices():
    data, index, updates, axis = _elements_case(4, "add")
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterElements", feeds, {"axis": axis, "reduction": "add"}, constants={"index"}),
          feeds, constants={"index"})


def test_out_of_range_indices():
    """Runtime indices out of range are ignored; constant ones are an error naming the node."""
    data = np.zeros((2, 3), np.float32)
    index = np.array([[0, 5, -4], [2, 1, 0]], np.int64)
    updates = np.ones((2, 3), np.float32)
    feeds = {"data": data, "index": index, "updates": updates}
    expected = np.array([[1, 0, 0], [1, 1, 1]], np.float32)
    for backend in ("interpreter", "c"):
        out, = tk.onnx.load(node_model("ScatterElements", feeds, {"axis": 1}), backend=backend)(**feeds)
        np.testing.assert_array_equal(out, expected)
    with pytest.raises(tk.ShapeError, match="index 5 is out of range"):
        tk.onnx.load(node_model("ScatterElements", feeds, {"axis": 1}, constants={"index"}),
                     backend="interpreter")(data, updates)
    feeds = {"data": data, "index": np.array([[1, 3], [-1, 0], [0, -4]], np.int64),
             "updates": np.array([5, 6, 7], np.float32)}
    expected = np.array([[0, 0, 0], [6, 0, 0]], np.float32)
    for backend in ("interpreter", "c"):
        out, = tk.onnx.load(node_model("ScatterND", feeds), backend=backend)(**feeds)
        np.testing.assert_array_equal(out, expected)


# ---- ScatterND --------------------------------------------------------------------------------

def _nd_case(seed: int, reduction: str, dtype=np.float32):
    """data, indices (tuples over data's leading k axes, some negative) and updates."""
    rng = np.random.default_rng(100 + seed)
    rank = int(rng.integers(1, 4))
    shape = [int(s) for s in rng.integers(1, 5, rank)]
    k = int(rng.integers(0 if reduction != "none" else 1, rank + 1))
    batch = [int(s) for s in rng.integers(1, 4, int(rng.integers(1, 3)))]
    count, targets = int(np.prod(batch)), int(np.prod(shape[:k]))
    if reduction == "none":  # distinct tuples
        batch = [min(count, targets)]
        flat = rng.permutation(targets)[:batch[0]]
    else:
        flat = rng.integers(0, targets, count)
    index = np.stack(np.unravel_index(flat, shape[:k]), -1) if k else np.zeros((len(flat), 0), np.int64)
    index = index.reshape(batch + [k])
    index = np.where(rng.random(index.shape) < 0.3, index - np.array(shape[:k]), index).astype(np.int64)
    return _values(rng, shape, dtype), index, _values(rng, batch + shape[k:], dtype)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("seed", range(6))
def test_scatter_nd(reduction, seed):
    data, index, updates = _nd_case(seed, reduction)
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterND", feeds, {"reduction": reduction}), feeds)


@pytest.mark.parametrize("dtype", [np.int64, np.bool_])
@pytest.mark.parametrize("reduction", ["none", "add", "min"])
def test_scatter_nd_dtypes(dtype, reduction):
    data, index, updates = _nd_case(8, reduction, dtype)
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterND", feeds, {"reduction": reduction}), feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scatter_nd_add_as_matmul(monkeypatch, dtype):
    """A large add contracts the mask with a matmul (forced here with a zero limit)."""
    monkeypatch.setattr(onnx_scatter, "_BROADCAST_LIMIT", 0)
    data, index, updates = _nd_case(2, "add", dtype)
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterND", feeds, {"reduction": "add"}), feeds)


@pytest.mark.parametrize("opset", [11, 16])
def test_scatter_nd_old_opsets(opset):
    data, index, updates = _nd_case(5, "none" if opset == 11 else "add")
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterND", feeds, {} if opset == 11 else {"reduction": "add"}, opset=opset), feeds)


# ---- TensorScatter ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("seed", range(3))
def test_tensor_scatter(mode, seed):
    rng = np.random.default_rng(200 + seed)
    cache = _values(rng, (3, 2, 6, 4))
    update = _values(rng, (3, 2, int(rng.integers(1, 4)), 4))
    high = 6 if mode == "circular" else 6 - update.shape[2] + 1
    writes = rng.integers(0, high, 3).astype(np.int64)
    feeds = {"cache": cache, "update": update, "writes": writes} if seed else {"cache": cache, "update": update}
    check(node_model("TensorScatter", feeds, {"mode": mode}, opset=24), feeds)


# ---- CumProd ----------------------------------------------------------------------------------

@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("seed", range(3))
def test_cumprod(exclusive, reverse, seed):
    rng = np.random.default_rng(300 + seed)
    shape = tuple(int(s) for s in rng.integers(1, 8, int(rng.integers(1, 4))))
    dtype = [np.float32, np.int64, np.int32][seed]
    x = rng.uniform(0.5, 1.5, shape).astype(dtype) if dtype == np.float32 else _values(rng, shape, dtype)
    feeds = {"x": x, "axis": np.array(int(rng.integers(-len(shape), len(shape))), np.int64)}
    check(node_model("CumProd", feeds, {"exclusive": exclusive, "reverse": reverse}, opset=26,
                     constants={"axis"}), feeds, constants={"axis"})


# ---- LpNormalization ----------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the reference divides 0 by 0, then selects
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("seed", range(2))
def test_lp_normalization(p, seed):
    rng = np.random.default_rng(400 + seed)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x[1, :, 2] = 0  # a zero slice normalizes to zeros
    axis = int(rng.integers(-3, 3))
    norm = (np.abs(x) ** p).sum(axis, keepdims=True) ** (1 / p)
    expected = np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm)).astype(np.float32)
    proto = node_model("LpNormalization", {"x": x}, {"axis": axis, "p": p}, opset=22)
    check(proto, {"x": x}, expected=[expected])
    if p == 2 or seed == 0:  # the reference sums x, not |x|, for p = 1: compare it on |x| only
        check(proto, {"x": np.abs(x) if p == 1 else x})


# ---- ReverseSequence ----------------------------------------------------------------------------

@pytest.mark.parametrize("time_axis", [0, 1])
@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("seed", range(2))
def test_reverse_sequence(time_axis, constant, seed):
    rng = np.random.default_rng(500 + seed)
    shape = [int(s) for s in rng.integers(1, 6, int(rng.integers(2, 5)))]
    batch_axis = 1 - time_axis
    feeds = {"x": _values(rng, shape),
             "lens": rng.integers(0, shape[time_axis] + 3, shape[batch_axis]).astype(np.int64)}  # some too long
    constants = {"lens"} if constant else ()
    proto = node_model("ReverseSequence", feeds, {"batch_axis": batch_axis, "time_axis": time_axis},
                       opset=10, constants=constants)
    check(proto, feeds, constants=constants)


# ---- MaxUnpool ----------------------------------------------------------------------------------

# (input spatial shape, kernel, strides, pads): unpooling gives back the input's shape
UNPOOL = [((4, 6), [2, 2], [2, 2], [0, 0, 0, 0]),
          ((7, 5), [3, 3], [2, 2], [1, 1, 1, 1]),  # overlapping windows, padding
          ((5, 4), [3, 3], [1, 1], [1, 1, 1, 1]),  # a value can be the maximum of several windows
          ((8,), [2], [2], [0, 0]),
          ((4, 4, 2), [2, 2, 2], [2, 2, 2], [0] * 6)]


def _pooled(rng, spatial, kernel, strides, pads):
    """MaxPool's values (scaled, so repeated indices carry different values) and flat indices, in numpy
    (the reference evaluator's MaxPool gets the indices of padded stride-1 windows wrong)."""
    x = rng.standard_normal((2, 3) + tuple(spatial)).astype(np.float32)
    n = len(kernel)
    outs = [(size + pads[d] + pads[d + n] - kernel[d]) // strides[d] + 1 for d, size in enumerate(spatial)]
    values, index = np.zeros((2, 3) + tuple(outs), np.float32), np.zeros((2, 3) + tuple(outs), np.int64)
    for b, c, *o in np.ndindex(values.shape):
        cells = [tuple(o[d] * strides[d] - pads[d] + k[d] for d in range(n)) for k in np.ndindex(*kernel)]
        cells = [q for q in cells if all(0 <= q[d] < spatial[d] for d in range(n))]
        best = max(cells, key=lambda q: (x[(b, c) + q], -np.ravel_multi_index(q, spatial)))  # first maximum
        values[(b, c, *o)] = x[(b, c) + best]
        index[(b, c, *o)] = (b * 3 + c) * int(np.prod(spatial)) + np.ravel_multi_index(best, spatial)
    return (values * rng.uniform(0.5, 1.5, values.shape)).astype(np.float32), index


@pytest.mark.parametrize("case", range(len(UNPOOL)))
def test_max_unpool(case):
    spatial, kernel, strides, pads = UNPOOL[case]
    values, index = _pooled(np.random.default_rng(600 + case), spatial, kernel, strides, pads)
    feeds = {"x": values, "index": index}
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    check(node_model("MaxUnpool", feeds, attrs, opset=11), feeds)


def test_max_unpool_output_shape():
    values, index = _pooled(np.random.default_rng(610), (4, 4), [2, 2], [2, 2], [0] * 4)
    feeds = {"x": values, "index": index, "shape": np.array([2, 3, 5, 6], np.int64)}
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    check(node_model("MaxUnpool", feeds, attrs, opset=11, constants={"shape"}), feeds, constants={"shape"})


# ---- compiled to C ----------------------------------------------------------------------------

def test_compiled():
    """A few small cases through the C backend, traced indices included."""
    data, index, updates, axis = _elements_case(1, "add")
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterElements", feeds, {"axis": axis, "reduction": "add"}), feeds, backend="c")
    data, index, updates, axis = _elements_case(2, "none")
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterElements", feeds, {"axis": axis}), feeds, backend="c")
    data, index, updates = _nd_case(3, "max")
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterND", feeds, {"reduction": "max"}), feeds, backend="c")
    data, index, updates = _nd_case(4, "none")
    feeds = {"data": data, "index": index, "updates": updates}
    check(node_model("ScatterND", feeds), feeds, backend="c")
    values, index = _pooled(np.random.default_rng(620), *UNPOOL[1])
    feeds = {"x": values, "index": index}
    check(node_model("MaxUnpool", feeds, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}, opset=11),
          feeds, backend="c")
    feeds = {"x": _values(np.random.default_rng(621), (5, 3, 2)), "lens": np.array([5, 0, 3], np.int64)}
    check(node_model("ReverseSequence", feeds, {"batch_axis": 1, "time_axis": 0}, opset=10), feeds, backend="c")
    feeds = {"x": _values(np.random.default_rng(622), (3, 7), np.int64), "axis": np.array(-1, np.int64)}
    check(node_model("CumProd", feeds, {"exclusive": 1}, opset=26, constants={"axis"}), feeds,
          constants={"axis"}, backend="c")
    feeds = {"x": _values(np.random.default_rng(623), (2, 5, 3))}
    check(node_model("LpNormalization", feeds, {"axis": 1}, opset=22), feeds, backend="c")
