"""Differential testing of precision="bf16": random programs compiled to C must match the reference
interpreter run on the same optimized graph, whose round_bf16 nodes say where operands are rounded.

The precision pass (passes/precision.py) decides which values are rounded to bf16; the kernels then
store, widen and fuse those roundings in their own ways (bf16 buffers, roundings stored by the
producer, operands rounded while packed). Interpreting the optimized graph in numpy gives the values
every such choice must keep. The inputs are multiples of 1/64 in [-2, 2], so a product of two
(rounded or not) and the sums of a matmul over them are exact in float32 in any order: the two
sides agree to float32's accuracy, and a rounding left out or put in the wrong place, which moves a
value by up to 2^-9 of itself, shows.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings

import tensorkiln as tk
from tensorkiln.ir.graph import interpret

from helpers import scaled_examples
from strategies import ALL_OPS, random_programs

GRID = 64  # inputs on a grid of 1/64: 7 significant bits at most, bf16 values whose products are exact
RTOL, ATOL = 2e-4, 2e-5  # as for float32 programs (test_random_compiled.py); ATOL relative to the outputs' scale
# matmul drawn as often as all other ops together: the precision pass rounds only contractions' operands
OPS = ALL_OPS + ("matmul",) * len(ALL_OPS)


# Derandomized: a transcendental computed one ulp apart in C and in numpy can, once in tens of thousands of
# elements, land on the other side of a bf16 rounding boundary before a matmul; a fixed set of programs
# keeps the suite's answer the same from run to run (the thorough profile draws 250 of them as well).
@settings(max_examples=scaled_examples(25), deadline=None, derandomize=True)
@given(program=random_programs(max_steps=8, dtypes=(tk.float32,), max_side=12, ops=OPS))
def test_bf16_random_programs_match_their_rounded_graph(program):
    tensors = [tk.tensor(np.round(a * GRID) / GRID, dtype=program.dtype) for a in program.inputs]
    compiled = tk.jit(program, precision="bf16")
    result = compiled(*tensors)
    results = result if isinstance(result, tuple) else (result,)
    assert compiled.report(*tensors).backend == "c"
    graph = compiled.optimized_graph(*tensors)
    expected = interpret(graph, *[t._value for t in tensors])
    for got, want in zip(results, expected):
        if want.dtype.kind != "f":
            np.testing.assert_array_equal(got.numpy(), want, err_msg=repr(program))
            continue
        finite = want[np.isfinite(want)]
        scale = max(1.0, float(np.max(np.abs(finite), initial=0.0)))
        np.testing.assert_allclose(got.numpy(), want, rtol=RTOL, atol=ATOL * scale,
                                   equal_nan=True, err_msg=repr(program))
