"""Parallel loops whose threads are decided per call (`For.threads_if`, OpenMP's `if` clause): one
program for sizes on both sides of a parallel threshold, and no range guard."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.run_time_choice import all_of, at_least
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import For, LoopIRError, Store, format_stmt


def test_an_elementwise_kernel_is_parallel_only_at_large_sizes_of_one_program():
    f = tk.jit(lambda x: (x * 3.0 - 1.0).tanh(), dynamic={"x": {0: "rows"}})
    rng = np.random.default_rng(0)
    for rows in (2, 5, 999, 3, 4097):  # 64 columns: parallel from 512 rows (32768 elements)
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        np.testing.assert_allclose(f(x).numpy(), np.tanh(x * 3 - 1), rtol=1e-5, atol=1e-6)
    assert f.compile_count == 1
    source = open(f.report(x).source_path).read()
    assert "#pragma omp parallel for if(32768 <= s_rows * 64)" in source


def test_a_decision_the_bounds_make_is_a_plain_bool():
    f = tk.jit(lambda x: x + 1, dynamic={"x": {0: tk.Dim("n", min=1024)}})
    x = np.ones((1500, 64), np.float32)
    f(x)
    assert "if(" not in open(f.report(x).source_path).read()  # 1024*64 >= 32768 always: plain parallel


def test_choices_combine():
    n = E.Var("s_n")
    assert at_least(7, 5) is True and at_least(3, 5) is False
    assert all_of(True, False) is False and all_of(True, True) is True
    joined = all_of(E.ge(n, 3), True, E.le(n, 9))
    assert E.evaluate(joined, {"s_n": 5}) and not E.evaluate(joined, {"s_n": 10})


def test_threads_if_needs_a_parallel_loop_and_is_printed():
    i, n = E.Var("i"), E.Var("s_n")
    out = Buffer("out", "float32", (10,))
    body = Store(out, i, E.Const(0.0, "float32"))
    with pytest.raises(LoopIRError, match="threads_if needs a parallel loop"):
        For(i, n, body, "serial", E.ge(n, 4))
    loop = For(i, n, body, "parallel", E.ge(n, 4))
    assert format_stmt(loop)[0] == "for i in 0..s_n (parallel if 4 <= s_n):"
