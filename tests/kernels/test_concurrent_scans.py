"""Independent scans of one length run side by side (kernels/concurrent.py); small loop bodies run on one
thread (kernels/small_body.py). Compiled results against the numpy interpreter over random shapes,
gradients against torch, the kernel order against the data dependences, and failures inside a part."""
import numpy as np
import pytest
import torch

import tensorkiln as tk
from tensorkiln.codegen.c import generate_c
from tensorkiln.driver.build import build
from tensorkiln.ir.graph import interpret
from tensorkiln.kernels.concurrent import concurrent_control
from tensorkiln.kernels.schedule_defaults import thread_count
from tensorkiln.kernels.small_body import SERIAL_BODY_MAX_WORK, iterations, serial_if_small
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Load, Var, const
from tensorkiln.loops.ir import Block, Concurrent, For, Kernel, NativeCall, Pointer, ProgramCall, Store, iter_stmts
from tensorkiln.loops.program import Program
from tensorkiln.loops.types import INDEX_DTYPE
from tensorkiln.runtime.module import OutOfBoundsError

from helpers import assert_close

SIDE_BY_SIDE = thread_count() >= 2


def _shapes(rng, count=3):
    """Random [batch, width] shapes with size-1 axes, odd sizes and tails past a vector width."""
    return [tuple(int(rng.choice([1, 3, 5, 17, 19])) for _ in range(2)) for _ in range(count)]


def _concurrent_kernels(jitted, args) -> list:
    return [k for k in jitted.report(*args).kernels if "concurrently" in k.loop_ir]


def _two_directions(w, u, xs, h0):
    """A bidirectional recurrence: two scans over the same steps with their own weights and carries."""
    forward, ys_f = tk.scan(lambda h, x: ((h @ w + x).tanh(),) * 2, h0, xs)
    backward, ys_b = tk.scan(lambda h, x: ((h @ u + x).sigmoid(),) * 2, h0, xs, reverse=True)
    return forward, backward, ys_f, ys_b


def _numpy_two_directions(w, u, xs, h0):
    hf, hb = h0, h0
    ys_f, ys_b = np.zeros(xs.shape[:1] + h0.shape, np.float32), np.zeros(xs.shape[:1] + h0.shape, np.float32)
    for t in range(len(xs)):
        hf = np.tanh(hf @ w + xs[t])
        ys_f[t] = hf
    for t in reversed(range(len(xs))):
        hb = 1 / (1 + np.exp(-(hb @ u + xs[t])))
        ys_b[t] = hb
    return hf, hb, ys_f, ys_b


def test_independent_scans_of_one_length_are_one_concurrent_kernel():
    rng = np.random.default_rng(0)
    for length in (1, 2, 7):
        for batch, width in _shapes(rng, 2):
            w = (rng.standard_normal((width, width)) * 0.4).astype(np.float32)
            u = (rng.standard_normal((width, width)) * 0.4).astype(np.float32)
            xs = rng.standard_normal((length, batch, width)).astype(np.float32)
            h0 = rng.standard_normal((batch, width)).astype(np.float32)
            jitted = tk.jit(_two_directions)
            got = jitted(w, u, xs, h0)
            expected = _numpy_two_directions(w, u, xs, h0)
            interpreted = interpret(jitted.graph(w, u, xs, h0), w, u, xs, h0)
            for g, i, e in zip(got, interpreted, expected):
                assert_close(g, e, rtol=1e-5, atol=1e-5)
                assert_close(i, e, rtol=1e-5, atol=1e-5)
            assert len(_concurrent_kernels(jitted, (w, u, xs, h0))) == (1 if SIDE_BY_SIDE else 0)


def test_a_scan_reading_another_scans_output_runs_after_it():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((5, 5)) * 0.4).astype(np.float32)
    xs = rng.standard_normal((6, 3, 5)).astype(np.float32)
    h0 = rng.standard_normal((3, 5)).astype(np.float32)

    def stacked(w, xs, h0):
        _, first = tk.scan(lambda h, x: ((h @ w + x).tanh(),) * 2, h0, xs)
        return tk.scan(lambda h, x: ((h @ w + x).tanh(),) * 2, h0, first, reverse=True)

    jitted = tk.jit(stacked)
    carry, ys = jitted(w, xs, h0)
    for g, e in zip((carry, ys), interpret(jitted.graph(w, xs, h0), w, xs, h0)):
        assert_close(g, e, rtol=1e-5, atol=1e-5)
    assert not _concurrent_kernels(jitted, (w, xs, h0))


