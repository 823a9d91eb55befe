"""Loop IR statements: printer, verifier, simplify_kernel and Program layout."""
from __future__ import annotations

import textwrap

import pytest

from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Const, Load, Var, lt, maximum, minimum
from tensorkiln.loops.ir import (
    Alloc, Assign, Block, For, If, Kernel, Let, LoopIRError, Store, block, simplify_kernel, verify_kernel,
)
from tensorkiln.loops.program import Program

i, j, r = Var("i"), Var("j"), Var("r")
acc = Var("acc", "float32")
out = Buffer("out", "float32", (4, 8))
x = Buffer("x", "float32", (4, 8))
b = Buffer("b", "float32", (8,))
sums = Buffer("sums", "float32", (4,))


def bias_relu() -> Kernel:
    body = For(i, 4, For(j, 8, Store(out, i * 8 + j, maximum(Load(x, i * 8 + j) + Load(b, j), 0.0)),
                         "vectorized"), "parallel")
    return Kernel("bias_relu", (out, x, b), body, comment="%3 = add(%1, %2)\n%4 = relu(%3)")


def row_sum() -> Kernel:
    body = For(i, 4, block(
        Let(acc, Const(0.0, "float32")),
        For(j, 8, Assign(acc, acc + Load(out, i * 8 + j)), "vectorized"),
        Store(sums, i, acc),
    ), "parallel")
    return Kernel("row_sum", (sums, out), body, comment="%5 = sum(%4, dim=1)")


def test_kernel_prints_as_an_indented_loop_nest():
    assert str(bias_relu()) == textwrap.dedent("""\
        kernel bias_relu(out: float32[4, 8], x: float32[4, 8], b: float32[8]):
          # %3 = add(%1, %2)
          # %4 = relu(%3)
          for i in 0..4 (parallel):
            for j in 0..8 (vectorized):
              out[i*8 + j] = max(x[i*8 + j] + b[j], 0.0)""")
    assert str(row_sum()).splitlines()[2:] == [
        "  for i in 0..4 (parallel):",
        "    acc: float32 = 0.0",
        "    for j in 0..8 (vectorized):",
        "      acc = acc + out[i*8 + j]",
        "    sums[i] = acc",
    ]


def test_if_alloc_and_tiled_extents_print():
    tmp = Buffer("tmp", "float32", (16,), scope="local")
    body = For(i, 3, Alloc(tmp, Block((
        For(j, minimum(Const(16), 40 - i * 16), Store(tmp, j, Load(x, j))),
        If(lt(i, Const(2)), Store(sums, i, Load(tmp, Const(0))), Store(sums, i, Const(0.0, "float32"))),
    ))))
    text = str(Kernel("tiles", (sums, x), body))
    assert "  for i in 0..3:" in text
    assert "    alloc tmp: float32[16]:" in text
    assert "      for j in 0..min(16, 40 - i*16):" in text
    assert "      if i < 2:" in text and "      else:" in text


def test_verifier_names_the_problem():
    with pytest.raises(LoopIRError, match="variable j is used outside"):
        verify_kernel(Kernel("k", (sums, x), For(i, 4, Store(sums, i, Load(x, j)))))
    with pytest.raises(LoopIRError, match="buffer b is neither a parameter"):
        verify_kernel(Kernel("k", (sums,), For(i, 4, Store(sums, i, Load(b, i)))))
    with pytest.raises(LoopIRError, match="declared again while already in scope"):
        verify_kernel(Kernel("k", (sums,), For(i, 4, For(i, 4, Store(sums, i, Const(0.0, "float32"))))))
    with pytest.raises(LoopIRError, match="no let declares"):
        verify_kernel(Kernel("k", (sums,), For(i, 4, Assign(acc, acc))))
    with pytest.raises(LoopIRError, match="needs a float32 value"):
        Store(sums, i, i)
    with pytest.raises(LoopIRError, match="kind must be"):
        For(i, 4, Block(()), "gpu")
    with pytest.raises(LoopIRError, match="size symbol"):  # it would be read as a run-time size
        For(Var("s_q", "int64"), 4, Block(()))


def test_sibling_loops_may_reuse_a_name():
    body = block(For(i, 4, Store(sums, i, Const(0.0, "float32"))), For(i, 4, Store(sums, i, Const(1.0, "float32"))))
    verify_kernel(Kernel("k", (sums,), body))


def test_let_is_visible_only_after_it_in_its_block():
    body = For(i, 4, block(Store(sums, i, acc), Let(acc, Const(0.0, "float32"))))
    with pytest.raises(LoopIRError, match="variable acc"):
        verify_kernel(Kernel("k", (sums,), body))


def test_simplify_kernel_uses_loop_ranges():
    body = For(r, 32, Store(sums, (r // 8) % 4, Load(x, (r // 8) * 8 + r % 8)))
    simplified = simplify_kernel(Kernel("k", (sums, x), body))
    assert str(simplified).splitlines()[-1].strip() == "sums[r//8] = x[r]"


def test_program_packs_temps_in_an_aligned_arena():
    t1 = Buffer("t1", "float32", (3,))
    t2 = Buffer("t2", "float64", (5,))
    k1 = Kernel("k1", (t1, x), For(i, 3, Store(t1, i, Load(x, i))))
    k2 = Kernel("k2", (t2, t1), For(i, 3, Store(t2, i, Const(1.0, "float64"))))
    k3 = Kernel("k3", (sums, t1), For(i, 3, Store(sums, i, Load(t1, i))))
    p = Program("p", (k1, k2, k3), inputs=(x,), outputs=(sums,), temps=(t1, t2))
    assert p.arena_layout() == {"t1": 0, "t2": 64}
    assert p.arena_bytes == 128
    planned = Program("p", (k1, k3), inputs=(x,), outputs=(sums,), temps=(t1, t2),
                      arena_offsets=(("t1", 0), ("t2", 0)))
    assert planned.arena_bytes == 64
    assert "arena: 64 bytes" in str(planned)
    with pytest.raises(LoopIRError, match="kernel k2 takes temps t1 and t2, which overlap"):
        Program("p", (k1, k2, k3), inputs=(x,), outputs=(sums,), temps=(t1, t2),
                arena_offsets=(("t1", 0), ("t2", 0)))


def test_program_rejects_kernels_over_unknown_or_read_only_buffers():
    with pytest.raises(LoopIRError, match="not one of the program's buffers"):
        Program("p", (bias_relu(),), inputs=(x,), outputs=(out,))
    writes_input = Kernel("w", (x,), For(i, 4, Store(x, i, Const(0.0, "float32"))))
    with pytest.raises(LoopIRError, match="writes input"):
        Program("p", (writes_input,), inputs=(x,), outputs=())
    with pytest.raises(LoopIRError, match="not aligned"):
        Program("p", (), inputs=(), outputs=(), temps=(Buffer("t", "float32", (2,)),), arena_offsets=(("t", 2),))
