"""Causal and iota-masked attention with a symbolic length: one fused kernel whose mask is an index
comparison with a run-time offset, the answer of a program specialized to each length."""
from __future__ import annotations

import re

import numpy as np

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.kernels.templates.attention_match import attention_parts, causal_mask
from tensorkiln.shapes import is_symbolic

from .tile_loops import tile_loops

RNG = np.random.default_rng(11)


def _reference(q, k, v, mask):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(mask, scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    return (scores / scores.sum(-1, keepdims=True)) @ v


def _causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _the_mask(f, *args):
    """The CausalMask the fused kernel of f's program recognised."""
    graph = f.optimized_graph(*args)
    root = next(n for n in graph.nodes if attention_parts(n) is not None)
    first, x, _ = attention_parts(root)
    return causal_mask(x, first)


def test_causal_attention_over_many_lengths_is_one_fused_kernel_per_size_class():
    f = tk.jit(_causal, dynamic={"q": {2: "seq"}, "k": {2: "seq"}, "v": {2: "seq"}})
    lengths = [30, 41, 130, 201]  # one 48-query block, then several; key blocks of 64 and a tail
    for n in lengths:
        q, k, v = (RNG.standard_normal((1, 3, n, 16)).astype(np.float32) for _ in range(3))
        expected = _reference(q, k, v, np.tril(np.ones((n, n), bool)))
        np.testing.assert_allclose(f(q, k, v).numpy(), expected, rtol=1e-4, atol=1e-5)
        assert [kernel.kind for kernel in f.report(q, k, v).kernels] == ["attention"]  # no mask buffer
    mask = _the_mask(f, q, k, v)
    assert mask is not None and mask.offset == 0 and mask.skippable
    assert f.compile_count == 1  # one query block or several, serial or parallel: decided per call


def test_causal_attention_with_different_query_and_key_lengths():
    f = tk.jit(_causal, dynamic={"q": {2: "queries"}, "k": {2: "keys"}, "v": {2: "keys"}})
    for length, source in [(50, 30)]:  # later queries see every key
        q = RNG.standard_normal((2, 1, length, 8)).astype(np.float32)
        k, v = (RNG.standard_normal((2, 1, source, 8)).astype(np.float32) for _ in range(2))
        expected = _reference(q, k, v, np.tril(np.ones((length, source), bool)))
        np.testing.assert_allclose(f(q, k, v).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_a_mask_of_iotas_with_a_symbolic_offset():
    """Queries that continue a cached prefix: query i is position past + i, and sees keys <= it."""
    def chunk(q, k, v):
        length, source = q.shape[2], k.shape[2]
        visible = tk.arange(source - length, source).reshape(length, 1) >= tk.arange(source).reshape(1, source)
        return F.scaled_dot_product_attention(q, k, v, visible)

    f = tk.jit(chunk, dynamic={"q": {2: "queries"}, "k": {2: "keys"}, "v": {2: "keys"}})
    for length, source in [(20, 100)]:
        q = RNG.standard_normal((1, 2, length, 8)).astype(np.float32)
        k, v = (RNG.standard_normal((1, 2, source, 8)).astype(np.float32) for _ in range(2))
        expected = _reference(q, k, v, np.tri(length, source, source - length, dtype=bool))
        np.testing.assert_allclose(f(q, k, v).numpy(), expected, rtol=1e-4, atol=1e-5)
    offset = _the_mask(f, q, k, v).offset
    assert is_symbolic(offset) and str(offset) in ("keys - queries", "-queries + keys")


def test_a_strict_comparison_shifts_the_diagonal():
    def strict(q, k, v):
        n = q.shape[2]
        visible = tk.arange(n).reshape(1, n) < tk.arange(1, n + 1).reshape(n, 1)  # key < query + 1
        return F.scaled_dot_product_attention(q, k, v, visible)

    f = tk.jit(strict, dynamic={"q": {2: "seq"}, "k": {2: "seq"}, "v": {2: "seq"}})
    for n in (70,):
        q, k, v = (RNG.standard_normal((1, 1, n, 8)).astype(np.float32) for _ in range(3))
        np.testing.assert_allclose(f(q, k, v).numpy(), _reference(q, k, v, np.tril(np.ones((n, n), bool))),
                                   rtol=1e-4, atol=1e-5)


def test_causal_tiles_at_a_run_time_length_are_vector_code():
    """The batch index of a causal task is named once per task: a division by the run-time block
    count inside the tile loops (its zero test a branch) kept them scalar, one float per FMA."""
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    f = tk.jit(attend, dynamic={"q": {2: "s"}, "k": {2: "s"}, "v": {2: "s"}})
    q, k, v = (RNG.standard_normal((1, 3, 100, 64)).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(f(q, k, v).numpy(), _reference(q, k, v, np.tri(100, 100, dtype=bool)),
                               rtol=1e-4, atol=1e-5)
    tiles = tile_loops(f.report(q, k, v).library_path or "")
    assert len(tiles) >= 4  # the scores and P V tiles of the whole and the last blocks
    scalar = [body for body in tiles if any(re.search(r"vfmadd\w*ss\b", line) for line in body)]
    assert not scalar


def test_the_batch_coordinates_divide_with_c_operators():
    """A run-time block count (a ceiling division) is known positive: the task's batch index and the
    tile loops' `batch_index % heads` are C's / and %, no sign-testing helper for GCC to unswitch on."""
    f = tk.jit(_causal, dynamic={"q": {2: "seq"}, "k": {2: "seq"}, "v": {2: "seq"}})
    q, k, v = (RNG.standard_normal((2, 3, 100, 16)).astype(np.float32) for _ in range(3))
    f(q, k, v)
    source = open(f.report(q, k, v).source_path).read()
    assert re.search(r"batch_index = \w+ / ", source), "the batch index is not C's division"
    assert "tk_mod_int64(batch_index" not in source and "tk_floordiv_int64(batch_index" not in source
