"""The layout pass (passes/layout.py): which convolutions go blocked, where conversions remain, and that
every rewritten graph computes what the original does (hand-built graphs, random conv graphs, models)."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln import models
from tensorkiln.ir.graph import Graph, input_node, interpret, verify
from tensorkiln.kernels.target import cpu_target
from tensorkiln.ir.ops import TensorType
from tensorkiln.passes import optimize
from tensorkiln.passes import layout
from tensorkiln.passes.layout import (block_layouts, block_size, blocked_conv_choice, conversion_share,
                                      from_blocked, to_blocked)
from tensorkiln.passes.rules import simplify_graph

RNG = np.random.default_rng(0)
LANES = cpu_target().vector_bytes // 4


def weight(o: int, c: int, k: int) -> tk.Tensor:
    return tk.tensor((RNG.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32))


def bias(c: int) -> tk.Tensor:
    return tk.tensor(RNG.standard_normal(c).astype(np.float32))


def image(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def optimized(fn, *args, level: int = 2) -> tuple[Graph, dict]:
    """The graph after the pipeline of `level`, and what the layout pass reported."""
    graph = tk.jit(fn).graph(*args)
    result, stats = optimize(graph, level)
    layout = next((s.fired for s in stats if s.name == "layout"), {})
    return result, layout


def convs(graph: Graph) -> list:
    return [n for n in graph.nodes if n.op in ("conv2d", "conv2d_nchwc")]


def conversions(graph: Graph) -> list:
    """Movement ops on activations (constants fold away, so only conversions are left)."""
    return [n for n in graph.nodes if n.op in ("permute", "reshape")]


def check_against_reference(fn, *args, level: int = 2):
    """Compile at `level` and compare with the reference interpreter on the traced graph."""
    f = tk.jit(fn, opt_level=level)
    got = f(*args)
    assert f.report(*args).backend == "c"
    want = interpret(f.graph(*args), *args)[0]
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4 * scale)
    return f


# ---- hand-built graphs ----------------------------------------------------------------------

def test_a_chain_converts_only_at_its_edges():
    """Three convolutions: the first reads NCHW (its copy converts), the last writes NCHW (its store
    converts), nothing in between is converted."""
    w1, w2, w3, b2 = weight(32, 16, 1), weight(32, 32, 3), weight(16, 32, 1), bias(32)

    def chain(x):
        y = F.conv2d(x, w1).relu()
        y = F.conv2d(y, w2, b2, stride=2, padding=1).relu()
        return F.conv2d(y, w3) * 0.5

    x = image(2, 16, 12, 12)
    graph, fired = optimized(chain, x)
    first, middle, last = convs(graph)
    assert all(n.op == "conv2d_nchwc" for n in (first, middle, last))
    assert first.inputs[0].ndim == 4 and first.attrs["out_layout"] == "nchwc"
    assert middle.inputs[0] is not first and middle.inputs[0].ndim == 5 and middle.attrs["out_layout"] == "nchwc"
    assert last.inputs[0].ndim == 5 and last.attrs["out_layout"] == "nchw"
    assert conversions(graph) == []
    assert fired["conversion into a conv's copy"] == 1 and fired["conversion into a conv's store"] == 1
    assert fired["conversions cancelled"] == 4 and fired["conv2d -> conv2d_nchwc"] == 3
    check_against_reference(chain, x)


def test_inverted_residual_blocks_run_blocked_depthwise_included():
    """MobileNetV2's block (1x1 expand, ReLU6, 3x3 depthwise, ReLU6, 1x1 project, residual add):
    the depthwise layers join the chain, so nothing converts between the blocks."""
    c = max(2 * LANES, 32)  # a chain's edge conversions are a small share of its multiply-adds at any vector width
    e = 6 * c
    layers = [(weight(e, c, 1), bias(e), weight(e, 1, 3), bias(e), weight(c, e, 1), bias(c)) for _ in range(2)]

    def blocks(x):
        for w_expand, b_expand, w_dw, b_dw, w_project, b_project in layers:
            y = F.conv2d(x, w_expand, b_expand).clip(0.0, 6.0)
            y = F.conv2d(y, w_dw, b_dw, padding=1, groups=e).clip(0.0, 6.0)
            x = x + F.conv2d(y, w_project, b_project)
        return x

    x = image(1, c, 14, 14)
    graph, fired = optimized(blocks, x)
    assert [n.op for n in convs(graph)] == ["conv2d_nchwc"] * 6
    assert sum(n.attrs.get("groups", 1) > 1 for n in convs(graph)) == 2
    assert fired["depthwise conv2d -> conv2d_nchwc"] == 2 and conversions(graph) == []
    check_against_reference(blocks, x)


def test_a_single_convolution_between_other_ops():
    """A deep convolution alone is blocked, converting in its own copy and store; a shallow one, for
    which those conversions would cost more than the kernel gains, stays NCHW."""
    deep, shallow = weight(64, 64, 3), weight(32, 32, 1)
    x = image(1, 64, 14, 14)
    graph, fired = optimized(lambda x: F.conv2d(x.tanh(), deep, stride=2, padding=1).sigmoid(), x)
    (conv,) = convs(graph)
    assert conv.op == "conv2d_nchwc" and conv.inputs[0].op == "tanh" and conv.attrs["out_layout"] == "nchw"
    assert [n.op for n in graph.nodes if n.op not in ("input", "constant")] == ["tanh", "conv2d_nchwc", "sigmoid"]
    check_against_reference(lambda x: F.conv2d(x.tanh(), deep, stride=2, padding=1).sigmoid(), x)

    x = image(1, 32, 14, 14)
    graph, fired = optimized(lambda x: F.conv2d(x.tanh(), shallow).sigmoid(), x)
    assert conversion_share(convs(graph)[0]) > layout.MAX_CONVERSION_SHARE
    assert [n.op for n in convs(graph)] == ["conv2d"] and not fired


def test_a_chain_runs_blocked_only_where_its_edge_conversions_pay_off():
    """MobileNetV2's pairs of 1x1 convolutions: shallow ones at a large image stay NCHW (converting
    their input and output costs more than the kernels gain), deep ones at a small image go blocked."""
    for c, m, side, blocked in ((144, 24, 28, False), (960, 160, 7, True)):
        w1, w2 = weight(m, c, 1), weight(c, m, 1)
        fn = lambda x: F.conv2d(F.conv2d(x, w1) + 1.0, w2).clamp(0, 6)  # noqa: E731
        graph, fired = optimized(fn, image(1, c, side, side))
        assert [n.op for n in convs(graph)] == ["conv2d_nchwc" if blocked else "conv2d"] * 2
        assert fired.get("conversions cancelled", 0) == (2 if blocked else 0)


def test_back_to_back_conversions_cancel():
    """from_blocked(to_blocked(x)) and to_blocked(from_blocked(y)) simplify to x and y: the two permutes
    compose to the identity, the two reshapes to none."""
    x = input_node("x", 0, TensorType((2, 32, 5, 7), tk.float32))
    y = input_node("y", 1, TensorType((2, 4, 5, 7, 8), tk.float32))
    round_trips = [from_blocked(to_blocked(x, 16)), to_blocked(from_blocked(y), 8),
                   to_blocked(from_blocked(to_blocked(from_blocked(y), 8)), 8)]
    graph = Graph([x, y], round_trips)
    simplified, fired = simplify_graph(graph)
    assert simplified.outputs == [x, y, y]
    assert fired["permute(permute(x)) -> permute(x) or x"] >= 3
    # a different block is a real conversion: it stays
    regrouped, _ = simplify_graph(Graph([y], [to_blocked(from_blocked(y), 4)]))
    assert regrouped.outputs[0] is not y
    arrays = [image(2, 32, 5, 7), image(2, 4, 5, 7, 8)]
    for got, want in zip(interpret(simplified, *arrays), interpret(graph, *arrays)):
        np.testing.assert_array_equal(got, want)


def test_depthwise_grouped_float64_and_weight_inputs_are_left_alone():
    x = image(1, 32, 10, 10)
    w_dw, w_grouped = weight(32, 1, 3), weight(32, 8, 3)
    graph, fired = optimized(lambda x: F.conv2d(x, w_dw, stride=2, padding=1, groups=32), x)
    assert [n.op for n in convs(graph)] == ["conv2d"] and not fired
    graph, fired = optimized(lambda x: F.conv2d(x, w_grouped, stride=2, padding=1, groups=4), x)
    assert [n.op for n in convs(graph)] == ["conv2d"] and not fired
    w64 = tk.tensor(RNG.standard_normal((32, 32, 3, 3)))
    graph, fired = optimized(lambda x: F.conv2d(x, w64, stride=2, padding=1), x.astype(np.float64))
    assert [n.op for n in convs(graph)] == ["conv2d"] and not fired
    w = RNG.standard_normal((64, 32, 3, 3)).astype(np.float32)  # a graph input (training): not constant
    graph, fired = optimized(lambda x, w: F.conv2d(x, w, stride=2, padding=1), x, w)
    assert [n.op for n in convs(graph)] == ["conv2d"] and not fired


def test_channels_that_do_not_fill_a_vector_stay_nchw():
    odd = LANES // 2 + 2  # neither a multiple of a vector nor of half of one
    assert block_size(LANES * 4) == LANES and block_size(LANES // 2 * 3) == LANES // 2 and block_size(odd) is None
    x = image(1, 32, 10, 10)
    graph, _ = optimized(lambda x: F.conv2d(x, weight(odd, 32, 3), stride=2, padding=1), x)
    assert [n.op for n in convs(graph)] == ["conv2d"]


def test_a_residual_add_of_an_nchw_convolution_stays_nchw():
    """add(blocked conv, NCHW conv): the add stays NCHW, where the NCHW convolution's kernel can take it."""
    w_blocked, w_dw = weight(64, 64, 3), weight(64, 1, 3)

    def block(x):
        return (F.conv2d(x, w_blocked, stride=2, padding=1) + F.conv2d(x, w_dw, stride=2, padding=1, groups=64)).relu()

    x = image(1, 64, 14, 14)
    graph, _ = optimized(block, x)
    add = next(n for n in graph.nodes if n.op == "add")
    assert add.ndim == 4 and {i.op for i in add.inputs} == {"conv2d", "conv2d_nchwc"}
    check_against_reference(block, x)