def test_scans_of_different_lengths_are_not_paired():
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((3, 3)) * 0.4).astype(np.float32)
    short, long = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((9, 3)).astype(np.float32)

    def f(w, short, long):
        a, _ = tk.scan(lambda h, x: ((h @ w + x).tanh(),) * 2, tk.zeros(3), short)
        b, _ = tk.scan(lambda h, x: ((h @ w + x).tanh(),) * 2, tk.zeros(3), long)
        return a, b

    jitted = tk.jit(f)
    for g, e in zip(jitted(w, short, long), interpret(jitted.graph(w, short, long), w, short, long)):
        assert_close(g, e, rtol=1e-5, atol=1e-5)
    assert not _concurrent_kernels(jitted, (w, short, long))


def test_gradient_of_two_concurrent_scans_matches_torch():
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((4, 4)) * 0.5).astype(np.float32)
    u = (rng.standard_normal((4, 4)) * 0.5).astype(np.float32)
    xs = rng.standard_normal((5, 2, 4)).astype(np.float32)
    h0 = rng.standard_normal((2, 4)).astype(np.float32)

    def loss(w, u, xs, h0):
        forward, backward, ys_f, ys_b = _two_directions(w, u, xs, h0)
        return ys_f.sum() + (ys_b * ys_b).sum() + (forward * backward).sum()

    def torch_loss(w, u, xs, h0):
        hf, hb, ys_f, ys_b = h0, h0, [], []
        for x in xs:
            hf = torch.tanh(hf @ w + x)
            ys_f.append(hf)
        for x in reversed(xs):
            hb = torch.sigmoid(hb @ u + x)
            ys_b.append(hb)
        return torch.stack(ys_f).sum() + (torch.stack(ys_b) ** 2).sum() + (hf * hb).sum()

    step = tk.jit(tk.grad(loss, argnums=(0, 1, 2, 3)))
    grads = step(w, u, xs, h0)
    expected = torch.func.grad(torch_loss, argnums=(0, 1, 2, 3))(*map(torch.tensor, (w, u, xs, h0)))
    for g, e in zip(grads, expected):
        assert_close(g, e.numpy(), rtol=1e-4, atol=1e-5)
    if SIDE_BY_SIDE:  # the forward pair, and the reverse scans of the backward pass
        assert _concurrent_kernels(step, (w, u, xs, h0))


def test_a_failure_inside_one_part_is_raised_and_the_module_stays_usable():
    """A bounds-checked build: a sub-program's failing store in one part ends that part's loop (a return
    may not leave an OpenMP section) and the call raises; the next call starts with a clean state."""
    r, t = Var("r", INDEX_DTYPE), Var("t", INDEX_DTYPE)
    idx, hits = Buffer("idx", "int64", (4,)), Buffer("hits", "float32", (4,))
    scatter = Kernel("scatter", (hits, idx), For(r, 4, Store(hits, Load(idx, r), const(1.0, "float32"))))
    body = Program("body", (scatter,), inputs=(idx,), outputs=(hits,))
    steps, parts, params = 3, [], []
    for name in ("a", "b"):
        rows, out = Buffer(f"idx_{name}", "int64", (steps, 4)), Buffer(f"hits_{name}", "float32", (4,))
        call = ProgramCall("body", (Pointer(rows, t * const(4)), Pointer(out, const(0))), (out.name,))
        parts.append(For(t, const(steps), call))
        params += [rows, out]
    outer = Kernel("both", tuple(params), Concurrent(tuple(parts)))
    module = build(Program("outer", (outer,), inputs=(params[0], params[2]), outputs=(params[1], params[3]),
                           subprograms=(body,)), debug=True)
    good = np.tile(np.array([0, 1, 2, 3], np.int64), (steps, 1))
    bad = good.copy()
    bad[1, 2] = 7
    out_a, out_b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(OutOfBoundsError, match=r"store of hits\[7\]"):
        module(good, bad, out_a, out_b)
    out_a[:], out_b[:] = 0, 0
    module(good, good, out_a, out_b)
    assert out_a.tolist() == [1, 1, 1, 1] and out_b.tolist() == [1, 1, 1, 1]
    assert "#pragma omp parallel sections" in generate_c(Program("outer", (outer,), inputs=(params[0], params[2]),
                                                                 outputs=(params[1], params[3]),
                                                                 subprograms=(body,))).text


