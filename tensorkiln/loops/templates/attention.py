"""Fused attention: softmax(q k^T * scale + mask) v with an online softmax, one query row at a time.

For each query row the kernel streams over blocks of keys keeping a running
maximum m, a running sum l of exp(s - m) and an accumulator row acc of the
weighted values; a block's scores go to a small local array (vectorized max
and exp over it), and when the block raises the maximum, l and acc are
rescaled once by exp(m_old - m_new) (Milakov and Gimelshein's online softmax, as in
FlashAttention). The seq x seq score matrix never exists: memory is
O(seq x head_dim). The score of key j is the graph's own expression of the
softmax input (the scale, a mask, a causal select) with q.k_j substituted for
the first matmul's element, so any scaling or masking the graph applies is
honoured.
"""
from __future__ import annotations

import numpy as np

from ...graph import Node
from .. import expr as E
from ..buffer import Buffer
from ..inline import ValueBuilder, broadcast_index, delinearize
from ..ir import Alloc, Assign, For, Let, Store, Stmt, block
from ..schedule_defaults import PARALLEL_MIN_ELEMENTS

KEY_BLOCK = 64  # keys per block: one rescale of the accumulators per block
QUERY_BLOCK = 16  # query rows sharing one packed block of keys


def attention_parts(root: Node) -> tuple[Node, Node, Node] | None:
    """(first matmul, softmax input, softmax output) when `root` is softmax(x(q @ k^T)) @ v, else None."""
    if root.op != "matmul" or root.dtype.name not in ("float32", "float64"):
        return None
    p = root.inputs[0]
    if p.op != "div":
        return None
    e, s = p.inputs
    if e.op != "exp" or s.op != "reduce_sum" or s.inputs[0] is not e or not _last_axis(s):
        return None
    sub = e.inputs[0]
    if sub.op != "sub":
        return None
    x, m = sub.inputs
    if m.op != "reduce_max" or m.inputs[0] is not x or not _last_axis(m):
        return None
    first = _first_matmul(x)
    if first is None or first.shape[:-2] != root.shape[:-2]:
        return None
    return first, x, p


def _last_axis(r: Node) -> bool:
    return r.attrs["keepdims"] and r.attrs["axes"] == (r.inputs[0].ndim - 1,) and r.inputs[0].shape[-1] > 0


def _first_matmul(x: Node) -> Node | None:
    """The matmul that x is computed from elementwise (same shape all the way), if any."""
    node = x
    while True:
        if node.op == "matmul":
            return node if node.shape == x.shape else None
        candidates = [i for i in node.inputs if i.shape == x.shape and i.op not in ("constant", "input")]
        if node.kind.value != "elementwise" or node.shape != x.shape or len(candidates) != 1:
            return None
        node = candidates[0]


