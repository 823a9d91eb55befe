"""Convolution (NCHW): Winograd or implicit GEMM through the BLIS template, a depthwise nest, or a direct nest.

The algorithm per layer (`conv_algorithm`, the rule written down in docs/kernels.md):

- **Winograd** (`winograd4`, `winograd2`: F(4x4, 3x3), F(2x2, 3x3);
  winograd.py): 3x3 stride-1 undilated ungrouped float32 layers with enough
  channels and pixels and small enough transformed weights
  (`winograd_choice`, measured by benchmarks/conv_algorithms.py).
- **implicit GEMM** (`gemm`): float32/float64 convolutions with at least 4
  output channels per group and enough work (the matmul rule of matmul.py
  on the GEMM shape). Per (image, group), C[o, pixel] = W[o, (c, r, s)] @
  X[(c, r, s), pixel]: M = output channels of the group, N = OH*OW,
  K = Cg*KH*KW. The im2col matrix is never materialized: its elements are the
  `b_value` of the GEMM, so packing the B panels gathers the shifted, strided,
  dilated, zero-padded input directly. A 1x1 stride-1 unpadded convolution
  is the same code, where packing reads contiguous rows: a plain GEMM.
- **padded-row implicit GEMM** (`gemm_rows`): stride-1 layers (not an
  unpadded 1x1) whose junk columns add at most half of N: the input is
  copied zero-padded once, the GEMM runs over N' = (OH-1)*Wp + OW columns
  y*Wp + x so every im2col row is a contiguous slice of the padded input
  (B packing is a copy), into a scratch C' from which one (y, x) pass applies
  the epilogue and drops the junk columns (`_implicit_gemm_rows`).
- **depthwise** (`depthwise`): one input and one output channel per group.
  For each (image, channel) plane, each output row is computed with the
  taps unrolled and the output columns vectorized.
- **shallow** (`shallow`; conv_shallow.py): layers with fewer than
  SHALLOW_MAX_CHANNELS input channels per group (the RGB stem; not an
  unpadded 1x1 stride-1 layer, a plain GEMM): a direct
  convolution vectorized over output pixels, G output channels x T pixel
  vectors in registers, over a zero-padded copy of the input in column
  phases; no packing, and contiguous NCHW stores.
- **direct** (`direct`): everything else (integer-free small layers, a
  float16 output with K over one depth block, few output channels per
  group): one output plane per (image, channel) accumulated locally, the
  first template.

Out-of-image taps read zero (the padding) through a select whose load index
is clamped, so the code never reads out of bounds.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ..inline import ValueBuilder
from ...loops.ir import Alloc, For, Let, Store, Stmt, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS
from ..run_time_choice import at_least, loop_kind, parallel_when, threads_if
from ...loops.types import compute_dtype
from .conv_shallow import shallow_conv_body
from .depthwise import depthwise_body
from .gemm import analytic_gemm_blocking, gemm_needs_partial_sums
from .gemm_bf16 import gemm_template, holds_bf16_values, is_bf16_rounding
from .matmul import BLIS_MIN_FLOPS
from ..target import CpuTarget, cpu_target
from .winograd import winograd_conv

CONV_ALGORITHMS = ("winograd4", "winograd2", "gemm_rows", "gemm", "shallow", "depthwise", "direct")
# Fewer input channels per group than this -> "shallow" where Winograd does not apply
# (benchmarks/conv_algorithms.py --shallow): the reduction C*KH*KW is too short for a GEMM's
# packing to pay off (1-31 channels measured 1.2-6x faster than gemm/gemm_rows; Winograd wins
# from 24 channels on 3x3 stride-1 layers and goes first).
SHALLOW_MAX_CHANNELS = 32
# An algorithm that benchmarks and tests impose where it applies (`forced_conv_algorithm`).
_FORCED: ContextVar[str | None] = ContextVar("forced_conv_algorithm", default=None)


@contextmanager
def forced_conv_algorithm(algorithm: str) -> Iterator[None]:
    """Within the block, convolutions compiled use `algorithm` wherever it applies (benchmarks, tests).

    Layers it does not apply to keep the rule's choice. Compilation happens at
    a jit function's first call with a signature, so call it inside the block.
    """
    if algorithm not in CONV_ALGORITHMS:
        raise ValueError(f"unknown convolution algorithm {algorithm!r}; expected one of {CONV_ALGORITHMS}")
    token = _FORCED.set(algorithm)
    try:
        yield
    finally:
        _FORCED.reset(token)


def conv_algorithm(root: Node, out: Buffer) -> str:
    """The algorithm for this conv2d node, one of CONV_ALGORITHMS (see the module docstring).

    The rule, checked against measurement by benchmarks/conv_algorithms.py:

    1. not float32/float64 -> "direct";
    2. depthwise -> "depthwise";
    3. fewer than 4 output channels per group, fewer than 8 output pixels or
       under 32^3 multiply-adds -> "direct";
    4. Winograd ("winograd4" / "winograd2") where `winograd_choice` says so;
    5. fewer than SHALLOW_MAX_CHANNELS input channels per group, except an
       unpadded 1x1 stride-1 layer (a plain GEMM) -> "shallow";
    6. stride 1 with few junk columns -> "gemm_rows";
    7. otherwise "gemm" (or "direct" for a 16-bit output with K over one block).
    """
    forced = forced_algorithm()
    if forced is not None and forced in applicable_conv_algorithms(root, out):
        return forced
    return _rule(root, out)


def forced_algorithm() -> str | None:
    """The algorithm `forced_conv_algorithm` imposes right now, or None (part of the compile cache's key)."""
    return _FORCED.get()


def winograd_algorithm(root: Node) -> str | None:
    """"winograd4" / "winograd2" where conv_algorithm would pick Winograd for this conv2d node, else None."""
    forced = forced_algorithm()
    if forced is not None:
        applies = forced.startswith("winograd") and _winograd_applies(root) and not any(d == 0 for d in root.shape)
        return forced if applies else None
    if compute_dtype(root.dtype.name) != "float32" or _is_depthwise(root) or _too_small_for_gemm(root):
        return None
    return winograd_choice(root)


def _too_small_for_gemm(root: Node) -> bool:
    """Fewer than 4 output channels per group, fewer than 8 output pixels or too few multiply-adds."""
    c_out, c_group, kh, kw = root.inputs[1].shape
    groups = root.attrs["groups"]
    m, n, k = c_out // groups, root.shape[2] * root.shape[3], c_group * kh * kw
    return m < 4 or n < 8 or root.shape[0] * groups * m * n * k < BLIS_MIN_FLOPS


def _rule(root: Node, out: Buffer) -> str:
    if compute_dtype(root.dtype.name) not in ("float32", "float64"):
        return "direct"
    if _is_depthwise(root):
        return "depthwise"
    if _too_small_for_gemm(root):
        return "direct"
    winograd = winograd_choice(root)
    if winograd is not None:
        return winograd
    if _is_shallow(root):
        return "shallow"
    if _padded_rows_n(root) is not None:
        return "gemm_rows"  # partial sums go through a scratch buffer of the compute dtype
    if not _gemm_applies(root, out):
        return "direct"
    return "gemm"


def applicable_conv_algorithms(root: Node, out: Buffer) -> list[str]:
    """Every algorithm that computes this conv2d node correctly (not only the fast ones)."""
    dtype = compute_dtype(root.dtype.name)
    found = []
    if dtype in ("float32", "float64"):
        if _winograd_applies(root):
            found += ["winograd4", "winograd2"]
        if _padded_rows_n(root) is not None:
            found.append("gemm_rows")
        if _gemm_applies(root, out):
            found.append("gemm")
        found.append("shallow")
        if _is_depthwise(root):
            found.append("depthwise")
    return found + ["direct"]


def _is_shallow(root: Node) -> bool:
    """Few input channels per group, and not a plain GEMM (unpadded 1x1 stride 1: its packing
    reads contiguous rows and it needs no padded copy)."""
    _, c_group, kh, kw = root.inputs[1].shape
    plain_gemm = (kh, kw) == (1, 1) and tuple(root.attrs["stride"]) == (1, 1) and not any(root.attrs["padding"])
    return c_group < SHALLOW_MAX_CHANNELS and not plain_gemm


def _is_depthwise(root: Node) -> bool:
    c_out, c_group = root.inputs[1].shape[:2]
    groups = root.attrs["groups"]
    return groups > 1 and c_group == 1 and c_out == groups


def _gemm_applies(root: Node, out: Buffer) -> bool:
    """The flat implicit GEMM keeps partial sums in the output: a 16-bit output needs K within one block."""
    c_out, c_group, kh, kw = root.inputs[1].shape
    m, n, k = c_out // root.attrs["groups"], root.shape[2] * root.shape[3], c_group * kh * kw
    dtype = compute_dtype(root.dtype.name)
    return out.dtype == dtype or not gemm_needs_partial_sums(k, analytic_gemm_blocking(m, n, k, dtype))


def _winograd_applies(root: Node) -> bool:
    """3x3, stride 1, dilation 1, one group, float32: the layers winograd.py computes."""
    kh, kw = root.inputs[1].shape[2:]
    return (root.dtype.name == "float32" and (kh, kw) == (3, 3) and root.attrs["groups"] == 1
            and tuple(root.attrs["stride"]) == (1, 1) and tuple(root.attrs["dilation"]) == (1, 1))


# Winograd's rule (measured with benchmarks/conv_algorithms.py; see docs/kernels.md).
WINOGRAD_MIN_CHANNELS = 16  # fewer input channels: each GEMM's reduction is too short to pay for the transforms
WINOGRAD_MIN_PIXELS = 128  # output pixels per call (batch included): fewer cannot pay for the weight transform
WINOGRAD_MIN_MACS = 1 << 20  # multiply-adds of the direct convolution per call: below, a tie at best
# ... and where the transformed weights U spill out of L2, by the target's vector width in bytes: U
# streams from L3 once per call, which more output pixels pay for, and a narrower vector makes the
# direct convolution it replaces slower per pixel. Measured with ResNet-18's 256x14x14 layer (U of
# F(2x2): 4 MiB): with 64-byte vectors (Zen 5) 196 pixels lose and 1568 win; with 32-byte vectors
# (Zen 4, AVX2) 196 pixels win (benchmarks/conv_algorithms.py, docs/performance.md).
WINOGRAD_LARGE_U_PIXELS = {64: 512, 32: 128}
# What counts is the rate of the direct convolution's multiply-adds, so the width is the target's
# full-rate FMA width (`CpuTarget.fma_bytes`): the Zen 4 host decodes 64-byte vectors but runs their FMAs
# in two 32-byte halves, and there Winograd F(2x2) took 0.76x the blocked direct convolution's time on
# ResNet-18's three 256x14x14 layers in the model (a tuning record found it: docs/tuning.md). A direct
# convolution on vdpbf16ps (bf16 operands) multiplies twice an FMA's work per instruction: it is
# weighed at the whole vector width.
WINOGRAD4_MIN_SIDE = 16  # F(4x4) on smaller outputs: most of its tiles' area is past the image
# F(4x4)'s transforms hold 6x6 tiles of vectors (36 values, vectorized over tiles) and spill on any x86
# target: GCC 12 writes 547 registers to the stack in a 64-channel layer's kernel with 16 vector
# registers, 232 with 32. With 32 F(4x4) still wins (docs/kernels.md); with 16 (AVX2) F(2x2), whose
# 4x4 tiles spill nothing, measured 1.1-1.3x faster on ResNet-18's 64x56x56 and 128x28x28 layers
# (benchmarks/conv_algorithms.py --only-3x3, docs/performance.md).
WINOGRAD4_MIN_REGISTERS = 32


def winograd_choice(root: Node) -> str | None:
    """"winograd4", "winograd2" or None: the layers where Winograd beats the GEMM forms.

    Winograd applies to 3x3, stride-1, undilated, ungrouped float32 layers
    with at least WINOGRAD_MIN_CHANNELS input channels, WINOGRAD_MIN_PIXELS
    output pixels and WINOGRAD_MIN_MACS multiply-adds per call. Its fixed
    cost is the weight transform, U = n^2 x C x K floats (n = m + 2),
    computed on every call (or at compile time for constant weights) and read
    by the GEMMs of every chunk of tiles: where U fits in L2 it is cheap;
    up to a quarter of L3 it needs WINOGRAD_LARGE_U_PIXELS output pixels
    (fewer with narrower vectors);
    larger, never (512 x 512 channels: 37 MiB for F(4x4)). F(4x4, 3x3)
    (4x fewer multiplications) where the output is at least
    WINOGRAD4_MIN_SIDE on both sides, the target has at least
    WINOGRAD4_MIN_REGISTERS vector registers and its U qualifies, else
    F(2x2, 3x3) (2.25x), whose 2x2 tiles fit small outputs and 16 registers
    better and whose U is 2.25x smaller.

    With run-time sizes (a symbolic batch or image) Winograd is chosen only where it qualifies at
    every size the symbols' bounds allow: a choice that depends on the size's value would be a
    size class (a guard, another program), and the GEMM forms serve every size.
    """
    if not _winograd_applies(root):
        return None
    n_img, c_in = root.inputs[0].shape[:2]
    c_out = root.inputs[1].shape[0]
    _, _, oh, ow = root.shape
    pixels = n_img * oh * ow
    if c_in < WINOGRAD_MIN_CHANNELS or not _always_at_least(pixels, WINOGRAD_MIN_PIXELS):
        return None
    if not _always_at_least(pixels * c_out * c_in * 9, WINOGRAD_MIN_MACS):
        return None
    target = cpu_target()
    for m in (4, 2):
        if m == 4 and not (_always_at_least(oh, WINOGRAD4_MIN_SIDE) and _always_at_least(ow, WINOGRAD4_MIN_SIDE)
                           and target.vector_registers >= WINOGRAD4_MIN_REGISTERS):
            continue
        u_bytes = (m + 2) ** 2 * c_in * c_out * 4
        if u_bytes <= target.l2 or (u_bytes <= target.l3 // 4
                                    and _always_at_least(pixels, _large_u_pixels(_direct_rate_bytes(root, target)))):
            return f"winograd{m}"
    return None


def _direct_rate_bytes(root: Node, target: CpuTarget) -> int:
    """The vector width whose full-rate FMAs match the direct convolution's multiply-add rate."""
    return target.vector_bytes if target.bf16_dot and bf16_operands(root) else target.fma_bytes


def _large_u_pixels(width: int) -> int:
    """Output pixels per call from which Winograd pays for a U past L2 (`WINOGRAD_LARGE_U_PIXELS`) against a
    direct convolution at the rate of `width`-byte FMAs.

    A width not measured takes the threshold of the nearest measured one at least as wide.
    """
    wider = [w for w in WINOGRAD_LARGE_U_PIXELS if w >= width]
    return WINOGRAD_LARGE_U_PIXELS[min(wider) if wider else max(WINOGRAD_LARGE_U_PIXELS)]


def bf16_operands(node: Node) -> bool:
    """The convolution's operands hold bf16 values (precision="bf16"): its blocked kernel runs on
    vdpbf16ps where the target multiplies bf16 pairs (passes/conv_bf16_weights.py)."""
    x, w = node.inputs[:2]
    return holds_bf16_values(w) and (is_bf16_rounding(x) or holds_bf16_values(x))


def _always_at_least(value, minimum: int) -> bool:
    """`value >= minimum` at every size (for a run-time size: decided by its symbols' bounds; no guard)."""
    return at_least(value, minimum) is True


def _padded_rows_n(root: Node) -> int | None:
    """GEMM width N' = (OH-1)*Wp + OW of the padded-row form, or None where it does not apply.

    Applies to stride-1 convolutions with a kernel wider than 1x1 (or padded)
    whose junk columns (Wp - OW per output row) add at most half of N.
    """
    x_node, w_node = root.inputs
    _, _, h, w = x_node.shape
    _, _, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    pt, pb, pl, pr = root.attrs["padding"]
    if tuple(root.attrs["stride"]) != (1, 1) or (kh * kw == 1 and not (pt or pb or pl or pr)):
        return None
    wp = w + pl + pr
    rows = (oh - 1) * wp + ow
    return rows if 2 * rows <= 3 * oh * ow else None


def conv2d_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None, algorithm: str | None = None,
                shallow_sizes: tuple[int, int] = (0, 0)) -> Stmt | None:
    """Loop IR computing epilogue(conv2d(x, w)): grouped, strided, dilated, padded.

    `epilogue(index, acc)` gives the stored value of output element `index`
    (n, o, y, x) whose convolution sum is `acc` (default: acc itself).
    algorithm: one of `applicable_conv_algorithms` (a tuned choice), else `conv_algorithm`'s.
    shallow_sizes: the "shallow" kernel's tuned (channels, vectors), 0 for the rule's size.
    """
    if epilogue is None:
        epilogue = lambda index, acc: E.cast(acc, out.value_dtype)  # noqa: E731
    if any(d == 0 for d in root.shape):
        return None
    if algorithm is None or algorithm not in applicable_conv_algorithms(root, out):
        algorithm = conv_algorithm(root, out)
    if algorithm.startswith("winograd"):
        return winograd_conv(root, out, values, epilogue, m=int(algorithm[len("winograd"):]))
    if algorithm == "gemm":
        return _implicit_gemm(root, out, values, epilogue)
    if algorithm == "gemm_rows":
        return _implicit_gemm_rows(root, out, values, epilogue)
    if algorithm == "shallow":
        return shallow_conv_body(root, out, values, epilogue, shallow_sizes)
    if algorithm == "depthwise":
        return depthwise_body(root, out, values, epilogue)
    return _direct(root, out, values, epilogue)


