"""Models exported by torch.onnx, imported with tk.onnx.load, agree with PyTorch eager."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import tensorkiln as tk  # noqa: E402
from tensorkiln.tools import torch_reference as tm  # noqa: E402

TOLERANCE = dict(rtol=1e-4, atol=1e-4)


def _roundtrip(tmp_path, model, inputs, name):
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(model, inputs, str(path), dynamo=False)
    with torch.no_grad():
        want = model(*inputs).numpy()
    got = tk.onnx.load(str(path))(*[t.numpy() for t in inputs])[0]
    np.testing.assert_allclose(got, want, **TOLERANCE)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_cnn_exported_by_torch_onnx(tmp_path, name):
    _roundtrip(tmp_path, getattr(tm, name)(), (tm.image(2, 64),), name)


def test_bert_exported_by_torch_onnx(tmp_path):
    _roundtrip(tmp_path, tm.bert_encoder(), tm.bert_inputs(), "bert")
