"""A 1x1 stride-1 convolution's output plane as one row of pixels, so register tiles may cross image rows.

In the channel-blocked layout (conv_nchwc.py) a 1x1 layer of stride 1 reads input
pixel (y, x) of its plane for output pixel (y, x), and each plane stores the
oh*ow pixels of a channel block one after another: input and output are both
one row of oh*ow pixels. Tiled by image row, a small image pays at the end of
every row: a 7-pixel row in tiles of 5 pixels ends in a tile of 2 (4 accumulators
for 2 weight vectors and 2 broadcasts a step), and every tile streams the
weights of its channel blocks once more. Tiled along the plane, all but one
tile per plane are full (49 pixels: nine tiles of 5 and one of 4).

A wider window (3x3, strided) tiles its plane the same way where the tile is
small (`WINDOW_PLANE_MAX_PIXELS`, `is_window_plane`): its pixels are no longer
one contiguous run of the input, so each pixel of a tile reads from its own
input offset, computed once per tile (GCC keeps one address register per
pixel, and the reduction's offsets are displacements from them). ResNet-18's
512-channel 7x7 layers on an AVX2 host: tiles of 5 x 2 blocks over rows of 7
end every row in a 2-pixel tile; along the plane, nine tiles of 5 and one of 4
(one thread, CPU time: 1.17x faster, docs/performance.md).

The tasks are (image, channel group, chunk of the plane's full tiles): chunks
enough that the threads share the work evenly, and no more, so that a task
runs many tiles on the same weights. The last chunk of a plane also runs the
plane's narrower tail tile.
"""
from __future__ import annotations

from typing import Callable

from ...loops import expr as E
from ...loops.ir import For, If, Stmt
from ...shapes.symint import is_symbolic

CHUNKS_PER_THREAD = 4  # tasks per thread at least, where the planes allow: an uneven share stays small
# Pixels of a window layer's plane tile at most: each holds an address register of its own, and an
# x86-64 loop has 16 general registers, about 6 of them taken by the reduction's indices, the weight
# pointer and the loop bounds. (AVX-512 tiles of 14 pixels stay tiled by row.)
WINDOW_PLANE_MAX_PIXELS = 8


def is_pointwise_plane(kh: int, kw: int, stride: tuple[int, int], depthwise: bool, oh: object, ow: object) -> bool:
    """Whether the layer's output plane is tiled as one row (see the module docstring): a 1x1 layer
    of stride 1 (a padded one reads its copy, whose plane is the output's), not depthwise, of a
    size known when compiling."""
    return (kh == kw == 1 and tuple(stride) == (1, 1) and not depthwise
            and not is_symbolic(oh) and not is_symbolic(ow))


def is_window_plane(depthwise: bool, in_block: int, oh: object, ow: object, plane_tile_pixels: int) -> bool:
    """Whether a layer that is not a pointwise plane tiles its plane as one row anyway (see the module
    docstring): not depthwise, input blocks of several channels (an RGB stem's single-channel blocks
    keep their own tap loop), a size known when compiling, and the plane's tile of at most
    WINDOW_PLANE_MAX_PIXELS pixels."""
    return (not depthwise and in_block > 1 and not is_symbolic(oh) and not is_symbolic(ow)
            and plane_tile_pixels <= WINDOW_PLANE_MAX_PIXELS)


def tile_row_pixels(kh: int, kw: int, stride: tuple[int, int], depthwise: bool, oh: int, ow: int) -> int:
    """The pixels a register tile may span: the whole plane for a pointwise plane, else one output row."""
    return oh * ow if is_pointwise_plane(kh, kw, stride, depthwise, oh, ow) else ow


def plane_chunks(full_tiles: int, other_tasks: int, threads: int) -> tuple[int, int]:
    """(chunks per plane, full tiles per chunk) for `full_tiles` full tiles in a plane and `other_tasks`
    (image, channel group) pairs: the fewest chunks giving each thread CHUNKS_PER_THREAD tasks, or
    up to twice as many where that makes the task count a multiple of the threads (9 channel groups
    of one chunk on 2 threads leave one thread idle for a ninth of the time), and no empty chunk.
    A plane without a full tile is one chunk (its tail tile)."""
    if full_tiles == 0:
        return 1, 0
    other_tasks = max(1, other_tasks)
    wanted = max(1, -(-CHUNKS_PER_THREAD * threads // other_tasks)) if threads > 1 else 1
    even = [c for c in range(wanted, 2 * wanted + 1) if (c * other_tasks) % threads == 0]
    chunks = max(1, min(full_tiles, even[0] if even else wanted))
    per = -(-full_tiles // chunks)
    return -(-full_tiles // per), per


def plane_tiles(tile_code: Callable[[int, E.Expr], Stmt], ox_tile: E.Var, chunk: E.Expr, chunks: int,
                per_chunk: int, full_tiles: int, tail: int, t_full: int) -> list[Stmt]:
    """The tiles of one chunk of a plane tiled as one row (`tile_code(pixels, first pixel)` each): its
    `per_chunk` full tiles (fewer in the last chunk, where they do not divide), then, in the last
    chunk, the plane's tail tile."""
    tiles: list[Stmt] = []
    if full_tiles:
        count = E.const(per_chunk) if full_tiles % per_chunk == 0 else \
            E.minimum(E.const(per_chunk), E.const(full_tiles) - chunk * per_chunk)
        tiles.append(For(ox_tile, count, tile_code(t_full, (chunk * per_chunk + ox_tile) * t_full)))
    if tail:
        last = tile_code(tail, E.const(full_tiles * t_full))
        tiles.append(last if chunks == 1 else If(E.eq(chunk, E.const(chunks - 1)), last))
    return tiles


__all__ = ["CHUNKS_PER_THREAD", "WINDOW_PLANE_MAX_PIXELS", "is_pointwise_plane", "is_window_plane", "plane_chunks",
           "plane_tiles", "tile_row_pixels"]
