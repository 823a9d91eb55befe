"""The AVX2 tiles that widen bf16 in registers (kernels/templates/bf16_widened_c.py), on a CPU described
without AVX512-BF16: whole precision="bf16" graphs give the same bits as the loop IR that widens each
element, and agree with the bf16 reference interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.kernels.target import _cpu_flags, cpu_target
from tensorkiln.kernels.templates import conv_nchwc_bf16, conv_shallow_bf16
from tensorkiln.passes import conv_bf16_weights, shallow_bf16_weights

pytestmark = pytest.mark.skipif(not {"avx2", "fma"} <= _cpu_flags(), reason="this CPU has no AVX2 with FMA")

RNG = np.random.default_rng(11)


@pytest.fixture
def widened(monkeypatch, tmp_path):
    """The host without AVX512-BF16, 256-bit vectors (blocks of 8 lanes), a fresh compile cache per build."""
    monkeypatch.setenv("TENSORKILN_NO_BF16_DOT", "1")
    monkeypatch.setenv("TENSORKILN_VECTOR_BYTES", "32")
    # Without vdpbf16ps the float32 blocked kernels serve by default; these tests ask for the pairs kernels.
    monkeypatch.setattr(conv_bf16_weights, "PAIRS_WITHOUT_BF16_DOT", True)
    monkeypatch.setattr(shallow_bf16_weights, "PAIRS_WITHOUT_BF16_DOT", True)
    cpu_target.cache_clear()
    counter = iter(range(100))

    def build(fn, x, *, helper: bool):
        """(output, generated C) of fn compiled now, with the tiles or with the widening loop IR."""
        monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path / f"cache{next(counter)}"))
        if not helper:
            monkeypatch.setattr(conv_nchwc_bf16, "uses_widened_tile", lambda kb: False)
            monkeypatch.setattr(conv_shallow_bf16, "uses_widened_tile", lambda lanes: False)
        f = tk.jit(fn, precision="bf16")
        out = f(x).numpy()
        report = f.report(x)
        with open(report.source_path) as source:
            text = source.read()
        monkeypatch.setattr(conv_nchwc_bf16, "uses_widened_tile", UNPATCHED[0])
        monkeypatch.setattr(conv_shallow_bf16, "uses_widened_tile", UNPATCHED[1])
        return out, text, [k.precision for k in report.kernels]

    yield build
    monkeypatch.undo()
    cpu_target.cache_clear()


UNPATCHED = (conv_nchwc_bf16.uses_widened_tile, conv_shallow_bf16.uses_widened_tile)


def _weight(*shape: int) -> tk.Tensor:
    return tk.tensor((RNG.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))).astype(np.float32))


def residual_chain(channels: int, stride: int):
    """3x3 (stride), ReLU, 3x3, a strided 1x1 shortcut, add, ReLU: direct blocked bf16 layers."""
    w1, w2, ws = _weight(channels, channels, 3, 3), _weight(channels, channels, 3, 3), _weight(channels, channels, 1, 1)
    b1, b2 = _weight(channels), _weight(channels)

    def fn(x):
        y = F.conv2d(F.conv2d(x, w1, b1, stride=stride, padding=1).relu(), w2, b2, padding=1)
        return (y + F.conv2d(x, ws, stride=stride)).relu()

    return fn


def stem(kernel: int, stride: int, dilation: int):
    """A shallow layer: 3 input channels, an odd kernel, bias and ReLU."""
    w, b = _weight(24, 3, kernel, kernel), _weight(24)
    pad = dilation * (kernel // 2)
    return lambda x: F.conv2d(x, w, b, stride=stride, padding=pad, dilation=dilation).relu()


CASES = [  # (name, function, input shape, the helper it calls)
    ("direct, 24 channels, stride 1", residual_chain(24, 1), (1, 24, 13, 11), "tk_widened_bf16_conv_"),
    ("direct, 40 channels, stride 2", residual_chain(40, 2), (2, 40, 9, 15), "tk_widened_bf16_conv_"),
    ("stem 7x7 stride 2", stem(7, 2, 1), (1, 3, 37, 29), "tk_widened_bf16_shallow_"),
    ("stem 5x5 stride 1 dilated", stem(5, 1, 2), (2, 3, 19, 23), "tk_widened_bf16_shallow_"),
]


@pytest.mark.parametrize("name,fn,shape,helper", CASES, ids=[c[0] for c in CASES])
def test_the_tile_gives_the_loop_irs_bits(widened, name, fn, shape, helper):
    x = RNG.standard_normal(shape).astype(np.float32)
    got, tiled_c, precisions = widened(fn, x, helper=True)
    looped, looped_c, _ = widened(fn, x, helper=False)
    assert helper in tiled_c and helper not in looped_c
    np.testing.assert_array_equal(got, looped)
    oracle = tk.jit(fn, precision="bf16", backend="interpreter")(x).numpy()
    np.testing.assert_allclose(got, oracle, rtol=1e-4, atol=1e-5 * np.abs(oracle).max())
    assert "bf16 (widened to fp32)" in precisions
