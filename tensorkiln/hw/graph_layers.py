"""Extract the layers a systolic array runs (convolutions, matmuls) from a graph.

Works on tensorkiln's graph IR, and on anything shaped like it:
``graph.nodes`` in topological order; each node has ``op`` (str), ``inputs``
(nodes), ``attrs`` (a mapping) and ``type.shape`` (tuple of ints). Other ops
(elementwise, pooling, ...) run elsewhere and are skipped.

conv2d: inputs x (N, C, H, W) and w (O, C/groups, KH, KW); attrs ``stride``
(sh, sw), ``padding`` (top, bottom, left, right), ``dilation`` (dh, dw),
``groups``. SCALE-Sim wants padded input sizes, so the IFMAP height is the
padded height cropped to the rows some window reads,
``(OH - 1) * sh + (KH - 1) * dh + 1``: that keeps SCALE-Sim's ceil-based
output formula equal to the true output size (plain padded height would give
one extra output row whenever (H + pads - KH) is not a multiple of the
stride). The batch N multiplies the streamed dimension M (im2col over the
whole batch). groups == C (one input channel per group) is a depthwise
convolution; other grouped convolutions are ``groups`` independent GEMMs.
conv2d_nchwc (a convolution the CPU layout pass computes in channel blocks)
and conv2d_winograd (a 3x3 convolution whose weights the CPU passes gave
transformed) count as the conv2d they compute; matmul_packed (a constant
weight the CPU passes laid out as GEMM panels) as the matmul it computes.

matmul: (..., M, K) @ (..., K, N). When the right operand has batch
dimensions, each batch entry is its own GEMM (``groups``); when it is a plain
(K, N) matrix - a linear layer - the batch dimensions of the left operand
fold into M, because every row meets the same weights, as on a real array.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from .errors import AccelLayerError
from .layer import Layer


def _pair(value: Any, default: int, what: str, node_name: str) -> tuple[int, int]:
    if value is None:
        return default, default
    if isinstance(value, int):
        return value, value
    items = tuple(int(v) for v in value)
    if len(items) == 1:
        return items[0], items[0]
    if len(items) != 2:
        raise AccelLayerError(f"node '{node_name}': {what} must have 2 entries, got {value!r}")
    return items[0], items[1]


def _padding(value: Any, node_name: str) -> tuple[int, int, int, int]:
    if value is None:
        return 0, 0, 0, 0
    if isinstance(value, int):
        return value, value, value, value
    items = tuple(int(v) for v in value)
    if len(items) == 2:          # (pad_h, pad_w), symmetric
        return items[0], items[0], items[1], items[1]
    if len(items) == 4:          # (top, bottom, left, right)
        return items  # type: ignore[return-value]
    raise AccelLayerError(f"node '{node_name}': padding must have 2 or 4 entries, got {value!r}")


def _name(node: Any, index: int) -> str:
    name = getattr(node, "name", None)
    return str(name) if name else f"{node.op}{index}"


def _shape(node: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in node.type.shape)


def conv_layer(node: Any, name: str) -> Layer:
    """The Layer of one conv2d node."""
    attrs: Mapping[str, Any] = node.attrs
    x, w = (_shape(i) for i in node.inputs[:2])
    out = _shape(node)
    if len(x) != 4 or len(w) != 4 or len(out) != 4:
        raise AccelLayerError(f"node '{name}': conv2d needs 4-D input, weight and output, got "
                              f"{x}, {w} -> {out}")
    n, c, h, wd = x
    o, c_per_group, kh, kw = w
    _, _, oh, ow = out
    groups = int(attrs.get("groups", 1) or 1)
    sh, sw = _pair(attrs.get("stride"), 1, "stride", name)
    dh, dw = _pair(attrs.get("dilation"), 1, "dilation", name)
    pt, pb, pl, pr = _padding(attrs.get("padding"), name)
    if min(n, c, h, wd, o, kh, kw, oh, ow, groups, sh, sw, dh, dw) <= 0:
        raise AccelLayerError(f"node '{name}': conv2d has a zero or negative size: input {x}, "
                              f"weight {w}, output {out}, stride {(sh, sw)}, groups {groups}")
    if c % groups or o % groups or c // groups != c_per_group:
        raise AccelLayerError(f"node '{name}': input channels {c} and filters {o} do not split "
                              f"into {groups} groups of weight {w}")
    ext_h, ext_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    ifmap_h, ifmap_w = (oh - 1) * sh + ext_h, (ow - 1) * sw + ext_w
    if ifmap_h > h + pt + pb or ifmap_w > wd + pl + pr:
        raise AccelLayerError(
            f"node '{name}': output {oh}x{ow} does not fit the padded input "
            f"{h + pt + pb}x{wd + pl + pr} with a {kh}x{kw} filter, stride {(sh, sw)}, "
            f"dilation {(dh, dw)}")
    depthwise = c_per_group == 1 and groups > 1
    return Layer(name, ifmap_h, ifmap_w, kh, kw, channels=c_per_group, num_filters=o // groups,
                 stride_h=sh, stride_w=sw, groups=groups, batch=n, dilation_h=dh, dilation_w=dw,
                 kind="depthwise" if depthwise else "conv")


def matmul_layer(node: Any, name: str) -> Layer:
    """The Layer of one matmul node."""
    a, b = (_shape(i) for i in node.inputs[:2])
    if not a or not b:
        raise AccelLayerError(f"node '{name}': matmul of a scalar: {a} @ {b}")
    # numpy semantics: a 1-D left operand is one row, a 1-D right operand one column.
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    m, k = a2[-2], a2[-1]
    k2, n = b2[-2], b2[-1]
    if k != k2:
        raise AccelLayerError(f"node '{name}': matmul inner dimensions differ: {a} @ {b}")
    a_batch, b_batch = a2[:-2], b2[:-2]
    if not b_batch:
        m *= math.prod(a_batch)   # a linear layer: all rows share the weights
        groups = 1
    else:
        width = max(len(a_batch), len(b_batch))
        pa = (1,) * (width - len(a_batch)) + a_batch
        pb = (1,) * (width - len(b_batch)) + b_batch
        if any(x != y and 1 not in (x, y) for x, y in zip(pa, pb)):
            raise AccelLayerError(f"node '{name}': matmul batch dimensions do not broadcast: "
                                  f"{a} @ {b}")
        groups = math.prod(max(x, y) for x, y in zip(pa, pb))
    if min(m, n, k, groups) <= 0:
        raise AccelLayerError(f"node '{name}': matmul has a zero-sized dimension: {a} @ {b}")
    return Layer.gemm(name, m, n, k, groups=groups)


def _unblocked(node: Any) -> Any:
    """A conv2d_nchwc node as the conv2d it computes (the CPU layout pass blocks its channels)."""
    x, w = node.inputs
    xs = _shape(x)
    n, h, wd = xs[0], xs[2], xs[3]
    channels = xs[1] * xs[4] if len(xs) == 5 else xs[1]
    kblocks, cblocks, kh, kw, cb, kb = _shape(w)
    out = _shape(node)
    shaped = lambda shape: SimpleNamespace(type=SimpleNamespace(shape=shape))  # noqa: E731
    groups = node.attrs.get("groups", 1)  # 1, or the channels of a depthwise layer
    return SimpleNamespace(op="conv2d", attrs={**node.attrs, "groups": groups}, name=getattr(node, "name", None),
                           inputs=(shaped((n, channels, h, wd)), shaped((kblocks * kb, cblocks * cb, kh, kw))),
                           type=SimpleNamespace(shape=(n, kblocks * kb, out[2], out[3])))


def _unpacked(node: Any) -> Any:
    """A matmul_packed node as the matmul by the K x N matrix its panels hold."""
    a, panels = node.inputs
    shaped = lambda shape: SimpleNamespace(type=SimpleNamespace(shape=shape))  # noqa: E731
    return SimpleNamespace(op="matmul", attrs={}, name=getattr(node, "name", None),
                           inputs=(a, shaped((_shape(panels)[1], node.attrs["n"]))), type=node.type)


def _untransformed(node: Any) -> Any:
    """A conv2d_winograd node as the 3x3 stride-1 conv2d it computes."""
    x, u = node.inputs
    shaped = lambda shape: SimpleNamespace(type=SimpleNamespace(shape=shape))  # noqa: E731
    c, k = _shape(u)[2], node.attrs["out_channels"]
    return SimpleNamespace(op="conv2d", attrs={"groups": 1, "stride": (1, 1), "dilation": (1, 1),
                                               "padding": node.attrs["padding"]},
                           name=getattr(node, "name", None), inputs=(x, shaped((k, c, 3, 3))), type=node.type)


def layers_from_graph(graph: Any) -> list[Layer]:
    """The conv2d and matmul layers of ``graph``, in execution order."""
    layers = []
    for index, node in enumerate(graph.nodes):
        if node.op == "conv2d":
            layers.append(conv_layer(node, _name(node, index)))
        elif node.op == "conv2d_nchwc":
            layers.append(conv_layer(_unblocked(node), _name(node, index)))
        elif node.op == "conv2d_winograd":
            layers.append(conv_layer(_untransformed(node), _name(node, index)))
        elif node.op == "matmul":
            layers.append(matmul_layer(node, _name(node, index)))
        elif node.op == "matmul_packed":
            layers.append(matmul_layer(_unpacked(node), _name(node, index)))
    return layers
