"""What tk.quantize did, per layer and end to end, printable as a table."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def sqnr_db(signal_power: float, noise_power: float) -> float:
    """Signal-to-quantization-noise ratio in dB (inf when the two agree exactly)."""
    if noise_power == 0:
        return float("inf")
    if signal_power == 0:
        return float("-inf")
    return float(10.0 * np.log10(signal_power / noise_power))


class ErrorMeter:
    """Accumulates sum(f^2) and sum((f - q)^2) over calibration samples."""

    def __init__(self) -> None:
        self.signal = 0.0
        self.noise = 0.0

    def add(self, reference: np.ndarray, approximation: np.ndarray) -> None:
        f = np.asarray(reference, np.float64)
        self.signal += float(np.sum(f * f))
        self.noise += float(np.sum((f - np.asarray(approximation, np.float64)) ** 2))

    @property
    def sqnr_db(self) -> float:
        return sqnr_db(self.signal, self.noise)


@dataclass
class LayerReport:
    """One layer: where it is, how its input and weight are quantized, and the error of its output."""

    index: int
    name: str
    op: str
    quantized: bool
    method: str = ""
    low: float = 0.0  # the calibrated input range [low, high]
    high: float = 0.0
    x_scale: float = 0.0
    x_zero: int = 0
    x_dtype: str = ""
    weight_scales: tuple[float, float] = (0.0, 0.0)  # smallest and largest weight scale
    sqnr_db: float = float("nan")  # the layer's output, quantized input and weight vs float, on the calibration data
    dynamic: bool = False  # the input's scale and zero point are computed per call (low, high: the range observed)


@dataclass
class QuantizationReport:
    """Per layer (LayerReport) and end to end: output SQNR of the quantized function vs float."""

    layers: list[LayerReport] = field(default_factory=list)
    method: str = ""
    samples: int = 0
    end_to_end_sqnr_db: float = float("nan")
    max_abs_error: float = float("nan")

    def layer(self, name_or_index) -> LayerReport:
        """A layer by its index or name."""
        for layer in self.layers:
            if layer.index == name_or_index or layer.name == name_or_index:
                return layer
        raise KeyError(f"no layer {name_or_index!r}; layers: {', '.join(l.name for l in self.layers)}")

    def __str__(self) -> str:
        header = f"{'#':>3}  {'layer':<24} {'op':<7} {'input range':>21} {'scale':>10} {'zero':>5} " \
                 f"{'weight scales':>21} {'SQNR dB':>8}"
        lines = [f"post-training quantization: method {self.method}, {self.samples} calibration samples", header,
                 "-" * len(header)]
        for layer in self.layers:
            if not layer.quantized:
                lines.append(f"{layer.index:>3}  {layer.name:<24} {layer.op:<7} {'kept float':>21}")
                continue
            scale, zero = ("per call", "-") if layer.dynamic else (f"{layer.x_scale:.4g}", layer.x_zero)
            lines.append(f"{layer.index:>3}  {layer.name:<24} {layer.op:<7} "
                         f"{f'[{layer.low:.4g}, {layer.high:.4g}]':>21} {scale:>10} {zero:>5} "
                         f"{f'{layer.weight_scales[0]:.3g}..{layer.weight_scales[1]:.3g}':>21} {layer.sqnr_db:>8.1f}")
        lines.append(f"end to end: output SQNR {self.end_to_end_sqnr_db:.1f} dB, max |error| {self.max_abs_error:.4g}")
        return "\n".join(lines)