def _geometry(root: Node):
    x_node, w_node = root.inputs
    _, c_in, h, w = x_node.shape
    c_out, c_group, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    return x_node, w_node, c_out, c_group, kh, kw, h, w, oh, ow


def _pixel(values: ValueBuilder, x_node: Node, root: Node, img, channel, y, x, r, s, dtype):
    """Input element under tap (r, s) of output pixel (y, x), zero in the padding."""
    _, _, h, w = x_node.shape
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    pt, pb, pl, pr = root.attrs["padding"]
    iy, ix = y * sh + r * dh - pt, x * sw + s * dw - pl
    if not (pt or pb or pl or pr):
        return values.value(x_node, [img, channel, iy, ix])
    inside = E.logical_and(E.logical_and(E.ge(iy, 0), E.lt(iy, h)), E.logical_and(E.ge(ix, 0), E.lt(ix, w)))
    clamp = lambda i, size: E.minimum(E.maximum(i, 0), size - 1)  # noqa: E731
    return E.Select(inside, values.value(x_node, [img, channel, clamp(iy, h), clamp(ix, w)]), E.Const(0.0, dtype))


def _weight_value(values: ValueBuilder, w_node: Node, groups: int, og: int, k: int, split_k):
    """a_value(b, row, kk) of the implicit GEMM: weight [g*og + row, c, r, s] with kk = (c*KH + r)*KW + s.

    A weight held in a buffer is read at the flat index (g*og + row)*K + kk,
    so packing A has no div/mod per element.
    """
    buf = values.buffers.get(w_node.id) if w_node is not values.inline_root else None

    def a_value(b, row, kk):
        g = b % groups if groups > 1 else E.const(0)
        if buf is not None and w_node.id not in values.known:
            return E.Load(buf, (g * og + row) * k + kk)
        c, r, s = split_k(kk)
        return values.value(w_node, [g * og + row, c, r, s])
    return a_value


