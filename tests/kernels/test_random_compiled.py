"""Differential testing of the compiler: random programs compiled to C must match the reference interpreter.

The programs come from tests/strategies.py (elementwise chains and trees with
broadcasting, reductions, movement ops, matmul, softmax, casts), so fusion,
lowering, the simplifier and code generation are all exercised on shapes and
combinations nobody wrote by hand. Each example is one C compiler run.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings

import tensorkiln as tk
from tensorkiln.ir.graph import interpret

from strategies import random_programs

TOLERANCE = {"float32": (2e-4, 2e-5), "float64": (1e-9, 1e-12)}


@settings(max_examples=30, deadline=None)
@given(program=random_programs(max_steps=8))
def test_compiled_random_programs_match_the_reference(program):
    tensors = program.tensors()
    for level in (0, 2):
        compiled = tk.jit(program, opt_level=level)
        result = compiled(*tensors)
        results = result if isinstance(result, tuple) else (result,)
        assert compiled.report(*tensors).backend == "c"
        graph = compiled.graph(*tensors)
        expected = interpret(graph, *[t._value for t in tensors])
        for got, want, node in zip(results, expected, graph.outputs):
            rtol, atol = TOLERANCE.get(node.dtype.name, (0, 0))
            scale = max(1.0, float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0))) if want.dtype.kind == "f" else 1
            np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=atol * scale, equal_nan=True,
                                       err_msg=f"opt_level={level}\n{program!r}")
