"""The bf16 dot product is used where it multiplies faster than float32 FMAs (kernels/bf16_dot_rate.py)."""
from __future__ import annotations

import math

import pytest

from tensorkiln.kernels import bf16_dot_rate as rate_module
from tensorkiln.kernels import target
from tensorkiln.kernels.bf16_dot_rate import BF16_DOT_MIN_RATE, bf16_dot_pays, forced_choice

from cross_gcc import gcc_for

AVX512_BF16_FLAGS = {"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16"}


@pytest.fixture
def bf16_host(monkeypatch):
    """A CPU with AVX512-BF16, its bf16 dot rate set by the test (`rate.value`); no forced choice."""
    class Rate:
        value: float | None = 2.0
    monkeypatch.setattr(target, "_cpu_flags", lambda: AVX512_BF16_FLAGS)
    monkeypatch.setattr(target, "bf16_dot_rate", lambda: Rate.value)
    monkeypatch.delenv("TENSORKILN_BF16_DOT", raising=False)
    monkeypatch.delenv("TENSORKILN_NO_BF16_DOT", raising=False)
    monkeypatch.delenv("TENSORKILN_VECTOR_BYTES", raising=False)
    target.cpu_target.cache_clear()
    yield Rate
    monkeypatch.undo()
    target.cpu_target.cache_clear()


def test_the_rule_takes_the_instruction_at_the_minimum_rate_and_above():
    assert bf16_dot_pays(None)  # not measured: as before the measurement existed
    assert bf16_dot_pays(2.0) and bf16_dot_pays(BF16_DOT_MIN_RATE)
    assert not bf16_dot_pays(1.0) and not bf16_dot_pays(BF16_DOT_MIN_RATE - 0.01)


@pytest.mark.parametrize("value, expected", [("1", True), ("0", False), ("", None), ("maybe", None)])
def test_the_environment_forces_the_choice(monkeypatch, value, expected):
    monkeypatch.setenv("TENSORKILN_BF16_DOT", value)
    assert forced_choice() is expected


def test_a_core_where_the_dot_product_runs_at_the_fma_rate_keeps_float32_kernels(bf16_host, monkeypatch):
    bf16_host.value = 1.0  # an Intel Xeon with two FMA ports: one vdpbf16ps per cycle, two FMAs
    assert not target.cpu_target().bf16_dot
    assert "bf16 unused (1.00x the FMA rate)" in target.cpu_description()
    monkeypatch.setenv("TENSORKILN_BF16_DOT", "1")
    target.cpu_target.cache_clear()
    assert target.cpu_target().bf16_dot


def test_a_core_where_it_doubles_the_rate_uses_it(bf16_host, monkeypatch):
    bf16_host.value = 2.0  # Zen 4 and Zen 5
    assert target.cpu_target().bf16_dot and "+bf16" in target.cpu_description()
    monkeypatch.setenv("TENSORKILN_BF16_DOT", "0")
    target.cpu_target.cache_clear()
    assert not target.cpu_target().bf16_dot
    monkeypatch.setenv("TENSORKILN_NO_BF16_DOT", "1")  # a CPU without the instruction: never
    monkeypatch.setenv("TENSORKILN_BF16_DOT", "1")
    target.cpu_target.cache_clear()
    assert not target.cpu_target().bf16_dot


def test_the_probe_times_twelve_independent_chains_of_each_instruction(tmp_path):
    assembly = gcc_for("sapphirerapids", rate_module._SOURCE, tmp_path, "-O3", assembly=True)
    # chains that started alike would be merged into one
    assert assembly.count("vdpbf16ps") >= 12 and assembly.count("vfmadd231ps") >= 12


@pytest.mark.skipif("avx512_bf16" not in target._cpu_flags(), reason="this CPU has no AVX512-BF16")
def test_the_probe_measures_this_cpu():
    rate_module.bf16_dot_rate.cache_clear()
    rate = rate_module.bf16_dot_rate()
    assert rate is not None and math.isfinite(rate) and 0.2 < rate < 10
