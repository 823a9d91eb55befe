"""GEMM and convolution templates against the reference: odd shapes, transposes, batches, epilogues, groups.

Shapes are not multiples of any block (1, 7, 33, 127, 1000), so every edge
tile and tail runs. `kernels_using` checks which template a kernel took.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.kernels.templates.gemm import ThreadSplit, gemm_blocking, gemm_thread_split
from tensorkiln.kernels.templates.gemm_a_reads import a_reads_rows, a_row_piece, rows_sharing_l2
from tensorkiln.kernels.target import cpu_target, l2_ways, read_cache_sizes

from .compiled import check_compiled
from .disassembly import needs_vector_disassembly


RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def uses_gemm(fn, *args) -> bool:
    report = tk.jit(fn).report(*args)
    return any("g_acc" in k.loop_ir for k in report.kernels)


@pytest.mark.parametrize("m,k,n", [(1, 7, 33), (7, 33, 127), (33, 127, 7), (127, 1000, 33), (33, 1000, 127),
                                   (1000, 7, 127)])
def test_gemm_shapes(m, k, n):
    a, b = rand(m, k), rand(k, n)
    check_compiled(lambda a, b: a @ b, a, b, factor=10)


def test_gemm_is_used_above_small_sizes_only():
    assert uses_gemm(lambda a, b: a @ b, rand(127, 1000), rand(1000, 33))
    assert not uses_gemm(lambda a, b: a @ b, rand(3, 4), rand(4, 5))
    assert not uses_gemm(lambda a, b: a @ b, rand(1, 500), rand(500, 500))  # matrix-vector
    ints = RNG.integers(-5, 5, (64, 64)).astype(np.int32)
    assert not uses_gemm(lambda a, b: a @ b, ints, ints)
    check_compiled(lambda a, b: a @ b, ints, ints)


def test_gemm_large_square():
    a, b = rand(1000, 1000), rand(1000, 1000)
    check_compiled(lambda a, b: a @ b, a, b, factor=20)


def packs_a(fn, *args) -> bool:
    return any("g_apack" in k.loop_ir for k in tk.jit(fn).report(*args).kernels)


def test_gemm_reads_contiguous_a_rows_in_place():
    """A row-major A is read where it lies (no packed copy); a transposed A is packed."""
    a, b = rand(127, 300), rand(300, 40)
    assert uses_gemm(lambda a, b: a @ b, a, b) and not packs_a(lambda a, b: a @ b, a, b)
    assert packs_a(lambda a, b: a.T @ b, rand(300, 127), b)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("batch,m,n,k", [(1, 13, 40, 300), (1, 61, 96, 2000), (2, 9, 513, 64), (3, 5, 33, 1001)])
def test_gemm_a_in_place_edges(monkeypatch, threads, batch, m, n, k):
    """Rows past M (a partial register tile), several K blocks, thread chunks: reads stay in bounds."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    a, b, w = rand(batch, m, k), rand(batch, k, n), tk.tensor(rand(k, n))
    check_compiled(lambda a, b: (a @ b).relu(), a, b, debug=True, factor=10)
    with tk.no_grad():  # weights packed at compile time, batch folded into the rows
        check_compiled(lambda a: a @ w, a, debug=True, factor=10)


