"""Schedule sketches of kernels without a tuned template (elementwise groups, reductions, rows, attention):
random candidates against the reference interpreter,
records read back through `configured`, and illegal sketches refused with the primitive's message."""
from __future__ import annotations

import random

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.ir.graph import interpret
from tensorkiln.kernels.sketch import SketchConfig, nest_facts, sketch, sketch_kernel, sketch_legal, sketch_workload
from tensorkiln.kernels.sketch_space import sketch_space
from tensorkiln.kernels.tuned import target_key, using_configs
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Assign, For, Kernel, Let, Store, block
from tensorkiln.loops.nest import ScheduleError
from tensorkiln.runtime.tuning_records import TuningRecord, append_record


def _sketch_uses(fn, *args) -> list[str]:
    """The sketch workloads of fn's kernels (lowered, so their kernels are known even after a cache hit)."""
    fn.explain(*args)
    return [use.split(" ", 1)[0] for k in fn.report(*args).kernels for use in k.tuning if use.startswith("sketch:")]


def _random_shape(rng: random.Random) -> tuple[int, ...]:
    """2-d or 3-d, with size-1 dims and odd sizes, columns that are not a multiple of the vector width."""
    return tuple(rng.choice((1, 3, 17, 33, 65, 129, 200)) for _ in range(rng.choice((2, 3))))


def _random_function(rng: random.Random, ndim: int):
    """An elementwise chain, then maybe a reduction over a random axis (sum, max or mean), maybe a softmax."""
    unary = rng.choice(("exp", "tanh", "sqrt"))
    scale = rng.choice((0.5, 2.0, -1.5))
    reduce = rng.choice(("sum", "max", "mean", "softmax", None))
    axis = rng.randrange(ndim)

    def fn(a, b):
        y = getattr(a * scale + b, unary)() if unary != "sqrt" else (a * b).sqrt()
        if reduce == "softmax":
            return tk.softmax(y, axis)
        return getattr(y, reduce)(axis=axis) if reduce else y
    return fn, f"{unary} {scale} {reduce} axis={axis}"


@pytest.mark.parametrize("seed", range(5))
def test_random_candidates_match_the_reference(seed):
    rng = random.Random(seed)
    shape = _random_shape(rng)
    fn, what = _random_function(rng, len(shape))
    data = np.random.default_rng(seed)
    a, b = (data.uniform(0.5, 1.5, shape).astype(np.float32) for _ in range(2))
    compiled = tk.jit(fn)
    graph = compiled.graph(a, b)
    expected = interpret(graph, a, b)[0]
    workloads = _sketch_uses(compiled, a, b)
    assert workloads, f"{what} {shape}: no kernel asked for a sketch"
    tried = 0
    for workload in workloads:
        space = sketch_space(workload)
        assert space is not None and space.contains(space.default)
        candidates = {space.key(c): c for c in (space.sample(rng) for _ in range(8)) if c != space.default}
        for config in list(candidates.values())[:2]:
            with using_configs({workload: config}):
                candidate = tk.jit(fn)
                got = candidate(a, b).numpy()
                uses = [u for k in candidate.report(a, b).kernels for u in k.tuning if u.startswith(workload)]
            assert uses and " tuned: " in uses[0], f"{what} {shape}: {config} was not applied ({uses})"
            np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5, err_msg=f"{what} {shape} {config}")
            tried += 1
    assert tried or all(sketch_space(w).size == 1 for w in workloads)


def test_default_is_the_lowering_and_a_member():
    a = np.ones((33, 129), np.float32)
    compiled = tk.jit(lambda x: x.sum(axis=1))
    (workload,) = _sketch_uses(compiled, a)
    kernel = sketch_kernel(workload)
    assert sketch_workload(kernel, "reduction") == workload
    unchanged, steps = sketch(kernel, SketchConfig())
    assert unchanged is kernel and not steps.steps
    space = sketch_space(workload)
    assert space.default == dict.fromkeys(space.knobs, 0) and space.contains(space.default)
    assert 1 in space.knobs["fuse"] and 8 in space.knobs["rfactor"] and 256 not in space.knobs["rfactor"]
    _, steps = sketch(kernel, SketchConfig(rfactor=8))
    assert [s.name for s in steps.steps] == ["rfactor", "vectorize"]


