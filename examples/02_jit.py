"""Tutorial 2: tk.jit traces a function once per input signature and compiles it to C.

    python examples/02_jit.py
"""
import time

import numpy as np

import tensorkiln as tk
import tensorkiln.nn.functional as F

rng = np.random.default_rng(0)
w1, w2 = tk.tensor(rng.standard_normal((256, 128)) * 0.05), tk.tensor(rng.standard_normal((128, 10)) * 0.05)


@tk.jit
def mlp(x):
    return F.gelu(x @ w1) @ w2                # weights captured here become constants of the graph


x = rng.standard_normal((32, 256)).astype(np.float32)
start = time.perf_counter()
y = mlp(x)                                    # first call: trace, optimize, generate C, compile
print(f"first call {1e3 * (time.perf_counter() - start):.0f} ms (compiles)")
start = time.perf_counter()
mlp(x)                                        # same shapes: one call into the compiled library
print(f"second call {1e6 * (time.perf_counter() - start):.0f} us")

print(mlp.graph(x))                           # the traced graph, in SSA form with shapes and dtypes
report = mlp.report(x)
print("kernels:", [(k.name, k.kind) for k in report.kernels])
print("generated C:", report.source_path)

eager = (F.gelu(tk.tensor(x) @ w1) @ w2).numpy()
assert np.allclose(y.numpy(), eager, atol=1e-5)
mlp(rng.standard_normal((5, 256)).astype(np.float32))   # a new batch size traces again
print("signatures compiled:", mlp.cache_size())
