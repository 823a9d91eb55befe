"""tk.cond, tk.while_loop and tk.scan: eager (plain Python) vs tk.jit (one graph op, compiled to C
if/for/while) vs numpy, over random shapes; gradients; nesting; errors naming both sides."""
import numpy as np
import pytest
import torch

import tensorkiln as tk
from tensorkiln.errors import ShapeError, TraceError, UnsupportedOpError
from tensorkiln.ir.graph import interpret

from helpers import assert_close


def _shapes(rng, count=3):
    """Random shapes with size-1 axes, odd sizes and tails past a vector width."""
    return [tuple(int(rng.choice([1, 3, 5, 17, 19])) for _ in range(int(rng.integers(1, 3)))) for _ in range(count)]


def _compare(fn, *args, rtol=1e-5):
    """eager result == compiled result == the traced graph run by the numpy interpreter."""
    eager = fn(*[tk.tensor(a) for a in args])
    jitted = tk.jit(fn)
    compiled = jitted(*args)
    graph = jitted.graph(*args)
    interpreted = interpret(graph, *args)
    flat_eager = eager if isinstance(eager, (tuple, list)) else [eager]
    flat_compiled = compiled if isinstance(compiled, (tuple, list)) else [compiled]
    for e, c, i in zip(flat_eager, flat_compiled, interpreted):
        assert_close(c, e.numpy(), rtol=rtol, atol=1e-5)
        assert_close(i, e.numpy(), rtol=rtol, atol=1e-5)
    assert report_has_kernel(jitted, args)
    return compiled


def report_has_kernel(jitted, args) -> bool:
    """The control-flow op became one kernel (not unrolled, not a Python loop)."""
    kinds = [k.kind for k in jitted.report(*args).kernels]
    return "control" in kinds


