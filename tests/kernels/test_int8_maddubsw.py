"""The AVX2 `maddubsw` step: a layer whose constant weights vpmaddubsw sums exactly uses it, a layer with one
pair of weights past the bound keeps the widened exact step, and both are exact at the bound with the
largest activations (where a wrong rule would saturate)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.frontend.functions import matmul_integer
from tensorkiln.ir.ops.quantized import pack_u8s8_panels
from tensorkiln.kernels.templates.int8_avx2 import maddubsw_is_exact, saturating_pairs

from .compiled import check_compiled
from .dot_paths import INT8_PATHS, _on_target, random_ints
from .test_conv_u8s8 import _layer, _run, _sums

pytestmark = pytest.mark.skipif("avx2" not in INT8_PATHS, reason="this CPU has no AVX2")


@pytest.fixture
def avx2_target(monkeypatch):
    """The AVX2 int8 path, also on a CPU with AVX-512 (whose own kinds never take the maddubsw step)."""
    yield from _on_target(monkeypatch, "TENSORKILN_INT8_DOT", "avx2")


def _pairs(*pairs: tuple[int, int]) -> np.ndarray:
    """One (K, N) matrix whose column j holds pair j in depths 0 and 1 (its panels' first pair)."""
    return np.array(pairs, np.int8).T.reshape(2, -1)


@pytest.mark.parametrize("pairs, exact", [
    (((127, 1), (-64, -64), (0, 0)), True),  # 255 * 128 = 32640 and -32640: at the bound
    (((127, 2),), False),  # 255 * 129 > 32767
    (((-128, -1),), False),  # 255 * -129 < -32768
    (((127, -128), (-128, 127)), True),  # opposite signs never saturate
    (((-128, 0),), True),  # 255 * -128 = -32640
])
def test_the_rule_bounds_each_pair_of_weights(pairs, exact):
    assert maddubsw_is_exact(pack_u8s8_panels(_pairs(*pairs))) is exact


def test_saturating_pairs_are_named_one_by_one():
    """saturating_pairs flags exactly the pairs past the bound, in panel order (the benchmark's share of
    them, benchmarks/int8_maddubsw.py --pairs, counts these)."""
    flags = saturating_pairs(pack_u8s8_panels(_pairs((127, 1), (127, 2), (-128, -1), (127, -128))))
    # a panel step holds each column's 4 depths in turn: column j's depths (0, 1) are pair 2j
    assert flags[0:8:2].tolist() == [False, True, True, False]
    assert np.count_nonzero(flags) == 2


def test_seven_bit_weights_pass_and_full_range_weights_fail():
    rng = np.random.default_rng(0)
    assert maddubsw_is_exact(pack_u8s8_panels(rng.integers(-64, 65, (75, 40)).astype(np.int8)))
    assert not maddubsw_is_exact(pack_u8s8_panels(random_ints(rng, np.int8, (75, 40))))


def _bounded_weights(rng, shape) -> np.ndarray:
    """int8 weights whose pairs reach the bound: the first of each pair in [-127, 127], the second as large
    as the rule allows with the same sign (so 255 * their sum is 32640 or -32640)."""
    w = random_ints(rng, np.int8, shape).astype(np.int32)
    w = np.clip(w, -127, 127)
    first = w[..., 0::2]
    room = np.where(first >= 0, 128 - first, -128 - first)  # the other of the pair: sum exactly +-128
    out = w.copy()
    out[..., 1::2] = np.clip(room, -127, 127)[..., :out[..., 1::2].shape[-1]]
    return out.astype(np.int8)


def _saturating_inputs(rng, shape) -> np.ndarray:
    """uint8 activations mostly 255 (where a saturating pair would show) and some random."""
    x = np.full(shape, 255, np.uint8)
    mask = rng.random(shape) < 0.3
    x[mask] = rng.integers(0, 256, int(mask.sum()))
    return x


@pytest.mark.parametrize("m, k, n", [(1, 4, 1), (9, 33, 31), (37, 130, 65)])
def test_gemm_at_the_bound_is_exact_on_both_steps(avx2_target, m, k, n):
    rng = np.random.default_rng(m + k + n)
    a = _saturating_inputs(rng, (m, k))
    bounded = _bounded_weights(rng, (n, k)).T.copy()  # pairs run along the depth
    past = bounded.copy()
    past[0, 0], past[1, 0] = 127, 2  # one pair past the bound
    for w, kind in ((bounded, "maddubsw"), (past, "avx2")):
        weights = tk.tensor(w)
        f = check_compiled(lambda x: matmul_integer(x, weights), a)
        assert {kn.precision for kn in f.report(a).kernels if kn.kind == "contraction"} == {f"int8 ({kind})"}
        np.testing.assert_array_equal(f(a).numpy(), a.astype(np.int64) @ w.astype(np.int64))


# (N, C, H, W, O, kernel, stride, padding, dilation): odd channel counts (padded to groups of 4), stride 2,
# dilation, 1x1, tiles of every height
CONVS = [(1, 5, 9, 11, 7, 3, 1, 1, 1), (2, 19, 7, 6, 33, 3, 2, 1, 1), (1, 8, 10, 10, 17, 3, 1, 2, 2),
         (1, 24, 5, 13, 40, 1, 1, 0, 1)]


@pytest.mark.parametrize("shape", CONVS)
def test_convolution_at_the_bound_is_exact_on_both_steps(avx2_target, shape):
    rng = np.random.default_rng(sum(shape))
    layers = []
    for past in (False, True):
        layer = _layer(rng, np.uint8, *shape, 1, per_channel=True)
        o, c, kh, kw = layer["w"].shape
        # the panels pair neighbouring rows of the (KH * KW * C) depth, taps major (with C a multiple of 4
        # the channels of one tap; a shallow input's pairs may span two taps): bound them in that order
        w = _bounded_weights(rng, (o, kh * kw * c)).reshape(o, kh, kw, c).transpose(0, 3, 1, 2).copy()
        if past:  # every shape has C > 1
            w[0, 0, 0, 0], w[0, 1, 0, 0] = -127, -2
        layer.update(w=w, x=_saturating_inputs(rng, layer["x"].shape), zero=0)
        layers.append(layer)
    got, _, module, reference = _run(layers)
    kernels = [k for k in module.report(**{f"x{i}": l["x"] for i, l in enumerate(layers)}).kernels
               if k.kind == "contraction"]
    kinds = sorted(k.precision for k in kernels)
    assert kinds == ["int8 (avx2)", "int8 (maddubsw)"], kinds
    for layer, out, ref in zip(layers, got, reference):
        scale = (np.float32(layer["x_scale"]) * layer["w_scale"]).astype(np.float32).reshape(-1, 1, 1)
        np.testing.assert_array_equal(out, _sums(layer).astype(np.float32) * scale)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * max(np.abs(ref).max(), 1))


def test_requantized_convolution_matches_onnx_runtime_within_one_quantum(avx2_target):
    """7-bit weights (what ONNX Runtime's reduce_range writes): the maddubsw step, and ONNX Runtime's
    QLinearConv, which is exact on these weights too, agree within one output quantum."""
    ort = pytest.importorskip("onnxruntime")
    from .test_conv_u8s8 import _qdq_conv_layers
    rng = np.random.default_rng(11)
    layer = _layer(rng, np.uint8, 1, 13, 12, 12, 21, 3, 1, 1, 1, 1, per_channel=True)
    layer.update(w=rng.integers(-64, 65, layer["w"].shape).astype(np.int8), x_scale=0.02,
                 bias=rng.standard_normal(21).astype(np.float32), output=(0.05, 3))
    got, _, module, _ = _run([layer])
    assert {k.precision for k in module.report(x0=layer["x"]).kernels if k.kind == "contraction"} == \
        {"int8 (maddubsw)"}
    session = ort.InferenceSession(_qdq_conv_layers([layer]).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    theirs = session.run(None, {"x0": layer["x"]})[0]
    assert np.abs(got[0].astype(np.int32) - theirs.astype(np.int32)).max() <= 1
