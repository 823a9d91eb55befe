"""The arena planner: temps live at the same time never share bytes; the arena sits between the bounds."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln.tools.demo_models import all_models
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Kernel, Store
from tensorkiln.loops import expr as E
from tensorkiln.loops.program import Program
from tensorkiln.kernels.memory_plan import lower_bound, plan_memory


def _program_with_lifetimes(spans: list[tuple[int, int, int]]) -> Program:
    """A program whose temp i (size, first, last) is written by kernel `first` and read until `last`."""
    temps = [Buffer(f"t{i}", "float32", (size,)) for i, (size, _, _) in enumerate(spans)]
    steps = max(last for _, _, last in spans) + 1
    out = Buffer("out0", "float32", (1,))
    kernels = []
    for step in range(steps):
        params = [t for t, (_, first, last) in zip(temps, spans) if first <= step <= last and step in (first, last)]
        written = [t for t, (_, first, _) in zip(temps, spans) if first == step]
        body = [Store(t, E.const(0), E.Const(0.0, "float32")) for t in written] or [
            Store(out, E.const(0), E.Const(0.0, "float32"))]
        from tensorkiln.loops.ir import block
        kernels.append(Kernel(f"k{step}", tuple(dict.fromkeys(params + ([out] if not written else []))), block(*body)))
    return Program("p", tuple(kernels), (), (out,), (), tuple(temps))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 8), st.integers(0, 8)), min_size=1, max_size=12))
def test_plan_never_overlaps_live_temps(raw):
    spans = [(size, min(a, b), max(a, b)) for size, a, b in raw]
    program = _program_with_lifetimes(spans)
    plan = plan_memory(program)
    lives = {l.name: l for l in plan.lifetimes}
    for a in lives.values():
        for b in lives.values():
            if a.name < b.name and a.overlaps(b):
                a0, b0 = plan.offsets[a.name], plan.offsets[b.name]
                assert a0 + a.size <= b0 or b0 + b.size <= a0, (a, b, a0, b0)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.naive_bytes
    assert plan.lower_bound_bytes == lower_bound(plan.lifetimes, len(program.kernels))


def test_demo_models_report_arena_and_bounds():
    for model in all_models():
        f = tk.jit(model.forward)
        f(*model.inputs)
        report = f.report(*model.inputs)
        assert 0 < report.lower_bound_bytes <= report.arena_bytes <= report.naive_bytes
        if len(report.kernels) > 3:
            assert report.arena_bytes < report.naive_bytes  # reuse happens
        assert "lower bound" in f.explain(*model.inputs)


def test_chain_reuses_memory():
    f = tk.jit(lambda x: (((x @ x).relu() @ x).tanh() @ x).exp() @ x)
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    out = f(x)
    report = f.report(x)
    assert report.arena_bytes < report.naive_bytes
    ref = tk.jit(f.fn, opt_level=0)(x)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


def test_elementwise_kernels_update_in_place():
    """An elementwise kernel reading an intermediate on its last use, at the element it writes
    (here the column sums, between a reduction kernel and a GEMM that reads the result), overwrites it."""
    rng = np.random.default_rng(0)
    w = tk.tensor(rng.standard_normal((64, 32)).astype(np.float32))

    def forward(x):
        sums = x.sum(0)                          # stored: a reduction over rows
        scaled = (sums * 0.5).exp() + 1.0        # elementwise on the sums, read by the GEMM below
        return (scaled * x) @ w

    x = rng.standard_normal((16, 64)).astype(np.float32) * 0.1
    f = tk.jit(forward)
    out = f(x)
    compiled = next(iter(f._cache.values())).compiled
    program = compiled.lowered.program
    assert program.aliases, "no in-place update found"
    layout = program.arena_layout()
    for written, read in program.aliases:
        assert layout[written] == layout[read]
    source = open(compiled.report.source_path).read()
    written, _ = program.aliases[0]
    assert f"*{written}" in source and f"*restrict {written}" not in source
    reference = tk.jit(forward, opt_level=0)(x)
    np.testing.assert_allclose(out.numpy(), reference.numpy(), rtol=1e-4, atol=1e-5)
