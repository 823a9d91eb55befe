"""Kernels whose C functions differ only in their buffers share one function (codegen/c_shared.py)."""
from __future__ import annotations

import numpy as np

from tensorkiln.codegen.c import generate_c
from tensorkiln.driver.build import build
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Load, Var
from tensorkiln.loops.ir import Alloc, For, Kernel, Store, block
from tensorkiln.loops.program import Program

N = 64
i = Var("i")
x, t, u, y = (Buffer(name, "float32", (N,)) for name in ("x", "t", "u", "y"))


def scale(name: str, out: Buffer, source: Buffer, factor: float) -> Kernel:
    return Kernel(name, (out, source), For(i, N, Store(out, i, Load(source, i) * factor)))


def through_scratch(name: str, out: Buffer, source: Buffer) -> Kernel:
    """out = source + 1 through a local buffer too large for the stack (its allocation names the kernel)."""
    scratch = Buffer("scratch", "float32", (1 << 16,), scope="local")
    body = block(For(i, N, Store(scratch, i, Load(source, i) + 1.0)), For(i, N, Store(out, i, Load(scratch, i))))
    return Kernel(name, (out, source), Alloc(scratch, body))


def test_kernels_over_other_buffers_call_the_first_ones_function_and_compute_their_own():
    program = Program("p", (scale("a", t, x, 2.0), scale("b", u, t, 2.0), scale("c", y, u, 3.0)), (x,), (y,),
                      temps=(t, u))
    text = generate_c(program).text
    assert text.count("static void kernel_") == 2  # a (b's too) and c: another constant is another function
    assert "kernel_a(t, x);" in text and "kernel_a(u, t);" in text and "kernel_c(y, u);" in text
    assert "computed by kernel_a (the same function, over these buffers)" in text
    values = np.arange(N, dtype=np.float32) - 7
    np.testing.assert_array_equal(build(program).run(values)[0], values * 12)


def test_a_debug_build_keeps_a_function_per_kernel():
    program = Program("p", (scale("a", t, x, 2.0), scale("b", y, t, 2.0)), (x,), (y,), temps=(t,))
    text = generate_c(program, debug=True).text
    assert text.count("static void kernel_") == 2 and "kernel_b(y, t);" in text


def test_a_shared_function_takes_the_name_its_messages_report():
    program = Program("p", (through_scratch("a", t, x), through_scratch("b", y, t)), (x,), (y,), temps=(t,))
    text = generate_c(program).text
    assert text.count("static void kernel_") == 1
    assert 'tk_alloc(262144u, tk_kernel, "scratch")' in text
    assert 'kernel_a("a", t, x);' in text and 'kernel_a("b", y, t);' in text
    values = np.linspace(-3, 3, N, dtype=np.float32)
    np.testing.assert_array_equal(build(program).run(values)[0], (values + np.float32(1)) + np.float32(1))
