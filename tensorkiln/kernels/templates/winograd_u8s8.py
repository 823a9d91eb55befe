"""Winograd F(2x2, 3x3) for 8-bit 3x3 stride-1 convolutions on AVX2: exact 16-bit products.

Without VNNI, an exact u8 x s8 product costs a 16-bit lane (int8_avx2.py: the bytes widened, one
`vpmaddwd` per 16 multiply-adds), the same as a product of two int16. Winograd's transforms keep
every value an integer that fits 16 bits (ir/ops/quantized_winograd.py), so the layer takes 16
multiplies per 2x2 outputs instead of 36 at the same cost per multiply: 2.25x fewer.

A task is a run of whole output row pairs of one image x a block of output channels (the same
parallel loop and fused epilogue as the direct convolutions, conv_u8s8.py), and its helper
`tk_conv_u8s8_winograd_avx2` fills the task's int32 tile in three passes:

    V[q][t][c] = (B^T d_t B)[q]        each 4x4 input tile t, 16 channels a vector (int16)
    M[t][q][o] = sum over c of V[q][t][c] * U[q][c][o]
                                       per position q and panel of 16 channels, 6 tiles x 16
                                       channels of int32 sums in 12 registers, two channels a
                                       `vpmaddwd` (the panel's (q, channels) slice stays in L1
                                       for every tile of the task)
    tile[pixel][o] = (A^T M[t] A) / 4  the 2x2 outputs of each tile (exact: the sums are 4y)

Inputs past the image (the odd last row or column of the output) read as zeros: they only reach
outputs past the image, which are not stored.
"""
from __future__ import annotations

from functools import lru_cache

from ...ir.graph import Node
from ...ir.ops.quantized_winograd import (VARIANTS, WINOGRAD_CHANNELS, WINOGRAD_MAX_CHANNELS, WINOGRAD_PANEL,
                                            WinogradVariant)
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, NativeCall, Pointer, Stmt
from ..inline import ValueBuilder
from ..schedule_defaults import thread_count
from ..target import cpu_target
from .conv import forced_algorithm
from .conv_u8s8 import TASK_CYCLES, input_buffer, parallel_tasks
from .gemm import PARALLEL_MIN_MACS
from .int16_tile_avx2 import INT16_TILE

MIN_CHANNELS = 16  # fewer input or output channels: the transforms cost more than the multiplies saved
SCRATCH_BYTES = 384 * 1024  # a task's V, M and tile together: within the 1 MiB L2 of the cores it was tuned on
GEMM_MACS_PER_CYCLE = 32  # two vpmaddwd a cycle (16 multiply-adds each)
INPUT_CYCLES = 24  # a tile's input transform, per 16 channels: 16 loads and widenings, 32 adds, 16 stores
OUTPUT_CYCLES = 12  # a tile's output transform, per 8 channels: 16 loads, 24 adds, 4 shifts and stores
# multiply-adds of the exact u8 x s8 step per byte streamed from memory, one thread (~40 G/s against ~8
# GB/s measured on a Zen 4 host without AVX-512): what a filter byte must save to pay for itself
MACS_PER_BYTE = 5


def min_tiles(stride: int) -> float:
    """Output tiles (2x2, of one image) a layer needs for Winograd to pay on this kind of CPU.

    Each tile saves 36 - P of the direct kernel's multiplies per input and output channel (P the
    variant's positions), while the filters grow from 9 bytes to 2P (int16 panels) that stream from
    memory once per call: the saving pays for them from (2P - 9) / (36 - P) x MACS_PER_BYTE tiles,
    about 6 at stride 1 and 19 at stride 2. ResNet-18's 7x7 layers (16 tiles) measured 1.54x at
    stride 1 and 0.90x at stride 2 (`python benchmarks/int8_convs.py --threads 1`)."""
    positions = VARIANTS[stride].n ** 2
    return (2 * positions - 9) / (36 - positions) * MACS_PER_BYTE


