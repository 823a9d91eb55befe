"""The ONNX backend conformance cases (node, pytorch-converted, pytorch-operator) through tk.onnx.

Every case runs with backend="interpreter" (trace, graph passes, reference
interpreter); a deterministic share (the first and every 10th case of each
operator, see `compiled_share`) is also compiled to C, and with
TK_CONFORMANCE=all (`make conformance`) every supported case is. A case passes when
every output matches onnx's expected output at the case's tolerance (onnx's
runner: rtol=1e-3, atol=1e-7 unless the case says otherwise). A case whose
model uses an unsupported operator or element type is skipped as
"unsupported: ..."; a case in onnx_conformance_skips.SKIPS is skipped as
"known: ..."; every other case must pass. conftest.py prints the counts.
"""
from __future__ import annotations

import os
import warnings

import pytest

onnx = pytest.importorskip("onnx")

from onnx_cases import all_cases, run_case  # noqa: E402
from onnx_conformance_skips import SKIPS  # noqa: E402

CASES = all_cases()
EVERY_CASE = os.environ.get("TK_CONFORMANCE", "") == "all"  # every supported case through C, not a share
COMPILED_EVERY = 1 if EVERY_CASE else 10
COMPILED_CAP = None if EVERY_CASE else 150


def _group(case) -> str:
    """The operator a case tests: its node's op type for one-node models, else one shared group."""
    model = onnx.load(case.path + "/model.onnx", load_external_data=False)
    nodes = model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else "multi-node"


def compiled_share(cases) -> list:
    """The first and every COMPILED_EVERY-th supported case of each operator group, at most COMPILED_CAP."""
    import tensorkiln as tk
    groups: dict[str, list] = {}
    for case in cases:
        if case.id in SKIPS:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tk.onnx.load(case.path + "/model.onnx", backend="interpreter")
        except tk.TensorKilnError:
            continue
        groups.setdefault(_group(case), []).append(case)
    chosen = [c for members in groups.values() for i, c in enumerate(members) if i % COMPILED_EVERY == 0]
    chosen.sort(key=lambda c: c.id)
    if COMPILED_CAP is not None and len(chosen) > COMPILED_CAP:
        step = len(chosen) / COMPILED_CAP
        chosen = [chosen[int(i * step)] for i in range(COMPILED_CAP)]
    return chosen


def _run(case, backend: str) -> None:
    if case.id in SKIPS:
        pytest.skip(f"known: {SKIPS[case.id]}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unsupported = run_case(case, backend)
    if unsupported is not None:
        pytest.skip("unsupported: " + "; ".join(str(item) for item in unsupported.items))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_conformance_interpreter(case):
    _run(case, "interpreter")


COMPILED = compiled_share(CASES)


@pytest.mark.parametrize("case", COMPILED, ids=[c.id for c in COMPILED])
def test_conformance_compiled(case):
    _run(case, "c")
