"""Differential testing of tracing: random programs (tests/strategies.py) run eagerly must equal the same
programs traced by tk.jit and run by the reference interpreter.

Run as traced (opt_level=0, no graph rewrites) both sides use the same numpy
references, so they must agree exactly; a mismatch means tracing recorded
something other than what eager mode computed (a wrong attribute, a value baked
in at trace time, a lost cast, ...). The optimization pipelines (opt_level 1-3)
rewrite the graph and are compared at the dtype's tolerance, and so is compiled
code (TK_TEST_BACKEND=c).
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln.ir.graph import format_graph, interpret, verify

from helpers import FRONT_END, JIT_BACKEND, assert_same_structure, scaled_examples
from strategies import ALL_OPS, BINARY, MOVEMENT, REDUCE, RandomProgram, random_programs

pytestmark = FRONT_END
EXACT = JIT_BACKEND != "c"


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


@settings(max_examples=scaled_examples(60))
@given(program=random_programs())
def test_eager_equals_traced_and_interpreted(program: RandomProgram):
    tensors = program.tensors()
    eager = program(*tensors)
    jitted = tk.jit(program, opt_level=0)
    assert_same_structure(eager, jitted(*tensors), exact=EXACT)

    graph = jitted.graph(*tensors)
    verify(graph)
    assert jitted.cache_size() == 1
    assert len(graph.inputs) == len(program.inputs)
    format_graph(graph)  # prints without error
    outputs = interpret(graph, *[t._value for t in tensors])
    for got, want in zip(outputs, _as_tuple(eager)):
        assert got.shape == want.shape and got.dtype == want._value.dtype
        np.testing.assert_array_equal(got, want._value)


@settings(max_examples=scaled_examples(30))
@given(program=random_programs(), seed=st.integers(0, 2 ** 32 - 1))
def test_trace_is_reused_for_new_values(program: RandomProgram, seed):
    """A trace must not depend on the input values it was traced with."""
    jitted = tk.jit(program, opt_level=0)
    jitted(*program.tensors())
    rng = np.random.default_rng(seed)
    fresh = [tk.tensor(rng.uniform(-2, 2, size=a.shape), dtype=program.dtype) for a in program.inputs]
    assert_same_structure(program(*fresh), jitted(*fresh), exact=EXACT)
    assert jitted.cache_size() == 1


@settings(max_examples=scaled_examples(25))
@given(program=random_programs(ops=MOVEMENT + BINARY, dtypes=(tk.float16, tk.bfloat16, tk.float32)))
def test_16_bit_programs(program: RandomProgram):
    tensors = program.tensors()
    assert_same_structure(program(*tensors), tk.jit(program, opt_level=0)(*tensors), exact=EXACT)


@settings(max_examples=scaled_examples(25))
@given(program=random_programs(ops=REDUCE + MOVEMENT, max_steps=12))
def test_long_reduction_and_movement_chains(program: RandomProgram):
    tensors = program.tensors()
    assert_same_structure(program(*tensors), tk.jit(program, opt_level=0)(*tensors), exact=EXACT)


@settings(max_examples=scaled_examples(40))
@given(program=random_programs(), level=st.sampled_from([1, 2, 3]))
def test_optimized_programs_match_eager(program: RandomProgram, level):
    """The optimization pipelines may round differently, never compute something else."""
    tensors = program.tensors()
    assert_same_structure(program(*tensors), tk.jit(program, opt_level=level)(*tensors), exact=False)


@settings(max_examples=scaled_examples(20))
@given(program=random_programs())
def test_programs_are_well_formed(program: RandomProgram):
    """The strategy itself: every operand is defined before use; outputs exist; every op is from the pool."""
    n_inputs = len(program.inputs)
    for k, step in enumerate(program.steps):
        assert step.op in ALL_OPS
        assert all(0 <= i < n_inputs + k for i in step.operands), repr(program)
    assert program.outputs and max(program.outputs) < n_inputs + len(program.steps)
    assert "RandomProgram(" in repr(program)
    fn, arrays = program  # unpacks as (function, input arrays)
    assert fn is program and arrays is program.inputs