def test_a_reads_rows_needs_a_unit_step_along_k():
    a = Buffer("a", "float32", (1000,))
    probe = E.Var("kk")
    assert a_reads_rows(lambda b, row, kk: E.Load(a, row * 10 + kk), probe)
    assert a_reads_rows(lambda b, row, kk: E.Load(a, (b * 4 + row) * 10 + (kk + 3)), probe)
    assert not a_reads_rows(lambda b, row, kk: E.Load(a, kk * 10 + row), probe)  # transposed
    assert not a_reads_rows(lambda b, row, kk: E.Load(a, row * 10 + kk // 2), probe)
    assert not a_reads_rows(lambda b, row, kk: E.Load(a, row * 10 + kk + kk), probe)
    assert not a_reads_rows(lambda b, row, kk: E.Load(a, row * 10 + kk) * 2.0, probe)  # computed


def test_a_row_piece_finds_contiguous_pieces_of_rows():
    """A permuted [heads, seq, d] read as [seq, heads * d] is contiguous in pieces of d along k."""
    a = Buffer("a", "float32", (12 * 128 * 64,))
    probe = E.Var("kk")
    permuted = lambda b, row, kk: E.Load(a, row * 64 + kk // 64 * (128 * 64) + kk % 64)  # noqa: E731
    assert a_row_piece(permuted, 768, 768, probe) == 64
    assert a_row_piece(permuted, 768, 256, probe) == 64  # depth blocks of 4 pieces
    assert a_row_piece(permuted, 700, 700, probe) is None  # k is no whole number of pieces
    assert a_row_piece(lambda b, row, kk: E.Load(a, kk * 10 + row), 768, 768, probe) is None  # transposed
    assert a_row_piece(lambda b, row, kk: E.Load(a, row * 64 + kk % 64) * 2.0, 768, 768, probe) is None


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("heads,seq,d,in_place", [(12, 13, 64, True), (4, 61, 24, True), (3, 128, 32, True),
                                                  (16, 40, 64, True), (40, 7, 50, False)])
def test_gemm_reads_permuted_a_in_pieces(monkeypatch, threads, heads, seq, d, in_place):
    """Attention's output read through a permute into packed weights: in place, piece by piece (no
    packed copy of A), rows past M included, against the reference. Pieces of 50 do not fill a depth
    block, so that A is packed."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    x, w = rand(1, heads, seq, d), tk.tensor(rand(heads * d, 40))
    fn = lambda x: x.permute(0, 2, 1, 3).reshape(1, seq, heads * d) @ w  # noqa: E731
    with tk.no_grad():
        assert uses_gemm(fn, x) and packs_a(fn, x) != in_place
        check_compiled(fn, x, debug=True, factor=10)


def test_gemm_reads_permuted_a_in_pieces_at_a_run_time_length():
    """The same with the sequence a size symbol: one program for every length, in place."""
    w = tk.tensor(rand(8 * 32, 96))

    def project(x):
        return x.permute(0, 2, 1, 3).reshape(1, x.shape[2], 8 * 32) @ w

    with tk.no_grad():
        f = tk.jit(project, dynamic={"x": {2: "seq"}}, debug=True)
        for seq in (5, 64, 131):
            x = rand(1, 8, seq, 32)
            want = x.transpose(0, 2, 1, 3).reshape(1, seq, 8 * 32) @ w.numpy()
            np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-4, atol=1e-4)
        assert not any("g_apack" in k.loop_ir for k in f.report(rand(1, 8, 64, 32)).kernels)
    assert f.cache_size() == 1


def test_gemm_float64():
    a, b = rand(127, 300, dtype=np.float64), rand(300, 33, dtype=np.float64)
    assert uses_gemm(lambda a, b: a @ b, a, b)
    check_compiled(lambda a, b: a @ b, a, b, factor=10)


@pytest.mark.parametrize("how", ["a.T", "b.T", "both"])
def test_gemm_transposed_operands(how):
    """Packing absorbs transposes: no copy kernel, the packed panels read the operand transposed."""
    fn, a, b = {"a.T": (lambda a, b: a.T @ b, rand(300, 127), rand(300, 33)),
                "b.T": (lambda a, b: a @ b.T, rand(127, 300), rand(33, 300)),
                "both": (lambda a, b: a.T @ b.T, rand(300, 127), rand(33, 300))}[how]
    check_compiled(fn, a, b, factor=10)
    assert len(tk.jit(fn).report(a, b).kernels) == 1


def test_gemm_batched_and_broadcast():
    a, b = rand(3, 33, 127), rand(3, 127, 40)
    check_compiled(lambda a, b: a @ b, a, b, factor=10)
    w = rand(127, 40)
    assert uses_gemm(lambda a, w: a @ w, a, w)
    check_compiled(lambda a, w: a @ w, a, w, factor=10)  # B shared: batch folded into rows
    check_compiled(lambda a, b: a @ b, rand(2, 1, 33, 64), rand(3, 64, 20), factor=10)


def test_gemm_epilogues():
    x, w, bias, res = rand(127, 300), rand(40, 300), rand(40), rand(127, 40)
    check_compiled(lambda x, w, bias: F.linear(x, w, bias).relu(), x, w, bias, factor=10)
    check_compiled(lambda x, w, bias, res: (F.linear(x, w, bias) + res).gelu(), x, w, bias, res, factor=10)
    check_compiled(lambda x, w: (x @ w.T) * 0.5 - 1.0, x, w, factor=10)


def test_gemm_float16_output_keeps_partial_sums_exact():
    a, b = rand(64, 1000).astype(np.float16), rand(1000, 64).astype(np.float16)
    check_compiled(lambda a, b: a @ b, a, b, factor=4)


def test_thread_split_gives_every_thread_work():
    bl = gemm_blocking(1024, 1024, 1024, "float32")
    assert gemm_thread_split(1, 1024, 1024, 1024, bl, threads=2) == ThreadSplit(2, 1, True)  # rows
    assert gemm_thread_split(1, 64, 3248, 576, bl, threads=2) == ThreadSplit(1, 2, True)  # columns: A is smaller
    assert gemm_thread_split(1, 512, 64, 2304, bl, threads=2) == ThreadSplit(2, 1, True)  # rows: B is smaller
    assert gemm_thread_split(1, 512, 64, 4608, bl, threads=2) == ThreadSplit(1, 1, True, 2)  # K >= 8 max(M, N)
    assert gemm_thread_split(4, 256, 256, 256, bl, threads=2) == ThreadSplit(1, 1, True)  # the batch divides
    assert gemm_thread_split(3, 256, 256, 256, bl, threads=2) == ThreadSplit(2, 1, True)  # 3 x 2 tasks
    assert gemm_thread_split(1, 1024, 1024, 1024, bl, threads=1) == ThreadSplit(1, 1, False)
    assert gemm_thread_split(1, 16, 16, 16, bl, threads=2) == ThreadSplit(1, 1, False)  # too small to share
    assert gemm_thread_split(1, 9, 16, 4096, bl, threads=2) == ThreadSplit(1, 1, True, 2)  # depth: a weight gradient
    assert gemm_thread_split(2, 9, 16, 4096, bl, threads=3).k_chunks == 1  # batches are never cut in depth


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("batch,m,n,k", [(1, 127, 1000, 33), (3, 65, 40, 300), (1, 1000, 7, 129), (2, 9, 513, 64),
                                         (1, 9, 16, 4096), (1, 5, 20, 1001), (1, 33, 40, 2000)])
def test_gemm_any_thread_split(monkeypatch, threads, batch, m, n, k):
    """Every way of cutting the GEMM into tasks computes the same product (edges included)."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    a, b = rand(batch, m, k), rand(batch, k, n)
    check_compiled(lambda a, b: (a @ b).relu(), a, b, factor=10)


@pytest.mark.parametrize("m,n", [(64, 16), (16, 256)])
def test_gemm_chunks_past_the_matrix_do_nothing(monkeypatch, m, n):
    """7 threads, 64 rows in chunks of 16 (or 256 columns in chunks of 64): 3 tasks past the end."""
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    a, b = rand(1, m, 300), rand(1, 300, n)
    check_compiled(lambda a, b: (a @ b).relu(), a, b, factor=10)


def test_depth_split_reads_and_writes_in_bounds(monkeypatch):
    """A K that does not divide among the threads: the last slice reads zeros past K (debug checks on)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    a, b = rand(9, 4001), rand(4001, 16)
    f = check_compiled(lambda a, b: (a @ b).relu(), a, b, debug=True, factor=10)
    assert any("g_partial" in kernel.loop_ir for kernel in f.report(a, b).kernels)


def test_blocking_from_caches():
    sizes = read_cache_sizes()
    assert sizes[1] >= 16 * 1024 and sizes[2] >= sizes[1]
    bl = gemm_blocking(1024, 1024, 1024, "float32")
    assert bl.mc % bl.mr == 0 and bl.nc % bl.nr == 0 and bl.kc % 8 == 0
    lanes = cpu_target().vector_bytes // 4
    assert bl.nr % lanes == 0
    assert bl.kc * bl.nr * 4 <= cpu_target().l2 // 8  # B's micro-panel in an eighth of L2


@pytest.mark.parametrize("k", [1024, 2048, 768, 1000])
def test_a_block_keeps_half_the_l2_ways(k):
    """A's block, its rows K apart as a row-major A lies, takes at most half the ways of any L2 set."""
    bl = gemm_blocking(2048, 2048, k, "float32")
    ways = l2_ways()
    assert rows_sharing_l2(bl.mc, k * 4, bl.kc * 4, cpu_target().l2, ways) <= ways // 2
    assert bl.mc >= bl.mr


def test_rows_sharing_l2_counts_conflicting_rows():
    """240 rows of 272 floats, 8 KiB apart, in a 512 KiB 8-way L2 (1024 sets): each row starts 128 sets past
    the last, so every 8th row shares its sets: 30 lines in a set of 8 ways. 3 KiB apart they spread."""
    assert rows_sharing_l2(240, 8192, 272 * 4, 512 << 10, 8) == 30
    assert rows_sharing_l2(30, 8192, 4096, 512 << 10, 8) == 4
    assert rows_sharing_l2(21, 3072, 3072, 512 << 10, 8) == 1
    assert rows_sharing_l2(1, 64, 1 << 20, 512 << 10, 8) == 1  # a row longer than the sets: once each


def test_a_read_in_place_cuts_columns():
    """An A read in place is packed by nobody: a square GEMM is cut by columns (no thread packs all of B);
    a packed A keeps the row cut, and a much taller A (M > 2N) too."""
    bl = gemm_blocking(1024, 1024, 1024, "float32")
    assert gemm_thread_split(1, 1024, 1024, 1024, bl, threads=2, a_packed=False) == ThreadSplit(1, 2, True)
    assert gemm_thread_split(1, 1024, 1024, 1024, bl, threads=2, a_packed=True) == ThreadSplit(2, 1, True)
    assert gemm_thread_split(1, 4096, 512, 1024, bl, threads=2, a_packed=False) == ThreadSplit(2, 1, True)


@pytest.mark.parametrize("m,n,k", [(13, 37, 2500), (64, 48, 3000)])
def test_output_tile_prefetched_over_depth_blocks(monkeypatch, m, n, k):
    """K over several depth blocks: the micro-kernel prefetches the output tile whose partial sums it
    adds, clamped into the matrix at its edges (debug bounds checks on)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    a, b = rand(m, k), rand(k, n)
    f = check_compiled(lambda a, b: (a @ b).relu(), a, b, debug=True, factor=10)
    assert any("tk_prefetch_w" in kernel.loop_ir for kernel in f.report(a, b).kernels)


def test_narrow_b_uses_a_one_vector_micro_tile():
    """N up to one vector (16 output channels, 10 classes): an MR x lanes tile, no padded half panel."""
    lanes = cpu_target().vector_bytes // 4
    assert gemm_blocking(64, lanes, 512, "float32").nr == lanes
    assert gemm_blocking(64, 3 * lanes, 512, "float32").nr > lanes
    for m, k, n in [(9, 4096, 16), (64, 512, 10), (33, 300, max(lanes // 2 + 1, 8))]:
        assert uses_gemm(lambda a, b: a @ b, rand(m, k), rand(k, n))
        check_compiled(lambda a, b: a @ b, rand(m, k), rand(k, n), factor=10)


@needs_vector_disassembly
def test_gemm_micro_kernel_is_vector_fma():
    """The generated micro-kernel is register-blocked FMA code (read back from the library)."""
    f = tk.jit(lambda a, b: a @ b)
    a, b = rand(64, 256), rand(256, 64)
    f(a, b)
    text = subprocess.run(["objdump", "-d", f.report(a, b).library_path or ""], capture_output=True,
                          text=True).stdout
    fma = [line for line in text.splitlines() if "vfmadd231ps" in line]
    assert len(fma) >= 8
    assert any("ymm" in line or "zmm" in line for line in fma)


# ---- convolution


CONV_CASES = [  # (n, c, h, w, o, k, stride, pad, dilation, groups)
    (1, 16, 9, 9, 8, 1, 1, 0, 1, 1),      # 1x1
    (2, 16, 7, 7, 32, 1, 2, 0, 1, 1),     # 1x1 strided
    (2, 8, 13, 11, 16, 3, 1, 1, 1, 1),    # 3x3 padded
    (1, 12, 15, 15, 12, 3, 2, 1, 1, 3),   # grouped, strided
    (1, 16, 17, 17, 16, 3, 1, 2, 2, 2),   # dilated, grouped
    (1, 8, 17, 17, 8, 3, 1, 2, 2, 8),     # depthwise dilated
    (2, 8, 12, 12, 8, 5, 2, 2, 1, 8),     # depthwise strided
    (1, 3, 33, 33, 16, 7, 2, 3, 1, 1),    # ResNet stem shape, small
    (1, 7, 1, 1, 33, 1, 1, 0, 1, 1),      # 1x1 image
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv_templates(case):
    n, c, h, w, o, k, st, pd, dl, g = case
    x, wt, bias, res = rand(n, c, h, w), rand(o, c // g, k, k), rand(o), None
    fn = lambda x, wt, bias: F.conv2d(x, wt, bias, stride=st, padding=pd, dilation=dl, groups=g).relu()  # noqa: E731
    check_compiled(fn, x, wt, bias, factor=10)
    out = F.conv2d(tk.tensor(x), tk.tensor(wt), stride=st, padding=pd, dilation=dl, groups=g)
    res = rand(*out.shape)
    check_compiled(lambda x, wt, res: F.conv2d(x, wt, stride=st, padding=pd, dilation=dl, groups=g) + res,
                   x, wt, res, factor=10)


def test_conv_algorithm_choice():
    from tensorkiln.kernels.templates.conv import conv_algorithm
    f = tk.jit(lambda x, w: F.conv2d(x, w, padding=1))
    x, w = rand(1, 32, 14, 14), rand(16, 32, 3, 3)  # 32 input channels: fewer go to "shallow"
    assert any("g_acc" in k.loop_ir for k in f.report(x, w).kernels)
    g = tk.jit(lambda x, w: F.conv2d(x, w, padding=1, groups=32))
    assert any("plane" in k.loop_ir for k in g.report(x, rand(32, 1, 3, 3)).kernels)
    assert callable(conv_algorithm)


def test_conv_float64():
    x, w = rand(1, 8, 10, 10, dtype=np.float64), rand(16, 8, 3, 3, dtype=np.float64)
    check_compiled(lambda x, w: F.conv2d(x, w, padding=1), x, w, factor=10)


# ---- stride-1 padded-row implicit GEMM ("gemm_rows"): junk columns, zero padding, scratch write-back

ROWS_CASES = [(w, pad, dil) for w in (1, 2, 3, 7, 57) for pad in (0, 1, 2) for dil in (1, 2)
              if w + 2 * pad - 2 * dil >= 1]


@pytest.mark.parametrize("case", ROWS_CASES, ids=lambda c: "w{}p{}d{}".format(*c))
def test_conv_padded_rows_widths(case):
    """Every width/padding/dilation goes through one of the templates and matches the reference."""
    w, pad, dil = case
    h = 5 + 2 * dil
    x, wt, bias = rand(2, 32, h, w), rand(16, 32, 3, 3), rand(16)  # fewer channels: "shallow"
    fn = lambda x, wt, bias: F.conv2d(x, wt, bias, padding=pad, dilation=dil).relu()  # noqa: E731
    check_compiled(fn, x, wt, bias, factor=10)


def test_conv_padded_rows_is_chosen_and_handles_long_k_and_groups():
    from tensorkiln.kernels.templates.conv import conv_algorithm  # noqa: F401
    # K = 64*9 > KC: partial sums through the scratch buffer; groups; residual epilogue
    x, wt, res = rand(1, 64, 9, 11), rand(32, 32, 3, 3), rand(1, 32, 9, 11)
    f = check_compiled(lambda x, wt, res: F.conv2d(x, wt, padding=1, groups=2) + res, x, wt, res, factor=10)
    assert any("g_xpad" in k.loop_ir and "g_cbuf" in k.loop_ir for k in f.report(x, wt, res).kernels)
    # asymmetric reach: 5x3 kernel, width 57 (junk columns inside a 32-wide micro-tile)
    x, wt = rand(1, 32, 12, 57), rand(12, 32, 5, 3)  # 32 input channels: fewer go to "shallow"
    f = check_compiled(lambda x, wt: F.conv2d(x, wt, padding=(2, 1)), x, wt, factor=10)
    assert any("g_xpad" in k.loop_ir for k in f.report(x, wt).kernels)
    # strided layers keep the flat implicit GEMM
    g = tk.jit(lambda x, w: F.conv2d(x, w, padding=1, stride=2))
    assert not any("g_xpad" in k.loop_ir for k in g.report(rand(1, 16, 14, 14), rand(32, 16, 3, 3)).kernels)


def test_conv_padded_rows_float16_long_k():
    x, w = rand(1, 32, 9, 9, dtype=np.float16), rand(16, 32, 3, 3, dtype=np.float16)
    check_compiled(lambda x, w: F.conv2d(x, w, padding=1), x, w, factor=10)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("m,k,n", [(1, 64, 1), (1, 33, 1000), (2, 17, 3000), (1, 8, 5003), (3, 5, 2047)])
def test_row_order_column_blocks(monkeypatch, threads, m, k, n):
    """Matrix-vector products split N into accumulator blocks (tails included) for any thread count."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    a, b, bias = rand(m, k), rand(k, n), rand(n)
    check_compiled(lambda a, b, bias: (a @ b + bias).relu(), a, b, bias, factor=10)
