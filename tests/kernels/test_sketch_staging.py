"""The cache_write and compute_at rules of schedule sketches: random candidates of random reductions, row and
attention kernels give the reference's results; illegal ones are refused with the primitive's message."""
from __future__ import annotations

import random

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.driver.build import build
from tensorkiln.ir.graph import interpret
from tensorkiln.kernels.sketch import (SketchConfig, accumulating_loops, nest_facts, producer_pairs, sketch,
                                       sketch_kernel, sketch_legal, unique_loop_names)
from tensorkiln.kernels.sketch_space import sketch_space
from tensorkiln.kernels.tuned import using_configs
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Alloc, For, Kernel, Store, block, iter_stmts
from tensorkiln.loops.nest import ScheduleError
from tensorkiln.loops.program import Program


def _sketch_uses(fn, *args) -> list[str]:
    fn.explain(*args)  # lowered here, so the kernels are known even after a compile-cache hit
    return [use.split(" ", 1)[0] for k in fn.report(*args).kernels for use in k.tuning if use.startswith("sketch:")]


def _random_case(rng: random.Random):
    """A reduction over two axes, a softmax or a layer norm over the last axis, at random odd sizes (size-1
    dims included; columns not a multiple of the vector width)."""
    kind = rng.choice(("sum02", "softmax", "layer_norm", "max02"))
    shape = (rng.choice((1, 3, 5)), rng.choice((1, 7, 37)), rng.choice((17, 65, 129, 200)))

    def fn(a):
        if kind == "sum02":
            return (a * 1.5).sum(axis=(0, 2))
        if kind == "max02":
            return a.exp().max(axis=(0, 2))
        if kind == "softmax":
            return tk.softmax(a * 2.0, -1)
        mean = a.mean(axis=-1, keepdims=True)
        centered = a - mean
        return centered / ((centered * centered).mean(axis=-1, keepdims=True) + 1e-5).sqrt()
    return fn, shape, kind


def _check_candidates(fn, a: np.ndarray, rng: random.Random, what: str) -> int:
    """Every cache_write place and one random staged candidate of each of fn's sketch workloads against the
    reference interpreter; returns how many candidates were compiled and compared."""
    compiled = tk.jit(fn)
    expected = interpret(compiled.graph(a), a)[0]
    tried = 0
    for workload in _sketch_uses(compiled, a):
        space = sketch_space(workload)
        picks = [dict(space.default, cache_write=v) for v in space.knobs["cache_write"] if v]
        picks += [c for c in (space.sample(rng) for _ in range(30)) if c["cache_write"] or c["compute_at"]][:1]
        for config in picks:
            if not space.contains(config):
                continue
            with using_configs({workload: config}):
                candidate = tk.jit(fn)
                got = candidate(a).numpy()
                uses = [u for k in candidate.report(a).kernels for u in k.tuning if u.startswith(workload)]
            assert " tuned: " in uses[0], f"{what}: {config} was not applied ({uses})"
            np.testing.assert_allclose(got, expected, rtol=3e-5, atol=3e-5, err_msg=f"{what} {config}")
            tried += 1
    return tried


def test_random_staging_candidates_match_the_reference():
    tried = 0
    for seed in range(4):
        rng = random.Random(seed)
        fn, shape, kind = _random_case(rng)
        a = np.random.default_rng(seed).uniform(0.5, 1.5, shape).astype(np.float32)
        tried += _check_candidates(fn, a, rng, f"{kind} {shape}")
    assert tried >= 2  # most of these kernels accumulate per-lane partial sums: the rule has places to act


def test_cache_write_keeps_a_row_kernels_partial_sums_in_registers():
    a = np.random.default_rng(0).uniform(0.5, 1.5, (7, 129)).astype(np.float32)
    compiled = tk.jit(lambda x: tk.softmax(x, -1))
    (workload,) = _sketch_uses(compiled, a)
    kernel = sketch_kernel(workload)
    assert nest_facts(kernel).accumulating == 1
    staged, steps = sketch(kernel, SketchConfig(cache_write=1))
    names = [s.name for s in steps.steps]
    assert names[0] == "reorder" and names[1:] == ["cache_write"] * (len(names) - 1)
    assert "acc1_lanes_local" in str(staged)
    with pytest.raises(ScheduleError, match="cache_write 2 needs that many loops accumulating into a buffer, "
                                            "found 1"):
        sketch(kernel, SketchConfig(cache_write=2))


