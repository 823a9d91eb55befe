"""The graph IR (tensorkiln/ir/graph.py, ir/ops/registry.py): nodes, printing, verify(), interpret(), scopes."""
from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln import dtypes as dt
from tensorkiln.errors import VerifyError
from tensorkiln.ir.graph import (Graph, Node, constant_node, evaluate, format_graph, input_node, interpret, make_node,
                              topological_order, verify)
from tensorkiln.ir.ops import REGISTRY, Attrs, ConstantValue, MappingType, OpKind, TensorType, get_op

from helpers import FRONT_END, assert_close

pytestmark = FRONT_END

THIS_FILE = os.path.basename(__file__)
F32 = tk.float32


def _input(name, index, shape, dtype=F32):
    return input_node(name, index, TensorType(tuple(shape), dtype))


def traced_graph(fn, *args, **kwargs) -> Graph:
    return tk.jit(fn).graph(*args, **kwargs)


# ---- building nodes by hand ------------------------------------------------------------------------

def test_make_node_infers_types():
    x, y = _input("x", 0, (2, 3)), _input("y", 1, (3,))
    add = make_node("add", [x, y])
    assert add.type == TensorType((2, 3), F32) and add.shape == (2, 3) and add.dtype is F32
    assert add.kind is OpKind.ELEMENTWISE and add.inputs == (x, y)
    s = make_node("reduce_sum", [add], {"axes": (1,), "keepdims": False})
    assert s.shape == (2,) and s.kind is OpKind.REDUCTION
    with pytest.raises(tk.ShapeError, match=r"add: .*cannot be broadcast.*\(operands: f32\[2,3\], f32\[4\]\)"):
        make_node("add", [x, _input("z", 2, (4,))], location="model.py:7")
    with pytest.raises(tk.ShapeError, match="at model.py:7"):
        make_node("add", [x, _input("z", 2, (4,))], location="model.py:7")


def test_nodes_are_immutable_and_unique():
    x = _input("x", 0, (2,))
    n1, n2 = make_node("exp", [x]), make_node("exp", [x])
    assert n1.id != n2.id and n1 is not n2 and n1 != n2  # identity, not structure
    with pytest.raises(dataclasses.FrozenInstanceError):
        n1.op = "log"
    assert repr(n1) == f"Node(exp#{n1.id}: f32[2])"


def test_attrs_are_immutable_hashable_and_compare_by_content():
    a = Attrs(axes=(0, 1), keepdims=True)
    b = Attrs({"keepdims": True, "axes": (0, 1)})
    assert a == b and hash(a) == hash(b) and len(a) == 2 and set(a) == {"axes", "keepdims"}
    assert a.replace(keepdims=False) != a and a["keepdims"] is True
    with pytest.raises(TypeError):
        a["axes"] = ()  # type: ignore[index]
    assert "axes=(0, 1)" in repr(a)


def test_constant_values_compare_by_content():
    a = ConstantValue(np.arange(6.0).reshape(2, 3))
    b = ConstantValue(np.arange(6.0).reshape(2, 3))
    c = ConstantValue(np.arange(6.0).reshape(3, 2))
    d = ConstantValue(np.arange(6).reshape(2, 3))
    assert a == b and hash(a) == hash(b) and a != c and a != d
    assert repr(ConstantValue(np.array([1.5, 2.0]))) == "[1.5,2. ]"
    assert re.fullmatch(r"<float64\[2, 3\] #[0-9a-f]{8}>", repr(a))


def test_topological_order_and_users():
    x, y = _input("x", 0, (3,)), _input("y", 1, (3,))
    a = make_node("add", [x, y])
    b = make_node("mul", [a, x])
    c = make_node("sub", [b, a])
    order = topological_order([c])
    assert order.index(a) < order.index(b) < order.index(c)
    assert set(order) == {x, y, a, b, c}
    unused = _input("u", 2, (1,))
    graph = Graph([x, y, unused], [c, a])
    assert unused in graph.nodes and len(graph) == 6  # unused parameters stay in the graph
    users = graph.users()
    assert users[a.id] == [b, c] and users[c.id] == [] and users[x.id] == [a, b]
    assert repr(graph) == "<Graph graph: 3 inputs, 6 nodes, 2 outputs>"


