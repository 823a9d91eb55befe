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
    nq = max(v * lanes for v in (1, 2, 3) if mq % (v * lanes) == 0)
    mrk = max(1, min(8, budget // (nq // lanes)))
    nk = _round_up(KEY_BLOCK, mrk)
    return AttentionBlocking(lanes, mq, nk, mrk, nq, mr, cols_vectors * lanes, chunks * cols_vectors * lanes)


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
