"""tk.jit (tensorkiln/frontend/jit.py, trace.py): tracing per signature, the cache key, argument and result
structures, captured tensors as constants, and inlining of nested jit functions."""
from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.ir.graph import verify

from helpers import FRONT_END, JIT_BACKEND, assert_close, assert_same_structure

pytestmark = FRONT_END
# With the reference interpreter and opt_level=0 (the graph as traced) jit results equal eager exactly.
EXACT = JIT_BACKEND != "c"


class Counting:
    """A function that counts how often Python runs it (= how often tk.jit traces it)."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0
        self.__name__ = getattr(fn, "__name__", "counting")
        self.__wrapped__ = fn  # inspect.signature sees the wrapped function's parameters

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def _ops(graph):
    return [n.op for n in graph.nodes]


# ---- the per-signature cache -----------------------------------------------------------------------

def test_traced_once_per_signature():
    body = Counting(lambda x, y: (x * y).relu() + 1)
    f = tk.jit(body)
    x, y = tk.ones(2, 3), tk.ones(3)
    for _ in range(3):
        out = f(x, y)
    assert body.calls == 1 and f.cache_size() == 1
    assert out.tolist() == [[2.0] * 3] * 2
    f(tk.zeros(2, 3), tk.full((3,), 5.0))  # new values, same signature: no retrace
    assert body.calls == 1
    f(x.numpy(), y.numpy())  # numpy arrays of the same shapes and dtypes: same signature
    assert body.calls == 1


def test_retraced_on_new_shapes_and_dtypes():
    body = Counting(lambda x: x.sum(0))
    f = tk.jit(body)
    f(tk.ones(2, 3))
    f(tk.ones(4, 3))
    f(tk.ones(2, 3, dtype=tk.float64))
    f(tk.ones(2, 3, dtype=tk.int32))
    f(tk.ones(2, 3))  # seen before
    assert body.calls == 4 and f.cache_size() == 4
    assert f(tk.ones(4, 3, dtype=tk.int32)).dtype is tk.int64
    assert f.cache_size() == 5


def test_static_python_arguments_are_part_of_the_key():
    body = Counting(lambda x, dim, keep=False, scale=1.0: x.sum(dim, keepdim=keep) * scale)
    f = tk.jit(body)
    x = tk.tensor(np.arange(6.0).reshape(2, 3))
    assert f(x, 0).tolist() == [3.0, 5.0, 7.0]
    assert f(x, 1).tolist() == [3.0, 12.0]
    assert f(x, 1, keep=True).shape == (2, 1)
    assert f(x, 1, scale=2.0).tolist() == [6.0, 24.0]
    assert f(x, 1, scale=2).tolist() == [6.0, 24.0]  # int 2 and float 2.0 are different keys
    assert body.calls == 5
    f(x, 0)
    assert body.calls == 5
    f(x, dim=0)  # the same value passed by keyword is another argument structure: traced again
    assert body.calls == 6
    graph = f.graph(x, 1, scale=3.0)
    assert [n for n in graph.inputs] and len(graph.inputs) == 1  # static args are not graph inputs


def test_keyword_argument_order_does_not_swap_inputs():
    f = tk.jit(lambda a, b: a - b)
    five, one = tk.tensor([5.0]), tk.tensor([1.0])
    assert f(a=five, b=one).tolist() == [4.0]
    assert f(b=one, a=five).tolist() == [4.0]
    g = tk.jit(lambda d: d["a"] - d["b"])
    assert g({"a": five, "b": one}).tolist() == [4.0]
    assert g({"b": one, "a": five}).tolist() == [4.0]


def test_unhashable_static_arguments_and_none():
    f = tk.jit(lambda x, dims, opt=None: x.permute(dims) if opt is None else x)
    x = tk.ones(2, 3, 4)
    assert f(x, [2, 0, 1]).shape == (4, 2, 3)
    assert f(x, [1, 0, 2]).shape == (3, 2, 4)
    assert f(x, (2, 0, 1)).shape == (4, 2, 3)
    assert f.cache_size() == 3
    assert f(x, [2, 0, 1], opt="x").shape == (2, 3, 4)


def test_jit_decorator_forms():
    @tk.jit
    def a(x):
        return x + 1

    @tk.jit(opt_level=0)
    def b(x):
        return x + 2

    assert a(tk.zeros(1)).tolist() == [1.0] and b(tk.zeros(1)).tolist() == [2.0]
    assert a.__name__ == "a" and b.options.opt_level == 0 and a.fn.__name__ == "a"


# ---- argument and result structures --------------------------------------------------------------

Pair = namedtuple("Pair", ["first", "second"])


def test_nested_outputs():
    @tk.jit(opt_level=0)  # as traced, no graph rewrites: results equal eager exactly
    def f(x):
        return {"sum": x.sum(), "parts": (x * 2, [x - 1, x.max(0)]), "n": 3, "none": None}

    x = tk.tensor([[1.0, 5.0], [3.0, 2.0]])
    out = f(x)
    assert set(out) == {"sum", "parts", "n", "none"}
    assert out["n"] == 3 and out["none"] is None
    assert isinstance(out["parts"], tuple) and isinstance(out["parts"][1], list)
    values, indices = out["parts"][1][1]
    assert type(out["parts"][1][1]).__name__ == "MinMax"  # namedtuples keep their type
    assert values.tolist() == [3.0, 5.0] and indices.tolist() == [1, 0]
    assert_same_structure(f.fn(x), out, exact=EXACT)


def test_nested_inputs_namedtuples_and_kwargs():
    body = Counting(lambda xs, pair, *, scale, extra=None: (xs[0] + xs[1]) * pair.first - pair.second * scale
                    + (extra["b"] if extra else 0))
    f = tk.jit(body)
    xs = [tk.ones(2), tk.full((2,), 2.0)]
    pair = Pair(tk.full((2,), 3.0), tk.ones(2))
    assert f(xs, pair, scale=2.0).tolist() == [7.0, 7.0]
    assert f(xs, pair, scale=2.0, extra={"b": tk.ones(2)}).tolist() == [8.0, 8.0]
    graph = f.graph(xs, pair, scale=2.0, extra={"b": tk.ones(2)})
    assert [n.attrs["name"] for n in graph.inputs] == ["xs_0", "xs_1", "pair_0", "pair_1", "extra_b"]
    assert body.calls == 2


def test_outputs_that_are_inputs_or_constants():
    captured = tk.tensor([1.0, 2.0])

    @tk.jit
    def f(x, unused):
        return x, captured, x.shape

    x = tk.tensor([5.0, 6.0])
    a, b, shape = f(x, tk.zeros(3))
    assert a.tolist() == [5.0, 6.0] and b.tolist() == [1.0, 2.0] and shape == (2,)
    graph = f.graph(x, tk.zeros(3))
    assert [n.op for n in graph.outputs] == ["input", "constant"]
    assert len(graph.inputs) == 2  # an unused parameter is still a parameter
    verify(graph)


def test_numpy_inputs_and_non_contiguous_arrays(rng):
    f = tk.jit(lambda a, b: a @ b + 1)
    a = rng.normal(size=(4, 3))
    b = np.asfortranarray(rng.normal(size=(3, 5)))[:, ::2]
    out = f(a.T.copy().T, b)
    assert out.dtype is tk.float64
    assert_close(out, a @ b + 1, tk.float64)


# ---- captured tensors and constants --------------------------------------------------------------

def test_captured_eager_tensors_become_constants():
    w = tk.tensor(np.arange(6.0, dtype=np.float32).reshape(3, 2))
    b = tk.tensor([1.0, -1.0])

    @tk.jit
    def f(x):
        return x @ w + b + w.sum()  # w used twice: one constant

    x = tk.ones(4, 3)
    assert_close(f(x), np.ones((4, 3)) @ np.arange(6.0).reshape(3, 2) + [1.0, -1.0] + 15.0, tk.float32)
    graph = f.graph(x)
    constants = [n for n in graph.nodes if n.op == "constant"]
    arrays = [n.attrs["value"].array for n in constants]
    assert sum(a.shape == (3, 2) for a in arrays) == 1
    assert any(a.shape == (2,) for a in arrays)
    # w.sum() has no traced input: computed once at trace time and folded into the graph
    assert "reduce_sum" not in _ops(graph)
    assert len(graph.inputs) == 1


def test_constants_are_baked_in_at_trace_time():
    state = {"w": tk.tensor([1.0])}

    @tk.jit
    def f(x):
        return x * state["w"]

    assert f(tk.tensor([2.0])).tolist() == [2.0]
    state["w"] = tk.tensor([10.0])  # a new tensor object: the cached trace keeps the old constant
    assert f(tk.tensor([2.0])).tolist() == [2.0]
    assert f(tk.tensor([2.0, 3.0])).tolist() == [20.0, 30.0]  # a new signature traces again


def test_python_scalars_become_weak_constants():
    graph = tk.jit(lambda x: x * 0.5 + 3).graph(tk.ones(2, dtype=tk.float16))
    constants = [n for n in graph.nodes if n.op == "constant"]
    assert {n.dtype for n in constants} == {tk.float16} and all(n.shape == () for n in constants)
    assert "cast" not in _ops(graph)


def test_promotions_are_explicit_casts():
    graph = tk.jit(lambda a, b: a + b).graph(tk.ones(2, dtype=tk.int8), tk.ones(2, dtype=tk.float16))
    casts = [n for n in graph.nodes if n.op == "cast"]
    assert len(casts) == 1 and casts[0].attrs["dtype"] is tk.float16 and casts[0].inputs[0].dtype is tk.int8


# ---- nesting ------------------------------------------------------------------------------------------

def test_calling_a_jit_function_inside_another_inlines_it():
    inner_body = Counting(lambda x: F.gelu(x) * 2)
    inner = tk.jit(inner_body)

    @tk.jit(opt_level=0)
    def outer(x):
        return inner(x) + inner(x * 3)

    x = tk.tensor([[0.5, -1.0, 2.0]])
    out = outer(x)
    expected = inner_body.fn(x) + inner_body.fn(x * 3)
    assert_same_structure(expected, out, exact=EXACT)
    graph = outer.graph(x)
    assert inner.cache_size() == 0  # never traced on its own
    assert len(graph.inputs) == 1 and _ops(graph).count("erf") == 2  # both calls inlined
    assert inner_body.calls == 2  # twice while tracing outer, and never again
    assert inner(x).shape == (1, 3) and inner.cache_size() == 1  # still usable on its own


def test_jit_of_a_function_returning_the_same_tensor_twice():
    f = tk.jit(lambda x: (x.exp(), x.exp()))
    a, b = f(tk.ones(2))
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_traced_tensor_passed_to_another_trace_is_rejected():
    leaked = []
    g = tk.jit(lambda y: y + 1)

    @tk.jit
    def f(x):
        leaked.append(x)
        return x

    f(tk.ones(2))
    with pytest.raises(TypeError, match="traced tensor from another trace"):
        g(leaked[0])


def test_graph_explain_and_report():
    f = tk.jit(lambda x: x.softmax(-1))
    x = tk.ones(2, 3)
    graph = f.graph(x)
    assert graph.name == "<lambda>" and len(graph.outputs) == 1
    text = f.explain(x)
    assert text.startswith("== traced graph (") and str(graph) in text
    assert f.cache_size() == 1
    if JIT_BACKEND != "c":
        assert "reference interpreter" in text
        assert f.report(x).backend == "interpreter"


def test_eager_and_jit_agree_on_a_small_model(rng):
    w1 = tk.tensor(rng.normal(size=(8, 6)).astype(np.float32))
    w2 = tk.tensor(rng.normal(size=(3, 8)).astype(np.float32))

    def model(x, labels):
        h = F.layer_norm(F.gelu(F.linear(x, w1)), (8,))
        logits = F.linear(h, w2)
        return F.cross_entropy(logits, labels), logits.argmax(-1)

    x = tk.tensor(rng.normal(size=(5, 6)).astype(np.float32))
    labels = tk.tensor(rng.integers(0, 3, 5))
    eager = model(x, labels)
    assert_same_structure(eager, tk.jit(model, opt_level=0)(x, labels), exact=EXACT)
    for level in (1, 2, 3):  # graph rewrites may round differently: compare at the tolerance
        assert_same_structure(eager, tk.jit(model, opt_level=level)(x, labels), exact=False)