# ---- printing --------------------------------------------------------------------------------------

def test_printer_shows_ssa_with_shapes_dtypes_scopes_and_lines():
    def model(x, w):
        return (x @ w + 2.0).relu().softmax(-1).to(tk.float16)

    graph = traced_graph(model, tk.zeros(2, 3), tk.zeros(3, 4))
    text = str(graph)
    lines = text.splitlines()
    assert lines[0] == "graph model(%x: f32[2,3], %w: f32[3,4]) {"
    assert lines[-2] == "  return %9" and lines[-1] == "}"
    body = lines[1:-2]
    assert body[0].startswith("  %0 = matmul(%x, %w) : f32[2,4]")
    assert body[1].startswith("  %1 = constant 2. : f32[]")
    assert "reduce_max(%3; axes=(1,), keepdims=True) : f32[2,1]" in text
    assert "cast(%8; dtype=float16) : f16[2,4]" in text
    line_of_model = model.__code__.co_firstlineno + 1
    for line in body:
        if "constant" in line:
            continue
        assert line.endswith(f"{THIS_FILE}:{line_of_model}"), line
    assert sum("# softmax " in line for line in body) == 5
    assert format_graph(graph) == text


def test_printed_graph_is_valid_ssa():
    def model(x, y):
        a = x.exp() + y
        return a * a, (a - 1).sum(0), x

    text = str(traced_graph(model, tk.zeros(2, 3), tk.zeros(3)))
    defined = {"%x", "%y"}
    for line in text.splitlines()[1:-2]:
        match = re.match(r"  (%\d+) = (\w+)(\((.*?)\))? ?.* : (\w+)\[([\d,]*)\]", line)
        assert match, line
        name, args = match.group(1), match.group(4) or ""
        for used in re.findall(r"%\w+", args.split(";")[0]):
            assert used in defined, f"{used} used before definition in {line!r}"
        assert name not in defined
        defined.add(name)
    returned = text.splitlines()[-2].strip()
    assert returned.startswith("return ") and all(v in defined for v in returned[7:].split(", "))
    assert returned.endswith(", %x")  # an input returned as is


@pytest.mark.parametrize("dtype", [tk.bool, tk.uint8, tk.int8, tk.int16, tk.int32, tk.int64, tk.float16, tk.bfloat16,
                                   tk.float32, tk.float64], ids=lambda d: d.name)
def test_printer_dtype_names(dtype):
    graph = traced_graph(lambda x: x.reshape(-1), tk.zeros(2, 2, dtype=dtype))
    assert f"%x: {dtype.short}[2,2]" in str(graph)
    assert f": {dtype.short}[4]" in str(graph)


def test_printer_shows_bfloat16_constants_as_values():
    graph = traced_graph(lambda x: x * 1.5 + tk.tensor([1.0, 2.0], dtype=tk.bfloat16),
                         tk.ones(2, dtype=tk.bfloat16))
    text = str(graph)
    assert "constant 1.5 : bf16[]" in text and "constant [1.,2.] : bf16[2]" in text


# ---- verify ---------------------------------------------------------------------------------------

def _small_graph():
    x, y = _input("x", 0, (2, 3)), _input("y", 1, (3,))
    a = make_node("add", [x, y])
    b = make_node("exp", [a])
    return Graph([x, y], [b]), (x, y, a, b)


def test_verify_accepts_traced_and_hand_built_graphs():
    graph, _ = _small_graph()
    verify(graph)
    verify(traced_graph(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                        tk.zeros(2, 4, 8), tk.zeros(2, 4, 8), tk.zeros(2, 4, 8)))


def test_verify_catches_use_before_definition():
    graph, (x, y, a, b) = _small_graph()
    graph.nodes = [x, y, b, a]
    with pytest.raises(VerifyError, match="uses .* before it is defined"):
        verify(graph)


