"""Debug builds: an out-of-range index is reported as an exception, never a crash."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tensorkiln.driver.build import build
from tensorkiln.codegen.c import generate_c
from tensorkiln.errors import TensorKilnError
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Const, Load, Var
from tensorkiln.loops.ir import For, Kernel, Store
from tensorkiln.loops.program import Program
from tensorkiln.runtime.c_compiler import compile_c
from tensorkiln.runtime.module import CompiledModule, OutOfBoundsError

REPO = Path(__file__).resolve().parents[2]
i = Var("i")


def gather_scatter_program() -> Program:
    """out[i] = table[idx[i]] (a gather), then hits[idx[i]] = 1 in a parallel loop (a scatter)."""
    table = Buffer("table", "float32", (10,))
    idx = Buffer("idx", "int64", (6,))
    out = Buffer("out", "float32", (6,))
    hits = Buffer("hits", "float32", (10,))
    gather = Kernel("gather", (out, table, idx), For(i, 6, Store(out, i, Load(table, Load(idx, i)))),
                    comment="%2 = gather(%0, %1)")
    scatter = Kernel("scatter", (hits, idx), For(i, 6, Store(hits, Load(idx, i), Const(1.0, "float32")), "parallel"))
    return Program("gather_scatter", (gather, scatter), inputs=(table, idx), outputs=(out, hits))


@pytest.fixture(scope="module")
def debug_module():
    return build(gather_scatter_program(), debug=True)


def test_valid_indices_run_normally(debug_module):
    table = np.arange(10, dtype=np.float32) * 10
    idx = np.array([0, 9, 3, 3, 5, 1])
    out, hits = np.zeros(6, np.float32), np.zeros(10, np.float32)
    debug_module(table, idx, out, hits)
    np.testing.assert_array_equal(out, table[idx])
    assert hits.sum() == 5


def test_out_of_range_load_raises_with_kernel_buffer_index_and_size(debug_module):
    table = np.arange(10, dtype=np.float32)
    out, hits = np.zeros(6, np.float32), np.zeros(10, np.float32)
    with pytest.raises(OutOfBoundsError) as info:
        debug_module(table, np.array([0, 1, 12, 2, 3, 4]), out, hits)
    message = str(info.value)
    assert message == "kernel gather: load of table[12] out of bounds (buffer size 10)"
    assert isinstance(info.value, IndexError) and isinstance(info.value, TensorKilnError)
    # the module stays usable: the error state is reset on the next call
    debug_module(table, np.array([0, 1, 2, 3, 4, 5]), out, hits)


def test_negative_index_is_caught(debug_module):
    table = np.arange(10, dtype=np.float32)
    out, hits = np.zeros(6, np.float32), np.zeros(10, np.float32)
    with pytest.raises(OutOfBoundsError, match=r"kernel gather: load of table\[-1\]"):
        debug_module(table, np.array([0, 1, 2, -1, 3, 4]), out, hits)


def test_out_of_range_store_is_reported_and_skipped():
    idx = Buffer("idx", "int64", (4,))
    hits = Buffer("hits", "float32", (4,))
    scatter = Kernel("scatter", (hits, idx), For(i, 4, Store(hits, Load(idx, i), Const(1.0, "float32")), "parallel"))
    module = build(Program("scatter_only", (scatter,), inputs=(idx,), outputs=(hits,)), debug=True)
    guard = np.zeros(64, np.float32)  # hits is a view inside a larger buffer: nothing outside may change
    message = r"kernel scatter: store of hits\[(7|-3)\] out of bounds \(buffer size 4\)"
    with pytest.raises(OutOfBoundsError, match=message):
        module(np.array([0, 7, -3, 1]), guard[16:20])
    assert guard[:16].sum() == 0 and guard[20:].sum() == 0
    assert guard[16] == 1 and guard[17] == 1


def test_asan_build_refuses_to_load_without_the_runtime():
    source = generate_c(gather_scatter_program(), debug=True)
    library = compile_c(source.text, debug=True, asan=True)
    with pytest.raises(TensorKilnError, match="LD_PRELOAD"):
        CompiledModule(library.path, source.signature, asan=True)


ASAN_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_debug import gather_scatter_program
    from tensorkiln.driver.build import build
    from tensorkiln.runtime.module import OutOfBoundsError
    module = build(gather_scatter_program(), debug=True, asan=True)
    table = np.arange(10, dtype=np.float32)
    out, hits = np.zeros(6, np.float32), np.zeros(10, np.float32)
    module(table, np.array([0, 9, 3, 3, 5, 1]), out, hits)
    assert (out == table[[0, 9, 3, 3, 5, 1]]).all()
    try:
        module(table, np.array([0, 1, 99, 2, 3, 4]), out, hits)
    except OutOfBoundsError as error:
        print("caught:", error)
""")


def test_asan_build_runs_under_preloaded_libasan():
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(libasan) or not os.path.exists(libasan):
        pytest.skip("libasan is not installed")
    env = {**os.environ, "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", ASAN_SCRIPT.format(tests=str(Path(__file__).parent))],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "caught: kernel gather: load of table[99] out of bounds (buffer size 10)" in done.stdout
    assert "ERROR: AddressSanitizer" not in done.stderr
