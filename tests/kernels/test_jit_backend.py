"""tk.jit's compiled path: report, explain, fallback, compiler errors, the one-call property, debug mode."""
from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.driver.executable as tkc
import tensorkiln.nn.functional as F
from tensorkiln.kernels.target import cpu_description

from .compiled import check_compiled


def test_report_and_explain_name_kernels_and_source():
    f = tk.jit(lambda x, w: F.gelu(x @ w).sum(-1))
    x, w = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    report = f.report(x, w)
    assert report.backend == "c"
    assert [k.kind for k in report.kernels] == ["contraction", "reduction"]
    assert any("matmul" in line for line in report.kernels[0].nodes)
    assert report.source_path.endswith(".c")
    assert report.compile_seconds >= 0
    text = f.explain(x, w)
    assert "== lower: 2 kernels as loop IR" in text and report.source_path in text and "for " in text
    assert cpu_description() in text  # the target the kernels were lowered for (its bf16 and int8 choices)
    source = open(report.source_path).read()
    assert "matmul(%x, %w)" in source  # each kernel names its graph nodes
    assert "#pragma omp" in source or "for (int64_t" in source


def test_one_foreign_call_per_invocation():
    f = tk.jit(lambda x: (x.exp().sum(1, keepdim=True) * x).softmax(-1) @ x.T)
    x = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    f(x)
    entry = tk.jit  # silence linters
    compiled = next(iter(f._cache.values())).compiled
    assert len(compiled.report.kernels) > 1
    real = compiled.module._entry
    calls = []

    def counting(*args):
        calls.append(args)
        return real(*args)

    compiled.module._entry = counting
    # counted on the Python path (the C caller, runtime/fastcall.c, makes its one call in C)
    f._native = compiled._native = next(iter(f._cache.values())).native = None
    f(x)
    f(x)
    assert len(calls) == 2
    del entry


def test_weights_are_bound_once_as_constants():
    w = tk.randn(64, 64, seed=3)
    f = tk.jit(lambda x: x @ w)
    x = np.ones((2, 64), np.float32)
    f(x)
    compiled = next(iter(f._cache.values())).compiled
    assert len(compiled.lowered.program.constants) == 1
    np.testing.assert_allclose(f(x).numpy(), x @ w.numpy(), rtol=1e-5)


def test_new_shapes_and_dtypes_retrace():
    f = tk.jit(lambda x: x * 2)
    assert f(np.ones(3, np.float32)).shape == (3,)
    assert f(np.ones((2, 2), np.float32)).shape == (2, 2)
    assert f(np.ones(3, np.int32)).dtype == tk.int32
    assert f.cache_size() == 3


def test_take_with_out_of_range_input_index_raises():
    table = tk.randn(5, 3, seed=0)
    f = tk.jit(lambda i: F.embedding(i, table))
    assert f(np.array([0, 4, -1])).shape == (3, 3)
    with pytest.raises(IndexError, match="out of range"):
        f(np.array([0, 5, 1]))


def test_missing_compiler_falls_back_with_one_warning(monkeypatch):
    import tensorkiln.runtime.c_compiler as compiler
    monkeypatch.setattr(compiler, "find_c_compiler", lambda: None)
    monkeypatch.setattr(tkc, "_warned", set())
    f = tk.jit(lambda x: x + 1)
    with pytest.warns(tkc.FallbackWarning, match="no C compiler"):
        out = f(np.ones(3, np.float32))
    np.testing.assert_array_equal(out.numpy(), 2)
    assert f.report(np.ones(3, np.float32)).backend == "interpreter"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second graph does not warn again
        tk.jit(lambda x: x - 1)(np.ones(2, np.float32))


def test_compiler_failure_raises_compile_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "false")
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))
    f = tk.jit(lambda x: x * 3 + 1)
    with pytest.raises(tk.CompileError) as info:
        f(np.ones(7, np.float32))
    assert info.value.source_path and info.value.source_path.endswith(".c")


@pytest.mark.parametrize("case", ["elementwise", "reduction", "matmul", "conv", "movement"])
def test_debug_mode_subset(case):
    """Debug builds: bounds-checked indexing and UBSan; results must still match the reference."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    fns = {
        "elementwise": lambda x: (x * 2).tanh() + x.sigmoid(),
        "reduction": lambda x: (x.softmax(-1), x.amax((1, 3)), x.argmax(2)),
        "matmul": lambda x: x @ x.transpose(-1, -2),
        "conv": lambda x: F.max_pool2d(F.conv2d(x, tk.ones(4, 3, 3, 3), padding=1, stride=2), 2, ceil_mode=True),
        "movement": lambda x: (F.pad(x, (1, 2, 3, 0)), x[:, ::-1, 1:5:2], tk.cat([x, x], 2).permute(3, 1, 0, 2)),
    }
    check_compiled(fns[case], x, debug=True)


def test_debug_env_variable_builds_with_checks(monkeypatch):
    monkeypatch.setenv("TENSORKILN_DEBUG", "1")
    f = tk.jit(lambda x: x[1:] * 2)
    f(np.ones(4, np.float32))
    source = open(f.report(np.ones(4, np.float32)).source_path).read()
    assert "tk_check" in source or "bounds" in source.lower()


ASAN_SCRIPT = r"""
import numpy as np, tensorkiln as tk, tensorkiln.nn.functional as F
from tensorkiln.driver.build import build
from tensorkiln.kernels.grouping import partition
from tensorkiln.kernels.lower import lower_graph
f = tk.jit(lambda x: (F.softmax(x, -1) @ x.T, F.pad(x, (1, 1)).sum(0)))
x = np.random.default_rng(0).standard_normal((5, 5)).astype(np.float32)
lowered = lower_graph(f.graph(x), partition(f.graph(x)))
module = build(lowered.program, {b.name: a for b, a in zip(lowered.program.constants, lowered.constants)},
               debug=True, asan=True)
outs = module.run(x)
ref = f(x)
for a, b in zip(outs, ref):
    np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-6)
print("asan-ok")
"""


def test_address_sanitizer_build_in_subprocess():
    cc = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not cc or cc == "libasan.so":
        pytest.skip("libasan is not installed")
    env = {"LD_PRELOAD": cc, "ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    import os
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env["TENSORKILN_CACHE"] = os.environ.get("TENSORKILN_CACHE", os.path.expanduser("~/.cache/tensorkiln"))
    result = subprocess.run([sys.executable, "-c", ASAN_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert "asan-ok" in result.stdout, result.stderr[-3000:]
