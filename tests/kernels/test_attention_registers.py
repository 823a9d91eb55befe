"""The fused attention's micro-kernels keep their accumulators in vector registers (templates/attention.py).

Read back from the compiled library: a register tile's loop (broadcasts and at least 8 FMAs) does no
vector load or store on the stack. A P V tile that rescaled O as it was loaded held its MR
corrections in registers across the products, and with 16 vector registers GCC spilled an
accumulator on every step (BERT's shape: queries, keys and values sliced from one projection, a
run-time length, a padding mask). The running row maximum is vector code too (no scalar float
comparison). The numbers are checked against numpy at run-time lengths.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

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


def _innermost_fma_loops(library: str) -> list[list[str]]:
    """The instructions of each register tile's loop: a backward jump's range holding no other loop,
    at least 8 FMAs and a broadcast operand from data (the softmax's exp polynomial has FMAs too, and
    broadcasts only its constants)."""
    lines = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library], capture_output=True,
                           text=True).stdout.splitlines()
    at = {int(m.group(1), 16): i for i, line in enumerate(lines) if (m := re.match(r"\s+([0-9a-f]+):", line))}
    ranges = []
    for i, line in enumerate(lines):
        jump = re.match(r"\s+([0-9a-f]+):\s+j\w+\s+([0-9a-f]+)", line)
        if jump and int(jump.group(2), 16) < int(jump.group(1), 16) and int(jump.group(2), 16) in at:
            ranges.append((at[int(jump.group(2), 16)], i))
    innermost = [(a, b) for a, b in ranges if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in ranges)]
    return [lines[a:b + 1] for a, b in innermost
            if sum("vfmadd" in x for x in lines[a:b + 1]) >= 8 and any("vbroadcast" in x and "rip" not in x for x in lines[a:b + 1])]


def _inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    x = RNG.standard_normal((1, n, 3 * HEADS * HEAD)).astype(np.float32)
    m = np.zeros((1, 1, 1, n), np.float32)
    m[..., n - n // 4:] = -10000.0
    return x, m


def _broadcasts_neighbours(body: list[str]) -> bool:
    """Whether the loop broadcasts floats 4 bytes apart: the probabilities of MR consecutive queries
    (a P V tile), where a score tile broadcasts one element of each of its key rows."""
    offsets = [int(sign + (hex_ or "0"), 16) for sign, hex_ in
               re.findall(r"vbroadcastss\s+(-?)(0x[0-9a-f]+)?\(", "\n".join(body))]
    return any(b - a == 4 for a in offsets for b in offsets)


def test_run_time_lengths_match_the_reference_and_the_value_tile_stays_in_registers():
    f = tk.jit(_attend, dynamic={"x": {1: "seq"}, "m": {3: "seq"}})
    for n in (131, 70, 9, 384):
        x, m = _inputs(n)
        np.testing.assert_allclose(f(x, m).numpy(), _reference(x, m), rtol=1e-4, atol=1e-5)
    report = f.report(x, m)
    assert f.compile_count == 1 and "attention" in [k.kind for k in report.kernels]
    value_tiles = [body for body in _innermost_fma_loops(report.library_path or "") if _broadcasts_neighbours(body)]
    assert value_tiles, "no P V tile loop found in the attention kernel"
    for body in value_tiles:
        spills = [x for x in body if "rsp" in x and re.search(r"[xyz]mm", x)]
        assert not spills, "a P V tile moves vectors through the stack:\n" + "\n".join(body)


@pytest.mark.parametrize("n", [384])
def test_attention_tiles_keep_their_accumulators_in_registers(n):
    """At a fixed length of whole key blocks every tile loop, scores and P V, stays in registers."""
    f = tk.jit(_attend)
    x, m = _inputs(n)
    np.testing.assert_allclose(f(x, m).numpy(), _reference(x, m), rtol=1e-4, atol=1e-5)
    loops = _innermost_fma_loops(f.report(x, m).library_path or "")
    assert loops, "no register-tiled loop found in the attention kernel"
    for body in loops:
        spills = [x for x in body if "rsp" in x and re.search(r"[xyz]mm", x)]
        assert not spills, "an FMA loop moves vectors through the stack:\n" + "\n".join(body)


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