def winograd_u8s8_applies(channels_in: int, channels_out: int, kernel, stride, dilation, groups: int,
                          out_hw: tuple[int, int]) -> bool:
    """Whether a quantized convolution of this geometry runs as `conv2d_u8s8_winograd` here: a 3x3
    layer of stride 1 or 2 with whole vectors of input channels, enough channels for the transforms
    to pay and enough output tiles for the larger filters (`min_tiles`), on an AVX2 target without
    VNNI (where an exact product is a 16-bit lane either way). `forced_conv_algorithm("winograd2")`
    takes any such geometry wherever the CPU has AVX2, "direct" none."""
    forced = forced_algorithm()
    strides = tuple(stride)
    if forced == "direct" or cpu_target().int8_dot == "portable" or groups != 1 or tuple(kernel) != (3, 3) or \
            strides[0] != strides[1] or strides[0] not in VARIANTS or tuple(dilation) != (1, 1) or \
            channels_in % WINOGRAD_CHANNELS or not MIN_CHANNELS <= channels_in <= WINOGRAD_MAX_CHANNELS or \
            channels_out < MIN_CHANNELS:
        return False
    if forced == "winograd2":
        return True
    tiles = -(-out_hw[0] // 2) * -(-out_hw[1] // 2)
    return cpu_target().int8_dot == "avx2" and tiles >= min_tiles(strides[0])


def _scratch(tiles: int, positions: int, c: int, nb: int, pixels: int) -> tuple[int, int, int]:
    """int16 elements of V, int32 elements of M and of the tile, for a task of `tiles` tiles."""
    return positions * tiles * c, tiles * positions * nb, pixels * nb


@lru_cache(maxsize=256)
def task_split(images: int, oh: int, ow: int, c: int, o: int, threads: int, positions: int = 16) -> tuple[int, int]:
    """(output rows, output channels) of a task: an even number of rows (or all of them) and a multiple
    of 16 channels, the split that finishes soonest over the threads by an estimate of each task's
    cycles (its multiplies, its transforms, its panels read from L2), within SCRATCH_BYTES."""
    tw = -(-ow // 2)
    best: tuple[float, int, int, int] | None = None
    for nb in range(WINOGRAD_PANEL, -(-o // WINOGRAD_PANEL) * WINOGRAD_PANEL + 1, WINOGRAD_PANEL):
        for rows in sorted({*range(2, oh + 1, 2), oh}):
            tiles = -(-rows // 2) * tw
            v, m, tile = _scratch(tiles, positions, c, nb, rows * ow)
            if 2 * v + 4 * (m + tile) > SCRATCH_BYTES and (rows, nb) != (min(2, oh), WINOGRAD_PANEL):
                continue
            cycles = (tiles * positions * c * nb / GEMM_MACS_PER_CYCLE + tiles * c // 16 * INPUT_CYCLES * positions / 16
                      + tiles * nb // 8 * OUTPUT_CYCLES + positions * c * nb * 2 / 16 + TASK_CYCLES)
            tasks = images * -(-oh // rows) * -(-o // nb)
            key = (-(-tasks // threads) * cycles, tasks, -nb, rows)
            if best is None or key[:3] < best[:3]:
                best = key
    assert best is not None  # two rows (or one) and one panel always fit
    return best[3], -best[2]


def _combination(coeffs, terms: list[str], add: str, sub: str) -> str:
    """C of the sum of terms by coefficients in {-1, 0, 1}, a positive term first (no negation)."""
    plus = [t for c, t in zip(coeffs, terms) if c == 1]
    minus = [t for c, t in zip(coeffs, terms) if c == -1]
    assert plus and len(plus) + len(minus) == sum(c != 0 for c in coeffs), coeffs
    text = plus[0]
    for t in plus[1:]:
        text = f"{add}({text}, {t})"
    for t in minus:
        text = f"{sub}({text}, {t})"
    return text


def _input_transform(variant: WinogradVariant, name: str) -> str:
    """C of `name`: an n x n input tile of 16 channels -> V = B^T d B, the n * n int16 vectors stored
    q * vq apart."""
    n, b = variant.n, variant.input_t
    over_rows = "\n".join(f"        t[{r}][j] = {_combination(b[r], [f'd[{i}][j]' for i in range(n)], '_mm256_add_epi16', '_mm256_sub_epi16')};"
                          for r in range(n))
    over_cols = "\n".join(f"        _mm256_storeu_si256((__m256i *)(v + ({n} * i + {c}) * vq), "
                          f"{_combination(b[c], [f't[i][{j}]' for j in range(n)], '_mm256_add_epi16', '_mm256_sub_epi16')});"
                          for c in range(n))
    return f"""
/* {n}x{n} input tile of 16 channels -> V = B^T d B ({n * n} vectors of int16), stored at v + q * vq; rows[i] is
 * the tile's row i (0: past the image) and avail its columns within the image: the others read as zeros */
static inline __attribute__((always_inline)) void {name}(
    const uint8_t *const rows[{n}], int64_t c4, int64_t avail, int16_t *restrict v, int64_t vq)
{{
    __m256i d[{n}][{n}], t[{n}][{n}];
#pragma GCC unroll {n}
    for (int i = 0; i < {n}; i++) {{
#pragma GCC unroll {n}
        for (int j = 0; j < {n}; j++) {{
            d[i][j] = rows[i] != 0 && j < avail
                ? _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(rows[i] + j * c4)))
                : _mm256_setzero_si256();
        }}
    }}
#pragma GCC unroll {n}
    for (int j = 0; j < {n}; j++) {{  /* B^T d: over the rows */
{over_rows}
    }}
#pragma GCC unroll {n}
    for (int i = 0; i < {n}; i++) {{  /* (B^T d) B: over the columns */
{over_cols}
    }}
}}
"""


def _output_transform(variant: WinogradVariant) -> tuple[str, str, str]:
    """C statements of A^T M over the rows (into s[2][n], from the tile's m at mt, 8 channels at j), and
    the two outputs of a row i of (A^T M) A (y0v, y1v), divided by the variant's scale."""
    n, a = variant.n, variant.output_t
    loads = "\n".join(f"                    const __m256i m{i} = _mm256_loadu_si256((const __m256i *)(mt + ({n * i} + k) * nbp + j));"
                      for i in range(n))
    rows = "\n".join(f"                    s[{o}][k] = {_combination(a[o], [f'm{i}' for i in range(n)], '_mm256_add_epi32', '_mm256_sub_epi32')};"
                     for o in range(2))
    shift = variant.scale.bit_length() - 1
    assert 1 << shift == variant.scale

    def output(o: int) -> str:
        value = _combination(a[o], [f"s[i][{k}]" for k in range(n)], "_mm256_add_epi32", "_mm256_sub_epi32")
        return f"_mm256_srai_epi32({value}, {shift})" if shift else value
    return loads + "\n" + rows, output(0), output(1)


_DRIVER = r"""
/* ---- Winograd F(2x2, 3x3) u8 x s8 convolution at stride {stride} (avx2): c[t * ldc + j] = the sum of output
 * pixel p0 + t (row-major over an OH x OW image) and channel j, for t < pixels, j < cols (columns up to the
 * next multiple of 16 may be written too); p0 starts an even output row and the run is whole rows. x is
 * one padded NHWC image (Hp x Wp pixels of c4 bytes), u the panels from the task's first channel
 * (ir/ops/quantized_winograd.py); v ({positions} x tiles x c4 int16) and m (tiles x {positions} x 16 panels
 * int32) are the task's scratch. noipa: never specialized to a layer's constants (a single call site's
 * arguments), since with the row stride of V known GCC hoists the tile's six broadcasts ahead of its
 * multiplies and keeps eight of its sums on the stack. */
static __attribute__((noipa)) void {name}(
    const uint8_t *restrict x, const int16_t *restrict u, int32_t *restrict c, int64_t ldc, int64_t p0,
    int64_t pixels, int64_t cols, int64_t ow, int64_t hp, int64_t wp, int64_t c4, int16_t *restrict v,
    int32_t *restrict m)
{{
    const int64_t r0 = p0 / ow, r1 = (p0 + pixels) / ow, tw = (ow + 1) / 2, row_pairs = (r1 - r0 + 1) / 2;
    const int64_t tiles = row_pairs * tw, npanels = (cols + 15) / 16, nbp = 16 * npanels, pairs = c4 / 2;
    for (int64_t pr = 0; pr < row_pairs; pr++) {{
        const uint8_t *rows[{n}];
        for (int i = 0; i < {n}; i++) {{  /* output rows r0 + 2 pr, + 1 read input rows from {stride} (r0 + 2 pr) */
            const int64_t y = {stride} * (r0 + 2 * pr) + i;
            rows[i] = y < hp ? x + y * wp * c4 : 0;
        }}
        for (int64_t b = 0; b < tw; b++) {{
            const int64_t x0 = {stride} * 2 * b;
            const uint8_t *at[{n}];
            for (int i = 0; i < {n}; i++) {{
                at[i] = rows[i] != 0 ? rows[i] + x0 * c4 : 0;
            }}
            for (int64_t cv = 0; cv < c4; cv += 16) {{
                const uint8_t *ac[{n}];
                for (int i = 0; i < {n}; i++) {{
                    ac[i] = at[i] != 0 ? at[i] + cv : 0;
                }}
                {input}(ac, c4, wp - x0, v + (pr * tw + b) * c4 + cv, tiles * c4);
            }}
        }}
    }}
    for (int q = 0; q < {positions}; q++) {{
        for (int64_t p = 0; p < npanels; p++) {{
            const int16_t *up = u + (p * {positions} + q) * pairs * 32;
            /* the tiles in blocks of equal height, at most 6 */
            const int64_t blocks = (tiles + 5) / 6;
            for (int64_t t = 0, left = blocks; t < tiles; left--) {{
                const int mr = (int)((tiles - t + left - 1) / left);
                tk_i16_tiles_avx2(mr, v + (q * tiles + t) * c4, c4, up, pairs, m + (t * {positions} + q) * nbp + p * 16,
                                  {positions} * nbp);
                t += mr;
            }}
        }}
    }}
    for (int64_t pr = 0; pr < row_pairs; pr++) {{
        const int64_t y0 = 2 * pr, rows = r0 + y0 + 1 < r1 ? 2 : 1;
        for (int64_t b = 0; b < tw; b++) {{
            const int32_t *mt = m + (pr * tw + b) * {positions} * nbp;
            const int64_t x0 = 2 * b, columns = x0 + 1 < ow ? 2 : 1;
            for (int64_t j = 0; j < nbp; j += 8) {{
                __m256i s[2][{n}];
#pragma GCC unroll {n}
                for (int k = 0; k < {n}; k++) {{  /* A^T M: over the rows */
{over_rows}
                }}
                for (int64_t i = 0; i < rows; i++) {{  /* (A^T M) A over the columns, divided by the scale (exact) */
                    int32_t *out = c + ((y0 + i) * ow + x0) * ldc + j;
                    _mm256_storeu_si256((__m256i *)out, {y0});
                    if (columns == 2) {{
                        _mm256_storeu_si256((__m256i *)(out + ldc), {y1});
                    }}
                }}
            }}
        }}
    }}
}}
"""


def helper_name(stride: int) -> str:
    """The C helper of a stride (the precision report reads "_winograd_" and the kind last)."""
    return "tk_conv_u8s8_winograd_avx2" if stride == 1 else f"tk_conv_u8s8_winograd_s{stride}_avx2"


@lru_cache(maxsize=None)
def winograd_source(stride: int) -> str:
    """The C of the helper of `stride` (`helper_name`) and its parts."""
    variant = VARIANTS[stride]
    input_name = f"tk_wino_input{variant.n}_avx2"
    over_rows, y0, y1 = _output_transform(variant)
    return INT16_TILE + _input_transform(variant, input_name) + _DRIVER.format(
        stride=stride, positions=variant.n ** 2, n=variant.n, name=helper_name(stride), input=input_name,
        over_rows=over_rows, y0=y0, y1=y1)


def winograd_u8s8_body(root: Node, out: Buffer, values: ValueBuilder, epilogue=None) -> Stmt | None:
    """Loop IR computing out = epilogue(conv + compensation) for a `conv2d_u8s8_winograd` node."""
    x_node, u_node, _ = root.inputs
    _, hp, wp, c = x_node.shape
    images, oh, ow, o = root.shape
    stride = root.attrs["stride"]
    positions = VARIANTS[stride].n ** 2
    x, u = input_buffer(root, values), values.buffers[u_node.id]
    macs = root.type.size * 9 * c
    threads = thread_count() if macs >= PARALLEL_MIN_MACS else 1
    rows, nb = task_split(images, oh, ow, c, o, threads, positions)
    tiles = -(-rows // 2) * -(-ow // 2)
    v_elems, m_elems, _ = _scratch(tiles, positions, c, nb, rows * ow)
    v = Buffer("qw_v", "int16", (v_elems,), scope="local")
    m = Buffer("qw_m", "int32", (m_elems,), scope="local")
    panel_elems = positions * c * WINOGRAD_PANEL

    def call(image, p0, pixels, c0, cols, tile, ldc) -> Stmt:
        args = (Pointer(x, image * (hp * wp * c)), Pointer(u, (c0 // WINOGRAD_PANEL) * panel_elems),
                Pointer(tile, E.const(0)), E.const(ldc), p0, pixels, cols, E.const(ow), E.const(hp), E.const(wp),
                E.const(c), Pointer(v, E.const(0)), Pointer(m, E.const(0)))
        helper = NativeCall(helper_name(stride), args, writes=(tile.name, v.name, m.name),
                            source=winograd_source(stride))
        return Alloc(v, Alloc(m, helper))

    return parallel_tasks(root, out, values, epilogue, (rows * ow, nb), macs, call)
