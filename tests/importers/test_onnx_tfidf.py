"""TfIdfVectorizer, compiled, against onnxruntime: random token rows and pools of 1- to 3-grams, every mode."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tensorkiln as tk  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx_build import model  # noqa: E402
from onnx_ort import check_against_onnxruntime  # noqa: E402

rng = np.random.default_rng(31)


def _pool(lengths: dict[int, int], vocabulary: int):
    """pool_int64s and ngram_counts for `lengths` (n -> how many distinct n-grams)."""
    pool, starts = [], []
    for n in range(1, max(lengths) + 1):
        starts.append(len(pool))
        grams = {tuple(rng.integers(0, vocabulary, n)) for _ in range(lengths.get(n, 0) * 3)}
        for gram in sorted(grams)[:lengths.get(n, 0)]:
            pool.extend(int(t) for t in gram)
    return pool, starts


# (mode, min length, max length, max skip, n-grams per length, weighted)
NODES = [("TF", 1, 2, 2, {1: 3, 2: 4}, False), ("IDF", 2, 3, 1, {1: 2, 2: 3, 3: 2}, True),
         ("TFIDF", 1, 3, 0, {1: 4, 2: 2, 3: 3}, True), ("TFIDF", 2, 2, 4, {1: 1, 2: 5}, False)]


@pytest.mark.parametrize("shape,elem", [((3, 11), TensorProto.INT64), ((9,), TensorProto.INT32)], ids=str)
def test_tfidf_vectorizer_matches_onnxruntime(shape, elem):
    vocabulary = 4  # few distinct tokens, so n-grams recur with every skip
    nodes, outputs = [], []
    for i, (mode, low, high, skip, lengths, weighted) in enumerate(NODES):
        pool, starts = _pool(lengths, vocabulary)
        count = sum(lengths.get(n, 0) for n in range(1, max(lengths) + 1))
        indexes = rng.permutation(count).tolist()
        attrs = dict(mode=mode, min_gram_length=low, max_gram_length=high, max_skip_count=skip, pool_int64s=pool,
                     ngram_counts=starts, ngram_indexes=indexes)
        if weighted:
            attrs["weights"] = rng.uniform(0.5, 2.0, count).astype(np.float32).tolist()
        nodes.append(helper.make_node("TfIdfVectorizer", ["x"], [f"y{i}"], **attrs))
        outputs.append((f"y{i}", TensorProto.FLOAT, None))
    m = model(nodes, [("x", elem, shape)], outputs, opset=9)
    x = rng.integers(0, vocabulary, shape).astype(np.int64 if elem == TensorProto.INT64 else np.int32)
    check_against_onnxruntime(m, {"x": x})


def test_tfidf_vectorizer_refuses_string_pools_by_name():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="bag", mode="TF", min_gram_length=1,
                            max_gram_length=1, max_skip_count=0, pool_strings=["a", "b"], ngram_counts=[0],
                            ngram_indexes=[0, 1])
    m = model([node], [("x", TensorProto.INT64, (4,))], [("y", TensorProto.FLOAT, None)], opset=9)
    with pytest.raises(tk.TensorKilnError, match="'bag'.*pool_strings"):
        tk.onnx.load(m)(np.zeros(4, np.int64))
