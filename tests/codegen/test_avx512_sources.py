"""The C that tensorkiln generates for an AVX-512 CPU with bf16 and int8 dot products compiles on any host.

Those kernels (the `vdpbf16ps` and `vpdpbusd` tiles, 512-bit row kernels) run only on such a CPU, which
the machine running the tests may not be: here the target is described as one (its /proc/cpuinfo flags),
the programs are lowered and their C is compiled, not run, with GCC for a Sapphire Rapids Xeon. The
tests that run them (tests/kernels) do so where the CPU has them.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln import nn
from tensorkiln.driver import build
from tensorkiln.kernels import target
from tensorkiln.models.mobilenet import InvertedResidual, conv_bn_relu6
from tensorkiln.runtime.c_compiler import C_ERRORS_OF_GCC_14

from cross_gcc import gcc_for

AVX512_HOST_FLAGS = {"sse2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl",
                     "avx512_bf16", "avx512_vnni", "avx512vbmi"}
RNG = np.random.default_rng(4)

class Generated(Exception):
    """Raised in place of compiling: the program's C, for the test to compile itself."""


@pytest.fixture
def avx512_sources(monkeypatch, tmp_path):
    """Lower for an AVX-512 CPU with AVX512-BF16 and VNNI; `sources(fn, *args)` gives the C of fn's call.
    Whatever must run on this host (a quantizer's calibration) runs before the fixture is requested."""
    monkeypatch.setattr(target, "_cpu_flags", lambda: AVX512_HOST_FLAGS)
    monkeypatch.setenv("TENSORKILN_BF16_DOT", "1")
    monkeypatch.delenv("TENSORKILN_NO_BF16_DOT", raising=False)
    monkeypatch.delenv("TENSORKILN_VECTOR_BYTES", raising=False)
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path / "cache"))  # nothing cached for this CPU is reused
    target.cpu_target.cache_clear()

    def capture(text, **options):
        raise Generated(text)

    def sources(fn, *args) -> str:
        with pytest.MonkeyPatch.context() as patch, pytest.raises(Generated) as generated:
            patch.setattr(build, "compile_c", capture)
            fn(*args)
        return generated.value.args[0]
    assert target.cpu_target().bf16_dot and target.cpu_target().int8_dot == "vnni"
    yield sources
    monkeypatch.undo()
    target.cpu_target.cache_clear()


def compiles_for_sapphire_rapids(text: str, folder) -> None:
    gcc_for("sapphirerapids", text, folder, "-O2", "-fPIC", *C_ERRORS_OF_GCC_14,
            # after -Werror=strict-aliasing, which alone sets the warning's level to 3 (misses casts)
            "-Werror=strict-aliasing", "-Wstrict-aliasing=1")


def test_bf16_convolutions(avx512_sources, tmp_path):
    model = nn.Sequential(conv_bn_relu6(3, 32, 3, 2), InvertedResidual(32, 16, 1, 1),
                          InvertedResidual(16, 24, 2, 6)).eval()
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    with tk.no_grad():
        text = avx512_sources(tk.jit(model, precision="bf16"), x)
    assert "_mm512_dpbf16_ps" in text and 'prefer-vector-width=512' in text
    compiles_for_sapphire_rapids(text, tmp_path)


@pytest.mark.parametrize("keys", [7, 70])
def test_bf16_attention_and_linear_layers(avx512_sources, tmp_path, keys):
    w = tk.tensor((RNG.standard_normal((64, 64)) / 8).astype(np.float32))

    def block(x):
        q = (x @ w).reshape(1, keys, 2, 32).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q, is_causal=True)
    x = RNG.standard_normal((keys, 64)).astype(np.float32)
    text = avx512_sources(tk.jit(block, precision="bf16"), x)
    assert "tk_bf16_tile_8x" in text
    compiles_for_sapphire_rapids(text, tmp_path)


def test_int8_layers(request, tmp_path):
    model = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 36, 10)).eval()
    data = [RNG.standard_normal((2, 8, 6, 6)).astype(np.float32) for _ in range(4)]
    quantized = tk.quantize(model, data)  # calibrated (run) on this host first
    text = request.getfixturevalue("avx512_sources")(quantized, data[0])
    assert "_mm512_dpbusd_epi32" in text
    compiles_for_sapphire_rapids(text, tmp_path)
