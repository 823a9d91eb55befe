"""The op table is complete, and everything that names an op agrees with it.

Every primitive must carry every fact (a missing one is named with its op), and
the Tensor methods, the `tk.*` functions, the importers' one-to-one tables and
the table in docs/ops.md are checked against the table's rows.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.importers.onnx.registry import CONVERTERS
from tensorkiln.ir.ops import REGISTRY, Attrs, OpKind, TensorType
from tensorkiln.kernels.lower import lowering_of
from tensorkiln.tools.op_table import BEGIN, END, markdown_table

DOCS = Path(__file__).resolve().parents[3] / "docs" / "ops.md"


def missing_facts(op) -> list[str]:
    """The facts `op` lacks, by name."""
    missing = []
    if not op.doc:
        missing.append("doc (notes for docs/ops.md)")
    if lowering_of(op) is None:
        missing.append("a loop-IR lowering (a row's `lower`, or one in kernels/)")
    if op.kind == OpKind.ELEMENTWISE and op.lower is None:
        missing.append("`lower` (an elementwise row builds its own element expression)")
    if op.kind != OpKind.SOURCE and op.gradient is None:
        missing.append("a gradient rule (or gradient=NOT_DIFFERENTIABLE)")
    return missing


def test_every_op_has_every_fact():
    report = {name: missing_facts(op) for name, op in REGISTRY.items()}
    report = {name: facts for name, facts in report.items() if facts}
    assert not report, "ops missing facts:\n" + "\n".join(f"  {n}: {', '.join(f)}" for n, f in report.items())


def test_the_completeness_check_names_a_missing_fact():
    from dataclasses import replace
    bare = replace(REGISTRY["exp"], lower=None, doc="", gradient=None)
    facts = missing_facts(bare)
    assert any("lower" in f for f in facts) and any("doc" in f for f in facts) and any("gradient" in f for f in facts)


def test_docs_table_is_the_generated_one():
    text = DOCS.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, "docs/ops.md lost its generated op table"
    documented = text[text.index(BEGIN):text.index(END) + len(END)]
    assert documented == markdown_table(), "docs/ops.md is stale: paste `tensorkiln ops --markdown` into it"


USER_ROWS = [op for op in REGISTRY.values() if op.method]


@pytest.mark.parametrize("op", USER_ROWS, ids=lambda op: op.name)
def test_the_method_applies_exactly_its_op(op):
    x = tk.tensor(np.array([[0.5, 1.5, 2.0]], np.float32))
    try:
        op.infer([TensorType(x.shape, tk.float32)] * op.arity, Attrs())
    except tk.DTypeError:  # an op of bools
        x = x > 1.0
    graph = tk.jit(lambda t: getattr(t, op.method)(*[t] * (op.arity - 1))).graph(x)
    computing = [n.op for n in graph.nodes if n.kind != OpKind.SOURCE]
    assert computing == [op.name], f"x.{op.method}() traces to {computing}, not [{op.name!r}]"


@pytest.mark.parametrize("op", USER_ROWS, ids=lambda op: op.name)
def test_the_tk_function_is_the_method(op):
    x = tk.tensor(np.array([0.25, 1.0, 3.0], np.float32))
    others = [x] * (op.arity - 1)
    np.testing.assert_array_equal(getattr(tk, op.method)(x, *others).numpy(), getattr(x, op.method)(*others).numpy())


@pytest.mark.parametrize("op", [op for op in REGISTRY.values() if op.onnx], ids=lambda op: op.name)
def test_the_onnx_name_has_a_converter(op):
    assert op.onnx in CONVERTERS, f"{op.name}: ONNX {op.onnx} has no converter"


def test_backend_only_ops_have_no_user_names():
    for op in REGISTRY.values():
        if op.backend_only:
            assert not (op.method or op.onnx or op.aten), op.name


@pytest.mark.parametrize("op", [op for op in REGISTRY.values() if op.aten], ids=lambda op: op.name)
def test_the_aten_name_has_a_lowering(op):
    torch = pytest.importorskip("torch")
    from tensorkiln.importers.torch.lowering import LOWERINGS
    assert getattr(torch.ops.aten, op.aten).default in LOWERINGS, f"{op.name}: aten.{op.aten} has no lowering"
