"""`tensorkiln demo`: run each demo model eagerly and through tk.jit, check they agree, print a table."""
from __future__ import annotations

import time

import numpy as np

from .demo_models import all_models
from .jit import jit


def _median_seconds(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def run_demo(tolerance: float = 1e-4) -> int:
    """Run the demo; returns the process exit status (1 if any output differs)."""
    rows = []
    failed = False
    for model in all_models():
        compiled = jit(model.forward)
        start = time.perf_counter()
        jitted = compiled(*model.inputs).numpy()
        first_call = time.perf_counter() - start
        eager = model.forward(*model.inputs).numpy()
        error = float(np.max(np.abs(jitted - eager))) if eager.size else 0.0
        scale = max(1.0, float(np.max(np.abs(eager))))
        ok = error <= tolerance * scale
        failed |= not ok
        eager_s = _median_seconds(lambda: model.forward(*model.inputs))
        jit_s = _median_seconds(lambda: compiled(*model.inputs))
        nodes = len(compiled.graph(*model.inputs))
        rows.append((model.name, model.description, nodes, first_call, eager_s, jit_s, error, ok))

    header = f"{'model':<12} {'graph nodes':>11} {'trace+1st run':>14} {'eager':>10} {'jit':>10} {'max |diff|':>11}  agree"
    print("tensorkiln demo: eager vs tk.jit (graph traced, run by the reference interpreter)\n")
    print(header)
    print("-" * len(header))
    for name, _, nodes, first, eager_s, jit_s, error, ok in rows:
        print(f"{name:<12} {nodes:>11} {first * 1e3:>11.1f} ms {eager_s * 1e3:>7.2f} ms {jit_s * 1e3:>7.2f} ms "
              f"{error:>11.2e}  {'yes' if ok else 'NO'}")
    print()
    for name, description, *_ in rows:
        print(f"  {name:<12} {description}")
    if failed:
        print("\nFAILED: a jitted model disagrees with eager execution")
        return 1
    return 0