@pytest.fixture
def records(tmp_path, monkeypatch):
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("TENSORKILN_TUNING_RECORDS", str(path))
    return path


def test_a_record_round_trips_through_configured(records):
    a = np.random.default_rng(1).uniform(-1, 1, (65, 200)).astype(np.float32)
    fn = lambda x: (x * 3).exp().sum(axis=1)  # noqa: E731
    untuned = tk.jit(fn)
    expected = untuned(a).numpy()
    (workload,) = _sketch_uses(untuned, a)
    assert "tuning: sketch" not in open(untuned.report(a).source_path).read()  # untuned C names no sketch
    config = {**dict.fromkeys(sketch_space(workload).knobs, 0), "rfactor": 16, "parallel": 1}
    append_record(TuningRecord(workload, target_key(), config, 1.0, 2.0, 5))
    tuned = tk.jit(fn)
    np.testing.assert_allclose(tuned(a).numpy(), expected, rtol=1e-5, atol=1e-5)
    report = tuned.report(a)
    assert any(f"{workload} tuned: parallel=1 rfactor=16" in u for k in report.kernels for u in k.tuning)
    assert "acc_rf" in open(report.source_path).read()


def _two_scalar_sum() -> Kernel:
    """for i: s = 0; q = 0; for j: s += a; q += a*a; out[i] = s*q  (a reduction loop updating two scalars)."""
    out, a = Buffer("out", "float32", (6,)), Buffer("a", "float32", (6, 40))
    i, j = E.Var("i"), E.Var("j")
    s, q = E.Var("s", "float32"), E.Var("q", "float32")
    x = E.Load(a, i * 40 + j)
    body = For(i, 6, block(Let(s, E.Const(0.0, "float32")), Let(q, E.Const(0.0, "float32")),
                           For(j, 40, block(Assign(s, s + x), Assign(q, q + x * x))),
                           Store(out, i, s * q)))
    return Kernel("sums", (out, a), body)


def test_an_illegal_sketch_is_refused_with_the_primitives_message(records):
    kernel = _two_scalar_sum()
    assert nest_facts(kernel).reduction is not None
    with pytest.raises(ScheduleError, match="must update exactly one outer scalar, found \\['q', 's'\\]"):
        sketch(kernel, SketchConfig(rfactor=4))
    assert not sketch_legal(kernel, SketchConfig(rfactor=4))
    with pytest.raises(ScheduleError, match="tile 64 needs a vectorized loop longer than it"):
        sketch(kernel, SketchConfig(tile=64))
    # a record asking for an illegal sketch is not used: the kernel keeps its default
    a = np.ones((17, 3), np.float32)
    compiled = tk.jit(lambda x: x.sum(axis=0))
    (workload,) = _sketch_uses(compiled, a)
    append_record(TuningRecord(workload, target_key(), {"tile": 512}, 1.0, 2.0, 5))
    again = tk.jit(lambda x: x.sum(axis=0))
    np.testing.assert_allclose(again(a).numpy(), a.sum(axis=0))
    (use,) = [u for k in again.report(a).kernels for u in k.tuning]
    assert "default (its tuned record is not a legal configuration here)" in use


def test_attention_kernel_candidates_match_the_reference():
    data = np.random.default_rng(3)
    q, k = (data.standard_normal((3, 37, 24)).astype(np.float32) for _ in range(2))
    v = data.standard_normal((3, 37, 40)).astype(np.float32)
    fn = lambda q, k, v: tk.softmax((q @ k.transpose(1, 2)) * 0.2, -1) @ v  # noqa: E731
    compiled = tk.jit(fn)
    expected = interpret(compiled.graph(q, k, v), q, k, v)[0]
    (workload,) = _sketch_uses(compiled, q, k, v)
    assert workload.startswith("sketch:kind=attention:")
    space = sketch_space(workload)
    rng = random.Random(0)
    for config in [c for c in (space.sample(rng) for _ in range(6)) if c != space.default][:2]:
        with using_configs({workload: config}):
            got = tk.jit(fn)(q, k, v).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=str(config))
