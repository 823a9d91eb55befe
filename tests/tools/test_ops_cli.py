"""`tensorkiln ops`: tensorkiln's primitives and the ONNX and ATen operators its importers support."""
from __future__ import annotations

from tensorkiln.importers.onnx.registry import supported_ops
from tensorkiln.ir.ops import REGISTRY
from tensorkiln.tools.op_table import aten_ops, main


def test_ops_lists_primitives_onnx_and_aten_operators(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert f"tensorkiln primitives ({len(REGISTRY)}):" in out
    assert f"ONNX operators (ai.onnx; other domains as domain::Op) ({len(supported_ops())}):" in out and " MatMul " in out
    aten = aten_ops()
    if aten is not None:
        assert f"({len(aten)}):" in out and "aten.conv2d" in aten
    assert main(["--only", "onnx"]) == 0
    only = capsys.readouterr().out
    assert "Conv" in only and "primitives" not in only and "ATen" not in only
