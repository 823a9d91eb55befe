"""PyTorch's core ATen opset, read from torch itself: every operator is lowered, decomposed or refused.

An operator tagged `torch.Tag.core` must have a lowering (`LOWERINGS`), a
decomposition in PyTorch's core table (which both import paths apply, see
`decompositions()`), or a refusal with its reason (`refusals.REFUSED`, listed in
docs/pytorch.md). A torch upgrade that adds a core operator fails here, naming it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import tensorkiln as tk  # noqa: E402
from tensorkiln.importers.torch.core_aten import BEGIN, END, core_overloads, coverage, markdown_table  # noqa: E402
from tensorkiln.importers.torch.refusals import REFUSED  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "pytorch.md"


def test_the_core_opset_is_read_from_torch():
    packets = {o.overloadpacket for o in core_overloads()}
    assert len(packets) > 150, f"only {len(packets)} core ATen operators found: did torch change its tags?"


def test_every_core_aten_op_is_lowered_decomposed_or_refused():
    missing = [str(o) for o in core_overloads() if coverage(o) is None]
    assert not missing, ("core ATen ops with neither a lowering, a decomposition nor a documented refusal:\n  "
                         + "\n  ".join(missing))


def test_refusals_name_core_ops_that_are_neither_lowered_nor_decomposed():
    core = {str(o): o for o in core_overloads()}
    stale = [name for name in REFUSED if name not in core or coverage(core[name]) != "refused"]
    assert not stale, f"refusals of ops that are lowered, decomposed or not in the core opset: {stale}"


def test_docs_list_the_coverage_and_every_refusal():
    text = DOCS.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, "docs/pytorch.md lost its core ATen coverage section"
    documented = text[text.index(BEGIN):text.index(END) + len(END)]
    assert documented == markdown_table(), \
        "docs/pytorch.md is stale: paste tensorkiln.importers.torch.core_aten.markdown_table() into it"


def test_a_refused_op_is_named_with_its_reason():
    from tensorkiln.importers.torch import check_supported

    def spectrum(x):
        return torch.fft.rfft(x).abs()

    graph = torch.fx.experimental.proxy_tensor.make_fx(spectrum)(torch.zeros(8)).graph
    with pytest.raises(tk.UnsupportedOpError, match=r"aten\._fft_r2c\.default \(complex results"):
        check_supported(graph)
