"""ONNX LinearAttention (opset 27): the recurrent linear-attention family, unrolled over the sequence.

The recurrence keeps a state S of shape (B, H_kv, d_k, d_v) per key/value head; each of the T
tokens (T is static) updates it and reads it:

    linear       S = S + k v^T
    gated        S = exp(g) S + k v^T
    delta        S = S + k (beta (v - S^T k))^T
    gated_delta  S = exp(g) S, then as delta
    output       o = scale q^T S      (each query head reads its key/value head's S: grouped queries)

computed in float32 as ONNX's reference does, the output cast to the query's type and the final
state to the past state's (else the query's). The standard's own body runs a Scan; unrolling it
here gives the compiler plain elementwise ops and small matmuls to fuse.
"""
from __future__ import annotations

import math

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.functions import matmul, stack
from ...frontend.tensor import Tensor
from .helpers import filled
from .registry import NodeContext, converter

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(x: Tensor, heads: int) -> Tensor:
    """(B, T, H*D) -> (B, H, T, D) in float32."""
    b, t, hd = x.shape
    return x.to(dt.float32).reshape((b, t, heads, hd // heads)).permute(0, 2, 1, 3)


def _check(ctx: NodeContext, q: Tensor, k: Tensor, v: Tensor, q_heads: int, kv_heads: int, rule: str,
           decay: Tensor | None, beta: Tensor | None) -> None:
    where_ = f"node '{ctx.name}' (LinearAttention)"
    if rule not in UPDATE_RULES:
        raise ShapeError(f"{where_}: update_rule {rule!r} is not one of {', '.join(UPDATE_RULES)}")
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise ShapeError(f"{where_}: q_num_heads ({q_heads}) must be a positive multiple of kv_num_heads "
                         f"({kv_heads})")
    shapes = f"query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)}"
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3 or q.shape[:2] != k.shape[:2] or q.shape[:2] != v.shape[:2]:
        raise ShapeError(f"{where_}: query, key and value must be (B, T, H*D) of one B and T; got {shapes}")
    if q.shape[2] % q_heads or k.shape[2] % kv_heads or v.shape[2] % kv_heads \
            or q.shape[2] // q_heads != k.shape[2] // kv_heads:
        raise ShapeError(f"{where_}: {shapes} do not split into {q_heads} query and {kv_heads} key/value heads "
                         "with one key size")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise ShapeError(f"{where_}: update_rule {rule!r} takes {'a' if gating else 'no'} decay and "
                         f"{'a' if delta else 'no'} beta input")


def linear_attention(q: Tensor, k: Tensor, v: Tensor, past: Tensor | None, decay: Tensor | None,
                     beta: Tensor | None, q_heads: int, kv_heads: int, scale: float) -> tuple[Tensor, Tensor]:
    """(output (B, T, H_q * d_v), final state (B, H_kv, d_k, d_v)), both float32."""
    b, t = q.shape[0], q.shape[1]
    d_k, d_v = q.shape[2] // q_heads, v.shape[2] // kv_heads
    group = q_heads // kv_heads
    q4, k4, v4 = _heads(q, q_heads), _heads(k, kv_heads), _heads(v, kv_heads)
    g4 = None if decay is None else _heads(decay, kv_heads)  # (B, H_kv, T, 1 or d_k)
    beta4 = None if beta is None else _heads(beta, beta.shape[2])  # (B, H_kv or 1, T, 1)
    state = filled((b, kv_heads, d_k, d_v), 0.0, dt.float32) if past is None else past.to(dt.float32)
    outputs = []
    for i in range(t):
        k_t, v_t = k4.narrow(2, i, 1), v4.narrow(2, i, 1)  # (B, H_kv, 1, d)
        if g4 is not None:
            state = state * g4.narrow(2, i, 1).squeeze(2).exp().unsqueeze(-1)
        if beta4 is not None:
            retrieved = matmul(k_t, state)  # (B, H_kv, 1, d_v): S^T k
            v_t = beta4.narrow(2, i, 1) * (v_t - retrieved)
        state = state + matmul(k_t.transpose(2, 3), v_t)  # the outer product k v^T
        read = state
        if group > 1:  # query head h reads key/value head h // group
            read = state.unsqueeze(2).expand(b, kv_heads, group, d_k, d_v).reshape((b, q_heads, d_k, d_v))
        outputs.append(matmul(q4.narrow(2, i, 1), read).squeeze(2) * scale)  # (B, H_q, d_v)
    output = stack(outputs, 1).reshape((b, t, q_heads * d_v))
    return output, state


@converter("LinearAttention")
def _linear_attention(ctx, inputs, attrs):
    q, k, v = inputs[:3]
    past, decay, beta = (list(inputs[3:]) + [None] * 3)[:3]
    q_heads, kv_heads = attrs.get("q_num_heads", 0), attrs.get("kv_num_heads", 0)
    rule = attrs.get("update_rule", "gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else rule
    _check(ctx, q, k, v, q_heads, kv_heads, rule, decay, beta)
    d_k = q.shape[2] // q_heads
    if past is not None and tuple(past.shape) != (q.shape[0], kv_heads, d_k, v.shape[2] // kv_heads):
        raise ShapeError(f"node '{ctx.name}' (LinearAttention): past_state of shape {list(past.shape)} is not "
                         f"[B, H_kv, d_k, d_v] = {[q.shape[0], kv_heads, d_k, v.shape[2] // kv_heads]}")
    if decay is not None and (decay.ndim != 3 or decay.shape[2] not in (kv_heads, kv_heads * d_k)):
        raise ShapeError(f"node '{ctx.name}' (LinearAttention): decay of shape {list(decay.shape)} is not "
                         f"[B, T, {kv_heads}] or [B, T, {kv_heads * d_k}]")
    if beta is not None and (beta.ndim != 3 or beta.shape[2] not in (kv_heads, 1)):
        raise ShapeError(f"node '{ctx.name}' (LinearAttention): beta of shape {list(beta.shape)} is not "
                         f"[B, T, {kv_heads}] or [B, T, 1]")
    scale = attrs.get("scale", 0.0) or 1.0 / math.sqrt(d_k)
    output, state = linear_attention(q, k, v, past, decay, beta, q_heads, kv_heads, scale)
    return [output.to(q.dtype), state.to(past.dtype if past is not None else q.dtype)]
