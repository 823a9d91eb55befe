"""Each pass on hand-built graphs (what it must change, what it must leave alone) and on random graphs."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings

import tensorkiln as tk
from tensorkiln.tools.demo_models import all_models
from tensorkiln.ir.graph import Graph, interpret, verify
from tensorkiln.passes import optimize, pipeline
from tensorkiln.passes.constant_fold import fold_constants
from tensorkiln.passes.cse import eliminate_common_subexpressions
from tensorkiln.passes.dce import eliminate_dead_code

from strategies import random_programs


def _ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes if n.op not in ("input", "constant")]


def test_cse_merges_identical_subexpressions_only():
    graph = tk.jit(lambda x, y: (x.exp() + y) * (x.exp() + y) + x.exp() * 2 + (y.exp() + x)).graph(
        np.ones(3, np.float32), np.ones(3, np.float32))
    merged, fired = eliminate_common_subexpressions(graph)
    verify(merged)
    assert _ops(merged).count("exp") == 2  # exp(x) once, exp(y) kept
    assert fired["exp"] == 2 and fired["add"] == 1
    x, y = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    np.testing.assert_array_equal(interpret(graph, x, y)[0], interpret(merged, x, y)[0])


def test_cse_merges_equal_constants():
    a = tk.tensor([1.0, 2.0, 3.0])
    b = tk.tensor([1.0, 2.0, 3.0])
    graph = tk.jit(lambda x: x * a + x * b).graph(np.ones(3, np.float32))
    merged, _ = eliminate_common_subexpressions(graph)
    assert _ops(merged) == ["mul", "add"]


def test_constant_folding_folds_and_does_not_materialize_broadcasts():
    from tensorkiln.ir.graph import constant_node, input_node, make_node
    from tensorkiln.ir.ops import TensorType
    c = constant_node(np.arange(6, dtype=np.float32).reshape(2, 3), tk.float32)
    s = constant_node(np.array(2.0, np.float32), tk.float32)
    x = input_node("x", 0, TensorType((4, 3), tk.float32))
    t = make_node("permute", [c], {"perm": (1, 0)})
    e = make_node("exp", [t])
    big = make_node("expand", [s], {"shape": (1000, 1000)})
    out = make_node("add", [make_node("matmul", [x, e]), make_node("reduce_sum", [big], {"axes": (0, 1), "keepdims": False})])
    g = Graph([x], [out, big])
    folded, fired = fold_constants(g)
    assert fired["permute"] == 1 and fired["exp"] == 1 and fired["reduce_sum"] == 0
    assert "expand" in _ops(folded)  # the 1000x1000 broadcast stays lazy
    arr = np.ones((4, 3), np.float32)
    for a, b in zip(interpret(g, arr), interpret(folded, arr)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_dce_reports_removed_nodes():
    from tensorkiln.ir.graph import input_node, make_node
    from tensorkiln.ir.ops import TensorType
    x = input_node("x", 0, TensorType((3,), tk.float32))
    used = make_node("exp", [x])
    g = Graph([x], [used])
    g.nodes.append(make_node("sin", [x]))  # a dead node left behind by some rewrite
    cleaned, fired = eliminate_dead_code(g)
    assert fired["sin"] == 1 and _ops(cleaned) == ["exp"]


def test_pipelines_per_level():
    assert pipeline(0) == []
    assert [name for name, _ in pipeline(1)] == ["constant_fold", "cse", "dce"]
    assert "simplify" in [name for name, _ in pipeline(2)]
    with pytest.raises(ValueError, match="opt_level"):
        tk.CompileOptions(opt_level=4)  # checked once, where the options are made


def test_dump_ir_writes_one_file_per_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_DUMP_IR", str(tmp_path))
    f = tk.jit(lambda x: x * 1.0 + 0.0)
    f(np.ones(3, np.float32))
    names = sorted(os.listdir(tmp_path))
    assert names[0].endswith("00.traced.txt") and any("simplify" in n for n in names)
    report = f.report(np.ones(3, np.float32))
    assert [p.name for p in report.passes] == [name for name, _ in pipeline(2)]
    simplify = next(p for p in report.passes if p.name == "simplify")
    assert simplify.nodes_before > simplify.nodes_after and simplify.fired
    assert "after simplify" in f.explain(np.ones(3, np.float32))


@settings(max_examples=25, deadline=None)
@given(program=random_programs())
def test_optimized_random_graphs_match_the_reference(program):
    graph = tk.jit(program).graph(*program.tensors())
    arrays = [t._value for t in program.tensors()]
    expected = interpret(graph, *arrays)
    for level in (1, 2, 3):
        optimized, _ = optimize(graph, level, fast_math=False)
        verify(optimized)
        for got, want in zip(interpret(optimized, *arrays), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model", all_models(), ids=lambda m: m.name)
def test_opt_levels_0_and_3_compute_the_same_on_demo_models(model):
    results = [tk.jit(model.forward, opt_level=level)(*model.inputs).numpy() for level in (0, 3)]
    np.testing.assert_allclose(results[0], results[1], rtol=1e-4, atol=1e-5)
