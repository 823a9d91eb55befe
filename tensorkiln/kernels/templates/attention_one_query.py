"""Fused attention for one query row per (batch, head): the decode step of a language model.

attention.py's kernel computes a block of MQ queries at once, with the vector lanes over
queries. A decode step has one query per head: its block would be one vector of queries of
which one is real, so every score product and every exp would be computed once per lane (8 or
16 times). This kernel keeps the online softmax and the P V tile of attention.py and changes
the two steps whose lanes ran over queries:

    scores: lanes over the depth t. A tile of MRK keys keeps MRK vectors of partial sums
            acc[kr][l] += q[tc*L + l] * k[j][tc*L + l]   (keys rows read contiguously, in place)
            then each key's lanes are added (one horizontal sum per key, not per product).
    softmax: lanes over the keys of the block: p[j] = exp(s[j] - max), their sum a reduction.

The P V tile is one query row by up to a register budget of value vectors, so the whole row of
O stays in registers while the keys stream by. Chosen when the query count is the constant 1 and
the depth is a whole number of vectors (attention_one_query_blocking), on float32 operands and on
bf16-valued ones alike (attention_bf16.fused_attention_body: their products are exact in float32);
otherwise attention.py's or attention_bf16.py's kernel runs.
"""
from __future__ import annotations

import numpy as np

from ...ir.graph import Node
from ...loops import expr as E
from ...loops.buffer import Buffer
from ...loops.ir import Alloc, Assign, For, Let, Stmt, Store, block
from ...loops.types import itemsize
from ...shapes import is_symbolic
from ..inline import ValueBuilder
from ..target import cpu_target
from .attention import _AttentionKernel
from .attention_blocking import KEY_BLOCK, AttentionBlocking, _round_up

ONE_QUERY_SCORE_KEYS = 8  # keys per score tile: 8 vectors of sums + the query's and a key's vector fit 16 registers


def attention_one_query_blocking(m: int, d: int, dv: int, dtype: str) -> AttentionBlocking | None:
    """The one-query kernel's tile sizes, or None where attention.py's kernel runs instead (more than one
    query, a run-time query count, or a depth that is not a whole number of vectors)."""
    target = cpu_target()
    lanes = max(target.vector_bytes // itemsize(dtype), 1)
    if is_symbolic(m) or m != 1 or is_symbolic(d) or d % lanes or lanes == 1:
        return None
    # the P V tile: one row of as many value vectors as the accumulator budget holds (fewest chunks),
    # so each key's value row is read once per block and its FMAs run on independent sums
    budget = 24 if target.vector_registers >= 32 else 12
    dv_vectors = -(-dv // lanes)
    chunks = -(-dv_vectors // budget)
    cols_vectors = -(-dv_vectors // chunks)
    mrk = ONE_QUERY_SCORE_KEYS
    return AttentionBlocking(lanes, 1, _round_up(KEY_BLOCK, mrk), mrk, 1, 1, cols_vectors * lanes,
                             chunks * cols_vectors * lanes)


class OneQueryAttention(_AttentionKernel):
    """attention.py's kernel for one query row: scores with lanes over the depth, softmax with lanes over keys."""

    def _pack_queries(self) -> Stmt:
        t = E.Var("qt")
        return For(t, E.const(self.d), Store(self.q_t, t, self._operand(self.q_node, self.i0, t)), "vectorized")

    def _scores(self, width: E.Expr) -> Stmt:
        """probs[j] = score(q . k_j) for the block's keys, MRK keys per register tile of depth-lane sums;
        the block's maximum score folded into new_max[0]. Keys past the width of the last tile repeat
        the last key or are masked (as in attention.py), so they never change the maximum."""
        bl = self.bl
        mrk, lanes = bl.score_keys, bl.lanes
        kg, kr, tc, lane, h = (E.Var(name) for name in ("kg", "kr", "tc", "sl", "sh"))
        acc = Buffer("s_acc", self.dtype, (mrk * lanes,), scope="local")
        key = kg * mrk + kr
        at = kr * lanes + lane

        def product_step(chunk: E.Expr, first: bool) -> Stmt:
            depth = chunk * lanes + lane
            product = self._key_element(key, depth) * E.Load(self.q_t, depth)
            value = product if first else E.call("fma", self._key_element(key, depth), E.Load(self.q_t, depth),
                                                 E.Load(acc, at))
            return For(kr, E.const(mrk), For(lane, E.const(lanes), Store(acc, at, value), "vectorized"), "unrolled")

        # the first chunk initializes the tile (a zeroing loop would become a memset kept in memory)
        chunks = self.d // lanes
        products = block(product_step(E.const(0), True),
                         For(tc, E.const(chunks - 1), product_step(tc + 1, False)) if chunks > 1 else block())

        dot, score = E.Var("dot", self.dtype), E.Var("score", self.dtype)
        query, key_row = self._query(E.const(0)), self._key(key)
        known = {self.first.id: dot}
        if self.causal is not None:
            known[self.causal.mask.id] = E.le(key_row, query + self.causal.offset)
        score_value = ValueBuilder(self.buffers, known=known).value(self.x, self.batch_index + [query, key_row])
        finish = For(kr, E.const(mrk), block(
            Let(dot, self._const(0.0)),
            For(h, E.const(lanes), Assign(dot, dot + E.Load(acc, kr * lanes + h)), "vectorized"),
            Let(score, score_value),
            Store(self.probs, key, score),
            Store(self.new_max, E.const(0), E.maximum(E.Load(self.new_max, E.const(0)), score))), "unrolled")
        groups = (width + (mrk - 1)) // mrk
        return For(kg, groups, Alloc(acc, block(products, finish)))

    def _softmax_step(self, width: E.Expr) -> Stmt:
        """Online softmax over the block, the keys in vector lanes: rescale factor, probabilities, their sum."""
        zero = E.const(0)
        j = E.Var("mj")
        shift, total, p = (E.Var(name, self.dtype) for name in ("row_shift", "block_sum", "p"))
        new_max = E.Load(self.new_max, zero)
        # an all -inf row so far keeps max -inf; exp(s - 0) then gives 0 for its -inf scores
        return block(
            Let(shift, E.Select(E.eq(new_max, self._const(-np.inf)), self._const(0.0), new_max)),
            Store(self.corr, zero, E.call("exp", E.Load(self.row_max, zero) - shift)),
            Let(total, self._const(0.0)),
            For(j, width, block(
                Let(p, E.call("exp", E.Load(self.probs, j) - shift)),
                Store(self.probs, j, p),
                Assign(total, total + p)), "vectorized"),
            Store(self.row_sum, zero, E.Load(self.row_sum, zero) * E.Load(self.corr, zero) + total),
            Store(self.row_max, zero, new_max))

    def _local_buffers(self) -> list[Buffer]:
        return [buf for buf in super()._local_buffers() if buf is not self.shift]


def one_query_attention_body(root: Node, first: Node, x: Node, out: Buffer, buffers: dict[int, Buffer],
                             blocking: AttentionBlocking) -> Stmt:
    """Loop IR of the one-query kernel (blocking from attention_one_query_blocking)."""
    return OneQueryAttention(root, first, x, out, buffers, blocking).body()


__all__ = ["OneQueryAttention", "attention_one_query_blocking", "one_query_attention_body"]
