"""The compile cache: hits, corrupt entries, concurrent builds, compiler errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from tensorkiln.codegen.c import generate_c
from tensorkiln.errors import CompileError
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Load, Var
from tensorkiln.loops.ir import For, Kernel, Store
from tensorkiln.loops.program import Program
from tensorkiln.runtime import c_compiler as compiler
from tensorkiln.runtime.c_compiler import compile_c, entry_is_valid, find_c_compiler
from tensorkiln.runtime.module import CompiledModule

REPO = Path(__file__).resolve().parents[2]


def scale_program(factor: float, name: str = "scale") -> Program:
    """y = x * factor over 16 floats: a different factor is a different source."""
    x, y, i = Buffer("x", "float32", (16,)), Buffer("y", "float32", (16,)), Var("i")
    kernel = Kernel("scale", (y, x), For(i, 16, Store(y, i, Load(x, i) * factor), "vectorized"))
    return Program(name, (kernel,), inputs=(x,), outputs=(y,))


def run_scaled(library_path: str, program: Program) -> np.ndarray:
    source = generate_c(program)
    module = CompiledModule(library_path, source.signature)
    (y,) = module.run(np.arange(16, dtype=np.float32))
    return y


def test_find_c_compiler_honours_cc(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    assert find_c_compiler() is not None
    monkeypatch.setenv("CC", "no-such-compiler-tensorkiln")
    assert find_c_compiler() is None
    monkeypatch.setenv("CC", "gcc -std=c99")  # a command with arguments is fine
    assert find_c_compiler() == "gcc -std=c99"


def test_missing_compiler_raises_compile_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "no-such-compiler-tensorkiln")
    with pytest.raises(CompileError, match="no C compiler found"):
        compile_c("int x;", cache=tmp_path)


def test_second_compile_is_a_cache_hit_without_the_compiler(monkeypatch, tmp_path):
    program = scale_program(2.0)
    source = generate_c(program).text
    first = compile_c(source, cache=tmp_path)
    assert not first.cache_hit and first.compile_seconds > 0

    def no_compiler(*args, **kwargs):
        raise AssertionError("the compiler must not run on a cache hit")

    monkeypatch.setattr(compiler, "_run_compiler", no_compiler)
    second = compile_c(source, cache=tmp_path)
    assert second.cache_hit and second.path == first.path and second.key == first.key
    assert second.compile_seconds == pytest.approx(first.compile_seconds)
    assert Path(second.source_path).read_text() == source
    np.testing.assert_array_equal(run_scaled(second.path, program), np.arange(16) * 2.0)


def test_key_depends_on_flags_and_source(tmp_path):
    a = compiler.cache_key("int x;", "cc", compiler.build_flags())
    assert a != compiler.cache_key("int x;", "cc", compiler.build_flags(debug=True))
    assert a != compiler.cache_key("int y;", "cc", compiler.build_flags())


@pytest.mark.parametrize("damage", ["truncate", "flip_hash"])
def test_corrupt_entry_is_detected_and_rebuilt(tmp_path, damage):
    program = scale_program(3.0)
    source = generate_c(program).text
    first = compile_c(source, cache=tmp_path)
    library = Path(first.path)
    if damage == "truncate":
        library.write_bytes(library.read_bytes()[:100])
    else:
        (library.parent / "module.so.sha256").write_text("0" * 64 + "\n")
    assert not entry_is_valid(library.parent)
    again = compile_c(source, cache=tmp_path)
    assert not again.cache_hit and again.path == first.path
    assert entry_is_valid(library.parent)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no build or trash left behind
    np.testing.assert_array_equal(run_scaled(again.path, program), np.arange(16) * 3.0)


def test_compiler_error_carries_output_and_source_path(tmp_path):
    bad = "/* generated */\nint broken(void) { return undefined_name; }\n"
    with pytest.raises(CompileError) as info:
        compile_c(bad, cache=tmp_path)
    error = info.value
    assert "undefined_name" in error.compiler_output
    assert "undefined_name" in str(error)
    assert error.source_path is not None and Path(error.source_path).read_text() == bad
    assert "generated source:" in str(error)


CONCURRENT_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_compiler import scale_program
    from tensorkiln.codegen.c import generate_c
    from tensorkiln.runtime.c_compiler import compile_c
    from tensorkiln.runtime.module import CompiledModule
    program = scale_program(5.0, name="race")
    source = generate_c(program)
    go = Path(sys.argv[1])
    while not go.exists():  # start both compilers at the same moment
        time.sleep(0.001)
    library = compile_c(source.text, cache=Path(sys.argv[2]))
    module = CompiledModule(library.path, source.signature)
    (y,) = module.run(np.arange(16, dtype=np.float32))
    print(json.dumps({{"hit": library.cache_hit, "y": y.tolist()}}))
""")


