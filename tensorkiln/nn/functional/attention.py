"""scaled_dot_product_attention and the causal mask it builds."""
from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError, at_user_line
from ...frontend.creation import arange
from ...frontend.functions import matmul, where
from ...frontend.tensor import Tensor, as_tensor
from ...frontend.trace import composite
from ...shapes import is_symbolic
from .activations import softmax


@composite("attention")
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v over the last two dims, as PyTorch's SDPA."""
    q, k, v = (as_tensor(t) for t in (query, key, value))
    if dropout_p:
        raise ValueError("scaled_dot_product_attention: dropout_p must be 0 (inference)")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(at_user_line(
            f"scaled_dot_product_attention: query {list(q.shape)}, key {list(k.shape)} and value "
            f"{list(v.shape)} do not fit (need (..., L, E), (..., S, E), (..., S, Ev))"))
    if enable_gqa and q.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        groups = q.shape[-3] // k.shape[-3]
        k = k.unsqueeze(-3).expand(*k.shape[:-2], groups, *k.shape[-2:]).reshape(*q.shape[:-2], *k.shape[-2:])
        v = v.unsqueeze(-3).expand(*v.shape[:-2], groups, *v.shape[-2:]).reshape(*q.shape[:-2], *v.shape[-2:])
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = matmul(q, k.transpose(-2, -1)) * scale
    length, source = q.shape[-2], k.shape[-2]
    if is_causal:
        scores = where(causal_mask(length, source), scores, float("-inf"))
    if attn_mask is not None:
        mask = as_tensor(attn_mask)
        scores = where(mask, scores, float("-inf")) if mask.dtype.is_bool else scores + mask
    return matmul(softmax(scores, -1), v)


def causal_mask(length, source) -> Tensor:
    """mask[i, j] = j <= i: a constant for static sizes, iota comparisons for symbolic ones (one
    program serves every length; the attention kernel reads either as an index comparison)."""
    if is_symbolic(length) or is_symbolic(source):
        return arange(source).reshape(1, source) <= arange(length).reshape(length, 1)
    return as_tensor(np.tril(np.ones((length, source), dtype=bool)))