def test_cond_random_shapes_both_branches():
    rng = np.random.default_rng(0)
    for shape, _, _ in [_shapes(rng) for _ in range(3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        w = rng.standard_normal(shape[-1:]).astype(np.float32)

        def f(x, w):
            def then(a, b):
                return {"y": (a * b).exp(), "s": a.sum()}

            def else_(a, b):
                return {"y": a - b, "s": (a * a).max()}
            return tk.cond(x.sum() > 0, then, else_, x, w)

        for sign in (1.0, -1.0):
            out = _compare(lambda a, b: tuple(f(a, b)[k] for k in ("s", "y")), x * sign, w)
            expected = (np.exp(x * sign * w) if (x * sign).sum() > 0 else x * sign - w)
            assert_close(out[1], expected, rtol=1e-5, atol=1e-5)


def test_cond_reads_outer_values_and_weights():
    rng = np.random.default_rng(1)
    weight = tk.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    x = rng.standard_normal((7, 5)).astype(np.float32)

    def f(x, flag):
        h = x * 2.0  # captured by both branches
        return tk.cond(flag, lambda: (h @ weight).relu(), lambda: (h @ weight).sigmoid() + x.sum())

    for flag in (np.array(True), np.array(False)):
        _compare(f, x, flag)


def test_while_loop_trip_count_depends_on_data():
    rng = np.random.default_rng(2)
    for shape in _shapes(rng, 2):
        x = np.abs(rng.standard_normal(shape)).astype(np.float32) + 0.1

        def f(x, limit):
            def cond_fun(state):
                i, v = state
                return v.sum() < limit

            def body_fun(state):
                i, v = state
                return i + 1, v * 1.5 + 0.25
            return tk.while_loop(cond_fun, body_fun, (tk.tensor(0), x))

        for limit in (np.array(1.0, np.float32), np.array(x.sum() * 40, np.float32)):
            steps, value = _compare(f, x, limit)
            v, n = x.copy(), 0
            while v.sum() < limit:
                v, n = v * np.float32(1.5) + np.float32(0.25), n + 1
            assert int(steps) == n
            assert_close(value, v, rtol=1e-5)


def test_scan_random_shapes_reverse_and_pytrees():
    rng = np.random.default_rng(3)
    for length in (1, 7):
        for shape in _shapes(rng, 2):
            xs = rng.standard_normal((length,) + shape).astype(np.float32)
            h0 = rng.standard_normal(shape).astype(np.float32)
            for reverse in (False, True):
                def f(h0, xs, reverse=reverse):
                    def step(carry, x):
                        h, count = carry
                        h = (h * 0.5 + x["a"]).tanh()
                        return (h, count + 1), {"h": h, "sq": x["a"] * x["a"]}
                    (h, n), ys = tk.scan(step, (h0, tk.tensor(np.int32(0))), {"a": xs}, reverse=reverse)
                    return h, n, ys["h"], ys["sq"]

                h, n, hs, sq = _compare(f, h0, xs)
                expected, hh = np.zeros_like(xs), h0
                for t in (range(length - 1, -1, -1) if reverse else range(length)):
                    hh = np.tanh(hh * np.float32(0.5) + xs[t])
                    expected[t] = hh
                assert_close(hs, expected, rtol=1e-5, atol=1e-6)
                assert_close(h, hh, rtol=1e-5, atol=1e-6)
                assert int(n) == length


def test_scan_without_xs_uses_length():
    def f(x):
        return tk.scan(lambda c, _: (c * 2.0, c.sum()), x, None, length=5)

    carry, ys = _compare(f, np.ones(3, np.float32))
    assert_close(ys, np.array([3, 6, 12, 24, 48], np.float32))


def test_scan_inside_cond():
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((6, 4)).astype(np.float32)

    def f(xs, flag):
        def cumulative(xs):
            return tk.scan(lambda c, x: (c + x, c + x), tk.zeros(4), xs)[1]
        return tk.cond(flag, cumulative, lambda xs: xs * 2.0, xs)

    assert_close(_compare(f, xs, np.array(True)), np.cumsum(xs, axis=0), rtol=1e-5, atol=1e-6)
    _compare(f, xs, np.array(False))


def test_mismatched_branches_name_both():
    def f(x):
        return tk.cond(x.sum() > 0, lambda a: a, lambda a: a.sum(), x)
    with pytest.raises(ShapeError, match=r"true_fn's result.*f32\[3\].*false_fn's result.*f32\[\]"):
        tk.jit(f)(np.ones(3, np.float32))

    def g(x):
        return tk.scan(lambda c, x: (c.sum(), x), x, x)
    with pytest.raises(ShapeError, match=r"f's carry.*init"):
        tk.jit(g)(np.ones((2, 2), np.float32))
    with pytest.raises(ShapeError, match=r"f's carry.*init"):
        g(tk.ones((2, 2)))


def test_cond_gradient_matches_torch():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 5)).astype(np.float32)

    def f(x):
        return tk.cond(x.sum() > 0, lambda a: (a * a).sin().sum(), lambda a: a.exp().sum(), x)

    def f_torch(x):
        return (x * x).sin().sum() if x.sum() > 0 else x.exp().sum()

    for sign in (1.0, -1.0):
        grad = tk.grad(f)(tk.tensor(x * sign))
        expected = torch.func.grad(f_torch)(torch.tensor(x * sign))
        assert_close(grad, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_scan_gradient_matches_torch():
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((5, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32) * 0.5

    def f(w, xs):
        return tk.scan(lambda h, x: ((h @ w + x).tanh(),) * 2, tk.zeros(4), xs)[1].sum()

    def f_torch(w, xs):
        h, total = torch.zeros(4), 0
        for x in xs:
            h = torch.tanh(h @ w + x)
            total = total + h.sum()
        return total

    grad = tk.grad(f)(tk.tensor(w), tk.tensor(xs))
    expected = torch.func.grad(f_torch)(torch.tensor(w), torch.tensor(xs))
    assert_close(grad, expected.numpy(), rtol=1e-4, atol=1e-5)


def test_while_loop_is_forward_only():
    x = tk.tensor(np.ones(3, np.float32), requires_grad=True)
    with pytest.raises(UnsupportedOpError, match="forward-only"):
        tk.while_loop(lambda v: v.sum() < 10, lambda v: v * 2.0, x)
    with pytest.raises(UnsupportedOpError, match="forward-only"):
        tk.grad(lambda v: tk.while_loop(lambda v: v.sum() < 10, lambda v: v * 2.0, v).sum())(x)


def test_traced_tensor_of_another_function_is_refused():
    leaked = []
    tk.jit(lambda x: leaked.append(x) or x)(np.ones(2, np.float32))
    with pytest.raises(TraceError):
        tk.cond(tk.tensor(True), lambda a: a, lambda a: a, leaked[0])


def _torch_rnn_sum(w, xs, h0, reverse=False):
    h, total = h0, 0
    for x in (reversed(xs) if reverse else xs):
        h = torch.tanh(h @ w + x)
        total = total + h.sum()
    return total + (h * h).sum()


def test_traced_scan_gradient_is_a_reverse_scan(reverse=True):
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((6, 5)).astype(np.float32)
    w = (rng.standard_normal((5, 5)) * 0.5).astype(np.float32)
    h0 = rng.standard_normal(5).astype(np.float32)

    def f(w, xs, h0):
        c, ys = tk.scan(lambda h, x: ((h @ w + x).tanh(),) * 2, h0, xs, reverse=reverse)
        return ys.sum() + (c * c).sum()

    step = tk.jit(tk.grad(f, argnums=(0, 1, 2)))
    grads = step(w, xs, h0)
    expected = torch.func.grad(lambda *a: _torch_rnn_sum(*a, reverse=reverse), argnums=(0, 1, 2))(
        torch.tensor(w), torch.tensor(xs), torch.tensor(h0))
    for g, e in zip(grads, expected):
        assert_close(g, e.numpy(), rtol=1e-4, atol=1e-5)
    # the forward scan, and one reverse scan per differentiated result (the final carry and the ys)
    assert [n.op for n in step.graph(w, xs, h0).nodes].count("scan") == 3


def test_traced_gradient_reaches_captured_parameters_through_nested_control_flow():
    rng = np.random.default_rng(8)
    xs = rng.standard_normal((4, 3)).astype(np.float32)
    w = tk.tensor((rng.standard_normal((3, 3)) * 0.5).astype(np.float32), requires_grad=True)

    def loss(xs, flag):
        def run(xs):
            return tk.scan(lambda h, x: ((h @ w + x).tanh(),) * 2, tk.zeros(3), xs)[1].sum()
        return tk.cond(flag, run, lambda xs: (xs.sum(0) @ w).sum(), xs)

    for flag in (True, False):
        w.grad = None
        tk.jit(lambda xs, flag: loss(xs, flag).backward())(xs, np.array(flag))
        compiled = w.grad.numpy().copy()
        w.grad = None
        loss(tk.tensor(xs), tk.tensor(flag)).backward()  # eager: plain Python
        assert_close(compiled, w.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_traced_cond_gradient_is_a_cond():
    rng = np.random.default_rng(9)
    x, y = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)

    def f(x, y):
        return tk.cond(x.sum() > 0, lambda a: (a * a * y).sin().sum(), lambda a: (a.exp() * y).sum(), x)

    def f_torch(x, y):
        return (x * x * y).sin().sum() if x.sum() > 0 else (x.exp() * y).sum()

    step = tk.jit(tk.grad(f, argnums=(0, 1)))
    for sign in (1.0, -1.0):
        expected = torch.func.grad(f_torch, argnums=(0, 1))(torch.tensor(x * sign), torch.tensor(y))
        for g, e in zip(step(x * sign, y), expected):
            assert_close(g, e.numpy(), rtol=1e-4, atol=1e-5)