def test_two_processes_compiling_the_same_source_both_succeed(tmp_path):
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    script = CONCURRENT_SCRIPT.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(go), str(cache)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(0.5)  # both interpreters up and waiting
    go.write_text("go")
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    for result in results:
        assert result["y"] == [5.0 * v for v in range(16)]
    entries = [p for p in cache.iterdir() if len(p.name) == 64]
    assert len(entries) == 1 and entry_is_valid(entries[0])
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_library_that_fails_to_load_is_moved_aside_and_rebuilt(cache_env, damage):
    from tensorkiln.driver.build import build, generate
    program = scale_program(7.0, name=f"damaged_{damage}")
    library = Path(compile_c(generate(program).text).path)  # the C `build` compiles (its target's vector width)
    _damage(library, b"" if damage == "empty" else library.read_bytes()[:200])
    assert entry_is_valid(library.parent)
    again = build(program)
    assert not again.library.cache_hit and again.library.path == str(library)
    (y,) = again.run(np.arange(16, dtype=np.float32))
    np.testing.assert_array_equal(y, np.arange(16) * 7.0)


def nine_x_plus_two(t):
    return t * 9 + 2


def test_a_damaged_library_named_by_a_graph_record_is_rebuilt(cache_env):
    import tensorkiln as tk
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # Built in another process: dlopen would find a library this process loaded by its path alone.
    script = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import numpy as np, tensorkiln as tk; "
              "from test_compiler import nine_x_plus_two as f; x = np.arange(6, dtype=np.float32).reshape(2, 3); "
              "print(tk.jit(f).report(x).library_path)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    library = Path(done.stdout.split()[-1])
    _damage(library, b"")
    reports = []
    for _ in range(2):  # rebuilt once, then found again
        g = tk.jit(nine_x_plus_two)
        np.testing.assert_array_equal(g(x).numpy(), x * 9 + 2)
        reports.append(g.report(x))
    assert [r.cache_hit for r in reports] == [False, True]
    assert reports[1].library_path == str(library) and library.stat().st_size > 0


def _damage(library: Path, data: bytes) -> None:
    """Replace the library by `data` and its checksum by that of `data` (both written wrong)."""
    # A new file, not the old one truncated: this process may have the old one mapped.
    damaged = library.with_name("damaged.so")
    damaged.write_bytes(data)
    os.replace(damaged, library)
    (library.parent / "module.so.sha256").write_text(compiler._file_sha256(library) + "\n")


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))
    return tmp_path


LOCK_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_compiler import scale_program
    from tensorkiln.codegen.c import generate_c
    from tensorkiln.runtime.c_compiler import compile_c
    source = generate_c(scale_program(11.0, name="locked")).text
    go = Path(sys.argv[1])
    while not go.exists():
        time.sleep(0.001)
    library = compile_c(source, cache=Path(sys.argv[2]))
    print(json.dumps({{"hit": library.cache_hit}}))
""")


def test_processes_compiling_the_same_source_run_the_compiler_once(tmp_path):
    runs = tmp_path / "compiler-runs"
    wrapper = tmp_path / "slow-cc"
    # A compiler that is slow (so the processes overlap) and logs every compile, not `--version`.
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" != "--version" ]; then echo run >> {runs}; sleep 1; fi\n'
                       'exec cc "$@"\n')
    wrapper.chmod(0o755)
    cache, go = tmp_path / "cache", tmp_path / "go"
    script = LOCK_SCRIPT.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "CC": str(wrapper),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(go), str(cache)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    time.sleep(1.0)  # the interpreters up and waiting
    go.write_text("go")
    hits = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        hits.append(json.loads(out.strip().splitlines()[-1])["hit"])
    assert runs.read_text().split() == ["run"]
    assert sorted(hits) == [False, True, True]
    assert not list((cache / "locks").iterdir())  # lock files go with their builds