def test_blocked_elementwise_ops_take_per_channel_constants_and_outside_tensors():
    """Bias, scale and a residual from outside the chain are blocked for the chain's elementwise ops."""
    w1, w2, scale, b = weight(64, 32, 3), weight(64, 64, 3), bias(64).reshape(1, 64, 1, 1), bias(64)

    def fn(x, skip):
        y = (F.conv2d(x, w1, stride=2, padding=1) * scale + b.reshape(64, 1, 1)).relu()
        y = y + skip  # skip is an input: read through to_blocked in the epilogue
        return F.conv2d(y, w2, stride=2, padding=1) - 1.0

    x, skip = image(2, 32, 15, 15), image(2, 64, 8, 8)
    graph, fired = optimized(fn, x, skip)
    assert fired["to_blocked inserted"] == 1 and fired["conv2d -> conv2d_nchwc"] == 2
    check_against_reference(fn, x, skip)


def test_report_shows_the_layout_pass():
    w1, w2 = weight(32, 16, 3), weight(32, 32, 3)
    fn = lambda x: F.conv2d(F.conv2d(x, w1, stride=2, padding=1).relu(), w2, stride=2, padding=1)  # noqa: E731
    x = image(1, 16, 16, 16)
    f = tk.jit(fn)
    f(x)
    layout = next(p for p in f.report(x).passes if p.name == "layout")
    assert layout.fired["conv2d -> conv2d_nchwc"] == 2 and layout.fired["conversions cancelled"] == 2
    assert "conv2d_nchwc" in f.explain(x)
    assert [n.op for n in convs(tk.jit(fn, backend="interpreter").optimized_graph(x))] == ["conv2d"] * 2


