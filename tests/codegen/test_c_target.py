"""The generated C follows the target the kernels were lowered for: GCC told to vectorize loops at the
lowering's vector width, and native helpers that read their operands within C's aliasing rule."""
from __future__ import annotations

import re

import pytest

from tensorkiln.codegen.c import generate_c
from tensorkiln.codegen.c_native import NATIVE_FUNCTIONS, native_helpers
from tensorkiln.codegen.c_prelude import c_prelude, vector_width_pragma
from tensorkiln.driver import build
from tensorkiln.kernels.target import cpu_target
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Load, Var
from tensorkiln.loops.ir import For, Kernel, Store
from tensorkiln.loops.program import Program
from tensorkiln.runtime.c_compiler import C_ERRORS_OF_GCC_14

from cross_gcc import gcc_for

PRAGMA = '#pragma GCC target("prefer-vector-width=512")'
x, y, i = Buffer("x", "float32", (64,)), Buffer("y", "float32", (64,)), Var("i")
SCALE = Program("scale", (Kernel("scale", (y, x), For(i, 64, Store(y, i, Load(x, i) * 3.0), "vectorized")),), (x,), (y,))


def test_the_pragma_is_there_for_512_bit_vectors_only():
    assert PRAGMA in vector_width_pragma(512)
    assert vector_width_pragma(256) == vector_width_pragma(None) == ""
    assert PRAGMA in generate_c(SCALE, vector_bits=512).text
    assert "prefer-vector-width" not in generate_c(SCALE).text
    # first in the file: every function, the prelude's helpers too, has the same target options
    assert c_prelude(512).index(PRAGMA) < c_prelude(512).index("#include")


@pytest.mark.parametrize("width", [32, 64])
def test_the_build_asks_for_the_lowering_targets_width(monkeypatch, width):
    monkeypatch.setenv("TENSORKILN_VECTOR_BYTES", str(width))
    cpu_target.cache_clear()
    try:
        assert (PRAGMA in build.generate(SCALE).text) == (width == 64)
    finally:
        monkeypatch.undo()
        cpu_target.cache_clear()


def test_gcc_vectorizes_512_bits_wide_under_the_pragma_on_an_intel_avx512_tuning(tmp_path):
    """-march=skylake-avx512 and later Intel tunings prefer 256-bit vectors; the pragma overrides it."""
    counts = {bits: len(re.findall(r"%zmm", gcc_for("skylake-avx512", generate_c(SCALE, vector_bits=bits).text,
                                                    tmp_path, "-O3", assembly=True)))
              for bits in (None, 512)}
    assert counts[None] == 0 and counts[512] > 0, counts


def test_native_helpers_never_read_through_a_cast_pointer():
    """An `*(int32_t *)` read of uint16_t data breaks C's aliasing rule: once the helper is inlined GCC may
    move that load above the stores that filled the data (a bf16 attention read its packs before they
    were written: NaN outputs). Helpers read such pairs with memcpy or a may_alias type."""
    punned = re.compile(r"\*\s*\(\s*(const\s+)?u?int(8|16|32|64)_t\s*\*\s*\)")
    for name, source in NATIVE_FUNCTIONS.items():
        assert not punned.search(source), name


def test_every_native_helper_compiles_for_an_avx512_bf16_cpu(tmp_path):
    """The helpers run only where the CPU has AVX512-BF16: compiled here for such a CPU, whatever this host is."""
    gcc_for("sapphirerapids", c_prelude(512) + "\n" + native_helpers(set(NATIVE_FUNCTIONS)) + "\n", tmp_path, "-O2",
            *C_ERRORS_OF_GCC_14)
