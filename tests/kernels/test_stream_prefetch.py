"""The weight stream's software prefetch in matrix-vector products over packed weights
(kernels/templates/stream_prefetch.py), against the reference interpreter.

Shapes are odd on purpose: K not a multiple of the independent sums (the last depths go to the
first sums), N past the last whole panel, 1 to 3 rows (4, 2 and 1 sums per output), and
distances that run past the end of the weights (the addresses are clamped into the buffer).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.kernels.target import CpuTarget
from tensorkiln.kernels.templates import stream_prefetch
from tensorkiln.kernels.templates.stream_prefetch import StreamPrefetch, stream_prefetch_for

from .compiled import check_compiled

RNG = np.random.default_rng(23)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("rows, k, n", [(1, 37, 130), (2, 101, 77), (3, 64, 200), (1, 768, 1000), (1, 5, 2000)])
@pytest.mark.parametrize("ahead", [StreamPrefetch("nta", 1024), StreamPrefetch("t0", 64 * 1024)])
def test_prefetched_matrix_vector_products_match_the_reference(monkeypatch, rows, k, n, ahead):
    monkeypatch.setattr(stream_prefetch, "WEIGHT_STREAM_PREFETCH", ahead)
    w, bias = tk.tensor(rand(n, k)), tk.tensor(rand(n))
    x = rand(rows, k)
    with tk.no_grad():
        f = check_compiled(lambda x: F.linear(x, w, bias), x)
        source = open(f.report(x).source_path).read()
    assert f"{ahead.helper}(&" in source
    # clamped into the weights: a min with the last element, or that element where the simplifier knew it
    indices = re.findall(rf"{ahead.helper}\(&c\d+\[(.*)\]\);", source)
    assert indices and all(i.startswith("tk_min_int64(") or i.isdigit() for i in indices), indices[:2]


def test_float64_weights_prefetch_their_lines_too(monkeypatch):
    """Eight float64 per cache line: the distance in elements halves, the results stay exact."""
    ahead = StreamPrefetch("nta", 4096)
    monkeypatch.setattr(stream_prefetch, "WEIGHT_STREAM_PREFETCH", ahead)
    w = tk.tensor(RNG.standard_normal((203, 129)))
    x = RNG.standard_normal((1, 129))
    with tk.no_grad():
        f = check_compiled(lambda x: F.linear(x, w), x)
        assert f"{ahead.helper}(&" in open(f.report(x).source_path).read()


def test_without_a_prefetch_the_kernel_has_none(monkeypatch):
    monkeypatch.setattr(stream_prefetch, "WEIGHT_STREAM_PREFETCH", None)
    w = tk.tensor(rand(300, 64))
    x = rand(1, 64)
    with tk.no_grad():
        f = check_compiled(lambda x: F.linear(x, w), x)
        assert "tk_prefetch_stream" not in open(f.report(x).source_path).read()


def test_the_setting_is_part_of_the_cache_key(monkeypatch):
    """A library built with one prefetch is never reused for another: the target description says it."""
    from tensorkiln.driver.stages import target_description
    monkeypatch.setattr(stream_prefetch, "WEIGHT_STREAM_PREFETCH", None)
    plain = target_description()
    monkeypatch.setattr(stream_prefetch, "WEIGHT_STREAM_PREFETCH", StreamPrefetch("nta", 2048))
    assert target_description() != plain


def test_the_distance_comes_from_the_target_description():
    zen4 = CpuTarget(32, 16, 32 * 1024, 1024 * 1024, 32 * 1024 * 1024, fma256=True)
    skylake = CpuTarget(64, 32, 32 * 1024, 1024 * 1024, 32 * 1024 * 1024)
    small_l1 = CpuTarget(32, 16, 16 * 1024, 256 * 1024, 8 * 1024 * 1024)
    for target in (zen4, skylake, small_l1):
        chosen = stream_prefetch_for(target, "AuthenticAMD")
        assert chosen is not None and chosen.hint == "nta"
        assert chosen.distance % 64 == 0 and 0 < chosen.distance < target.l1d
        assert stream_prefetch_for(target, "GenuineIntel") is None  # measured slower there: none
    assert stream_prefetch_for(small_l1).distance < stream_prefetch_for(zen4).distance


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="hint 'nt'"):
        StreamPrefetch("nt", 1024)
    with pytest.raises(ValueError, match="distance 100 bytes"):
        StreamPrefetch("nta", 100)