def test_the_rule_keeps_winograd_layers_in_nchw(monkeypatch):
    """Where conv.py's rule picks Winograd, the layout pass keeps NCHW, so the two rules never disagree."""
    from tensorkiln.kernels.templates import conv
    x = image(1, 32, 14, 14)
    node = convs(tk.jit(lambda x: F.conv2d(x, weight(32, 32, 3), padding=1)).graph(x))[0]
    monkeypatch.setattr(conv, "conv_algorithm", lambda root, out: "winograd4")
    assert blocked_conv_choice(node) is None
    monkeypatch.setattr(conv, "conv_algorithm", lambda root, out: "gemm_rows")
    assert blocked_conv_choice(node) == block_size(32)


def test_avx2_blocks_are_eight_channels(monkeypatch):
    monkeypatch.setenv("TENSORKILN_VECTOR_BYTES", "32")
    cpu_target.cache_clear()
    try:
        assert block_size(64) == 8 and block_size(12) == 4 and block_size(10) is None
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()


def test_the_pass_leaves_graphs_without_convolutions_unchanged():
    graph = tk.jit(lambda x: (x * 2).relu()).graph(image(2, 3))
    assert block_layouts(graph) == (graph, {})


# ---- random convolution graphs --------------------------------------------------------------

@st.composite
def conv_graphs(draw):
    """A random DAG of convolutions (1x1, 3x3, 5x5; stride 1, 2; padding; dilation) joined by bias, ReLU,
    scale, and residual adds of same-shaped values, with its input image."""
    channels = st.sampled_from([3, 8, 16, 17, 24, 32, 48, 64])
    c0 = draw(channels)
    side = draw(st.integers(3, 13))
    n = draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2 ** 31))
    rng = np.random.default_rng(seed)
    layers = []
    shapes = [(c0, side)]
    for _ in range(draw(st.integers(1, 4))):
        src = draw(st.integers(0, len(shapes) - 1))
        c, s = shapes[src]
        k = draw(st.sampled_from([1, 3, 5] if s >= 5 else [1, 3] if s >= 3 else [1]))
        dilation = draw(st.sampled_from([1, 2])) if s >= 2 * (k - 1) + 1 else 1
        stride = draw(st.sampled_from([1, 2]))
        pad = draw(st.integers(0, k // 2 * dilation))
        out = (s + 2 * pad - dilation * (k - 1) - 1) // stride + 1
        o = draw(channels)
        w = tk.tensor((rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32))
        b = tk.tensor(rng.standard_normal(o).astype(np.float32))
        residual = next((i for i, (ci, si) in enumerate(shapes) if (ci, si) == (o, out)), None)
        add = residual is not None and draw(st.booleans())
        layers.append((src, w, b, dict(stride=stride, padding=pad, dilation=dilation), residual if add else None,
                       draw(st.sampled_from(["relu", "none", "scale"]))))
        shapes.append((o, out))

    def fn(x):
        values = [x]
        for src, w, b, conv, residual, act in layers:
            y = F.conv2d(values[src], w, b, **conv)
            if residual is not None:
                y = y + values[residual]
            y = y.relu() if act == "relu" else y * 0.5 if act == "scale" else y
            values.append(y)
        return sum(v.sum() * 0 for v in values[1:-1]) + values[-1]  # every layer stays live

    return fn, rng.standard_normal((n, c0, side, side)).astype(np.float32)


@settings(max_examples=12, deadline=None)
@given(case=conv_graphs())
def test_random_conv_graphs_match_the_reference(case):
    """Every eligible convolution blocked (the cost rule switched off), compiled and interpreted."""
    fn, x = case
    with mock.patch.object(layout, "MAX_CONVERSION_SHARE", 1.0):
        graph = tk.jit(fn).graph(x)
        rewritten, _ = block_layouts(graph)
        verify(rewritten)
        want = interpret(graph, x)[0]
        np.testing.assert_allclose(interpret(rewritten, x)[0], want, rtol=1e-4, atol=1e-4)
        check_against_reference(fn, x)


# ---- models -----------------------------------------------------------------------------------

@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize("build", [models.ResNet18, models.MobileNetV2], ids=["resnet18", "mobilenetv2"])
def test_models_with_blocked_layouts_match_eager(build, level):
    tk.manual_seed(0)
    model = build(num_classes=10)
    for module in model.modules():  # non-trivial batch norm, so the folded bias is not zero
        if isinstance(module, tk.nn.BatchNorm2d):
            module.running_mean._value[:] = RNG.uniform(-0.1, 0.1, module.running_mean.shape)
            module.running_var._value[:] = RNG.uniform(0.5, 1.5, module.running_var.shape)
    model.eval()
    x = image(2, 3, 32, 32)
    with tk.no_grad():
        f = tk.jit(model, opt_level=level)
        got = f(x).numpy()
        want = model(tk.tensor(x)).numpy()
        assert any(n.op == "conv2d_nchwc" for n in f.optimized_graph(x).nodes)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
