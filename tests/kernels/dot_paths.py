"""The instruction paths a low-precision kernel test runs on, and the operands it feeds them.

The target (`kernels/target.py: cpu_target`) is read once per process; these fixtures describe
another host through its environment switches and clear the cached target before and after, so
one machine runs every path:

- `bf16_path`: "vdpbf16ps" (the AVX512-BF16 tile, skipped on a CPU without it) or "widened"
  (`TENSORKILN_NO_BF16_DOT=1`: loop IR that widens each bf16 value and multiplies with fma; the
  matmuls and attention kept on the bf16 pairs kernels, which such a target otherwise leaves for
  the float32 ones: passes/bf16_fp32_gemm.py's `PAIRS_WITHOUT_BF16_DOT`);
- `int8_path`: each int8 dot-product kind this CPU has (`TENSORKILN_INT8_DOT`), its own first;
  `avx2_int8_path`: the AVX2 one alone;
- `vector_path`: "avx512" (512-bit vectors, skipped on a CPU without them), "avx2"
  (`TENSORKILN_VECTOR_BYTES=32`: the 256-bit helpers) or "portable" (`TENSORKILN_VECTOR_BYTES=16`:
  plain C).

A test module imports the fixture it needs (`from .dot_paths import bf16_path`).
"""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.dtypes import bf16_bits_from_f32, f32_from_bf16_bits
from tensorkiln.passes import bf16_fp32_gemm
from tensorkiln.kernels.target import INT8_DOT_KINDS, _cpu_flags, cpu_target, int8_dot_kind

HAS_BF16_DOT = cpu_target().bf16_dot
HAS_AVX512 = cpu_target().vector_bytes >= 64
INT8_PATHS = INT8_DOT_KINDS[INT8_DOT_KINDS.index(int8_dot_kind(_cpu_flags())):]


def _on_target(monkeypatch, variable: str | None, value: str = "1"):
    """Set one target switch (none: the host as it is) with a fresh target; undo both afterwards."""
    if variable is not None:
        monkeypatch.setenv(variable, value)
    cpu_target.cache_clear()
    yield
    monkeypatch.undo()
    cpu_target.cache_clear()


@pytest.fixture(params=["vdpbf16ps", "widened"])
def bf16_path(request, monkeypatch):
    """Which bf16 micro-kernel the target asks for."""
    if request.param == "vdpbf16ps" and not HAS_BF16_DOT:
        pytest.skip("this CPU has no AVX512-BF16")
    variable = "TENSORKILN_NO_BF16_DOT" if request.param == "widened" else None
    monkeypatch.setattr(bf16_fp32_gemm, "PAIRS_WITHOUT_BF16_DOT", True)
    for _ in _on_target(monkeypatch, variable):
        yield request.param


@pytest.fixture(params=INT8_PATHS)
def int8_path(request, monkeypatch):
    """Force one int8 dot-product path of those this CPU has."""
    for _ in _on_target(monkeypatch, "TENSORKILN_INT8_DOT", request.param):
        yield request.param


@pytest.fixture
def avx2_int8_path(monkeypatch):
    """The AVX2 int8 path (`TENSORKILN_INT8_DOT=avx2`), on any CPU that has it: an AVX-512 one too."""
    if "avx2" not in INT8_PATHS:
        pytest.skip("this CPU has no AVX2")
    for _ in _on_target(monkeypatch, "TENSORKILN_INT8_DOT", "avx2"):
        yield "avx2"


@pytest.fixture(params=["avx512", "avx2", "portable"])
def vector_path(request, monkeypatch):
    """Which helper variant the target asks for: with 512-bit vectors, with 256-bit ones (AVX2 and FMA),
    or the portable one (the target described with 16-byte vectors)."""
    if request.param == "avx512" and not HAS_AVX512:
        pytest.skip("this CPU has no 512-bit vectors")
    if request.param == "avx2" and not cpu_target().fma256:
        pytest.skip("this CPU has no AVX2 with FMA")
    width = {"avx512": None, "avx2": "32", "portable": "16"}[request.param]
    for _ in _on_target(monkeypatch, width and "TENSORKILN_VECTOR_BYTES", width or "1"):
        yield request.param


def bf16(a: np.ndarray) -> np.ndarray:
    """`a` rounded to bfloat16 (nearest even), as float64: the operands a bf16 kernel multiplies."""
    return f32_from_bf16_bits(bf16_bits_from_f32(np.asarray(a, dtype=np.float32))).astype(np.float64)


def random_ints(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    """Integers over the whole range of `dtype`."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)
