"""The fused attention's last key block and its register tiles (templates/attention.py, attention_blocking.py).

The last block of a run-time length (or of a causal block cut at the diagonal) is an iteration of the
key loop, its P V products taken in whole groups of the score tile's keys and then the keys left one
by one (an infinite value stays infinite); the Q K^T tile leaves registers for its operands. Checked against numpy at lengths
on both sides of every block and group boundary, with values read in place and packed, masks, causal
and batched heads, and read back from the compiled library: no tile loop keeps anything on the stack.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.kernels.templates.attention_blocking import attention_blocking, score_tile

from .tile_loops import tile_loops

RNG = np.random.default_rng(31)


@pytest.mark.parametrize("lanes, budget, registers", [(8, 12, 16), (16, 24, 32), (4, 12, 16)])
def test_the_score_tile_leaves_registers_for_its_operands(lanes, budget, registers):
    for mq in (lanes, 2 * lanes, 3 * lanes, 48, 96):
        keys, queries = score_tile(mq, lanes, budget, registers)
        vectors = queries // lanes
        assert mq % queries == 0 and keys * vectors <= budget
        assert vectors == 1 or keys * vectors + vectors + 1 < registers


def test_sixteen_registers_take_the_gemm_tile_and_thirty_two_the_wider_one():
    assert score_tile(48, 8, 12, 16) == (6, 16)  # not 4 x 24: 12 + 3 + 1 registers left GCC none
    assert score_tile(48, 16, 24, 32) == (8, 48)
    assert score_tile(8, 8, 12, 16) == (8, 8)


def test_the_key_block_is_whole_groups_of_the_score_tile():
    bl = attention_blocking(384, 64, "float32")
    assert bl.key_block % bl.score_keys == 0  # the P V groups past the width stay inside the block


def _reference(q, k, v, mask=None, causal_offset=None):
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = s + mask
    if causal_offset is not None:
        n, m = s.shape[-2:]
        s = np.where(np.tri(n, m, causal_offset, dtype=bool), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v.astype(np.float64)


LENGTHS = (2, 5, 6, 7, 17, 49, 65, 66, 67, 71, 132, 133, 139)


@pytest.mark.parametrize("dv", [64, 40])
def test_run_time_lengths_with_values_read_in_place(dv):
    """q, k, v as (batch, heads, seq, d): the values are read where they lie (clamped past the last key)."""
    def attend(q, k, v, m):
        return ((q @ k.transpose(-1, -2)) * 0.125 + m).softmax(-1) @ v

    f = tk.jit(attend, dynamic={"q": {2: "s"}, "k": {2: "s"}, "v": {2: "s"}, "m": {3: "s"}})
    for n in LENGTHS:
        q, k = (RNG.standard_normal((2, 3, n, 64)).astype(np.float32) for _ in range(2))
        v = RNG.standard_normal((2, 3, n, dv)).astype(np.float32)
        m = np.where(RNG.random((2, 1, 1, n)) > 0.3, 0.0, -10000.0).astype(np.float32)
        np.testing.assert_allclose(f(q, k, v, m).numpy(), _reference(q, k, v, m), rtol=1e-4, atol=1e-5)
    assert f.compile_count == 1 and [kr.kind for kr in f.report(q, k, v, m).kernels] == ["attention"]


def test_run_time_lengths_with_heads_sliced_from_one_projection():
    """BERT's layout: q, k and v column slices of one (1, seq, 3 * heads * 64) array, keys and values packed."""
    heads = 2

    def attend(x, m):
        n = x.shape[1]
        split = lambda t: t.reshape(1, n, heads, 64).transpose(1, 2)  # noqa: E731
        q, k, v = (split(x[:, :, i * heads * 64:(i + 1) * heads * 64]) for i in range(3))
        return ((q @ k.transpose(-1, -2)) * 0.125 + m).softmax(-1) @ v

    f = tk.jit(attend, dynamic={"x": {1: "seq"}, "m": {3: "seq"}})
    for n in LENGTHS:
        x = RNG.standard_normal((1, n, 3 * heads * 64)).astype(np.float32)
        m = np.zeros((1, 1, 1, n), np.float32)
        m[..., n - n // 4:] = -10000.0
        q, k, v = (x[0, :, i * heads * 64:(i + 1) * heads * 64].reshape(n, heads, 64).transpose(1, 0, 2)
                   for i in range(3))
        np.testing.assert_allclose(f(x, m).numpy(), _reference(q, k, v, m[0])[None], rtol=1e-4, atol=1e-5)
    assert f.compile_count == 1


@pytest.mark.parametrize("dynamic", [True, False], ids=["run-time length", "fixed lengths"])
def test_causal_blocks_cut_at_the_diagonal(dynamic):
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    f = tk.jit(attend, dynamic={"q": {2: "s"}, "k": {2: "s"}, "v": {2: "s"}} if dynamic else None)
    for n in (7, 66, 67, 133):
        q, k, v = (RNG.standard_normal((1, 2, n, 32)).astype(np.float32) for _ in range(3))
        np.testing.assert_allclose(f(q, k, v).numpy(), _reference(q, k, v, causal_offset=0), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [67, 139])
def test_fixed_lengths_with_a_last_part_block(n):
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    f = tk.jit(attend)
    q = RNG.standard_normal((3, 5, 64)).astype(np.float32)
    k, v = (RNG.standard_normal((3, n, 64)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(f(q, k, v).numpy(), _reference(q, k, v), rtol=1e-4, atol=1e-5)


def test_no_tile_loop_keeps_anything_on_the_stack():
    """BERT's shape at a run-time length whose last block is a part one: every register tile, the
    whole blocks' and the last block's, keeps its accumulators and operands in registers."""
    def attend(x, m):
        n = x.shape[1]
        split = lambda t: t.reshape(1, n, 4, 64).transpose(1, 2)  # noqa: E731
        q, k, v = (split(x[:, :, i * 256:(i + 1) * 256]) for i in range(3))
        return ((q @ k.transpose(-1, -2)) * 0.125 + m).softmax(-1) @ v

    f = tk.jit(attend, dynamic={"x": {1: "seq"}, "m": {3: "seq"}})
    x, m = RNG.standard_normal((1, 131, 768)).astype(np.float32), np.zeros((1, 1, 1, 131), np.float32)
    f(x, m)
    tiles = tile_loops(f.report(x, m).library_path or "")
    assert len(tiles) >= 4  # the scores and P V tiles of the whole and the last blocks
    # a vector on the stack (an accumulator or an operand spilled); a loop bound read from there once
    # per iteration (the last group's run-time key count, when the general registers run out) is not
    spilled = [body for body in tiles if any("rsp" in line and "mm" in line for line in body)]
    assert not spilled, "\n\n".join("\n".join(body) for body in spilled)


@pytest.mark.parametrize("dv", [64, 40])
def test_an_infinite_value_in_the_last_key_row_stays_infinite(dv):
    """The keys past a run-time width read the last key's value row; their products are left out, not
    weighted by 0 (0 * inf would be NaN where the softmax gives inf)."""
    def attend(q, k, v):
        return ((q @ k.transpose(-1, -2)) * 0.125).softmax(-1) @ v

    f = tk.jit(attend, dynamic={"q": {2: "s"}, "k": {2: "s"}, "v": {2: "s"}})
    for n in (5, 7, 17, 67, 133):
        q, k = (RNG.standard_normal((1, 2, n, 64)).astype(np.float32) for _ in range(2))
        v = RNG.standard_normal((1, 2, n, dv)).astype(np.float32)
        v[:, :, -1, 3] = np.inf
        got, want = f(q, k, v).numpy(), _reference(q, k, v)
        assert np.isinf(want[..., 3]).all() and not np.isnan(got).any()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