def test_attention_kernel_staging_and_a_refused_compute_at():
    data = np.random.default_rng(3)
    q, k = (data.standard_normal((2, 37, 24)).astype(np.float32) for _ in range(2))
    v = data.standard_normal((2, 37, 40)).astype(np.float32)
    fn = lambda q, k, v: tk.softmax((q @ k.transpose(1, 2)) * 0.2, -1) @ v  # noqa: E731
    compiled = tk.jit(fn)
    expected = interpret(compiled.graph(q, k, v), q, k, v)[0]
    (workload,) = _sketch_uses(compiled, q, k, v)
    kernel = sketch_kernel(workload)
    facts = nest_facts(kernel)
    assert facts.accumulating >= 2  # the score and output tiles
    for place in range(1, facts.accumulating + 1):
        config = {**sketch_space(workload).default, "cache_write": place}
        with using_configs({workload: config}):
            got = tk.jit(fn)(q, k, v).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=str(config))
    if facts.producers == 0:  # a target whose attention tile stages no row correction apart (AVX2 here)
        return
    # corr[] is produced for all rows at once, with the row sums it rescales, and read per row group: producing
    # it inside the reader is wrong (it reads rows later producer iterations write, or the move passes over the
    # loops that update those row sums in place, whichever the kernel's layout meets first)
    with pytest.raises(ScheduleError, match="compute_at of corr( at loop \\w+)?: (iteration .* reads corr\\[.*\\], "
                                            "which later producer iterations write|the producer )"):
        sketch(kernel, SketchConfig(compute_at=1))
    assert not sketch_legal(kernel, SketchConfig(compute_at=1))


def _producer_kernel(rows: int, cols: int) -> Kernel:
    """t = exp(a) * 2 for all rows first, then out = t + a row by row (a local producer, then its reader)."""
    out, a = Buffer("out", "float32", (rows, cols)), Buffer("a", "float32", (rows, cols))
    t = Buffer("t", "float32", (rows, cols), scope="local")
    i, j = E.Var("i"), E.Var("j")
    produce = For(i, rows, For(j, cols, Store(t, i * cols + j, E.call("exp", E.Load(a, i * cols + j)) * 2.0)))
    r, c = E.Var("r"), E.Var("c")
    consume = For(r, rows, For(c, cols, Store(out, r * cols + c, E.Load(t, r * cols + c) + E.Load(a, r * cols + c))),
                  "parallel")
    return Kernel("produce_then_add", (out, a), Alloc(t, block(produce, consume)))


def _run(kernel: Kernel, a: np.ndarray) -> np.ndarray:
    out, param = kernel.params
    return build(Program("staged_" + kernel.name, (kernel,), (param,), (out,))).run(a)[0]


@pytest.mark.parametrize("rows, cols", [(1, 17), (9, 33), (16, 1)])
def test_compute_at_produces_each_row_inside_its_reader(rows, cols):
    kernel = _producer_kernel(rows, cols)
    assert [(b, loop.var.name) for b, loop in producer_pairs(kernel)] == [("t", "r")]
    staged, steps = sketch(kernel, SketchConfig(compute_at=1))
    assert [(s.name, s.args) for s in steps.steps] == [("compute_at", ("t", "r"))]
    (reader,) = [s for s in iter_stmts(staged.body) if isinstance(s, For) and s.var.name == "r"]
    assert any(isinstance(s, Store) and s.buffer.name == "t" for s in iter_stmts(reader.body))
    a = np.random.default_rng(rows).uniform(-1, 1, (rows, cols)).astype(np.float32)
    np.testing.assert_allclose(_run(staged, a), np.exp(a.astype(np.float64)) * 2 + a, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_run(staged, a), _run(kernel, a), rtol=0, atol=0)


def test_loops_renamed_apart_change_nothing_else():
    kernel = _producer_kernel(4, 5)
    assert unique_loop_names(kernel) is kernel  # every name already unique
    twice = Kernel("twice", kernel.params, block(kernel.body, For(E.Var("i"), 4, For(E.Var("j"), 5, Store(
        kernel.params[0], E.Var("i") * 5 + E.Var("j"), E.Load(kernel.params[1], E.Var("i") * 5 + E.Var("j")))))))
    renamed = unique_loop_names(twice)
    names = [s.var.name for s in iter_stmts(renamed.body) if isinstance(s, For)]
    assert len(names) == len(set(names)) and "i1" in names and "j1" in names
    assert str(renamed).replace("i1", "i").replace("j1", "j") == str(twice)
    assert accumulating_loops(renamed) == []  # no loop here accumulates