def test_verify_catches_wrong_type():
    x = _input("x", 0, (2, 3))
    bad = Node("exp", (x,), Attrs(), TensorType((3, 2), F32))
    with pytest.raises(VerifyError, match=r"has type f32\[3,2\], its op infers f32\[2,3\]"):
        verify(Graph([x], [bad]))
    bad_dtype = Node("exp", (x,), Attrs(), TensorType((2, 3), tk.float64))
    with pytest.raises(VerifyError, match="its op infers"):
        verify(Graph([x], [bad_dtype]))


def test_verify_catches_operands_the_op_rejects():
    x, z = _input("x", 0, (2, 3)), _input("z", 1, (4,))
    bad = Node("add", (x, z), Attrs(), TensorType((2, 3), F32))
    with pytest.raises(VerifyError, match="rejects its operands.*cannot be broadcast"):
        verify(Graph([x, z], [bad]))
    unknown = Node("frobnicate", (x,), Attrs(), x.type)
    with pytest.raises(VerifyError, match="unknown op 'frobnicate'"):
        verify(Graph([x], [unknown]))
    wrong_arity = Node("exp", (x, x), Attrs(), x.type)
    with pytest.raises(VerifyError, match="takes 1 operands"):
        verify(Graph([x], [wrong_arity]))
    missing_attr = Node("reduce_sum", (x,), Attrs(), TensorType((), F32))
    with pytest.raises(VerifyError):
        verify(Graph([x], [missing_attr]))


def test_verify_catches_bad_constants():
    array = np.zeros((2, 2), np.float64)
    ttype = TensorType((2, 2), F32)  # claims float32, holds float64
    node = Node("constant", (), Attrs(value=ConstantValue(array), type=ttype), ttype)
    with pytest.raises(VerifyError, match="holds a float64"):
        verify(Graph([], [node]))
    ttype3 = TensorType((3,), tk.float64)
    node3 = Node("constant", (), Attrs(value=ConstantValue(array), type=ttype3), ttype3)
    with pytest.raises(VerifyError, match=r"\[2, 2\]"):
        verify(Graph([], [node3]))
    verify(Graph([], [constant_node(np.zeros(3, np.uint16), tk.bfloat16)]))


def test_verify_catches_bad_parameters_and_outputs():
    x, y = _input("x", 0, (2,)), _input("y", 0, (2,))  # both claim index 0
    with pytest.raises(VerifyError, match="graph input 1 is not an input node with index 1"):
        verify(Graph([x, y], [make_node("add", [x, y])]))
    stray = _input("s", 1, (2,))
    with pytest.raises(VerifyError, match="input node that is not a graph parameter"):
        verify(Graph([x], [make_node("add", [x, stray])]))
    graph, (x, y, a, b) = _small_graph()
    graph.outputs.append(make_node("neg", [b]))
    with pytest.raises(VerifyError, match="is not in the graph"):
        verify(graph)
    not_input = make_node("exp", [x])
    with pytest.raises(VerifyError, match="graph input 0"):
        verify(Graph([not_input], [not_input]))


# ---- interpret ----------------------------------------------------------------------------------------

INTERPRET_CASES = {
    "arith": (lambda x, y: (x * y + 1).exp() - y / 2, [(2, 3), (3,)]),
    "reduce": (lambda x, y: (x.sum(1, keepdim=True) * y).amax(0), [(2, 3), (3,)]),
    "movement": (lambda x, y: tk.cat([x.T, y.reshape(3, 1)], 1)[::-1, 1:].flip(0), [(2, 3), (3,)]),
    "matmul": (lambda x, y: x @ y, [(2, 3), (3,)]),
    "softmax": (lambda x, y: F.softmax(x, 0) + F.log_softmax(y, 0), [(2, 3), (3,)]),
    "norm": (lambda x, y: F.layer_norm(x, (3,), y, y), [(2, 3), (3,)]),
    "gelu": (lambda x, y: F.gelu(x) + F.gelu(y, approximate="tanh"), [(2, 3), (3,)]),
    "index": (lambda x, y: x[:, [2, 0]] + y[1], [(2, 3), (3,)]),
    "where": (lambda x, y: tk.where(x > 0, x, y), [(2, 3), (3,)]),
    "casts": (lambda x, y: (x.to(tk.bfloat16) * y.half()).to(tk.float64), [(2, 3), (3,)]),
    "multi": (lambda x, y: (x.max(1), {"m": x.mean(), "v": y.var()}), [(2, 3), (3,)]),
}


