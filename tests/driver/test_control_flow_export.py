"""A graph with control flow (a scan with captured weights, inside a cond) exported as a C library and run
from C with no Python in the process: the same bits as the Python call, and tk.load_compiled reads it."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tensorkiln as tk
from test_export import run_example

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("gcc") is None,
                                reason="needs make and gcc")


def test_scan_model_runs_from_c(tmp_path):
    rng = np.random.default_rng(0)
    w = tk.tensor((rng.standard_normal((5, 5)) * 0.4).astype(np.float32))  # a weight the body reads

    def rnn(xs, h0):
        def step(h, x):
            h = (h @ w + x).tanh()
            return h, h.sum()
        h, sums = tk.scan(step, h0, xs)
        reversed_h, _ = tk.scan(step, h0, xs, reverse=True)
        return tk.cond(sums.sum() > 0, lambda: h * 2.0, lambda: reversed_h), sums

    f = tk.jit(rnn)
    xs = rng.standard_normal((9, 3, 5)).astype(np.float32)
    h0 = rng.standard_normal((3, 5)).astype(np.float32)
    expected = [np.asarray(t.numpy()) for t in f(xs, h0)]
    f.export(tmp_path / "out", xs, h0, name="rnn")
    assert run_example(tmp_path / "out", [xs, h0]) == [e.tobytes() for e in expected]
    loaded = tk.load_compiled(tmp_path / "out")
    for actual, e in zip(loaded(xs, h0), expected):
        np.testing.assert_array_equal(actual, e)
    source = "".join(p.read_text() for p in (tmp_path / "out" / "src").glob("*.c"))
    assert source.count("static int tk_program_") == 4  # two scan bodies and two branches, in C
