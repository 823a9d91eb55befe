"""tk.onnx: run ONNX models with tensorkiln (docs/onnx.md).

    model = tk.onnx.load("model.onnx")             # or bytes, or an onnx.ModelProto
    outputs = model(x)                             # list of numpy arrays, graph-output order
    outputs = model(x=x, return_dict=True)         # {output name: array}

The `onnx` package is needed only when a model is loaded (pip install tensorkiln[onnx]).
"""
from __future__ import annotations

from .importers.onnx.model import (OnnxImportError, OnnxModule, OnnxOutputShapeWarning,  # noqa: F401
                                   UnsupportedModelError, load, random_inputs)
from .importers.onnx.registry import supported_ops  # noqa: F401

__all__ = ["load", "OnnxModule", "OnnxImportError", "OnnxOutputShapeWarning", "UnsupportedModelError",
           "supported_ops", "random_inputs"]
