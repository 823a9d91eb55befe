"""`tensorkiln demo`: each demo model eager, interpreted and compiled; checks they agree, prints a table.

Columns: compile time cold (tracing, lowering, C compiler) and cached (a new
tk.jit of the same function finds the library in the on-disk cache), latency
of the numpy reference interpreter and of the compiled code, and the speedup.
Exits non-zero if any compiled output differs from the reference.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from .demo_models import all_models
from ..ir.graph import interpret
from ..frontend.jit import jit
from .timing import median_seconds


def _timed_first_call(model) -> tuple[object, float]:
    compiled = jit(model.forward)
    start = time.perf_counter()
    compiled(*model.inputs)
    return compiled, time.perf_counter() - start


def run_demo(tolerance: float = 1e-4) -> int:
    """Run the demo; returns the process exit status (1 if any output differs)."""
    fresh_cache = tempfile.mkdtemp(prefix="tensorkiln-demo-")
    saved = os.environ.get("TENSORKILN_CACHE")
    os.environ["TENSORKILN_CACHE"] = fresh_cache  # so "cold" really runs the C compiler
    rows, failed = [], False
    try:
        for model in all_models():
            compiled, cold = _timed_first_call(model)
            _, cached = _timed_first_call(model)
            report = compiled.report(*model.inputs)
            graph = compiled.graph(*model.inputs)
            arrays = [t._value for t in model.inputs]
            reference = interpret(graph, *arrays)[0]
            result = compiled(*model.inputs).numpy()
            error = float(np.max(np.abs(result - reference))) if reference.size else 0.0
            ok = bool(np.all(np.isfinite(result))) and error <= tolerance * max(1.0, float(np.max(np.abs(reference))))
            failed |= not ok
            ref_s = median_seconds(lambda: interpret(graph, *arrays), repeat=7, warmup=1)
            jit_s = median_seconds(lambda: compiled(*model.inputs), repeat=7, warmup=1)
            rows.append((model, len(graph), len(report.kernels), report.backend, cold, cached, ref_s, jit_s, error, ok))
    finally:
        if saved is None:
            os.environ.pop("TENSORKILN_CACHE", None)
        else:
            os.environ["TENSORKILN_CACHE"] = saved

    header = (f"{'model':<12} {'nodes':>5} {'kernels':>7} {'compile cold':>12} {'cached':>9} "
              f"{'reference':>10} {'compiled':>10} {'speedup':>8} {'max |diff|':>10}  ok")
    print("tensorkiln demo: numpy reference interpreter vs compiled C (tk.jit)\n")
    print(header)
    print("-" * len(header))
    for model, nodes, kernels, backend, cold, cached, ref_s, jit_s, error, ok in rows:
        print(f"{model.name:<12} {nodes:>5} {kernels:>7} {cold:>10.2f} s {cached * 1e3:>6.0f} ms "
              f"{ref_s * 1e3:>7.2f} ms {jit_s * 1e3:>7.2f} ms {ref_s / jit_s:>7.1f}x {error:>10.1e}  "
              f"{'yes' if ok else 'NO'}{'' if backend == 'c' else ' (' + backend + ')'}")
    print()
    for model, *_ in rows:
        print(f"  {model.name:<12} {model.description}")
    if failed:
        print("\nFAILED: a compiled model disagrees with the reference interpreter")
        return 1
    return 0