# ---- the merge, on kernels standing in for loops -------------------------------------------------
def _buffer(name):
    return Buffer(name, "float32", (4,))


def _compute(name, reads, writes):
    params = [_buffer(b) for b in reads + writes]
    return Kernel(name, params, NativeCall("f", tuple(Pointer(b, const(0)) for b in params), tuple(writes)))


def _loop(name, reads, writes, steps=8):
    """A kernel whose loop calls a sub-program `steps` times, like a scan's."""
    params = [_buffer(b) for b in reads + writes]
    t = Var("t", INDEX_DTYPE)
    call = ProgramCall("body", tuple(Pointer(b, const(0)) for b in params), tuple(writes))
    return Kernel(name, params, For(t, const(steps), call, "serial"))


def test_merge_moves_the_earlier_loop_past_kernels_it_does_not_touch():
    kernels = [_compute("a", ["x"], ["p"]), _loop("l1", ["p"], ["y1"]), _compute("b", ["x"], ["q"]),
               _loop("l2", ["q"], ["y2"]), _compute("c", ["y1", "y2"], ["z"])]
    order, merged = concurrent_control(kernels, threads=2)
    assert [k.name for k in order] == ["a", "b", "l1_l2", "c"]
    assert merged == {"l1_l2": ["l1", "l2"]}
    assert isinstance(order[2].body, Concurrent) and {p.name for p in order[2].params} == {"p", "y1", "q", "y2"}


def test_merge_refuses_dependences_other_lengths_and_one_thread():
    reads_first = [_loop("l1", ["x"], ["y1"]), _loop("l2", ["y1"], ["y2"])]
    past_a_reader = [_loop("l1", ["x"], ["y1"]), _compute("b", ["y1"], ["q"]), _loop("l2", ["q"], ["y2"])]
    overwrites_input = [_loop("l1", ["x"], ["y1"]), _compute("b", [], ["x"]), _loop("l2", ["x"], ["y2"])]
    lengths = [_loop("l1", ["x"], ["y1"], steps=3), _loop("l2", ["x"], ["y2"], steps=4)]
    for kernels in (reads_first, past_a_reader, overwrites_input, lengths):
        assert concurrent_control(kernels, threads=2) == (kernels, {})
    independent = [_loop("l1", ["x"], ["y1"]), _loop("l2", ["x"], ["y2"]), _loop("l3", ["x"], ["y3"])]
    assert concurrent_control(independent, threads=1) == (independent, {})
    order, merged = concurrent_control(independent, threads=2)  # one part per thread
    assert [k.name for k in order] == ["l1_l2", "l3"] and merged == {"l1_l2": ["l1", "l2"]}


# ---- small bodies on one thread -----------------------------------------------------------------
def _body(rows: int, columns: int) -> Program:
    x, y = Buffer("x", "float32", (rows, columns)), Buffer("y", "float32", (rows, columns))
    r, c = Var("r", INDEX_DTYPE), Var("c", INDEX_DTYPE)
    flat = r * const(columns) + c
    nest = For(r, const(rows), For(c, const(columns), Store(y, flat, Load(x, flat)), "vectorized"), "parallel")
    return Program("body", (Kernel("k", (y, x), nest),), inputs=(x,), outputs=(y,))


def test_iterations_count_the_innermost_statements():
    assert iterations(_body(3, 5).kernels[0].body) == 15
    t = Var("t", INDEX_DTYPE)
    assert iterations(Block((For(t, const(4), Block(())), _body(2, 2).kernels[0].body))) == 4 * 0 + 4
    assert iterations(For(t, Var("s_n", INDEX_DTYPE), Block(()))) is None  # a run-time extent


def test_a_small_body_runs_serially_and_a_large_one_keeps_its_threads():
    small = serial_if_small(_body(8, 128))
    assert not any(isinstance(s, For) and s.kind == "parallel" for k in small.kernels for s in iter_stmts(k.body))
    rows = SERIAL_BODY_MAX_WORK // 128 + 1
    large = _body(rows, 128)
    assert serial_if_small(large) is large
