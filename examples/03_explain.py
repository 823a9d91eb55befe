"""Tutorial 3: what the compiler did, stage by stage: the graph after each pass, the kernel
grouping (which nodes fuse, and why each kernel's result is stored), the kernels as loop nests,
the memory plan, and the generated C.

    python examples/03_explain.py
"""
import numpy as np

import tensorkiln as tk
import tensorkiln.nn.functional as F


def block(x, gamma, beta):
    h = F.layer_norm(x, (x.shape[-1],), gamma, beta)    # one kernel: both reductions and the scaling
    return x + F.gelu(h) * 0.5                          # an elementwise chain, fused with its producers


x = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
gamma, beta = np.ones(128, np.float32), np.zeros(128, np.float32)
f = tk.jit(block)
f(x, gamma, beta)
text = f.explain(x, gamma, beta)
print(text)

report = f.report(x, gamma, beta)
print(f"{len(report.kernels)} kernels; arena {report.arena_bytes} bytes "
      f"(naive {report.naive_bytes}, lower bound {report.lower_bound_bytes})")
for p in report.passes:
    print("  pass", p)
assert "after kernel grouping" in text and "== lower: " in text and report.backend == "c"
