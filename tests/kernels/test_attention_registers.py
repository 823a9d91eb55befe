"""The fused attention's running row maximum is vector code (templates/attention.py, codegen's float max).

Read back from the compiled library: no scalar float comparison is left in the kernel (BERT's shape:
queries, keys and values sliced from one projection, a run-time length, a padding mask). The numbers
are checked against numpy at run-time lengths.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np

import tensorkiln as tk

RNG = np.random.default_rng(23)
HEADS, HEAD = 4, 64


def _attend(x, m):
    """softmax(q k^T / 8 + m) v of 4 heads of 64, q, k and v column slices of x (1, seq, 768)."""
    n = x.shape[1]
    heads = lambda t: t.reshape(1, n, HEADS, HEAD).transpose(1, 2)  # noqa: E731
    q, k, v = (heads(x[:, :, i * HEADS * HEAD:(i + 1) * HEADS * HEAD]) for i in range(3))
    return ((q @ k.transpose(-1, -2)) * 0.125 + m).softmax(-1) @ v


def _reference(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    n, w = x.shape[1], HEADS * HEAD
    q, k, v = (x[0, :, i * w:(i + 1) * w].astype(np.float64).reshape(n, HEADS, HEAD).transpose(1, 0, 2)
               for i in range(3))
    s = q @ k.transpose(0, 2, 1) * 0.125 + m[0, 0]
    e = np.exp(s - s.max(-1, keepdims=True))
    return ((e / e.sum(-1, keepdims=True)) @ v)[None]


def _inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    x = RNG.standard_normal((1, n, 3 * HEADS * HEAD)).astype(np.float32)
    m = np.zeros((1, 1, 1, n), np.float32)
    m[..., n - n // 4:] = -10000.0
    return x, m


def test_run_time_lengths_match_the_reference():
    f = tk.jit(_attend, dynamic={"x": {1: "seq"}, "m": {3: "seq"}})
    for n in (131, 70, 9, 384):
        x, m = _inputs(n)
        np.testing.assert_allclose(f(x, m).numpy(), _reference(x, m), rtol=1e-4, atol=1e-5)
    assert f.compile_count == 1 and "attention" in [k.kind for k in f.report(x, m).kernels]


def test_the_running_row_maximum_is_vector_code():
    """The tile's maximum per query, folded over its keys (nested NaN-propagating max), compiles to
    vector compares and blends: no scalar float comparison anywhere in the kernel."""
    f = tk.jit(_attend, dynamic={"x": {1: "seq"}, "m": {3: "seq"}})
    x, m = _inputs(131)
    np.testing.assert_allclose(f(x, m).numpy(), _reference(x, m), rtol=1e-4, atol=1e-5)
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f.report(x, m).library_path or ""],
                          capture_output=True, text=True).stdout
    scalar = [line for line in text.splitlines() if re.search(r"\bv?u?comiss\b", line)]
    assert not scalar, "scalar float comparisons:\n" + "\n".join(scalar[:8])
