"""Every rewrite rule is checked by a machine: applied alone to its example, both sides must agree."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.ir.graph import interpret, verify
from tensorkiln.passes.rules import RULES, Rule, simplify_graph

RULES_WITH_EXAMPLES = [r for r in RULES if r.example is not None]


def _trace(fn, shapes, dtype, rng):
    arrays = [rng.uniform(0.5, 2.0, size=s).astype(dtype) * rng.choice([-1, 1], size=s) for s in shapes]
    graph = tk.jit(fn).graph(*arrays)
    return graph, arrays


@pytest.mark.parametrize("rule", RULES_WITH_EXAMPLES, ids=lambda r: r.name)
def test_rule_is_an_identity_on_its_example(rule: Rule):
    rng = np.random.default_rng(zlib.crc32(rule.name.encode()))
    graph, arrays = _trace(rule.example, rule.example_shapes, rule.example_dtype, rng)
    rewritten, fired = simplify_graph(graph, rules=[rule], fast_math=True, fold_weights=True)
    assert fired[rule.name] >= 1, f"{rule.name!r} did not fire on its example"
    verify(rewritten)
    for _ in range(3):  # several random inputs per rule
        inputs = [rng.uniform(0.5, 2.0, size=a.shape).astype(a.dtype) * rng.choice([-1, 1], size=a.shape)
                  for a in arrays]
        before = interpret(graph, *inputs)
        after = interpret(rewritten, *inputs)
        for b, a in zip(before, after):
            assert a.shape == b.shape and a.dtype == b.dtype
            if rule.kind == "exact":  # identical up to the rounding of the operations it removes
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)
            else:
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_every_rule_has_an_example_or_a_dedicated_test():
    dedicated = {"conv2d(x, W) * s -> conv2d(x, W*s)", "matmul(x, W) * s -> matmul(x, W*s)"}
    missing = [r.name for r in RULES if r.example is None and r.name not in dedicated]
    assert not missing


def test_batch_norm_folds_into_conv_and_linear():
    rng = np.random.default_rng(0)
    w = tk.tensor(rng.standard_normal((4, 3, 3, 3)), dtype="float32")
    stats = [tk.tensor(rng.uniform(0.5, 1.5, 4), dtype="float32") for _ in range(4)]
    lw = tk.tensor(rng.standard_normal((5, 8)), dtype="float32")
    scale = tk.tensor(rng.uniform(0.5, 1.5, 5), dtype="float32")

    def fn(x, v):
        y = F.batch_norm(F.conv2d(x, w, padding=1), stats[0], stats[1], stats[2], stats[3])
        return y, F.linear(v, lw) * scale + 1.0

    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    v = rng.standard_normal((3, 8)).astype(np.float32)
    graph = tk.jit(fn).graph(x, v)
    rewritten, fired = simplify_graph(graph)
    assert fired["conv2d(x, W) * s -> conv2d(x, W*s)"] >= 1
    assert fired["matmul(x, W) * s -> matmul(x, W*s)"] == 1
    ops = [n.op for n in rewritten.nodes if n.op not in ("input", "constant")]
    assert sorted(ops) == ["add", "add", "conv2d", "matmul"]
    for a, b in zip(interpret(graph, x, v), interpret(rewritten, x, v)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_fast_math_rules_need_the_flag_for_floats_but_not_for_integers():
    f = lambda x: x - x  # noqa: E731
    float_graph = tk.jit(f).graph(np.ones(3, np.float32))
    _, fired = simplify_graph(float_graph)
    assert not fired
    _, fired = simplify_graph(float_graph, fast_math=True)
    assert fired["x - x -> 0"] == 1
    int_graph = tk.jit(f).graph(np.ones(3, np.int32))
    _, fired = simplify_graph(int_graph)
    assert fired["x - x -> 0"] == 1


def test_rules_leave_other_graphs_alone():
    # exp(log(x)) with x of unknown sign must stay; x / 3 stays without fast math.
    graph = tk.jit(lambda x: (x.log().exp(), x / 3.0, x ** 3)).graph(np.ones(4, np.float32))
    rewritten, fired = simplify_graph(graph)
    assert not fired
    assert [n.op for n in rewritten.nodes] == [n.op for n in graph.nodes]
