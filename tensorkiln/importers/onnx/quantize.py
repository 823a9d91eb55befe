"""tk.quantize for float ONNX models: a module from tk.onnx.load, quantized to int8 by tensorkiln's own PTQ.

The loaded module's traced function (its nodes converted to tensorkiln ops, the initializers as
constants) is quantized by tk.quantize itself, as ONNX Runtime's `quantize_static` and OpenVINO's
NNCF quantize a float file; the result is a QuantizedOnnxModule called as the module is (inputs
positionally or by name, outputs a list of arrays or a dict with return_dict=True), with
`quantization_report()`. Layers are named by the ONNX node that reads their weight (`/layer1/
layer1.0/conv1/Conv`: the names ONNX Runtime's `nodes_to_exclude` takes; a node without a name by
the label the importer's messages give it, `#12 Conv`, its position and op), and `keep_float`
accepts those names.

Each calibration sample holds the model's inputs: a tuple in graph-input order, a dict by input
name, or one array for a model of one input.
"""
from __future__ import annotations

import copy
from typing import Any, Iterable

import numpy as np

from ...errors import UnsupportedOpError
from ...frontend.tensor import Tensor
from ...quantization import quantize
from ...quantization.named_weights import NamedWeights
from .model import OnnxModule

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")  # ops whose input 1 may be a quantizable weight


class QuantizedOnnxModule(OnnxModule):
    """An OnnxModule whose compiled function is a tk.quantize result."""

    def quantization_report(self):
        """Per layer: scale, zero point, method and output SQNR vs float; and the end-to-end error."""
        return self._jit.quantization_report()


def _node_weights(module: OnnxModule) -> list[tuple[str, Tensor]]:
    """(the node's name, the initializer it reads as its weight) of each weighted node."""
    return [(node.name, module._constants[node.inputs[1]]) for node in module._nodes
            if node.op_type in WEIGHTED_OPS and len(node.inputs) > 1 and node.inputs[1] in module._constants]


def _arrays(module: OnnxModule, sample: Any) -> tuple[np.ndarray, ...]:
    """One calibration sample as the model's inputs in graph order (checked as a call's are)."""
    if isinstance(sample, dict):
        args, kwargs = (), sample
    else:
        args, kwargs = (tuple(sample) if isinstance(sample, (tuple, list)) else (sample,)), {}
    return tuple(t.numpy() if isinstance(t, Tensor) else np.asarray(t) for t in module._arguments(args, kwargs))


def quantize_onnx(module: OnnxModule, calibration: Iterable, **options) -> QuantizedOnnxModule:
    """tk.quantize's options for a module from tk.onnx.load (a float model)."""
    if module.value_inputs:
        raise UnsupportedOpError(f"tk.quantize: the ONNX model {module.model_name!r} reads input(s) "
                                 f"{', '.join(sorted(module.value_inputs))} as values (shapes or indices the "
                                 f"graph computes with); quantize a model whose inputs are all data")
    if module._staged is not None:
        raise UnsupportedOpError(f"tk.quantize: the ONNX model {module.model_name!r} has shapes that depend on "
                                 f"its inputs' values, and runs in compiled stages; it cannot be quantized")
    samples = [_arrays(module, sample) for sample in calibration]
    loaded_with = {name: value for name, value in module.jit_options.items() if name != "precision"}
    quantized = quantize(NamedWeights(module._jit.fn, _node_weights(module)), samples, **{**loaded_with, **options})
    result = copy.copy(module)
    result.__class__ = QuantizedOnnxModule
    result._jit = quantized
    result._plain_signature = None  # the quantized function's first call goes through the checks
    return result


__all__ = ["QuantizedOnnxModule", "quantize_onnx"]
