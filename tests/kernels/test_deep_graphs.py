"""Deep graphs: a 10,000-op chain traces, compiles, runs and differentiates without RecursionError.

Every walk over graph nodes is iterative, and the fusion policy stores a value
where the chain of ops one kernel inlines would pass MAX_INLINE_DEPTH
(kernels/grouping.py), so the loop-IR expressions stay shallow. The bound
must not change the grouping of ordinary models.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import models
from tensorkiln.ir.graph import interpret
from tensorkiln.kernels import grouping
from tensorkiln.tools import demo_models

DEPTH = 10_000
X = np.linspace(-1.5, 1.5, 32, dtype=np.float32).reshape(4, 8)


def sin_chain(x):
    for _ in range(DEPTH):
        x = x.sin()
    return x


def kernel_depth(group: grouping.KernelGroup) -> int:
    """The longest chain of ops the kernel computes (its stored inputs count 0)."""
    inside, depth = {n.id for n in group.nodes}, {}
    for n in group.nodes:
        depth[n.id] = 1 + max((depth[i.id] for i in n.inputs if i.id in inside and i.id in depth), default=0)
    return depth[group.root.id]


@pytest.fixture(autouse=True)
def default_recursion_limit():
    """None of this may need a larger recursion limit."""
    assert sys.getrecursionlimit() <= 1000
    yield
    assert sys.getrecursionlimit() <= 1000


def test_deep_chain_compiles_to_c_and_matches_the_interpreter_and_eager():
    f = tk.jit(sin_chain)
    got = f(X).numpy()
    report = f.report(X)
    assert report.backend == "c" and report.fallback_reason is None
    assert len(report.kernels) == -(-DEPTH // (grouping.MAX_INLINE_DEPTH + 1))
    graph = f._lookup((X,), {})[0].graph
    assert len(graph.nodes) > DEPTH and str(graph).count("sin(") == DEPTH
    np.testing.assert_allclose(got, interpret(graph, X)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, sin_chain(tk.tensor(X)).numpy(), rtol=1e-5, atol=1e-6)


def test_deep_chain_kernels_inline_a_bounded_chain():
    graph = tk.jit(lambda x: sin_chain(x * 2.0 + 1.0), backend="interpreter")._lookup((X,), {})[0].graph
    groups = grouping.partition(graph)
    assert max(kernel_depth(g) for g in groups) == grouping.MAX_INLINE_DEPTH + 1


def kernel_size(group: grouping.KernelGroup) -> int:
    """Ops in the kernel's expression: each inlined input counted once per read."""
    inside, size = {n.id for n in group.nodes}, {}
    for n in group.nodes:
        size[n.id] = 1 + sum(size[i.id] for i in n.inputs if i.id in inside and i.id in size)
    return size[group.root.id]


def polynomial_chain(x):
    for _ in range(40):  # each step reads x three times: 3^40 ops if everything were inlined
        x = x * x * 0.5 + x * 0.25
    return x


def concat_chain(x):
    for _ in range(40):  # each concat reads x twice
        x = tk.cat([x, x * 0.5], 1)[:, 2:10]
    return x


@pytest.mark.parametrize("chain", [polynomial_chain, concat_chain])
def test_values_read_twice_per_step_keep_expressions_bounded(chain):
    """An inlined value read twice is copied into its reader: stored before the expression passes
    MAX_INLINE_SIZE, so 40 doubling steps compile in seconds and match the interpreter."""
    f = tk.jit(chain)
    got = f(X).numpy()
    assert f.report(X).backend == "c"
    graph = f._lookup((X,), {})[0].graph
    np.testing.assert_allclose(got, interpret(graph, X)[0], rtol=1e-5, atol=1e-6)
    sizes = [kernel_size(g) for g in grouping.partition(graph)]
    assert max(sizes) <= 4 * grouping.MAX_INLINE_SIZE and len(sizes) > 2


def test_backward_through_a_deep_chain():
    def chain(x):
        for k in range(DEPTH):  # 15,000 ops
            x = x * 0.999 + 0.001 if k % 2 else x.sin()
        return x
    x = tk.tensor(X, requires_grad=True)
    loss = chain(x).sum()
    loss.backward()
    eps = 1e-3
    numeric = (chain(tk.tensor(X.astype(np.float64) + eps)).numpy() -
               chain(tk.tensor(X.astype(np.float64) - eps)).numpy()) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-3, atol=1e-6)


def test_compiled_backward_through_a_long_chain():
    """The backward graph shares every forward value with two kernels: fusion stores them in a
    few rounds (not one per value), and the compiled gradient matches the interpreter's."""
    def chain(x):
        for k in range(300):
            x = x * 0.999 + 0.001 if k % 2 else x.sin()
        return x
    grad = tk.jit(tk.grad(lambda x: chain(x).sum()))
    got = grad(X).numpy()
    assert grad.report(X).backend == "c"
    graph = grad._lookup((X,), {})[0].graph
    np.testing.assert_allclose(got, interpret(graph, X)[0], rtol=1e-5, atol=1e-6)


def test_a_long_chain_between_the_scores_and_the_softmax_leaves_attention_unfused():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 16, 8)).astype(np.float32) for _ in range(3))

    def attention(q, k, v):
        s = q @ k.transpose(-1, -2)
        for _ in range(2000):  # fused attention would inline all of them into one expression
            s = s.sin() * 1.5
        return s.softmax(-1) @ v
    got = tk.jit(attention)(q, k, v).numpy()
    want = tk.jit(attention, backend="interpreter")(q, k, v).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


TINY_BERT = models.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=32)
TINY_GPT2 = models.GPT2Config(vocab_size=50, n_positions=32, n_embd=32, n_layer=2, n_head=4)
RNG = np.random.default_rng(0)
ZOO = {
    "resnet18": (lambda: models.ResNet18(num_classes=10),
                 lambda: RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)),
    "mobilenetv2": (lambda: models.MobileNetV2(num_classes=10),
                    lambda: RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)),
    "bert": (lambda: models.BertModel(TINY_BERT), lambda: RNG.integers(0, 100, (2, 8))),
    "gpt2": (lambda: models.GPT2LMHeadModel(TINY_GPT2), lambda: RNG.integers(0, 50, (2, 8))),
}


def _zoo_graph(name):
    tk.manual_seed(0)
    build, make_input = ZOO[name]
    model = build()
    model.eval()
    with tk.no_grad():
        return tk.jit(model, backend="interpreter")._lookup((make_input(),), {})[0].compiled.graph


def _demo_graph(name):
    model = next(m for m in demo_models.all_models() if m.name == name)
    with tk.no_grad():
        args = tuple(t.numpy() for t in model.inputs)
        return tk.jit(model.forward, backend="interpreter")._lookup(args, {})[0].compiled.graph


@pytest.mark.parametrize("source, name", [("zoo", n) for n in ZOO] +
                         [("demo", m.name) for m in demo_models.all_models()])
def test_the_bound_leaves_model_groupings_unchanged(source, name, monkeypatch):
    """ResNet, MobileNet, BERT, GPT-2 and the demo models group exactly as without a bound."""
    graph = _zoo_graph(name) if source == "zoo" else _demo_graph(name)

    def summary():
        return [(g.root.id, g.kind, [n.id for n in g.nodes]) for g in grouping.partition(graph)]
    bounded = summary()
    monkeypatch.setattr(grouping, "MAX_INLINE_DEPTH", 10 ** 9)
    monkeypatch.setattr(grouping, "MAX_INLINE_SIZE", 10 ** 9)
    assert summary() == bounded
