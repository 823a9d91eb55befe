"""Local buffers too large for the stack come from a per-thread scratch stack (the prelude's tk_alloc/tk_free).

The allocator is checked in C (a program of the prelude and a main that allocates in nested order), and
through generated kernels whose nested and per-thread buffers are too large for the stack, called again
and again: the block grows once nothing is live, and every call computes the same values.
"""
from __future__ import annotations

import shlex
import subprocess

import numpy as np
import pytest

from tensorkiln.codegen.c import generate_c
from tensorkiln.codegen.c_prelude import c_prelude
from tensorkiln.driver.build import build
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Load, Var
from tensorkiln.loops.ir import Alloc, For, Kernel, Store, block
from tensorkiln.loops.program import Program
from tensorkiln.runtime.c_compiler import find_c_compiler

# Each check prints one line; the test compares them all.
ALLOCATOR_CHECKS = r"""
static int inside(void *p) { return (unsigned char *)p >= tk_scratch_base
                                    && (unsigned char *)p < tk_scratch_base + tk_scratch_size; }

int main(void)
{
    /* first call: the outer buffer makes the block; the nested one does not fit and comes from malloc */
    char *outer = tk_alloc(100000, "k", "outer");
    printf("outer in block %d aligned %d\n", inside(outer), (int)((uintptr_t)outer % 64 == 0));
    char *inner = tk_alloc(50000, "k", "inner");
    printf("inner from malloc %d\n", !inside(inner));
    memset(outer, 1, 100000);
    memset(inner, 2, 50000);
    tk_free(inner);
    tk_free(outer);
    printf("all freed %d\n", (int)(tk_scratch_used == 0));
    /* second call: the block has grown to hold both, one after the other */
    outer = tk_alloc(100000, "k", "outer");
    inner = tk_alloc(50000, "k", "inner");
    printf("both in block %d adjacent %d\n", inside(outer) && inside(inner), (int)(inner - outer == 100032));
    tk_free(inner);
    char *again = tk_alloc(50000, "k", "inner");
    printf("freed space reused %d\n", (int)(again == inner));
    tk_free(again);
    tk_free(outer);
    /* larger than TK_SCRATCH_MAX: malloc's, and its failure is reported, not a crash */
    void *huge = tk_alloc((size_t)-1 / 2, "k_huge", "giant");
    printf("huge NULL %d status %d\n", (int)(huge == NULL), tk_status);
    printf("%s\n", tk_message);
    return 0;
}
"""


@pytest.mark.skipif(find_c_compiler() is None, reason="needs a C compiler")
def test_the_scratch_stack_reuses_its_block_grows_once_nothing_is_live_and_reports_a_failed_allocation(tmp_path):
    source = tmp_path / "scratch.c"
    source.write_text(c_prelude() + ALLOCATOR_CHECKS)
    binary = tmp_path / "scratch"
    command = [*shlex.split(find_c_compiler()), "-O1", "-std=c99", "-o", str(binary), str(source), "-lm"]
    subprocess.run(command, check=True)
    lines = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout.splitlines()
    assert lines[:6] == ["outer in block 1 aligned 1", "inner from malloc 1", "all freed 1",
                         "both in block 1 adjacent 1", "freed space reused 1", "huge NULL 1 status 2"]
    assert "kernel k_huge: cannot allocate" in lines[6] and "local buffer giant" in lines[6]


N = 4096
i, j, r = Var("i"), Var("j"), Var("r")


def nested_scratch_kernel(out: Buffer, source: Buffer) -> Kernel:
    """out = 2 * source + 3 through two nested local buffers, each too large for the stack."""
    outer = Buffer("outer", "float32", (N,), scope="local")
    inner = Buffer("inner", "float32", (2 * N,), scope="local")
    body = block(
        For(i, N, Store(outer, i, Load(source, i) * 2.0)),
        Alloc(inner, block(For(i, N, Store(inner, i + N, Load(outer, i) + 3.0)),
                           For(i, N, Store(out, i, Load(inner, i + N))))))
    return Kernel("nested", (out, source), Alloc(outer, body))


def per_thread_kernel(out: Buffer, source: Buffer, rows: int) -> Kernel:
    """Each row, in parallel, through its own local buffer too large for the stack: out = source * 5."""
    row = Buffer("row", "float32", (N,), scope="local")
    body = Alloc(row, block(For(j, N, Store(row, j, Load(source, r * N + j) * 5.0)),
                            For(j, N, Store(out, r * N + j, Load(row, j)))))
    return Kernel("rows", (out, source), For(r, rows, body, "parallel"))


def test_nested_local_buffers_compute_the_same_values_on_every_call():
    x, y = Buffer("x", "float32", (N,)), Buffer("y", "float32", (N,))
    program = Program("p", (nested_scratch_kernel(y, x),), (x,), (y,))
    assert "tk_free(inner);" in generate_c(program).text
    module = build(program)
    values = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    for _ in range(4):  # the first call falls back to malloc for the inner buffer, the later ones do not
        np.testing.assert_array_equal(module.run(values)[0], values * np.float32(2) + np.float32(3))


def test_local_buffers_of_a_parallel_loop_come_from_each_threads_own_block():
    rows = 16
    x, y = Buffer("x", "float32", (rows * N,)), Buffer("y", "float32", (rows * N,))
    module = build(Program("p", (per_thread_kernel(y, x, rows),), (x,), (y,)))
    values = np.random.default_rng(1).standard_normal(rows * N).astype(np.float32)
    for _ in range(4):
        np.testing.assert_array_equal(module.run(values)[0], values * np.float32(5))
