"""The `streamed` loop kind: copies written with non-temporal stores (codegen/c_stream.py), run against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.driver.build import build
from tensorkiln.codegen.c import generate_c
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Const, Load, Var
from tensorkiln.loops.ir import Alloc, For, Kernel, Store, block
from tensorkiln.loops.program import Program

ROWS, WIDTH = 7, 1000  # 1000 floats: the copy has an alignment peel, whole vectors and a tail
a = Buffer("a", "float32", (ROWS, WIDTH))
rows_out = Buffer("rows_out", "float32", (ROWS, WIDTH))
shifted = Buffer("shifted", "float32", (WIDTH + 3,))
doubled = Buffer("doubled", "float32", (WIDTH,))


def _program() -> Program:
    r, c, s, i = Var("r"), Var("c"), Var("s"), Var("i")
    stage = Buffer("stage", "float32", (WIDTH,), scope="local")
    # each row computed into a local stage, then streamed out (the parallel loop's threads fence)
    per_row = Alloc(stage, block(
        For(c, WIDTH, Store(stage, c, Load(a, r * WIDTH + c) * Const(2.0, "float32")), "vectorized"),
        For(s, WIDTH, Store(rows_out, r * WIDTH + s, Load(stage, s)), "streamed")))
    rows_kernel = Kernel("stream_rows", (rows_out, a), For(r, ROWS, per_row, "parallel"))
    # a destination 3 floats past the array's start: never 64-byte aligned where the copy begins
    shifted_kernel = Kernel("stream_shifted", (shifted, a), block(
        For(i, 3, Store(shifted, i, Const(-1.0, "float32"))),
        For(s, WIDTH, Store(shifted, s + 3, Load(a, s)), "streamed")))
    # not a plain copy: written as a vectorized loop
    doubled_kernel = Kernel("streamed_not_a_copy", (doubled, a),
                            For(s, WIDTH, Store(doubled, s, Load(a, s + WIDTH) + Load(a, s)), "streamed"))
    return Program("streams", (rows_kernel, shifted_kernel, doubled_kernel), (a,), (rows_out, shifted, doubled))


@pytest.fixture(scope="module")
def results():
    module = build(_program())
    x = np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(np.float32)
    return x, module.run(x), module.source.text


def test_streamed_copies_match_numpy(results):
    x, (rows, shifted_out, doubled_out), _ = results
    np.testing.assert_array_equal(rows, x * 2)
    np.testing.assert_array_equal(shifted_out, np.concatenate([[-1, -1, -1], x[0]]).astype(np.float32))
    np.testing.assert_array_equal(doubled_out, x[1] + x[0])


def test_copies_become_stream_calls_and_each_thread_fences(results):
    text = results[2]
    assert "tk_stream_f32(&rows_out[r * 1000], &stage[0], 1000);" in text
    assert "tk_stream_f32(&shifted[3], &a[0], 1000);" in text
    rows_kernel = text[text.index("kernel_stream_rows("):text.index("kernel_stream_shifted(")]
    assert "#pragma omp parallel\n" in rows_kernel and "#pragma omp for" in rows_kernel
    assert rows_kernel.index("tk_stream_fence();") > rows_kernel.index("tk_stream_f32(")
    other = text[text.index("kernel_streamed_not_a_copy("):]
    assert "tk_stream" not in other.split("TK_EXPORT")[0] and "#pragma omp simd" in other


def test_debug_builds_write_plain_loops():
    text = generate_c(_program(), debug=True).text
    assert "tk_stream" not in text and "immintrin" not in text
