"""The padded window a depthwise int8 task reads: its rows and channels, the border filled in place.

A `depthwise_u8s8` with a `padding` attr (ir/ops/quantized_conv.py) reads its
input unpadded. Each task (conv_u8s8.py: a run of output pixels x a block of
channels) first copies the input rows its run reads, only its channels, into a
local window whose border holds the pad value (the activation's zero point),
and the weights of those channels beside it; the depthwise helper of the
target (conv_u8s8_native.py, int8_avx2.py) then sums the window as a padded
image of that many channels. Against a separate pad kernel this writes no
padded copy of the whole image (a pass over memory and a parallel region per
layer) and the sums read the window from L1; the price is the rows that two
vertically adjacent runs both read, copied once by each.

The helper is plain C (memcpy and memset), the same on every target.
"""
from __future__ import annotations

from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, NativeCall, Pointer, Stmt, block

WINDOW_FUNCTION = "tk_depthwise_window_u8"

_SOURCE = r"""/* ---- a depthwise task's padded window (depthwise_window.py): rows row0 .. row0 + rows - 1 of one
 * unpadded NHWC image x (h x wd pixels, cin channels a pixel), channels j0 .. j0 + channels - 1, with pl
 * columns of pad on the left and pr on the right, rows outside the image all pad; and the weights
 * (taps, cin) of those channels. Both written with ld channels a pixel (a tap) */
static void tk_depthwise_window_u8(const uint8_t *restrict x, const int32_t *restrict w, uint8_t *restrict win,
                                   int32_t *restrict wl, int64_t ld, int64_t row0, int64_t rows, int64_t j0,
                                   int64_t channels, int64_t h, int64_t wd, int64_t cin, int64_t pl, int64_t pr,
                                   int64_t pad, int64_t taps)
{
    const int64_t wp = pl + wd + pr;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *dst = win + r * wp * ld;
        const int64_t iy = row0 + r;
        if (iy < 0 || iy >= h) {
            memset(dst, (int)pad, (size_t)(wp * ld));
            continue;
        }
        memset(dst, (int)pad, (size_t)(pl * ld));
        memset(dst + (pl + wd) * ld, (int)pad, (size_t)(pr * ld));
        const uint8_t *src = x + iy * wd * cin + j0;
        dst += pl * ld;
        if (channels == cin && ld == cin) {  /* every channel: the row is one block */
            memcpy(dst, src, (size_t)(wd * cin));
            continue;
        }
        for (int64_t i = 0; i < wd; i++, dst += ld, src += cin) {
            int64_t k = 0;
            for (; k + 16 <= channels; k += 16) {
                memcpy(dst + k, src + k, 16);  /* a constant size: one 16-byte move */
            }
            for (; k < channels; k++) {
                dst[k] = src[k];
            }
        }
    }
    for (int64_t t = 0; t < taps; t++) {
        memcpy(wl + t * ld, w + t * cin + j0, (size_t)channels * sizeof(int32_t));
    }
}
"""


def window_rows(run: int, pixels: int, ow: int, sh: int, dh: int, kh: int) -> int:
    """The most input rows a task's window holds: the runs start at multiples of `run` output pixels
    (of `pixels`, rows `ow` wide), each reading (output rows - 1) * sh + (kh - 1) * dh + 1 rows."""
    most = 0
    for p0 in range(0, pixels, run):
        last = min(p0 + run, pixels) - 1
        most = max(most, (last // ow - p0 // ow) * sh + (kh - 1) * dh + 1)
    return most


def windowed(x: Buffer, x_offset: E.Expr, weights: Buffer, p0: E.Expr, pixels: E.Expr, c0: E.Expr, cols: E.Expr,
             nb: int, run: int, geometry: dict, call) -> Stmt:
    """The task's window and weights, then `call(window, weights, p0 within the window)`: the depthwise
    helper's call on them (pixel stride nb). geometry: the layer's h, w (unpadded), cin, oh, ow, kh, kw,
    sh, dh, padding (top, bottom, left, right) and pad_value."""
    g = geometry
    pt, _, pl, pr = g["padding"]
    wp = pl + g["w"] + pr
    rows = window_rows(run, g["oh"] * g["ow"], g["ow"], g["sh"], g["dh"], g["kh"])
    window = Buffer("qc_window", "uint8", (rows * wp * nb,), scope="local")
    taps = Buffer("qc_taps", "int32", (g["kh"] * g["kw"] * nb,), scope="local")
    oy0, oy1 = p0 // g["ow"], (p0 + pixels - 1) // g["ow"]
    task_rows = (oy1 - oy0) * g["sh"] + (g["kh"] - 1) * g["dh"] + 1
    stage = NativeCall(WINDOW_FUNCTION, (
        Pointer(x, x_offset), Pointer(weights, E.const(0)), Pointer(window, E.const(0)), Pointer(taps, E.const(0)),
        E.const(nb), oy0 * g["sh"] - pt, task_rows, c0, cols,
        *(E.const(v) for v in (g["h"], g["w"], g["cin"], pl, pr, g["pad_value"], g["kh"] * g["kw"]))),
        writes=(window.name, taps.name), source=_SOURCE)
    return Alloc(window, Alloc(taps, block(stage, call(window, taps, p0 - oy0 * g["ow"], wp))))


__all__ = ["WINDOW_FUNCTION", "window_rows", "windowed"]