def _implicit_gemm(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt:
    x_node, w_node, c_out, c_group, kh, kw, h, w, oh, ow = _geometry(root)
    n_img = x_node.shape[0]
    groups = root.attrs["groups"]
    og = c_out // groups
    m, n, k = og, oh * ow, c_group * kh * kw
    dtype = compute_dtype(root.dtype.name)

    def split_k(kk):
        return kk // (kh * kw), (kk // kw) % kh, kk % kw

    a_value = _weight_value(values, w_node, groups, og, k, split_k)

    def b_value(b, kk, col):
        img, g = (b // groups, b % groups) if groups > 1 else (b, E.const(0))
        c, r, s = split_k(kk)
        return _pixel(values, x_node, root, img, g * c_group + c, col // ow, col % ow, r, s, dtype)

    def epi(b, row, col, acc):
        img, g = (b // groups, b % groups) if groups > 1 else (b, E.const(0))
        return epilogue([img, g * og + row, col // ow, col % ow], acc)

    return gemm_template(root)(out, dtype, n_img * groups, m, n, k, a_value, b_value,
                               lambda b, row, col: (b * m + row) * n + col, epi)


def _implicit_gemm_rows(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt:
    """Stride-1 implicit GEMM over padded input rows: B packing is a contiguous copy.

    The input is first copied, zero-padded, into xpad[image, channel, Hp, Wp]
    (each element computed once; the only selects are here). The GEMM then
    runs over N' = (OH-1)*Wp + OW columns col = y*Wp + x, x in [0, Wp): the
    im2col element of tap (c, r, s) is xpad[c, 0, 0] + r*dh*Wp + s*dw + col,
    contiguous in col, so packing has no div/mod and no select. Columns with
    x >= OW are junk (they straddle two rows): computed, never written back.
    The largest offset read is Hp*Wp - 1, so no read leaves the channel plane.
    """
    x_node, w_node, c_out, c_group, kh, kw, h, w, oh, ow = _geometry(root)
    n_img, c_in = x_node.shape[0], x_node.shape[1]
    groups = root.attrs["groups"]
    dh, dw = root.attrs["dilation"]
    pt, pb, pl, pr = root.attrs["padding"]
    og = c_out // groups
    hp, wp = h + pt + pb, w + pl + pr
    m, n, k = og, _padded_rows_n(root), c_group * kh * kw
    dtype = compute_dtype(root.dtype.name)
    zero = E.Const(0.0, dtype)

    xpad = Buffer("g_xpad", dtype, (n_img * c_in * hp * wp,), scope="local")
    plane, yy, xx = E.Var("g_plane"), E.Var("g_yy"), E.Var("g_xx")
    iy, ix = yy - pt, xx - pl
    if pt or pb or pl or pr:
        inside = E.logical_and(E.logical_and(E.ge(iy, 0), E.lt(iy, h)), E.logical_and(E.ge(ix, 0), E.lt(ix, w)))
        clamp = lambda i, size: E.minimum(E.maximum(i, 0), size - 1)  # noqa: E731
        elem = E.Select(inside, values.value(x_node, [plane // c_in, plane % c_in, clamp(iy, h), clamp(ix, w)]), zero)
    else:
        elem = values.value(x_node, [plane // c_in, plane % c_in, iy, ix])
    choice = parallel_when(n_img * c_in * hp * wp, n_img * c_in, PARALLEL_MIN_ELEMENTS)
    fill = For(plane, E.const(n_img * c_in), For(yy, E.const(hp), For(xx, E.const(wp), Store(
        xpad, (plane * hp + yy) * wp + xx, elem), "vectorized")), loop_kind(choice), threads_if(choice))

    def split_k(kk):
        return kk // (kh * kw), (kk // kw) % kh, kk % kw

    def img_group(b):
        return (b // groups, b % groups) if groups > 1 else (b, E.const(0))

    a_value = _weight_value(values, w_node, groups, og, k, split_k)

    def b_value(b, kk, col):
        img, g = img_group(b)
        c, r, s = split_k(kk)
        return E.Load(xpad, (img * c_in + g * c_group + c) * (hp * wp) + r * (dh * wp) + s * dw + col)

    # The GEMM writes C'[b, row, col] (junk columns included, compute dtype, so
    # partial sums over K blocks need nothing of the output); one pass over
    # (y, x) then applies the epilogue and drops the junk columns.
    cbuf = Buffer("g_cbuf", dtype, (n_img * groups * m * n,), scope="local")
    gemm = gemm_template(root)(cbuf, dtype, n_img * groups, m, n, k, a_value, b_value,
                               lambda b, row, col: (b * m + row) * n + col, lambda b, row, col, acc: acc)
    bm, y, x = E.Var("g_bm"), E.Var("g_y"), E.Var("g_x")
    value = epilogue([bm // c_out, bm % c_out, y, x], E.Load(cbuf, bm * n + y * wp + x))
    choice = parallel_when(n_img * c_out * oh * ow, n_img * c_out, PARALLEL_MIN_ELEMENTS)
    final = For(bm, E.const(n_img * c_out), For(y, E.const(oh), For(x, E.const(ow), Store(
        out, (bm * oh + y) * ow + x, value), "vectorized")), loop_kind(choice), threads_if(choice))
    return Alloc(xpad, Alloc(cbuf, block(fill, gemm, final)))


def _direct(root: Node, out: Buffer, values: ValueBuilder, epilogue) -> Stmt | None:
    x_node, w_node = root.inputs
    n_img, c_in, h, w = x_node.shape
    c_out, c_group, kh, kw = w_node.shape
    _, _, oh, ow = root.shape
    if n_img * c_out * oh * ow == 0:
        return None
    sh, sw = root.attrs["stride"]
    dh, dw = root.attrs["dilation"]
    pt, _, pl, _ = root.attrs["padding"]
    out_per_group = c_out // root.attrs["groups"]
    dtype = compute_dtype(root.dtype.name)
    zero = E.Const(0.0, dtype)

    no, c, r, s, y, x, p, q = (E.Var(v) for v in ("no", "c", "r", "s", "y", "x", "p", "q"))
    img, o = no // c_out, no % c_out
    channel = (o // out_per_group) * c_group + c
    iy, ix = y * sh + r * dh - pt, x * sw + s * dw - pl
    inside = E.logical_and(E.logical_and(E.ge(iy, 0), E.lt(iy, h)), E.logical_and(E.ge(ix, 0), E.lt(ix, w)))
    clamp = lambda i, size: E.minimum(E.maximum(i, 0), size - 1)  # noqa: E731
    pixel = E.Select(inside, values.value(x_node, [img, channel, clamp(iy, h), clamp(ix, w)]), zero)

    acc = Buffer("acc", dtype, (oh * ow,), scope="local")
    tap = E.Var("tap", dtype)
    accumulate = For(c, E.const(c_group), For(r, E.const(kh), For(s, E.const(kw), block(
        Let(tap, values.value(w_node, [o, c, r, s])),
        For(y, E.const(oh), For(x, E.const(ow), Store(acc, y * ow + x, E.Load(acc, y * ow + x) + tap * pixel),
                                "vectorized"))))))
    plane = Alloc(acc, block(
        For(p, E.const(oh * ow), Store(acc, p, zero), "vectorized"),
        accumulate,
        For(q, E.const(oh * ow), Store(out, no * (oh * ow) + q,
                                       epilogue([img, o, q // ow, q % ow], E.Load(acc, q))),
            "vectorized")))
    work = n_img * c_out * oh * ow * c_group * kh * kw
    choice = parallel_when(work, n_img * c_out, PARALLEL_MIN_ELEMENTS)  # per call for run-time sizes
    return For(no, E.const(n_img * c_out), plane, loop_kind(choice), threads_if(choice))
