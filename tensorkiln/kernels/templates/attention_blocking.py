"""Block and register-tile sizes of the fused attention kernel, from the target description.

The sizes come from the CPU (vector lanes and registers: kernels/target.py)
and the extents (queries, values per row), never from a model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...loops.types import itemsize
from ...shapes import is_symbolic
from ..target import cpu_target

QUERY_BLOCK = 48  # queries sharing one packed block of keys and values (a multiple of every MR and vector)
KEY_BLOCK = 64  # keys per block: one online-softmax step (rescale of O) per block


@dataclass(frozen=True)
class AttentionBlocking:
    """Block and register-tile sizes of the attention kernel.

    query_block (MQ) queries share each packed key/value block; the scores
    tile is score_keys (MRK) keys x score_queries (NQ) queries, the P V tile
    pv_rows (MR) queries x pv_cols values; values are padded to dv_padded (a
    whole number of pv_cols chunks) so every vector loop has a constant extent.
    """

    lanes: int
    query_block: int
    key_block: int
    score_keys: int
    score_queries: int
    pv_rows: int
    pv_cols: int
    dv_padded: int


def attention_blocking(m: int, dv: int, dtype: str) -> AttentionBlocking:
    """Tile sizes for m queries and dv values per row of `dtype` on this CPU."""
    target = cpu_target()
    lanes = max(target.vector_bytes // itemsize(dtype), 1)
    # vector accumulators a tile may hold: the other registers take the operands
    budget = 24 if target.vector_registers >= 32 else 12
    # P V tile: MR rows x up to 6 (4 with 16 registers) vectors of values
    dv_vectors = -(-dv // lanes)
    cols_vectors = pv_tile_vectors(dv_vectors, budget)
    chunks = -(-dv_vectors // cols_vectors)
    mr = max(1, min(8, budget // cols_vectors))
    # A symbolic query count takes whole blocks with a tail, whatever its value: the short-block rule
    # below asks divisibility questions of the count, each a size class of its own.
    if is_symbolic(m) or m >= QUERY_BLOCK:
        mq = _round_up(QUERY_BLOCK, math.lcm(lanes, mr))
    else:  # few queries (decoding): one short block, and no more rows per tile than there are queries
        mq = _round_up(m, lanes)
        mr = max(r for r in range(1, min(mr, m) + 1) if mq % r == 0)
    mrk, nq = score_tile(mq, lanes, budget, target.vector_registers)
    nk = _round_up(KEY_BLOCK, mrk)
    return AttentionBlocking(lanes, mq, nk, mrk, nq, mr, cols_vectors * lanes, chunks * cols_vectors * lanes)


def score_tile(mq: int, lanes: int, budget: int, registers: int) -> tuple[int, int]:
    """(keys, queries) of the Q K^T register tile: the most accumulators (up to `budget`) in a tile of
    1 to 3 vectors of queries dividing the query block, whose query vectors and key broadcast fit in
    the registers beside its accumulators.

    The accumulators alone are not the limit. With 16 registers, 4 keys x 3 vectors is 12
    accumulators + 3 query vectors + 1 broadcast, every register: GCC then loaded the query vectors
    inside each FMA (16 loads per 12 FMAs) and the score products took a third more time than the
    P V products of the same flops; 6 keys x 2 vectors (15 registers, the GEMM's 6x16) loads 8. With
    32 registers, 8 keys x 3 vectors (28) is the tile as before."""
    tiles = []
    for v in (1, 2, 3):
        keys = max(1, min(8, budget // v))
        if mq % (v * lanes) == 0 and (keys * v + v + 1 < registers or v == 1):
            tiles.append((keys * v, v, keys))
    _, v, keys = max(tiles)
    return keys, v * lanes


def pv_tile_vectors(dv_vectors: int, budget: int) -> int:
    """Vectors of values per P V tile chunk: the fewest padded vectors (chunks x width past dv), then
    the largest tile (rows x width, rows = budget // width), then the widest.

    With 16 registers (budget 12) and dv = 64 in 8 lanes, 3-vector chunks padded the values to 72
    (12.5% of the products wasted, and the values copied each key block to pad them); 2-vector
    chunks of 6 rows waste nothing and read the values in place. With 32 registers (budget 24) and
    16 lanes, dv = 64 stays one chunk of 4 vectors, 6 rows."""
    # one vector per row only where there is one: a 1-vector tile loads a broadcast per product
    widths = range(min(2, dv_vectors), max(budget // 4, 1) + 1)
    return min(widths, key=lambda w: (-(-dv_vectors // w) * w, -(min(8, budget // w) * w), -w))


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k
