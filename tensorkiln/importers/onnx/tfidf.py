"""ONNX TfIdfVectorizer over integer tokens: counts of the pool's n-grams in each row, weighted.

An n-gram with skip distance d is the tokens at i, i + d, ..., i + (n - 1) d. For every length n
in [min_gram_length, max_gram_length] and every d in 1 .. max_skip_count + 1 (d = 1 only for
unigrams, as the standard counts them once), the pool's n-grams of that length are compared
with every window of the row at once: an (N, K, M) comparison per token position, ANDed and
summed over the M windows. The counts of the K n-grams land in their output columns through a
constant one-hot matrix; "IDF" keeps only whether an n-gram occurs, and the weights (by pool
n-gram, as the standard says and ONNX Runtime does; onnx's reference reads them by output
column, which differs only where ngram_indexes is not the identity) scale the counts.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.functions import concat, matmul
from ...frontend.tensor import Tensor, as_tensor
from .helpers import filled
from .registry import converter

MODES = ("TF", "IDF", "TFIDF")


def _pool_by_length(pool: list[int], starts: list[int]) -> dict[int, tuple[int, np.ndarray]]:
    """length n -> (id of its first n-gram, its n-grams as a (K, n) array); ids number the pool in order."""
    result, first_id = {}, 0
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(pool)
        n = i + 1
        grams = np.array(pool[start:end], dtype=np.int64).reshape(-1, n) if end > start else np.zeros((0, n))
        result[n] = (first_id, grams)
        first_id += grams.shape[0]
    return result


def _counts(x: Tensor, grams: np.ndarray, distance: int) -> Tensor | None:
    """(N, K) occurrences of each of the K n-grams (rows of `grams`) at skip `distance`; None if none fit."""
    n, length = grams.shape[1], x.shape[1]
    windows = length - (n - 1) * distance
    if windows <= 0:
        return None
    match = None
    for j in range(n):
        tokens = x.narrow(1, j * distance, windows).unsqueeze(1)  # (N, 1, M)
        wanted = as_tensor(grams[:, j].astype(x.dtype.storage)).reshape((-1, 1))  # (K, 1)
        equal = tokens == wanted
        match = equal if match is None else match & equal
    return match.to(dt.float32).sum(-1)


def tfidf(x: Tensor, pool: list[int], starts: list[int], indexes: list[int], weights: list[float] | None,
          mode: str, min_length: int, max_length: int, max_skip: int) -> Tensor:
    """The (N, max(indexes) + 1) float32 n-gram features of integer rows x (N, L)."""
    blocks = []  # (N, K) counts of each length's n-grams, in pool order: the n-gram ids
    for n, (_, grams) in _pool_by_length(pool, starts).items():
        counted = None
        if min_length <= n <= max_length:
            for distance in range(1, (max_skip + 1 if n > 1 else 1) + 1):
                found = _counts(x, grams, distance) if grams.shape[0] else None
                if found is not None:
                    counted = found if counted is None else counted + found
        if grams.shape[0]:
            blocks.append(counted if counted is not None else filled((x.shape[0], grams.shape[0]), 0.0, dt.float32))
    counts = concat(blocks, 1)
    if mode == "IDF":
        counts = (counts > 0.0).to(dt.float32)
    if mode != "TF" and weights:  # the i-th weight is the i-th pool n-gram's (as the standard and ONNX Runtime)
        counts = counts * as_tensor(np.array(weights[:counts.shape[1]], np.float32))
    placement = np.zeros((counts.shape[1], max(indexes) + 1), np.float32)  # n-gram id -> its output column
    placement[np.arange(counts.shape[1]), np.array(indexes, np.int64)] = 1.0
    return matmul(counts, as_tensor(placement))


@converter("TfIdfVectorizer")
def _tfidf_vectorizer(ctx, inputs, attrs):
    x = inputs[0]
    where_ = f"node '{ctx.name}' (TfIdfVectorizer)"
    if "pool_strings" in attrs:
        raise ctx.unsupported("string n-grams (pool_strings): tensorkiln holds no strings")
    mode = attrs.get("mode", "TF")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    pool, starts, indexes = list(attrs.get("pool_int64s", [])), list(attrs.get("ngram_counts", [])), \
        list(attrs.get("ngram_indexes", []))
    if mode not in MODES or not x.dtype.is_integer or x.ndim not in (1, 2) or not indexes:
        raise ShapeError(f"{where_}: needs mode TF, IDF or TFIDF (got {mode!r}), ngram_indexes and integer "
                         f"tokens of rank 1 or 2 (got {x.dtype.name} {list(x.shape)})")
    if len(indexes) != sum(len(g) for _, g in _pool_by_length(pool, starts).values()) or min(indexes) < 0:
        raise ShapeError(f"{where_}: ngram_indexes has {len(indexes)} entries for a pool of "
                         f"{sum(len(g) for _, g in _pool_by_length(pool, starts).values())} n-grams")
    weights = attrs.get("weights")
    if weights and len(weights) != len(indexes):
        raise ShapeError(f"{where_}: {len(weights)} weights for {len(indexes)} n-grams")
    rows = x if x.ndim == 2 else x.unsqueeze(0)
    out = tfidf(rows, pool, starts, indexes, weights, mode, attrs.get("min_gram_length", 1),
                attrs.get("max_gram_length", 1), attrs.get("max_skip_count", 0))
    return out if x.ndim == 2 else out.squeeze(0)
