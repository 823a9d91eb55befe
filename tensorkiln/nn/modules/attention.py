"""MultiheadAttention with PyTorch's parameter names (in_proj_weight, in_proj_bias, out_proj)."""
from __future__ import annotations

import math

import numpy as np

from ... import dtypes as dt
from ...frontend.creation import empty, zeros
from ...frontend.functions import matmul, where
from ...frontend.tensor import as_tensor
from .. import functional as F
from .. import init
from .linear import Linear
from .module import Module, Parameter


class MultiheadAttention(Module):
    """Multi-head attention: softmax(q k^T / sqrt(d) + mask) v per head, then the output projection.

    Inputs are (L, N, E) — or (N, L, E) with batch_first=True, or unbatched
    (L, E). A boolean attn_mask / key_padding_mask marks positions that may
    NOT be attended (PyTorch's convention for this module); a float mask is added.
    Returns (output, weights averaged over heads, or per head, or None).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False, dtype=dt.float32):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.dropout, self.batch_first = dropout, batch_first
        self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, dtype=dtype))
        self.in_proj_bias = Parameter(zeros(3 * embed_dim, dtype=dtype)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            init.zeros_(self.out_proj.bias)
        self.dropout_seed = F.new_dropout_seed()

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = as_tensor(key_padding_mask).unsqueeze(0)
        elif self.batch_first:  # internally (L, N, E) as PyTorch
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        e, h, d = self.embed_dim, self.num_heads, self.head_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        q = F.linear(query, w[:e], b[:e] if b is not None else None)
        k = F.linear(key, w[e:2 * e], b[e:2 * e] if b is not None else None)
        v = F.linear(value, w[2 * e:], b[2 * e:] if b is not None else None)
        length, batch, source = q.shape[0], q.shape[1], k.shape[0]

        def heads(t, n):  # (n, N, E) -> (N, H, n, D)
            return t.reshape(n, batch, h, d).permute(1, 2, 0, 3)

        q, k, v = heads(q, length), heads(k, source), heads(v, source)
        scores = matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        if is_causal and attn_mask is None:
            attn_mask = as_tensor(~np.tril(np.ones((length, source), dtype=bool)))
        if attn_mask is not None:
            mask = as_tensor(attn_mask)
            if mask.ndim == 3:  # (N*H, L, S)
                mask = mask.reshape(batch, h, length, source)
            scores = where(mask, float("-inf"), scores) if mask.dtype.is_bool else scores + mask.to(scores.dtype)
        if key_padding_mask is not None:
            pad = as_tensor(key_padding_mask).reshape(batch, 1, 1, source)
            scores = where(pad, float("-inf"), scores) if pad.dtype.is_bool else scores + pad.to(scores.dtype)
        weights = F.softmax(scores, -1)
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, self.dropout, True, seed=self.dropout_seed)
        out = matmul(weights, v).permute(2, 0, 1, 3).reshape(length, batch, e)  # (L, N, E)
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        if unbatched:
            weights = weights.squeeze(0)
        return out, weights
