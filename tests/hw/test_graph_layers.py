"""layers_from_graph on a tiny fake graph with the graph IR's attributes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tensorkiln.hw import AccelLayerError, layers_from_graph, simulate


@dataclass(frozen=True)
class FakeType:
    shape: tuple[int, ...]


@dataclass(frozen=True)
class FakeNode:
    op: str
    inputs: tuple["FakeNode", ...]
    type: FakeType
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str | None = None


@dataclass
class FakeGraph:
    nodes: list[FakeNode]


def tensor(*shape: int, name: str = "x") -> FakeNode:
    return FakeNode("input", (), FakeType(shape), name=name)


def conv(x: FakeNode, w: FakeNode, out: tuple[int, ...], name: str = "conv", **attrs) -> FakeNode:
    return FakeNode("conv2d", (x, w), FakeType(out), attrs, name)


def test_resnet_stem_crops_padding_so_scalesim_agrees():
    # 224x224, 7x7 stride 2, padding 3: padded 230, output 112. SCALE-Sim's ceil formula on
    # 230 would give 113 rows; the extracted layer uses the 229 rows the windows read.
    x, w = tensor(1, 3, 224, 224), tensor(64, 3, 7, 7)
    node = conv(x, w, (1, 64, 112, 112), stride=(2, 2), padding=(3, 3, 3, 3),
                dilation=(1, 1), groups=1)
    (layer,) = layers_from_graph(FakeGraph([x, w, node]))
    assert (layer.ifmap_h, layer.ifmap_w, layer.ofmap_h, layer.ofmap_w) == (229, 229, 112, 112)
    assert (layer.gemm_dims.m, layer.gemm_dims.n, layer.gemm_dims.k) == (112 * 112, 64, 147)
    assert layer.macs == 112 * 112 * 64 * 147


def test_depthwise_grouped_batched_and_matmul():
    x = tensor(2, 8, 16, 16)
    dw = conv(x, tensor(8, 1, 3, 3), (2, 8, 16, 16), "dw", stride=(1, 1),
              padding=(1, 1, 1, 1), groups=8)
    grp = conv(dw, tensor(12, 4, 1, 1), (2, 12, 16, 16), "grp", groups=2)
    flat = tensor(2, 5, 12, name="flat")
    linear = FakeNode("matmul", (flat, tensor(12, 10)), FakeType((2, 5, 10)), name="fc")
    bmm = FakeNode("matmul", (tensor(4, 6, 3), tensor(4, 3, 7)), FakeType((4, 6, 7)),
                   name="bmm")
    relu = FakeNode("relu", (grp,), grp.type, name="relu")
    layers = layers_from_graph(FakeGraph([x, dw, grp, relu, flat, linear, bmm]))
    assert [l.name for l in layers] == ["dw", "grp", "fc", "bmm"]
    d, g, fc, b = layers
    assert (d.kind, d.groups, d.channels, d.num_filters, d.batch) == ("depthwise", 8, 1, 1, 2)
    assert d.gemm_dims.m == 2 * 16 * 16 and d.gemm_dims.k == 9
    assert (g.kind, g.groups, g.channels, g.num_filters) == ("conv", 2, 4, 6)
    assert (fc.groups, fc.gemm_dims.m, fc.gemm_dims.n, fc.gemm_dims.k) == (1, 10, 10, 12)
    assert (b.groups, b.gemm_dims.m, b.gemm_dims.n, b.gemm_dims.k) == (4, 6, 7, 3)
    report = simulate(FakeGraph([x, dw, grp, relu, flat, linear, bmm]), array=(4, 4))
    assert report.totals.macs == sum(l.macs for l in layers)


def test_dilated_and_unnamed_nodes():
    x = tensor(1, 2, 10, 10)
    node = FakeNode("conv2d", (x, tensor(3, 2, 3, 3)), FakeType((1, 3, 6, 6)),
                    {"stride": (1, 1), "dilation": (2, 2)})
    (layer,) = layers_from_graph(FakeGraph([x, node]))
    assert layer.name == "conv2d1"
    assert (layer.filter_extent_h, layer.ofmap_h, layer.gemm_dims.k) == (5, 6, 18)


def test_one_dimensional_matmul_operands():
    v = FakeNode("matmul", (tensor(5), tensor(5, 3)), FakeType((3,)), name="vm")
    (layer,) = layers_from_graph(FakeGraph([v]))
    assert (layer.gemm_dims.m, layer.gemm_dims.n, layer.gemm_dims.k) == (1, 3, 5)


@pytest.mark.parametrize("node,words", [
    (FakeNode("conv2d", (tensor(1, 3, 8, 8), tensor(4, 3, 3, 3)), FakeType((1, 4, 0, 6)),
              name="zero"), ["'zero'", "zero or negative"]),
    (FakeNode("conv2d", (tensor(1, 3, 4, 4), tensor(4, 3, 5, 5)), FakeType((1, 4, 1, 1)),
              name="big"), ["'big'", "does not fit the padded input"]),
    (FakeNode("conv2d", (tensor(1, 6, 8, 8), tensor(4, 3, 3, 3)), FakeType((1, 4, 6, 6)),
              {"groups": 4}, name="split"), ["'split'", "groups"]),
    (FakeNode("matmul", (tensor(2, 3), tensor(4, 5)), FakeType((2, 5)), name="mm"),
     ["'mm'", "inner dimensions"]),
    (FakeNode("matmul", (tensor(3, 2, 3), tensor(4, 3, 5)), FakeType((3, 2, 5)), name="bc"),
     ["'bc'", "broadcast"]),
])
def test_layers_that_cannot_run_are_named(node, words):
    with pytest.raises(AccelLayerError) as info:
        layers_from_graph(FakeGraph([node]))
    for word in words:
        assert word in str(info.value)


def test_winograd_and_blocked_convolutions_count_as_the_conv2d_they_compute():
    x = tensor(1, 64, 56, 56)
    plain = conv(x, tensor(64, 64, 3, 3), (1, 64, 56, 56), "plain", stride=(1, 1), padding=(1, 1, 1, 1),
                 dilation=(1, 1), groups=1)
    winograd = FakeNode("conv2d_winograd", (x, tensor(36, 8, 64, 8)), FakeType((1, 64, 56, 56)),
                        {"m": 4, "padding": (1, 1, 1, 1), "out_channels": 64}, "winograd")
    (a,) = layers_from_graph(FakeGraph([x, plain]))
    (b,) = layers_from_graph(FakeGraph([x, winograd]))
    assert (a.gemm_dims, a.macs, a.ifmap_h, a.ofmap_w) == (b.gemm_dims, b.macs, b.ifmap_h, b.ofmap_w)


def test_blocked_depthwise_counts_as_a_depthwise_conv2d():
    x = tensor(1, 96, 56, 56)
    plain = conv(x, tensor(96, 1, 3, 3), (1, 96, 28, 28), "plain", stride=(2, 2), padding=(1, 1, 1, 1),
                 dilation=(1, 1), groups=96)
    blocked = FakeNode("conv2d_nchwc", (tensor(1, 6, 56, 56, 16), tensor(6, 1, 3, 3, 1, 16)),
                       FakeType((1, 6, 28, 28, 16)), {"stride": (2, 2), "padding": (1, 1, 1, 1),
                                                      "dilation": (1, 1), "out_layout": "nchwc", "groups": 96},
                       "blocked")
    (a,) = layers_from_graph(FakeGraph([x, plain]))
    (b,) = layers_from_graph(FakeGraph([blocked]))
    assert (a.gemm_dims, a.macs, a.ifmap_h) == (b.gemm_dims, b.macs, b.ifmap_h)


def test_packed_matmul_counts_as_the_matmul_it_computes():
    flat = tensor(2, 5, 12)
    plain = FakeNode("matmul", (flat, tensor(12, 70)), FakeType((2, 5, 70)), name="plain")
    packed = FakeNode("matmul_packed", (flat, tensor(3, 12, 32)), FakeType((2, 5, 70)), {"n": 70}, "packed")
    (a,) = layers_from_graph(FakeGraph([flat, plain]))
    (b,) = layers_from_graph(FakeGraph([flat, packed]))
    assert (a.gemm_dims, a.macs) == (b.gemm_dims, b.macs)
