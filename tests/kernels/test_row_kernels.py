"""Memory-bound kernels (softmax, layer norm, GELU, an elementwise chain) on odd shapes, against the reference.

The row kernels (kernels/templates/rows.py) reduce long rows into several
vector accumulators with a scalar tail, write softmax's exponentials once and
scale them by a reciprocal; the C backend prefetches the next row during the
second pass. Widths around the block size (1, 3, 17, 1000, 4097) exercise
the short-row path, whole blocks and the tails.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.kernels.templates.rows import LANE_VECTORS
from tensorkiln.kernels.target import cpu_target

from .compiled import check_compiled
from .disassembly import needs_vector_disassembly

WIDTHS = (1, 3, 17, 1000, 4097)


def memory_bound(*arrays):
    """softmax, layer norm (weight and bias), GELU (erf and tanh) and a 5-op chain of each (x, weight, bias)."""
    outs = []
    for x, weight, bias in zip(arrays[0::3], arrays[1::3], arrays[2::3]):
        width = x.shape[-1]
        outs += [x.softmax(-1), F.layer_norm(x, (width,), weight, bias), F.gelu(x),
                 F.gelu(x, approximate="tanh"), ((x * 2.0 + 1.0).relu() - 0.5).abs() * 3.0]
    return tuple(outs)


@pytest.mark.parametrize("rows", [1, 7, 33, 127])
def test_odd_shapes_match_the_reference(rows):
    rng = np.random.default_rng(rows)
    arrays = []
    for width in WIDTHS:
        arrays += [(rng.standard_normal((rows, width)) * 3).astype(np.float32),
                   rng.standard_normal(width).astype(np.float32), rng.standard_normal(width).astype(np.float32)]
    check_compiled(memory_bound, *arrays)


def test_leading_dims_and_float64():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 300)).astype(np.float64)
    check_compiled(lambda x: (x.softmax(-1), F.layer_norm(x, (300,)), x.log_softmax(-1)), x)


def test_softmax_special_values():
    """inf, -inf, NaN and huge values follow numpy: a NaN or +inf poisons its row, -inf gives 0."""
    width = 300
    x = np.random.default_rng(1).standard_normal((8, width)).astype(np.float32)
    x[0, 5] = np.nan
    x[1, 7] = np.inf
    x[2, :] = -np.inf
    x[3, 11] = -np.inf
    x[4, 13] = 3e38
    x[5, :] = 1e30
    x[6, 250] = -3e38
    x[7, 299] = np.nan  # in the tail of the last block
    check_compiled(lambda x: x.softmax(-1), x)


def test_layer_norm_constant_and_large_rows():
    width = 1000
    x = np.random.default_rng(2).standard_normal((4, width)).astype(np.float32)
    x[0, :] = 5.0          # variance 0
    x[1, :] *= 1e15        # large values (the squares' sum stays finite)
    x[2, :] += 1e3         # mean far from 0
    x[3, 17] = np.nan
    weight = np.linspace(-1, 1, width, dtype=np.float32)
    bias = np.linspace(0, 1, width, dtype=np.float32)
    check_compiled(lambda x, w, b: F.layer_norm(x, (width,), w, b), x, weight, bias, factor=5)


def test_sum_normalizer_keeps_the_division_for_tiny_totals():
    """x / sum(x) multiplies by the reciprocal, unless the reciprocal overflows (a total below ~1e-38)."""
    x = np.abs(np.random.default_rng(3).standard_normal((3, 500))).astype(np.float32)
    x[1] *= 1e-41  # subnormal elements: 1 / sum is inf
    check_compiled(lambda x: x / x.sum(-1, keepdims=True), x)


def _source(fn, *args) -> str:
    f = tk.jit(fn)
    f(*args)
    with open(f.report(*args).source_path) as source:
        return source.read()


def test_softmax_kernel_structure():
    """Long rows: lane accumulators, exp computed once and stored, a reciprocal, the next row prefetched."""
    x = np.random.default_rng(4).standard_normal((16, 4096)).astype(np.float32)
    text = _source(lambda x: x.softmax(-1), x)
    kernel = text[text.index("static void kernel_"):text.index("TK_EXPORT int tk_entry")]
    lanes = LANE_VECTORS * cpu_target().vector_bytes // 4
    assert f"acc2_lanes[{lanes}]" in kernel
    assert kernel.count("tk_expf(") == 1  # stored and summed from one local; 4096 leaves no tail
    assert "* inverse" in kernel
    assert "__builtin_prefetch(&in_x[" in kernel


@needs_vector_disassembly
def test_gelu_and_softmax_are_vector_code():
    """erf, tanh and exp are inlined vector code: no scalar libm call is left in the libraries."""
    x = np.random.default_rng(5).standard_normal((64, 1024)).astype(np.float32)
    f = tk.jit(lambda x: (F.gelu(x), F.gelu(x, approximate="tanh"), x.softmax(-1)))
    f(x)
    text = subprocess.run(["objdump", "-d", f.report(x).library_path or ""], capture_output=True, text=True).stdout
    assert not any(f"<{name}" in line and "call" in line for line in text.splitlines()
                   for name in ("erff", "expf", "tanhf"))
    fma = [line for line in text.splitlines() if "vfmadd" in line and "ps" in line]
    assert any("ymm" in line or "zmm" in line for line in fma)


def test_min_max_rows_with_nan_and_inf():
    """Row max/min reduce in lanes with plain compares; NaN comes from the side count, as in numpy."""
    x = np.random.default_rng(6).standard_normal((6, 700)).astype(np.float32)
    x[0, 3] = np.nan      # first block
    x[1, 650] = np.nan    # past the whole blocks (tail)
    x[2, 100] = np.inf
    x[3, 200] = -np.inf
    x[4, :] = -np.inf
    check_compiled(lambda x: (x - x.amin(-1, keepdims=True)) / (x.amax(-1, keepdims=True) - x.amin(-1, keepdims=True)),
                   x)


@pytest.fixture
def streaming(monkeypatch, tmp_path):
    """Row kernels stream any float32 output: a pretend last-level cache of 4 KiB (and a fresh cache
    directory, so no graph compiled under the real cache size is reused)."""
    import dataclasses

    import tensorkiln.kernels.stream as stream
    small = dataclasses.replace(cpu_target(), l3=4096)
    monkeypatch.setattr(stream, "cpu_target", lambda: small)
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))


def test_streamed_rows_match_the_reference(streaming):
    """Rows staged in a local buffer and copied out with non-temporal stores: odd widths (the copy's
    alignment peel and tail), a row too long to stage (plain stores), special values."""
    rng = np.random.default_rng(6)
    arrays = []
    for width in (300, 1000, 4097):
        arrays += [(rng.standard_normal((33, width)) * 3).astype(np.float32),
                   rng.standard_normal(width).astype(np.float32), rng.standard_normal(width).astype(np.float32)]
    arrays[0][0, 5], arrays[0][1, 7], arrays[0][2, :] = np.nan, np.inf, -np.inf
    check_compiled(memory_bound, *arrays)
    for fn in (lambda x, w, b: x.softmax(-1), lambda x, w, b: F.layer_norm(x, (300,), w, b),
               lambda x, w, b: x.log_softmax(-1)):
        text = _source(fn, *arrays[:3])
        assert "tk_stream_f32(&out0[" in text and "tk_stream_fence();" in text
        assert "_mm_stream_ps" in text  # the helpers are emitted only into a file that streams
    assert "tk_stream_f32(" not in _source(lambda x: x.softmax(-1), arrays[6])  # 4097 floats: too long to stage


def test_rows_below_the_cache_size_use_plain_stores():
    x = np.random.default_rng(7).standard_normal((16, 4096)).astype(np.float32)
    assert "tk_stream" not in _source(lambda x: x.softmax(-1), x)
