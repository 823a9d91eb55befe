"""A BERT encoder exported to ONNX with dim_param batch and sequence axes: one program for short and
long lengths (the embeddings' row kernel and fused attention keep the length symbolic), equal to
PyTorch's logits."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")


def test_an_exported_bert_runs_short_and_long_lengths_on_one_program(tmp_path):
    from tensorkiln.tools import torch_reference as ref
    torch.manual_seed(0)
    model = ref.BertEncoder(vocab=100, hidden=64, layers=2, heads=4, intermediate=128, max_positions=64).eval()
    path = str(tmp_path / "bert.onnx")
    axes = {0: "batch", 1: "seq"}
    ids = torch.randint(0, 100, (2, 16))
    torch.onnx.export(model, (ids, torch.ones_like(ids)), path, dynamo=False, input_names=["input_ids", "attention_mask"],
                      output_names=["logits"], dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": {0: "batch"}})
    m = tk.onnx.load(path)
    rng = np.random.default_rng(0)
    for seq in (16, 3, 17, 5, 40):  # both sides of the short-query attention kernel and of 8
        ids = rng.integers(0, 100, (1, seq)).astype(np.int64)
        mask = np.ones((1, seq), np.int64)
        mask[0, seq - seq // 4:] = 0
        with torch.no_grad():
            expected = model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        np.testing.assert_allclose(m(ids, mask)[0], expected, rtol=1e-4, atol=1e-5)
    assert m.compile_count == 1
    kinds = [k.kind for k in m.report(ids, mask).kernels]
    assert kinds.count("attention") == 2 and kinds[0] == "row", kinds  # embeddings + layer norm: one row kernel
