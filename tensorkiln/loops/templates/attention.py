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
    """Loop IR of the fused attention kernel rooted at the P @ V matmul."""
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

    # loop names: buffers are named in_*, out*, c<N> (constants) and t<N> (temps)
    bi, j, t, c, c0, o = (E.Var(name) for name in ("row", "key", "dim", "col", "col0", "col1"))
    b, i = (bi // m, bi % m) if m > 1 else (bi, E.const(0))
    batch_index = delinearize(b, tuple(batch_shape)) if batch_shape else []
    q_batch = broadcast_index(batch_index, tuple(batch_shape), q_node.shape[:-2])
    k_batch = broadcast_index(batch_index, tuple(batch_shape), kt_node.shape[:-2])
    v_batch = broadcast_index(batch_index, tuple(batch_shape), v_node.shape[:-2])
    values = ValueBuilder(buffers)

    dot, m_run, m_new, l_run, corr, block_max, block_sum, w = (E.Var(name, dtype) for name in (
        "dot", "m_run", "m_new", "l_run", "corr", "block_max", "block_sum", "w"))
    acc = Buffer("acc", dtype, (dv,), scope="local")
    scores = Buffer("scores", dtype, (KEY_BLOCK,), scope="local")
    jb, jj, jj2, jj3 = (E.Var(name) for name in ("kblock", "kin", "kin2", "kin3"))
    key = jb * KEY_BLOCK + jj
    width = E.minimum(E.const(KEY_BLOCK), E.const(n) - jb * KEY_BLOCK) if n % KEY_BLOCK else E.const(min(KEY_BLOCK, n))
    score_expr = ValueBuilder(buffers, known={first.id: dot}).value(x, batch_index + [i, key])
    # Every score so far -inf (masked): keep m at -inf and add nothing, not exp(-inf - -inf) = NaN.
    all_masked = E.eq(m_new, neg_inf)
    key_block = block(
        For(jj, width, block(  # scores of a block of keys
            Let(dot, zero),
            For(t, E.const(d), Assign(dot, dot + values.value(q_node, q_batch + [i, t]) *
                                      values.value(kt_node, k_batch + [t, key])), "vectorized"),
            Store(scores, jj, score_expr))),
        Let(block_max, neg_inf),
        For(jj2, width, Assign(block_max, E.maximum(block_max, E.Load(scores, jj2))), "vectorized"),
        Let(m_new, E.maximum(m_run, block_max)),
        Let(corr, E.Select(all_masked, one, E.call("exp", m_run - m_new))),
        Let(block_sum, zero),
        For(jj3, width, block(  # weights exp(s - m), in place
            Store(scores, jj3, E.Select(all_masked, zero, E.call("exp", E.Load(scores, jj3) - m_new))),
            Assign(block_sum, block_sum + E.Load(scores, jj3))), "vectorized"),
        Assign(l_run, l_run * corr + block_sum),
        For(c, E.const(dv), Store(acc, c, E.Load(acc, c) * corr), "vectorized"),
        For(jj, width, block(
            Let(w, E.Load(scores, jj)),
            For(c0, E.const(dv), Store(acc, c0, E.Load(acc, c0) + w * values.value(v_node, v_batch + [key, c0])),
                "vectorized"))),
        Assign(m_run, m_new),
    )
    row = Alloc(acc, Alloc(scores, block(
        For(o, E.const(dv), Store(acc, o, zero), "vectorized"),
        Let(m_run, neg_inf), Let(l_run, zero),
        For(jb, E.const(-(-n // KEY_BLOCK)), key_block),
        For(E.Var("col2"), E.const(dv), Store(out, bi * dv + E.Var("col2"), E.Load(acc, E.Var("col2")) / l_run),
            "vectorized"),
    )))
    parallel = batch * m * n * d >= PARALLEL_MIN_ELEMENTS and batch * m > 1
    return For(bi, E.const(batch * m), row, "parallel" if parallel else "serial")
