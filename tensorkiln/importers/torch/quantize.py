"""tk.quantize for PyTorch models: a torch.nn.Module, or a program from tk.from_torch, quantized to int8.

The module is imported with tk.from_torch at the first calibration sample's shapes, and its converted
function (tensorkiln ops on the module's weights as constants) is quantized by tk.quantize itself; the
result is a TorchProgram like from_torch's, whose compiled function is the quantized one: called with
the module's own arguments (torch tensors or numpy arrays), it returns the module's output structure.
Layers are named by the path of the module owning their weight (`encoder.layer.0.attention.self.query`,
`features.3.conv.1.0`), as a tk.nn module's are, so `keep_float` and the report take the names that
`model.named_modules()` prints; a weight that is no module parameter's (a constant made in forward)
leaves its layer named by op and position (`matmul_4`).
"""
from __future__ import annotations

import copy
from typing import Any, Iterable

import numpy as np
import torch
from torch.export.graph_signature import InputKind

from ...quantization import quantize
from ...quantization.named_weights import NamedWeights
from .export import TorchProgram, from_torch


class QuantizedTorchProgram(TorchProgram):
    """A TorchProgram whose compiled function is a tk.quantize result."""

    def quantization_report(self):
        """Per layer: scale, zero point, method and output SQNR vs float; and the end-to-end error."""
        return self.jit.quantization_report()


def _arguments(sample: Any) -> tuple[tuple, dict]:
    """(args, kwargs) of one calibration sample: a tuple of positional arguments, a dict of keyword ones
    (a Hugging Face batch), or a single tensor."""
    if isinstance(sample, dict):
        return (), dict(sample)
    return (tuple(sample) if isinstance(sample, (tuple, list)) else (sample,)), {}


def _torch(value):
    """An array argument as a torch tensor; other values (a flag such as use_cache=False) as they are."""
    return torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value


def _module_weights(program: TorchProgram) -> list[tuple[str, Any]]:
    """(module path, the snapshot the converted graph reads) of each parameter named `weight`
    (torch.export's parameter `a.b.weight` is module `a.b`'s)."""
    snapshots = program.converted.constants
    weights = []
    for spec in program.exported_program.graph_signature.input_specs:
        path, _, leaf = (spec.target or "").rpartition(".")
        if spec.kind == InputKind.PARAMETER and leaf == "weight" and spec.arg.name in snapshots:
            weights.append((path, snapshots[spec.arg.name]))
    return weights


def quantize_torch(model: torch.nn.Module | TorchProgram, calibration: Iterable, **options) -> QuantizedTorchProgram:
    """tk.quantize's options for `model` (a module in eval mode, or tk.from_torch's program); calibration
    holds the module's arguments per sample (a tuple of positional ones, or a dict of keyword ones; torch
    tensors or arrays)."""
    samples = [_arguments(sample) for sample in calibration]
    if not samples:
        raise ValueError("tk.quantize: the calibration data is empty; pass an iterable of argument tuples "
                         "(or of single tensors) with at least one sample")
    if isinstance(model, TorchProgram):
        program = model
    else:
        model.eval()
        args, kwargs = samples[0]
        jit_options = {k: options[k] for k in ("opt_level", "debug") if k in options}
        program = from_torch(model, tuple(_torch(v) for v in args), {k: _torch(v) for k, v in kwargs.items()},
                             **jit_options)
    flat = [tuple(t.numpy() for t in program._inputs(args, kwargs)) for args, kwargs in samples]
    quantized = quantize(NamedWeights(program.jit.fn, _module_weights(program)), flat, **options)
    result = copy.copy(program)
    result.__class__ = QuantizedTorchProgram
    result.jit = result._static_jit = quantized  # one signature per trace, as tk.jit's
    return result


__all__ = ["QuantizedTorchProgram", "quantize_torch"]
