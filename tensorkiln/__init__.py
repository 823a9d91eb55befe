"""tensorkiln: a small deep-learning compiler.

    import tensorkiln as tk
    x = tk.tensor([[1.0, 2.0]])
    y = (x @ w + b).relu().softmax(-1)      # eager
    f = tk.jit(fn)                          # graph mode (tk.compile(fn) is the same)
    tk.grad(fn)(x); loss.backward()         # autodiff (docs/autodiff.md); tk.nn, tk.optim for training
"""
import sys

# Tensor's methods are added by the modules above frontend/tensor.py that implement them: load these first.
from .frontend import tensor_arithmetic, tensor_movement, tensor_reductions  # noqa: F401
from .frontend import functions, indexing, special  # noqa: F401  (tk.special)
from .frontend.autodiff import tensor_api  # noqa: F401
from . import nn
from .frontend.creation import (arange, empty, eye, from_numpy, full, full_like, linspace, manual_seed, ones,
                       ones_like, rand, randint, randn, tensor, zeros, zeros_like)
from .dtypes import (DType, bfloat16, float16, float32, float64, int8, int16, int32, int64, promote_types,
                     uint8, uint16, uint32, uint64)
from .dtypes import bool_ as bool  # noqa: A001  (tk.bool, as torch.bool)
from .errors import (AxisError, CompileError, DTypeError, ShapeError, TensorKilnError, TraceError,
                     UnsupportedOpError)
from .frontend.functions import (cat, chunk, concat, concatenate, diagonal, flip, matmul, maximum, mean, minimum, repeat,
                        reshape, split, stack, var, where)
from .ir.graph import Graph, Node
from .ir.ops import REGISTRY as _OP_TABLE
from .frontend.control import cond, scan, while_loop
from .frontend.jit import compile, jit  # noqa: A004  (tk.compile, as torch.compile)
from .quantization import quantize as _quantize_tk
from .importers.onnx.quantize import OnnxModule as _OnnxModule, quantize_onnx as _quantize_onnx
from .driver.options import CompileOptions
from .shapes import Dim, SymInt
from .runtime.exported import load_compiled
from .frontend.autodiff.mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .frontend.autodiff.functional import grad, value_and_grad, vjp
from .frontend.autodiff.function import Function, FunctionCtx
from . import optim  # noqa: E402  (after Tensor: optimizers build on it)
from . import onnx  # noqa: E402  (tk.onnx.load; the onnx package is imported only on load)
from .tune import tune  # noqa: E402  (tk.tune: search kernel configurations, keep the records)
from .frontend.tensor import Tensor, as_tensor

float = float32  # noqa: A001
double = float64
half = float16
long = int64
short = int16
int = int32  # noqa: A001
bool_ = bool


def _method(name: str):
    def function(input, *args, **kwargs):
        return getattr(as_tensor(input), name)(*args, **kwargs)
    function.__name__ = name
    function.__doc__ = f"tk.{name}(x, ...) is x.{name}(...)."
    return function


# tk.<name>(x) for every primitive a Tensor method applies (the op table's rows), and these methods too.
_PRIMITIVE_METHODS = [op.method for op in _OP_TABLE.values() if op.method]
for _name in _PRIMITIVE_METHODS + [
        "log1p", "square", "clamp", "clip", "sum", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "std",
        "all", "any", "permute", "transpose", "squeeze", "unsqueeze", "flatten", "expand", "broadcast_to",
        "gather", "index_select", "softmax", "log_softmax", "gelu", "silu", "softplus", "narrow", "unbind",
        "masked_fill", "logical_and", "logical_or"]:
    globals()[_name] = _method(_name)
del _name


def from_torch(module, example_inputs, *args, **kwargs):
    """Import a PyTorch module via torch.export: tk.from_torch(model.eval(), (x,)) -> callable (docs/pytorch.md).

    torch is imported only here, so `import tensorkiln` never needs it.
    """
    from .importers.torch import from_torch as _from_torch
    return _from_torch(module, example_inputs, *args, **kwargs)


def quantize(fn_or_module, calibration, **options):
    """Post-training int8 quantization: tk.quantize(model, calibration, method="kl") -> a tk.jit function
    (docs/precision.md). A PyTorch module, or tk.from_torch's program, is imported by tk.from_torch first
    and comes back as such a program, quantized (torch is imported only then); a float ONNX model from
    tk.onnx.load comes back as such a module, quantized.
    Options: tensorkiln.quantization.quantize's."""
    torch = sys.modules.get("torch")
    if (torch is not None and isinstance(fn_or_module, torch.nn.Module)) or \
            type(fn_or_module).__module__.startswith("tensorkiln.importers.torch"):
        from .importers.torch.quantize import quantize_torch
        return quantize_torch(fn_or_module, calibration, **options)
    if isinstance(fn_or_module, _OnnxModule):
        return _quantize_onnx(fn_or_module, calibration, **options)
    return _quantize_tk(fn_or_module, calibration, **options)


from .runtime.version import __version__  # noqa: E402
