"""Post-training int8 quantization (tk.quantize): calibration, scales, the report."""
from .quantize import QuantizableLayer, QuantizedFunction, quantize
from .report import LayerReport, QuantizationReport

__all__ = ["QuantizableLayer", "QuantizedFunction", "quantize", "LayerReport", "QuantizationReport"]