@pytest.mark.parametrize("name", sorted(INTERPRET_CASES))
def test_interpret_matches_eager(name, rng):
    fn, shapes = INTERPRET_CASES[name]
    args = [tk.tensor(rng.normal(size=s).astype(np.float32)) for s in shapes]
    eager = fn(*args)
    graph = traced_graph(fn, *args)
    verify(graph)
    outputs = interpret(graph, *[a.numpy() for a in args])
    flat = []

    def collect(v):
        if isinstance(v, tk.Tensor):
            flat.append(v)
        elif isinstance(v, (tuple, list)):
            for item in v:
                collect(item)
        elif isinstance(v, dict):
            for item in v.values():
                collect(item)
    collect(eager)
    assert len(outputs) == len(flat) == len(graph.outputs)
    for got, want, node in zip(outputs, flat, graph.outputs):
        assert got.dtype == want.dtype.storage and got.shape == want.shape and node.type == want.type
        np.testing.assert_array_equal(got, want._value)


def test_interpret_bfloat16_inputs_are_storage_arrays():
    graph = traced_graph(lambda x: x * 2, tk.zeros(3, dtype=tk.bfloat16))
    x = tk.tensor([1.5, -2.0, 3.0], dtype=tk.bfloat16)
    (out,) = interpret(graph, x._value)
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(dt.f32_from_bf16_bits(out), [3.0, -4.0, 6.0])


def test_interpret_argument_count():
    graph, _ = _small_graph()
    with pytest.raises(TypeError, match="takes 2 inputs, got 1"):
        interpret(graph, np.zeros((2, 3), np.float32))


def test_interpret_keeps_outputs_that_are_also_intermediates():
    x = _input("x", 0, (2,))
    a = make_node("exp", [x])
    b = make_node("neg", [a])
    c = make_node("add", [a, b])
    out_a, out_c = interpret(Graph([x], [a, c]), np.array([0.0, 1.0], np.float32))
    np.testing.assert_allclose(out_a, np.exp([0.0, 1.0]), rtol=1e-6)
    np.testing.assert_array_equal(out_c, [0.0, 0.0])


def test_evaluate_checks_the_reference_shape(monkeypatch):
    from tensorkiln.ir.ops import registry
    op = get_op("exp")
    monkeypatch.setitem(registry.REGISTRY, "exp", dataclasses.replace(op, reference=lambda i, a, o: i[0][:1]))
    with pytest.raises(VerifyError, match=r"reference of exp returned shape \(1,\), expected \(3,\)"):
        evaluate("exp", Attrs(), [np.zeros(3, np.float32)], [TensorType((3,), F32)], TensorType((3,), F32))


# ---- composite scopes ----------------------------------------------------------------------------------

SCOPE_CASES = {
    "softmax": (lambda x: F.softmax(x, -1), [(2, 5)]),
    "log_softmax": (lambda x: x.log_softmax(0), [(2, 5)]),
    "gelu": (lambda x: F.gelu(x), [(2, 5)]),
    "silu": (lambda x: x.silu(), [(2, 5)]),
    "softplus": (lambda x: F.softplus(x), [(2, 5)]),
    "mean": (lambda x: x.mean(1), [(2, 5)]),
    "var": (lambda x: x.var(1), [(2, 5)]),
    "linear": (lambda x, w: F.linear(x, w), [(2, 5), (3, 5)]),
    "layer_norm": (lambda x: F.layer_norm(x, (5,)), [(2, 5)]),
    "batch_norm": (lambda x, m, v: F.batch_norm(x, m, v), [(2, 5), (5,), (5,)]),
    "attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [(2, 3, 4), (2, 5, 4), (2, 5, 4)]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), [(1, 2, 5, 5), (3, 2, 3, 3), (3,)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [(1, 2, 4, 4)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1), [(1, 2, 5, 5)]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [(1, 2, 5, 7)]),
    "nll_loss": (lambda x: F.nll_loss(x, tk.tensor([1, 0])), [(2, 5)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, tk.tensor([1, 0]), label_smoothing=0.1), [(2, 5)]),
}


