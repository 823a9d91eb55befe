"""The full-rate FMA width: measured on an AVX-512 CPU (kernels/fma_width_rate.py), forced by the environment."""
from __future__ import annotations

import pytest

from tensorkiln.kernels import fma_width_rate as probe
from tensorkiln.kernels import target
from tensorkiln.kernels.target import CpuTarget, cpu_target

needs_avx512 = pytest.mark.skipif("avx512f" not in target._cpu_flags(), reason="needs an AVX-512 CPU")


@needs_avx512
def test_the_probe_measures_a_rate_between_equal_and_twice():
    rate = probe.fma_width_rate()
    assert rate is not None and 0.7 < rate < 2.6  # 1 where 512-bit FMAs run in halves, 2 at full width


@pytest.mark.parametrize("value,full", [("1", True), ("0", False)])
def test_the_environment_decides_without_measuring(monkeypatch, value, full):
    monkeypatch.setenv("TENSORKILN_FMA_FULL_WIDTH", value)
    monkeypatch.setattr(probe, "fma_width_rate", lambda: pytest.fail("measured although forced"))
    assert probe.fma_full_width() is full


@pytest.mark.parametrize("rate,full", [(None, True), (1.0, False), (1.49, False), (1.5, True), (2.0, True)])
def test_the_rate_decides_when_not_forced(monkeypatch, rate, full):
    monkeypatch.delenv("TENSORKILN_FMA_FULL_WIDTH", raising=False)
    monkeypatch.setattr(probe, "fma_width_rate", lambda: rate)
    assert probe.fma_full_width() is full


@needs_avx512
@pytest.mark.parametrize("value,fma_bytes", [("1", 64), ("0", 32)])
def test_an_avx512_target_in_halves_has_32_byte_full_rate_fmas(monkeypatch, value, fma_bytes):
    monkeypatch.setenv("TENSORKILN_FMA_FULL_WIDTH", value)
    monkeypatch.delenv("TENSORKILN_VECTOR_BYTES", raising=False)
    cpu_target.cache_clear()
    try:
        host = cpu_target()
        assert host.vector_bytes == 64 and host.fma_bytes == fma_bytes
    finally:
        cpu_target.cache_clear()


def test_fma_bytes_defaults_to_the_vector_width():
    assert CpuTarget(64, 32, 1, 2, 3).fma_bytes == 64
    assert CpuTarget(64, 32, 1, 2, 3, full_rate_bytes=32).fma_bytes == 32
    assert CpuTarget(32, 16, 1, 2, 3).fma_bytes == 32
