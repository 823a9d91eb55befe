"""Reduction loops (kernels/reduction.py): merged contiguous axes and lane accumulators, compiled vs reference.

Adjacent reduced axes share one loop only where the input's index stays affine
in it; a sum whose short contiguous inner loop runs many times keeps one
partial sum per lane. Every shape here is compared with the numpy reference,
including sizes that are not multiples of any vector width.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.kernels.reduction import reduce_loops, use_lanes

from .compiled import check_compiled

CASES = [  # shape, axes
    ((64, 16, 8, 8), (0, 2, 3)),  # batch norm's statistics: lanes over the 64-element plane
    ((5, 3, 7, 9), (0, 2, 3)),  # a 63-element plane
    ((3, 13, 5), (0, 2)),
    ((7, 11), (0,)),  # a column sum: the output's columns are the SIMD lanes
    ((4, 6, 10), (1, 2)),
    ((2, 3, 4, 5), (0, 1, 2, 3)),
    ((6, 17, 3), (2,)),
    ((9, 1, 33), (0, 1)),
]


@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("shape, axes", CASES)
def test_sum_mean_max_min(shape, axes, keepdims):
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    check_compiled(lambda x: (x.sum(axes, keepdims=keepdims), x.mean(axes, keepdims=keepdims),
                              x.amax(axes, keepdims=keepdims), x.amin(axes, keepdims=keepdims)), x)


@pytest.mark.parametrize("shape, axes", CASES[:4])
def test_integer_sums_are_exact(shape, axes):
    x = np.random.default_rng(1).integers(-1000, 1000, shape).astype(np.int32)
    check_compiled(lambda x: x.sum(axes, keepdims=True), x)


def test_reduction_of_a_transposed_input():
    """The permuted input's index is not affine in a merged loop: the axes keep their own loops."""
    x = np.random.default_rng(2).standard_normal((6, 10, 12)).astype(np.float32)
    check_compiled(lambda x: x.permute(0, 2, 1).sum((1, 2)), x)
    check_compiled(lambda x: (x * 2.0).permute(2, 0, 1).reshape(12, 60).sum(1, keepdims=True), x)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_random_reductions(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 19), min_size=1, max_size=4), label="shape"))
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1), label="axes")))
    keepdims = data.draw(st.booleans(), label="keepdims")
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    check_compiled(lambda x: ((x * x).sum(axes, keepdims=keepdims), x.amax(axes, keepdims=keepdims)), x)


def test_batch_norm_statistic_sums_lanes_over_one_merged_loop():
    x = np.random.default_rng(3).standard_normal((64, 16, 8, 8)).astype(np.float32)
    f = tk.jit(lambda x: x.sum((0, 2, 3), keepdims=True))
    np.testing.assert_allclose(f(x).numpy(), x.sum((0, 2, 3), keepdims=True), rtol=1e-4, atol=1e-3)
    text = Path(f.report(x).source_path).read_text()
    assert "acc_lanes" in text and "k2 < 64" in text and "k3" not in text


def _probe(shape, axes, index_of):
    buf = Buffer("t", "float32", shape)
    return reduce_loops(shape, axes, lambda index: E.Load(buf, index_of(index)))


def test_reduce_loops_merge_only_affine_runs():
    shape = (4, 6, 8)
    row_major = lambda i: (i[0] * 6 + i[1]) * 8 + i[2]  # noqa: E731
    loops = _probe(shape, (1, 2), row_major)
    assert [(loop.axes, loop.extent) for loop in loops] == [((1, 2), 48)]
    transposed = lambda i: (i[0] * 8 + i[2]) * 6 + i[1]  # noqa: E731  axes 1 and 2 swapped in memory
    loops = _probe(shape, (1, 2), transposed)
    assert [(loop.axes, loop.extent) for loop in loops] == [((1,), 6), ((2,), 8)]
    loops = _probe(shape, (0, 2), row_major)
    assert [loop.axes for loop in loops] == [(0,), (2,)]
    assert use_lanes("reduce_sum", "float32", loops, 3)
    assert not use_lanes("reduce_max", "float32", loops, 3)


EXTREME_CASES = [  # shape, axes: one contiguous run each, long enough for lanes, with and without a tail
    ((98304,), (0,)),  # a whole tensor to one value (dynamic quantization's range)
    ((128, 768), (0, 1)),
    ((7, 300), (1,)),  # per row, 300 = whole blocks of lanes and a tail
    ((3, 4, 50), (1, 2)),  # two axes merged into one run of 200
    ((2, 140), (1,)),  # at least two blocks of lanes with 16-lane vectors (4 x 16), and a tail
]


@pytest.mark.parametrize("shape, axes", EXTREME_CASES)
def test_float_max_min_of_one_run_reduce_in_lanes(shape, axes):
    """A float max/min over one contiguous run keeps several vectors of partial extremes, compared plainly
    (NaN counted on the side): same answers as numpy, NaN wherever any element of the run is NaN."""
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    run = int(np.prod([shape[a] for a in axes]))
    flat = x.reshape(-1, run)
    flat[0, run // 3] = np.nan  # inside the lanes
    flat[-1, run - 1] = np.nan  # in the last elements (the tail where the run is not whole blocks)
    flat[min(1, len(flat) - 1), 5] = np.inf
    flat[min(1, len(flat) - 1), 6] = -np.inf
    check_compiled(lambda x: (x.amax(axes), x.amin(axes), x.amax(axes, keepdims=True)), x)
    signed = np.full(shape, -0.0, np.float32)
    signed.reshape(-1, run)[:, run // 2] = 0.0
    check_compiled(lambda x: (x.amax(axes), x.amin(axes)), signed)
    f = tk.jit(lambda x: x.amax(axes))
    f(x)
    assert "acc_lanes" in Path(f.report(x).source_path).read_text()