@pytest.mark.parametrize("name", sorted(SCOPE_CASES))
def test_composites_mark_their_nodes_scope(name):
    fn, shapes = SCOPE_CASES[name]
    graph = traced_graph(fn, *[tk.ones(s) for s in shapes])
    computed = [n for n in graph.nodes if n.op not in ("input", "constant")]
    assert computed
    for node in computed:
        assert node.scope, f"{node} has no scope"
        assert node.scope[0].split(":")[0] == name, node.scope
        assert re.fullmatch(rf"{name}:\d+", node.scope[0])
    assert len({n.scope[0] for n in computed}) == 1  # one instance of the composite
    assert f"# {name} " in str(graph)


def test_nested_composites_record_the_whole_stack():
    graph = traced_graph(lambda x: F.cross_entropy(x, tk.tensor([1, 0])), tk.ones(2, 5))
    stacks = {tuple(s.split(":")[0] for s in n.scope) for n in graph.nodes if n.scope}
    assert ("cross_entropy", "log_softmax") in stacks
    assert ("cross_entropy", "nll_loss") in stacks
    attention = traced_graph(lambda q: F.scaled_dot_product_attention(q, q, q), tk.ones(3, 4))
    assert ("attention", "softmax") in {tuple(s.split(":")[0] for s in n.scope) for n in attention.nodes if n.scope}


def test_separate_instances_get_separate_scopes_and_plain_ops_none():
    def model(x):
        return F.softmax(x, 0) + F.softmax(x, 1)

    graph = traced_graph(model, tk.ones(2, 3))
    instances = {n.scope[0] for n in graph.nodes if n.scope}
    assert len(instances) == 2 and all(s.startswith("softmax:") for s in instances)
    final = graph.outputs[0]
    assert final.op == "add" and final.scope == ()


def test_eager_calls_leave_no_scope_state_behind():
    F.softmax(tk.ones(3), 0)  # eager: no trace, nothing recorded
    graph = traced_graph(lambda x: x + 1, tk.ones(3))
    assert all(n.scope == () for n in graph.nodes)


# ---- the op registry --------------------------------------------------------------------------------------

def test_registry_entries_are_complete():
    assert {"add", "matmul", "conv2d", "reduce_sum", "slice", "take", "gather", "window", "cast", "where",
            "input", "constant"} <= set(REGISTRY)
    for name, op in REGISTRY.items():
        assert op.name == name
        assert isinstance(op.kind, OpKind) and isinstance(op.mapping, MappingType)
        assert callable(op.infer) and callable(op.reference)
        assert op.arity is None or op.arity >= 0


def test_every_registered_op_is_documented():
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "ops.md")
    if not os.path.exists(docs):
        pytest.skip("docs/ops.md not present")
    text = open(docs, encoding="utf-8").read()
    missing = [name for name in REGISTRY if f"`{name}`" not in text]
    assert not missing, f"ops missing from docs/ops.md: {missing}"


def test_graph_outputs_keep_dtypes(rng):
    graph = traced_graph(lambda x: (x > 0, x.argmax(), x.sum()), tk.tensor(rng.integers(0, 5, (2, 3))))
    assert [n.dtype for n in graph.outputs] == [tk.bool, tk.int64, tk.int64]
    out = interpret(graph, rng.integers(0, 5, (2, 3)))
    assert_close(out[2], out[2], tk.int64)
