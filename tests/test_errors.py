"""Errors (tensorkiln/errors.py): their kinds, and messages that name the op, the operands and the
user's own source line (a line of this file, never a frame inside tensorkiln)."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.errors import VerifyError, at_user_line, user_location
from tensorkiln.ir.ops import Attrs, get_op, infer_type

from helpers import FRONT_END

pytestmark = FRONT_END

THIS_FILE = os.path.abspath(__file__)


def assert_points_here(excinfo) -> int:
    """The message ends with 'at <this file>:<line>', where line is the innermost line of this file that raised."""
    entries = [e for e in excinfo.traceback if os.path.abspath(str(e.path)) == THIS_FILE]
    line = entries[-1].lineno + 1  # pytest's traceback lines are 0-based
    message = str(excinfo.value)
    assert message.rstrip().endswith(f"at {THIS_FILE}:{line}"), message
    assert "tensorkiln/" not in message.split(" at ")[-1]
    return line


# ---- shape and dtype errors from primitives -------------------------------------------------------

def test_broadcast_error_names_op_shapes_dtypes_and_line():
    x, y = tk.zeros(2, 3), tk.zeros(4, dtype=tk.float32)
    with pytest.raises(tk.ShapeError) as info:
        x + y
    message = str(info.value)
    assert message.startswith("add: ")
    assert "[2, 3] and [4] cannot be broadcast" in message
    assert "(operands: f32[2,3], f32[4])" in message
    assert_points_here(info)


def test_dtype_error_names_op_dtypes_and_line():
    a, b = tk.zeros(2), tk.ones(2)
    with pytest.raises(tk.DTypeError) as info:
        a & b
    message = str(info.value)
    assert message.startswith("and: expects bool/integer operands, got float32")
    assert "(operands: f32[2], f32[2])" in message
    assert_points_here(info)


def test_matmul_error():
    with pytest.raises(tk.ShapeError) as info:
        tk.ones(2, 3, dtype=tk.float16) @ tk.ones(5, 4, dtype=tk.float16)
    assert "matmul: inner dimensions differ: 3 vs 5 (operands: f16[2,3], f16[5,4])" in str(info.value)
    assert_points_here(info)


def test_error_inside_composite_points_at_the_callers_line():
    x, w = tk.zeros(1, 3, 8, 8), tk.zeros(4, 2, 3, 3)
    with pytest.raises(tk.ShapeError) as info:
        F.conv2d(x, w)
    assert str(info.value).startswith("conv2d: weight expects 2 input channels, input has 3")
    assert "(operands: f32[1,3,8,8], f32[4,2,3,3])" in str(info.value)
    assert_points_here(info)
    with pytest.raises(tk.ShapeError) as info:
        F.layer_norm(tk.zeros(2, 5), (4,))
    assert "layer_norm" in str(info.value)
    assert_points_here(info)
    with pytest.raises(tk.ShapeError) as info:
        F.scaled_dot_product_attention(tk.zeros(2, 4), tk.zeros(3, 5), tk.zeros(3, 4))
    assert_points_here(info)


def _user_helper(a, b):
    return a * b  # the innermost user frame: errors point here


def test_error_points_at_innermost_user_frame():
    with pytest.raises(tk.ShapeError) as info:
        _user_helper(tk.zeros(3), tk.zeros(4))
    line = assert_points_here(info)
    assert "return a * b" in open(THIS_FILE).read().splitlines()[line - 1]


@pytest.mark.parametrize("call, op, pattern", [
    (lambda: tk.zeros(2, 3).reshape(4, 2), "reshape", r"to \[4, 2\] \(operands: f32\[2,3\]\)"),
    (lambda: tk.zeros(2, 3).reshape(4, -1), "reshape", r"\[2, 3\] \(6 elements\) to \[4, -1\]"),
    (lambda: tk.zeros(2, 3).permute(0, 0), "permute", r"\[0, 0\]"),
    (lambda: tk.zeros(2, 3).expand(3, 3), "expand", r"\[2, 3\]"),
    (lambda: tk.zeros(2, 3).sum(3), "reduce_sum", "rank 2"),
    (lambda: tk.cat([tk.zeros(2, 3), tk.zeros(3, 2)]), "concat", r"f32\[2,3\], f32\[3,2\]"),
    (lambda: tk.zeros(2, 3).split([1, 2]), "split", r"\[1, 2\] do not add up to 2"),
    (lambda: tk.zeros(2, 2).t().t().squeeze(5), "squeeze", "rank 2"),
    (lambda: ~tk.zeros(2, dtype=tk.int32), "~", "int32"),
    (lambda: tk.zeros(3).exp().gather(0, tk.zeros(3)), "gather", "float32"),
    (lambda: F.nll_loss(tk.zeros(2, 3), tk.zeros(2)), "nll_loss", "float32"),
    (lambda: F.embedding(tk.zeros(2), tk.zeros(3, 3)), "embedding", "float32"),
])
def test_front_end_errors_name_op_operands_and_line(call, op, pattern):
    with pytest.raises(tk.TensorKilnError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{op}:"), message
    assert re.search(pattern, message), message
    assert_points_here(info)


# ---- errors under tk.jit point at the line inside the traced function -------------------------------

def test_shape_error_while_tracing_points_into_the_traced_function():
    @tk.jit
    def f(x, y):
        z = x * 2
        return z @ y  # the error must point here

    with pytest.raises(tk.ShapeError) as info:
        f(tk.zeros(2, 3), tk.zeros(4, 5))
    line = assert_points_here(info)
    assert "return z @ y" in open(THIS_FILE).read().splitlines()[line - 1]
    assert "(operands: f32[2,3], f32[4,5])" in str(info.value)


def test_traced_graph_nodes_remember_user_lines():
    @tk.jit
    def f(x):
        return (x + 1).exp()

    graph = f.graph(tk.zeros(3))
    locations = {n.op: n.location for n in graph.nodes if n.location}
    assert locations["add"].startswith(THIS_FILE + ":")
    assert locations["add"] == locations["exp"]
    assert "return (x + 1).exp()" in open(THIS_FILE).read().splitlines()[int(locations["add"].rsplit(":", 1)[1]) - 1]


# ---- traced values in Python control flow --------------------------------------------------------------

CONTROL_FLOW = {
    "if": lambda x: x if x.sum() > 0 else -x,
    "while": lambda x: [x for _ in iter(lambda: bool(x.amax() > 100), True)] and x,
    "bool": lambda x: bool(x[0]),
    "float": lambda x: float(x.sum()),
    "int": lambda x: int(x.sum()),
    "item": lambda x: x.sum().item(),
    "numpy": lambda x: x.numpy(),
    "tolist": lambda x: x.tolist(),
    "np.asarray": lambda x: np.asarray(x),
    "index": lambda x: [1, 2, 3][x.long().sum()],
    "and": lambda x: x.sum() > 0 and x,
}


@pytest.mark.parametrize("name", sorted(CONTROL_FLOW))
def test_traced_tensor_in_python_control_flow_raises_trace_error(name):
    fn = tk.jit(CONTROL_FLOW[name])
    with pytest.raises(tk.TraceError) as info:
        fn(tk.ones(3))
    message = str(info.value)
    assert "traced inside tk.jit" in message and "tk.where" in message
    assert message.rstrip().rsplit(" at ", 1)[1].startswith(THIS_FILE + ":")


def test_static_properties_are_fine_while_tracing():
    @tk.jit
    def f(x):
        assert x.is_traced
        n = len(x) + x.ndim + x.numel() + x.size(0)
        if x.shape[0] > 2 and x.dtype.is_floating:  # shapes and dtypes are static: Python control flow is fine
            return x * n
        return x
    assert f(tk.ones(3)).tolist() == [10.0, 10.0, 10.0]
    assert f(tk.ones(2)).tolist() == [1.0, 1.0]


def test_traced_tensor_used_outside_its_trace():
    leaked = []

    @tk.jit
    def f(x):
        leaked.append(x * 2)
        return x
    f(tk.ones(2))
    with pytest.raises(tk.TraceError, match="outside the tk.jit function that created it") as info:
        leaked[0] + 1
    assert_points_here(info)
    with pytest.raises(tk.TraceError):
        leaked[0].numpy()
    assert "traced" in repr(leaked[0])


# ---- the error classes -------------------------------------------------------------------------------

def test_error_hierarchy():
    assert issubclass(tk.ShapeError, (tk.TensorKilnError, ValueError))
    assert issubclass(tk.DTypeError, tk.TensorKilnError) and issubclass(tk.DTypeError, TypeError)
    assert issubclass(tk.AxisError, tk.ShapeError) and issubclass(tk.AxisError, IndexError)
    assert issubclass(tk.TraceError, RuntimeError) and issubclass(tk.TraceError, tk.TensorKilnError)
    assert issubclass(tk.UnsupportedOpError, NotImplementedError)
    assert issubclass(tk.CompileError, tk.TensorKilnError)
    assert issubclass(VerifyError, tk.TensorKilnError)


def test_compile_error_message():
    err = tk.CompileError("cc failed", source_path="/tmp/k.c", compiler_output="k.c:1: error: x\n")
    assert err.source_path == "/tmp/k.c" and err.compiler_output.startswith("k.c:1")
    assert str(err) == "cc failed\n  generated source: /tmp/k.c\n  compiler output:\nk.c:1: error: x"
    assert str(tk.CompileError("plain")) == "plain"


def test_unknown_op_and_wrong_arity():
    with pytest.raises(tk.UnsupportedOpError, match="unknown op 'conv3d'"):
        get_op("conv3d")
    with pytest.raises(TypeError, match="add takes 2 operands, got 1"):
        infer_type("add", [tk.zeros(2).type], Attrs())


def test_user_location_and_at_user_line():
    location = user_location()
    assert location.startswith(THIS_FILE + ":")
    assert at_user_line("boom", "f.py:3") == "boom\n  at f.py:3"
    assert at_user_line("boom").startswith("boom\n  at " + THIS_FILE + ":")
