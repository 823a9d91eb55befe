"""Fused attention: softmax(q k^T * scale + mask) v with an online softmax, one query row at a time.

For each query row the kernel streams over the keys keeping a running maximum
m, a running sum l of exp(s - m) and an accumulator row acc of the weighted
values; when a new score raises the maximum, l and acc are rescaled by
exp(m_old - m_new) (Milakov and Gimelshein's online softmax, as in
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

    dot, score, m_run, m_new, l_run, corr, weight = (E.Var(name, dtype) for name in (
        "dot", "score", "m_run", "m_new", "l_run", "corr", "weight"))
    acc = Buffer("acc", dtype, (dv,), scope="local")
    score_expr = ValueBuilder(buffers, known={first.id: dot}).value(x, batch_index + [i, j])
    # A key whose score is -inf (masked) while every score so far was -inf too: keep m at -inf
    # and add nothing, instead of exp(-inf - -inf) = NaN.
    both_inf = E.eq(m_new, neg_inf)
    key_step = block(
        Let(dot, zero),
        For(t, E.const(d), Assign(dot, dot + values.value(q_node, q_batch + [i, t]) *
                                  values.value(kt_node, k_batch + [t, j])), "vectorized"),
        Let(score, score_expr),
        Let(m_new, E.maximum(m_run, score)),
        Let(corr, E.Select(both_inf, one, E.call("exp", m_run - m_new))),
        Let(weight, E.Select(both_inf, zero, E.call("exp", score - m_new))),
        Assign(l_run, l_run * corr + weight),
        For(c, E.const(dv), Store(acc, c, E.Load(acc, c) * corr + weight * values.value(v_node, v_batch + [j, c])),
            "vectorized"),
        Assign(m_run, m_new),
    )
    row = Alloc(acc, block(
        For(c0, E.const(dv), Store(acc, c0, zero), "vectorized"),
        Let(m_run, neg_inf), Let(l_run, zero),
        For(j, E.const(n), key_step),
        For(o, E.const(dv), Store(out, bi * dv + o, E.Load(acc, o) / l_run), "vectorized"),
    ))
    parallel = batch * m * n * d >= PARALLEL_MIN_ELEMENTS and batch * m > 1
    return For(bi, E.const(batch * m), row, "parallel" if parallel else "serial")
