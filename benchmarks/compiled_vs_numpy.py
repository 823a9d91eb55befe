"""Compiled tensorkiln vs numpy, measured in one run: demo models, a fused elementwise chain, call overhead.

    python benchmarks/compiled_vs_numpy.py [--json out/compiled_vs_numpy.json]

Rows:
- each demo model (MLP 784-512-512-10 at batch 1 and 64, CNN, transformer block):
  plain numpy code (numpy_models.py: numpy's BLAS for the products, a
  sliding-window tensordot for the convolutions) vs the compiled function, and
  tensorkiln's eager mode (its numpy reference interpreter, one op at a time)
  named apart;
- a 5-op elementwise chain over 16M float32 values, numpy's unfused ops vs one fused kernel;
- the call overhead of a jitted function on a 4-element input vs one numpy ufunc call.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorkiln as tk  # noqa: E402
from common import machine_summary, median_seconds, print_table, write_json  # noqa: E402
from numpy_models import numpy_model  # noqa: E402
from tensorkiln.tools.demo_models import cnn, mlp, transformer_block  # noqa: E402


def chain_numpy(x, y):
    return np.tanh(x * 1.5 + y) * x - y * 0.5


def chain_tk(x, y):
    return (x * 1.5 + y).tanh() * x - y * 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write results to this JSON file")
    args = parser.parse_args()
    print(f"machine: {machine_summary()}\n")
    rows, results = [], {}

    for model in (mlp(batch=1), mlp(batch=64), cnn(), transformer_block()):
        compiled = tk.jit(model.forward)
        plain = numpy_model(model)
        arrays = [t.numpy() for t in model.inputs]
        got, want = compiled(*model.inputs).numpy(), plain(*arrays)
        assert np.allclose(got, want, rtol=1e-4, atol=1e-4), f"{model.name}: numpy and tensorkiln disagree"
        numpy_s = median_seconds(lambda: plain(*arrays))
        eager_s = median_seconds(lambda: model.forward(*model.inputs))
        jit_s = median_seconds(lambda: compiled(*model.inputs))
        rows.append([model.description, f"{numpy_s * 1e3:.3f} ms", f"{jit_s * 1e3:.3f} ms", f"{numpy_s / jit_s:.2f}x",
                     f"{eager_s * 1e3:.3f} ms"])
        results[model.description] = {"numpy_s": numpy_s, "tensorkiln_s": jit_s, "tensorkiln_eager_s": eager_s}

    n = 1 << 24
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    fused = tk.jit(chain_tk)
    fused(x, y)
    np_s = median_seconds(lambda: chain_numpy(x, y), repeat=7)
    tk_s = median_seconds(lambda: fused(x, y), repeat=7)
    gbs = 3 * 4 * n / tk_s / 1e9  # two reads and one write of float32
    rows.append(["5-op elementwise chain, 16M float32", f"{np_s * 1e3:.2f} ms", f"{tk_s * 1e3:.2f} ms ({gbs:.1f} GB/s)",
                 f"{np_s / tk_s:.2f}x", ""])
    results["elementwise_chain_16M"] = {"numpy_s": np_s, "tensorkiln_s": tk_s, "tensorkiln_GBps": gbs}

    small = np.ones(4, np.float32)
    add = tk.jit(lambda a: a + 1.0)
    add(small)
    np_s = median_seconds(lambda: np.add(small, 1.0), repeat=2001)
    tk_s = median_seconds(lambda: add(small), repeat=2001)
    rows.append(["call overhead (4 floats, a + 1)", f"{np_s * 1e6:.2f} us", f"{tk_s * 1e6:.2f} us", f"{np_s / tk_s:.2f}x",
                 ""])
    results["call_overhead"] = {"numpy_s": np_s, "tensorkiln_s": tk_s}

    print_table(["workload", "numpy", "tensorkiln (compiled)", "speedup", "tensorkiln eager"], rows)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
