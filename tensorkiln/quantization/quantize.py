"""tk.quantize: int8 post-training quantization of a function or an inference module.

    qf = tk.quantize(model, calibration, method="kl")
    qf(x)                            # a tk.jit function: explain(), report(), profile() work
    print(qf.quantization_report())  # per layer: input range, scale, zero point, SQNR; end to end
    tk.quantize(model, calibration, activation_scales="dynamic")  # input scales from each call's range
    tk.quantize(model, calibration, activation_scales="per_token")  # ... one per row of a matmul's input

The function is traced (as tk.jit traces it) for the calibration samples' shapes; its quantizable
layers (passes/quantize_layers.py: matmuls by constant weights, conv2d of groups 1) are numbered
in graph order. Calibration runs a compiled copy of the graph that also returns every layer's
input, once for min/max and, for the histogram methods, once more for a histogram of |x|
(calibration.py). Weights are quantized once, here: symmetric int8 per output channel (or per
tensor). Every later trace (a new input shape) is rewritten with the same parameters, in the
quantize/dequantize form that the qdq_integer pass runs on the integer kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..driver.options import CompileOptions
from ..driver.stages import compile_graph
from ..errors import ShapeError
from ..frontend.autodiff.mode import no_grad
from ..frontend.jit import JitFunction, TracedFunction
from ..frontend.tensor import Tensor
from ..ir.graph import Graph, Node
from ..passes.quantize_layers import (LayerQuantization, insert_qdq, quantizable_layers, quantized_layer,
                                      weight_constant, weight_value, with_extra_outputs)
from .calibration import METHODS, ActivationStats, clip_range, threshold
from .params import ACTIVATION_RANGES, WEIGHT_BITS, affine_params
from .params import symmetric_weights as symmetric_int8_weights  # quantize's keyword takes the plain name
from .report import ErrorMeter, LayerReport, QuantizationReport


@dataclass(frozen=True)
class QuantizableLayer:
    """A layer keep_float's predicate is asked about: its number, name (a module path where the
    function is a module, else op_index) and graph node."""

    index: int
    name: str
    op: str
    node: Node


class QuantizedFunction(JitFunction):
    """A tk.jit function whose every trace has its layers rewritten with the calibrated Q/DQ ops."""

    def __init__(self, fn: Callable, options: CompileOptions, plans: dict[int, LayerQuantization]):
        super().__init__(fn, options)
        self.plans = plans
        self._report: QuantizationReport | None = None

    def _trace(self, tensors, names, structure, donated, plan: dict | None = None) -> TracedFunction:
        with no_grad():  # parameters are read as constants, the weights the plans quantized
            entry = super()._trace(tensors, names, structure, donated, plan)
        entry.graph = insert_qdq(entry.graph, self.plans)
        return entry

    def quantization_report(self) -> QuantizationReport:
        """Per layer: scale, zero point, method and output SQNR vs float; and the end-to-end error."""
        return self._report


def quantize(fn_or_module, calibration: Iterable, *, method: str = "minmax", per_channel: bool = True,
             percentile: float = 99.99, keep_float=(), activations: str = "uint8", symmetric_weights: bool = True,
             activation_scales: str = "static", weight_bits: int = 8, **jit_options) -> QuantizedFunction:
    """Post-training int8 quantization of a function of tensors or a tk.nn.Module (put in eval mode).

    calibration: an iterable of argument tuples (or single arrays), all of one signature.
    method: "minmax", "percentile" (of |x|, `percentile` %), "kl" (entropy) or "mse" chooses each
        quantized layer's input range; activations are affine per tensor, `activations` "uint8" or "int8".
    activation_scales: "static" (calibrated once, by `method`) or "dynamic" (each call computes every
        quantized layer's input scale and zero point from that input's range, as ONNX's
        DynamicQuantizeLinear; calibration then only measures the report's errors) or "per_token"
        (dynamic, one scale and zero point per row of each quantized matmul's input, the range of
        that token's features; convolutions take dynamic per-tensor scales).
    per_channel: one weight scale per output channel (else one per weight); weights are symmetric int8.
    weight_bits: 8 (weights in [-127, 127]) or fewer, down to 2 (in [-(2 ** (bits - 1) - 1), ...]); 7 is
        what ONNX Runtime's reduce_range does for CPUs without VNNI: on an AVX2 CPU every layer then sums
        byte pairs with vpmaddubsw, unwidened (precision.md), at some cost in accuracy.
    keep_float: layers left in float: indices, names (module paths) or a predicate of a QuantizableLayer.
    Other keyword arguments are tk.jit's options. Returns a tk.jit function (QuantizedFunction).
    """
    _check_options(method, activations, percentile, symmetric_weights, activation_scales, weight_bits)
    dynamic = activation_scales in ("dynamic", "per_token")
    per_token = activation_scales == "per_token"
    samples = _calibration_samples(calibration)
    if hasattr(fn_or_module, "eval") and hasattr(fn_or_module, "training"):
        fn_or_module.eval()
    options = CompileOptions(**jit_options)
    float_fn = JitFunction(fn_or_module, options)
    with no_grad():  # traced only: calibration compiles its own program from the graph
        tensors, names, structure, _, donated = float_fn._bind(samples[0], {})
        entry = float_fn._trace(tensors, names, structure, donated)
    graph = entry.graph
    layers = _describe_layers(quantizable_layers(graph), fn_or_module)
    kept = _kept_layers(keep_float, layers)
    chosen = [layer for layer in layers if layer.index not in kept]

    def arrays_of(sample) -> list[np.ndarray]:
        return list(sample) + [read() for read in entry.state_sources]

    stats = _calibrate(graph, chosen, samples, arrays_of, options, histogram=method != "minmax" and not dynamic)
    plans, reports = {}, {}
    for layer in chosen:
        if dynamic:  # the report's range is the one observed; each call finds its own
            low, high = clip_range(stats[layer.index], threshold(stats[layer.index], "minmax", percentile))
        else:
            low, high = clip_range(stats[layer.index], threshold(stats[layer.index], method, percentile))
        scale, zero = affine_params(low, high, activations)
        channel_axis = (1 if layer.op == "matmul" else 0) if per_channel else None
        weight_q, weight_scale = symmetric_int8_weights(weight_value(layer.node), channel_axis, weight_bits)
        plans[layer.index] = LayerQuantization(scale, zero, activations, weight_q, weight_scale, dynamic, per_token)
        reports[layer.index] = LayerReport(layer.index, layer.name, layer.op, True,
                                           activation_scales if dynamic else method,
                                           low, high, scale, zero, activations,
                                           (float(weight_scale.min()), float(weight_scale.max())), dynamic=dynamic)
    quantized = QuantizedFunction(fn_or_module, options, plans)
    report = QuantizationReport([reports.get(l.index) or LayerReport(l.index, l.name, l.op, False) for l in layers],
                                f"{activation_scales} activation scales" if dynamic else method, len(samples))
    _measure(graph, chosen, plans, report, samples, arrays_of, quantized, options)
    quantized._report = report
    return quantized


def _check_options(method: str, activations: str, percentile: float, symmetric: bool, scales: str,
                   weight_bits: int) -> None:
    if not isinstance(weight_bits, (int, np.integer)) or weight_bits not in WEIGHT_BITS:
        raise ValueError(f"tk.quantize: weight_bits={weight_bits!r}; expected an integer from {WEIGHT_BITS.start} "
                         f"to {WEIGHT_BITS.stop - 1} (the int8 kernels hold the weights in 8 bits)")
    if scales not in ("static", "dynamic", "per_token"):
        raise ValueError(f"tk.quantize: activation_scales={scales!r}; expected 'static' (calibrated), "
                         f"'dynamic' (from each call's input range) or 'per_token' (dynamic, per row)")
    if method not in METHODS:
        raise ValueError(f"tk.quantize: unknown method {method!r}; expected one of {', '.join(METHODS)}")
    if activations not in ACTIVATION_RANGES:
        raise ValueError(f"tk.quantize: activations={activations!r}; expected 'uint8' or 'int8'")
    if not 0 < percentile <= 100:
        raise ValueError(f"tk.quantize: percentile={percentile} is not in (0, 100]")
    if not symmetric:
        raise ValueError("tk.quantize: symmetric_weights=False is not supported: the int8 kernels take "
                         "symmetric int8 weights (W_q - zero must stay in int8), so weights are quantized "
                         "symmetrically")


def _calibration_samples(calibration: Iterable) -> list[tuple[np.ndarray, ...]]:
    """Each sample as a tuple of arrays, all of the first sample's shapes and dtypes."""
    samples = []
    for sample in calibration:
        items = sample if isinstance(sample, (tuple, list)) else (sample,)
        samples.append(tuple(item.numpy() if isinstance(item, Tensor) else np.asarray(item) for item in items))
    if not samples:
        raise ValueError("tk.quantize: the calibration data is empty; pass an iterable of argument tuples "
                         "(or of single arrays) with at least one sample")
    first = samples[0]
    for number, sample in enumerate(samples[1:], start=1):
        if len(sample) != len(first):
            raise ShapeError(f"tk.quantize: calibration sample {number} has {len(sample)} arguments, "
                             f"sample 0 has {len(first)}")
        for position, (a, b) in enumerate(zip(sample, first)):
            if a.shape != b.shape or a.dtype != b.dtype:
                raise ShapeError(f"tk.quantize: calibration sample {number}, argument {position}, is "
                                 f"{a.dtype}{list(a.shape)} but sample 0's is {b.dtype}{list(b.shape)}; every "
                                 f"sample must have the shapes and dtypes of the first")
    return samples


def _describe_layers(nodes: list[Node], fn) -> list[QuantizableLayer]:
    """Each layer with its name: the path of the module owning its weight, else op_index."""
    owners: dict[int, tuple[str, np.ndarray]] = {}
    if hasattr(fn, "named_modules"):
        for path, module in fn.named_modules():
            weight = getattr(module, "weight", None)
            if isinstance(weight, Tensor) and weight._node is None:
                owners[id(weight._value)] = (path or type(module).__name__, weight._value)
    by_size: dict[int, list[tuple[str, np.ndarray]]] = {}
    for path, weight in owners.values():
        by_size.setdefault(weight.size, []).append((path, weight))
    layers = []
    for index, node in enumerate(nodes):
        array = weight_constant(node.inputs[1]).attrs["value"].array
        owner = owners[id(array)][0] if id(array) in owners else _owner_by_value(array, by_size.get(array.size, []))
        layers.append(QuantizableLayer(index, owner or f"{node.op}_{index}", node.op, node))
    return layers


def _owner_by_value(array: np.ndarray, candidates: list[tuple[str, np.ndarray]]) -> str | None:
    """The module whose weight this constant is a transposed or reshaped copy of (tracing evaluates a
    permute of a constant, e.g. an imported linear layer's weight.t(), into a new array); None if none."""
    for path, weight in candidates:
        if weight.shape == array.shape[::-1] and weight.ndim == 2 and np.array_equal(weight.T, array):
            return path
        if np.array_equal(weight.reshape(array.shape), array):
            return path
    return None


def _kept_layers(keep_float, layers: list[QuantizableLayer]) -> set[int]:
    """Indices of the layers keep_float names (an index, a name, a predicate, or a list of them)."""
    entries = [keep_float] if isinstance(keep_float, (int, str)) or callable(keep_float) else list(keep_float)
    kept = set()
    names = ", ".join(f"{l.index}: {l.name}" for l in layers) or "none"
    for entry in entries:
        if callable(entry):
            kept |= {l.index for l in layers if entry(l)}
            continue
        matches = [l.index for l in layers if (l.index == entry if isinstance(entry, int) else l.name == entry)]
        if not matches:
            raise ValueError(f"tk.quantize: keep_float names {entry!r}, which matches no quantizable layer; "
                             f"the layers are {names}")
        kept |= set(matches)
    return kept


def _calibrate(graph: Graph, layers: list[QuantizableLayer], samples, arrays_of, options: CompileOptions,
               histogram: bool) -> dict[int, ActivationStats]:
    """Each layer's input statistics over the samples: a pass for min/max, one more for the histogram."""
    stats = {layer.index: ActivationStats() for layer in layers}
    if not layers:
        return stats
    program = compile_graph(with_extra_outputs(graph, [layer.node.inputs[0] for layer in layers]), options)
    first = len(graph.outputs)
    passes = ["observe_range", "observe_histogram"] if histogram else ["observe_range"]
    for observe in passes:
        for sample in samples:
            for layer, x in zip(layers, program(arrays_of(sample))[first:]):
                getattr(stats[layer.index], observe)(x)
    return stats


def _measure(graph: Graph, layers: list[QuantizableLayer], plans: dict, report: QuantizationReport, samples,
             arrays_of, quantized: QuantizedFunction, options: CompileOptions) -> None:
    """Fill in each layer's output SQNR (its own quantized input and weight vs float, on the float
    model's activations) and the end-to-end SQNR of the quantized function vs float."""
    pairs = []
    for layer in layers:
        pairs += [layer.node, quantized_layer(layer.node, layer.node.inputs[0], plans[layer.index])]
    program = compile_graph(with_extra_outputs(graph, pairs), options)
    with no_grad():
        entry, _ = quantized._lookup(samples[0], {})
    first = len(graph.outputs)
    meters = [ErrorMeter() for _ in layers]
    end_to_end = ErrorMeter()
    max_error = 0.0
    for sample in samples:
        arrays = arrays_of(sample)
        results = program(arrays)
        for i, meter in enumerate(meters):
            meter.add(results[first + 2 * i], results[first + 2 * i + 1])
        q_outputs = entry.compiled(list(sample) + [read() for read in entry.state_sources])
        for f, q in zip(results[:first], q_outputs):
            if np.issubdtype(np.asarray(f).dtype, np.floating):
                end_to_end.add(f, q)
                max_error = max(max_error, float(np.max(np.abs(np.asarray(f, np.float64) - q), initial=0.0)))
    for layer, meter in zip(layers, meters):
        report.layer(layer.index).sqnr_db = meter.sqnr_db
    report.end_to_end_sqnr_db = end_to_end.sqnr_db
    report.max_abs_error = max_error