def attention_body(root: Node, out: Buffer, buffers: dict[int, Buffer]) -> Stmt | None:
    """Loop IR of the fused attention kernel rooted at the P @ V matmul.

    Query rows are taken QUERY_BLOCK at a time so each block of keys, packed
    transposed once (KT[t][j]), serves all of them: scores are FMAs across
    keys and the weighted values FMAs across the value dimension, both
    contiguous, so both vectorize without horizontal sums.
    """
    first, x, _ = attention_parts(root)
    q_node, kt_node = first.inputs
    v_node = root.inputs[1]
    *batch_shape, m, n = x.shape
    d, dv = q_node.shape[-1], v_node.shape[-1]
    batch = int(np.prod(batch_shape, dtype=np.int64)) if batch_shape else 1
    if batch * m * dv == 0:
        return None
    dtype = root.dtype.name
    zero, one = E.Const(0.0, dtype), E.Const(1.0, dtype)
    neg_inf = E.Const(float("-inf"), dtype)
    qb_count = -(-m // QUERY_BLOCK)
    kb_count = -(-n // KEY_BLOCK)

    # loop names: buffers are named in_*, out*, c<N> (constants) and t<N> (temps)
    blk, kb, t, jj, jj2, jj3, jj4, jp, r, c, c0, c1, r0, r1 = (E.Var(name) for name in (
        "qblock", "kblock", "dim", "kin", "kin2", "kin3", "kin4", "kpack", "qrow", "col", "col0", "col1",
        "qrow0", "qrow1"))
    b, i0 = (blk // qb_count, (blk % qb_count) * QUERY_BLOCK) if qb_count > 1 else (blk, E.const(0))
    rows = E.minimum(E.const(QUERY_BLOCK), E.const(m) - i0) if m % QUERY_BLOCK else E.const(min(QUERY_BLOCK, m))
    width = E.minimum(E.const(KEY_BLOCK), E.const(n) - kb * KEY_BLOCK) if n % KEY_BLOCK else E.const(min(KEY_BLOCK, n))
    batch_index = delinearize(b, tuple(batch_shape)) if batch_shape else []
    q_batch = broadcast_index(batch_index, tuple(batch_shape), q_node.shape[:-2])
    k_batch = broadcast_index(batch_index, tuple(batch_shape), kt_node.shape[:-2])
    v_batch = broadcast_index(batch_index, tuple(batch_shape), v_node.shape[:-2])
    values = ValueBuilder(buffers)

    acc = Buffer("acc", dtype, (QUERY_BLOCK * dv,), scope="local")
    scores = Buffer("scores", dtype, (QUERY_BLOCK * KEY_BLOCK,), scope="local")
    packed = Buffer("keys_t", dtype, (d * KEY_BLOCK,), scope="local")
    m_buf = Buffer("row_max", dtype, (QUERY_BLOCK,), scope="local")
    l_buf = Buffer("row_sum", dtype, (QUERY_BLOCK,), scope="local")
    qv, dot, m_old, m_new, corr, block_max, block_sum, w = (E.Var(name, dtype) for name in (
        "qv", "dot", "m_old", "m_new", "corr", "block_max", "block_sum", "w"))

    i = i0 + r
    key = kb * KEY_BLOCK + jj
    s_at = lambda col: r * KEY_BLOCK + col  # noqa: E731
    score_expr = ValueBuilder(buffers, known={first.id: dot}).value(x, batch_index + [i, kb * KEY_BLOCK + jj2])
    all_masked = E.eq(m_new, neg_inf)  # every score so far -inf: keep m at -inf, add nothing
    row_step = block(
        For(jj, width, Store(scores, s_at(jj), zero), "vectorized"),
        For(t, E.const(d), block(  # q_i . k_j for the whole block, as FMAs across keys
            Let(qv, values.value(q_node, q_batch + [i, t])),
            For(jj, width, Store(scores, s_at(jj), E.Load(scores, s_at(jj)) +
                                 qv * E.Load(packed, t * KEY_BLOCK + jj)), "vectorized"))),
        For(jj2, width, block(Let(dot, E.Load(scores, s_at(jj2))), Store(scores, s_at(jj2), score_expr))),
        Let(block_max, neg_inf),
        For(jj3, width, Assign(block_max, E.maximum(block_max, E.Load(scores, s_at(jj3)))), "vectorized"),
        Let(m_old, E.Load(m_buf, r)),
        Let(m_new, E.maximum(m_old, block_max)),
        Let(corr, E.Select(all_masked, one, E.call("exp", m_old - m_new))),
        Let(block_sum, zero),
        For(jj4, width, block(
            Store(scores, s_at(jj4), E.Select(all_masked, zero, E.call("exp", E.Load(scores, s_at(jj4)) - m_new))),
            Assign(block_sum, block_sum + E.Load(scores, s_at(jj4)))), "vectorized"),
        Store(l_buf, r, E.Load(l_buf, r) * corr + block_sum),
        Store(m_buf, r, m_new),
        For(c, E.const(dv), Store(acc, r * dv + c, E.Load(acc, r * dv + c) * corr), "vectorized"),
        For(jj, width, block(  # acc_i += p_ij v_j, as FMAs across the value dimension
            Let(w, E.Load(scores, s_at(jj))),
            For(c0, E.const(dv), Store(acc, r * dv + c0, E.Load(acc, r * dv + c0) +
                                       w * values.value(v_node, v_batch + [key, c0])), "vectorized"))),
    )
    key_block = block(
        For(t, E.const(d), For(jp, width, Store(packed, t * KEY_BLOCK + jp,  # keys of the block, transposed
                                                values.value(kt_node, k_batch + [t, kb * KEY_BLOCK + jp])))),
        For(r, rows, row_step),
    )
    body = Alloc(acc, Alloc(scores, Alloc(packed, Alloc(m_buf, Alloc(l_buf, block(
        For(r0, rows, block(Store(m_buf, r0, neg_inf), Store(l_buf, r0, zero),
                            For(c1, E.const(dv), Store(acc, r0 * dv + c1, zero), "vectorized"))),
        For(kb, E.const(kb_count), key_block),
        For(r1, rows, For(E.Var("col2"), E.const(dv), Store(
            out, (b * m + i0 + r1) * dv + E.Var("col2"), E.Load(acc, r1 * dv + E.Var("col2")) / E.Load(l_buf, r1)),
            "vectorized")),
    ))))))
    parallel = batch * m * n * d >= PARALLEL_MIN_ELEMENTS and batch * qb_count > 1
    return For(blk, E.const(batch * qb_count), body, "parallel" if parallel else "serial")
