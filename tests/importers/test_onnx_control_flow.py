"""ONNX If, Loop and Scan built with onnx.helper, compiled to C, against onnxruntime; refusals of what
needs dynamic shapes."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import tensorkiln as tk
from onnx_build import model

from helpers import assert_close

ort = pytest.importorskip("onnxruntime")
FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _run_both(proto, feed: dict):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feed)
    module = tk.onnx.load(proto)
    actual = module(**feed)
    for a, e in zip(actual, expected):
        assert_close(a, e, rtol=1e-5, atol=1e-6)
    assert any(k.kind == "control" for k in module.report(**feed).kernels)
    return actual


def _graph(nodes, name, inputs, outputs):
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info(*i) for i in inputs],
                             [helper.make_tensor_value_info(*o) for o in outputs])


def test_if_reads_outer_scope_values():
    then = _graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then", [], [("t", FLOAT, [3, 5])])
    else_ = _graph([helper.make_node("Sub", ["x", "w"], ["e"])], "else", [], [("e", FLOAT, [3, 5])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=else_)]
    proto = model(nodes, [("x", FLOAT, [3, 5]), ("w", FLOAT, [5])], [("y", FLOAT, [3, 5])],
                  {"zero": np.array(0, np.float32)}, opset=17)
    rng = np.random.default_rng(0)
    w = rng.standard_normal(5).astype(np.float32)
    for sign in (1, -1):
        _run_both(proto, {"x": np.abs(rng.standard_normal((3, 5))).astype(np.float32) * sign, "w": w})


def _counting_loop(with_trip: bool, with_cond: bool):
    """y = y * 1.5 + x while (trip count not reached) and (sum(y) < limit)."""
    body = _graph([helper.make_node("Mul", ["y_in", "k"], ["t"]),
                   helper.make_node("Add", ["t", "x"], ["y_out"]),
                   helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
                   helper.make_node("Less", ["s", "limit"], ["cond_out"])],
                  "body", [("i", INT64, []), ("cond_in", BOOL, []), ("y_in", FLOAT, [4, 3])],
                  [("cond_out", BOOL, []), ("y_out", FLOAT, [4, 3])])
    inputs = [("x", FLOAT, [4, 3]), ("limit", FLOAT, [])] + ([("M", INT64, [])] if with_trip else []) + \
        ([("c", BOOL, [])] if with_cond else [])
    loop = helper.make_node("Loop", ["M" if with_trip else "", "c" if with_cond else "", "x"], ["y"], body=body)
    return model([loop], inputs, [("y", FLOAT, [4, 3])], {"k": np.array(1.5, np.float32)}, opset=17)


@pytest.mark.parametrize("with_trip,with_cond", [(True, True), (True, False), (False, True)])
def test_loop_runtime_trip_count_and_condition(with_trip, with_cond):
    rng = np.random.default_rng(1)
    x = np.abs(rng.standard_normal((4, 3))).astype(np.float32) + 0.1
    proto = _counting_loop(with_trip, with_cond)
    for trip, limit in ((3, 1e6), (50, x.sum() * 20)):  # the count ends it, then the condition
        feed = {"x": x, "limit": np.array(limit, np.float32)}
        if with_trip:
            feed["M"] = np.array(trip, np.int64)
        if with_cond:
            feed["c"] = np.array(True)
        if not with_trip and limit > 1e5:
            continue  # without a trip count only the condition can end the loop
        _run_both(proto, feed)
    module = tk.onnx.load(proto)
    assert not module.value_inputs  # no scan outputs: trip count and condition stay runtime values


def test_loop_with_scan_outputs_and_static_trip_count():
    body = _graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                   helper.make_node("Cast", ["i"], ["fi"], to=FLOAT),
                   helper.make_node("Add", ["y_in", "fi"], ["y_out"]),
                   helper.make_node("Mul", ["y_out", "y_out"], ["sq"])],
                  "body", [("i", INT64, []), ("cond_in", BOOL, []), ("y_in", FLOAT, [5])],
                  [("cond_out", BOOL, []), ("y_out", FLOAT, [5]), ("sq", FLOAT, [5])])
    loop = helper.make_node("Loop", ["M", "c", "x"], ["y", "ys"], body=body)
    proto = model([loop], [("x", FLOAT, [5]), ("M", INT64, [])], [("y", FLOAT, [5]), ("ys", FLOAT, None)],
                  {"c": np.array(True)}, opset=17)
    x = np.random.default_rng(2).standard_normal(5).astype(np.float32)
    y, ys = _run_both(proto, {"x": x, "M": np.array(4, np.int64)})
    assert ys.shape == (4, 5)


def test_loop_scan_outputs_with_computed_condition_are_refused():
    body = _graph([helper.make_node("ReduceSum", ["y_in"], ["s"], keepdims=0),
                   helper.make_node("Less", ["s", "limit"], ["cond_out"]),
                   helper.make_node("Identity", ["y_in"], ["y_out"]),
                   helper.make_node("Identity", ["y_in"], ["scan"])],
                  "body", [("i", INT64, []), ("cond_in", BOOL, []), ("y_in", FLOAT, [2])],
                  [("cond_out", BOOL, []), ("y_out", FLOAT, [2]), ("scan", FLOAT, [2])])
    loop = helper.make_node("Loop", ["M", "", "x"], ["y", "ys"], body=body)
    proto = model([loop], [("x", FLOAT, [2]), ("limit", FLOAT, [])], [("y", FLOAT, [2]), ("ys", FLOAT, None)],
                  {"M": np.array(5, np.int64)}, opset=17)
    with pytest.raises(tk.UnsupportedOpError, match="only run-time values decide"):
        tk.onnx.load(proto)


def test_if_branches_of_different_shapes_are_refused():
    then = _graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [("t", FLOAT, [3])])
    else_ = _graph([helper.make_node("Concat", ["x", "x"], ["e"], axis=0)], "else", [], [("e", FLOAT, [6])])
    proto = model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=else_)],
                  [("c", BOOL, []), ("x", FLOAT, [3])], [("y", FLOAT, None)], opset=17)
    with pytest.raises(tk.UnsupportedOpError, match="only run-time values decide"):
        tk.onnx.load(proto)


def test_scan_axes_and_directions():
    body = _graph([helper.make_node("Add", ["s_in", "a"], ["s_out"]),
                   helper.make_node("Mul", ["s_out", "b"], ["o"])],
                  "body", [("s_in", FLOAT, [3]), ("a", FLOAT, [3]), ("b", FLOAT, [3])],
                  [("s_out", FLOAT, [3]), ("o", FLOAT, [3])])
    scan = helper.make_node("Scan", ["s0", "a", "b"], ["s", "ys"], body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 0], scan_input_directions=[1, 0],
                            scan_output_axes=[1], scan_output_directions=[1])
    proto = model([scan], [("s0", FLOAT, [3]), ("a", FLOAT, [3, 7]), ("b", FLOAT, [7, 3])],
                  [("s", FLOAT, [3]), ("ys", FLOAT, [3, 7])], opset=17)
    rng = np.random.default_rng(3)
    _run_both(proto, {"s0": rng.standard_normal(3).astype(np.float32),
                      "a": rng.standard_normal((3, 7)).astype(np.float32),
                      "b": rng.standard_normal((7, 3)).astype(np.float32)})


def _scan8(with_lengths: bool):
    """Opset 8's Scan: a batch axis on the state and the scan inputs, the scan axis 1, directions."""
    body = _graph([helper.make_node("Add", ["s_in", "a"], ["s_out"]),
                   helper.make_node("Mul", ["s_out", "b"], ["o"])],
                  "body", [("s_in", FLOAT, [2]), ("a", FLOAT, [2]), ("b", FLOAT, [2])],
                  [("s_out", FLOAT, [2]), ("o", FLOAT, [2])])
    scan = helper.make_node("Scan", ["lens" if with_lengths else "", "s0", "a", "b"], ["s", "ys"], body=body,
                            num_scan_inputs=2, directions=[0, 1])
    inputs = [("s0", FLOAT, [3, 2]), ("a", FLOAT, [3, 5, 2]), ("b", FLOAT, [3, 5, 2])]
    if with_lengths:
        inputs.insert(0, ("lens", TensorProto.INT32, [3]))
    return model([scan], inputs, [("s", FLOAT, [3, 2]), ("ys", FLOAT, [3, 5, 2])], opset=8)


def test_scan8_scans_each_batch_entry():
    """Each of the 3 batch entries scanned on its own (the second input in reverse), against numpy."""
    rng = np.random.default_rng(5)
    s0, a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((3, 2), (3, 5, 2), (3, 5, 2)))
    module = tk.onnx.load(_scan8(with_lengths=False))
    s, ys = module(s0=s0, a=a, b=b)
    state, want = s0.copy(), np.zeros_like(a)
    for t in range(5):
        state = state + a[:, t]
        want[:, t] = state * b[:, 4 - t]
    assert_close(s, state, rtol=1e-5, atol=1e-6)
    assert_close(ys, want, rtol=1e-5, atol=1e-6)
    assert any(k.kind == "control" for k in module.report(s0=s0, a=a, b=b).kernels)


def test_scan8_with_sequence_lengths_is_refused():
    with pytest.raises(tk.UnsupportedOpError, match="sequence_lens"):
        tk.onnx.load(_scan8(with_lengths=True))
