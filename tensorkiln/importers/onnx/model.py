"""Load an ONNX model as a tensorkiln function, compiled per input signature by tk.jit.

    model = tk.onnx.load("model.onnx")            # path, bytes or onnx.ModelProto
    y, = model(x)                                 # outputs in graph-output order (numpy arrays)
    out = model(x=x, return_dict=True)            # {output name: array}

How it works: the ONNX graph becomes a Python function over tk Tensors (one
converter per operator, registered in `registry.py` by the operator-family
modules) that `tk.jit` traces per input signature. An input dimension declared with a
`dim_param` ("batch", "sequence") is a size symbol (docs/dynamic_shapes.md): one
program serves its sizes as far as the operators keep them symbolic; the others
specialize with guards. Before anything is traced the model is checked: every unsupported operator and
element type is reported at once (UnsupportedOpError), and a malformed model
(bad bytes, no graph or opset, dangling inputs) raises OnnxImportError naming the
problem. External tensor data is read only from inside the model's directory or
`base_dir=` (external_data.py); declared output types are checked when traced.

Graph inputs that feed a value the compiler must know (Reshape's shape,
Slice's starts, Pad's pads, ...) are *value-specialized*: their value is part
of the signature, and a new value traces again. Shape -> Gather -> Concat
chains over traced tensors compute eagerly at trace time (they only read
static shapes) and become constants.

The module's parts: model_reading.py (the file and its external data),
model_checks.py (what is supported, before anything is traced),
model_specialization.py (size symbols, value-specialized inputs),
model_execution.py (the traced function), model_reports.py (graphs,
profile, export); this file holds the module's loading and calling.
"""
from __future__ import annotations

import os

import numpy as np

from ... import dtypes as dt
from ...driver.options import CompileOptions
from ...driver.progress import Progress
from ...errors import DTypeError, ShapeError, UnsupportedOpError
from ...frontend.jit import jit
from ...frontend.tensor import Tensor
from .element_types import tensor_from_proto
from .errors import OnnxImportError, OnnxOutputShapeWarning, onnx_errors
from .frozen import FrozenValue
from .model_checks import MIN_OPSET, ONNX_DOMAINS, ModelChecks, Unsupported, UnsupportedModelError
from .model_execution import ModelExecution
from .model_reading import inline_functions, model_opsets, read_model
from .model_reports import ModelReports
from .model_specialization import SHAPE_ARITHMETIC, ModelSpecialization
from .registry import DataDependentOutput
from .staged import StagedGraph

__all__ = ["MIN_OPSET", "ONNX_DOMAINS", "SHAPE_ARITHMETIC", "OnnxImportError", "OnnxModule", "OnnxOutputShapeWarning",
           "Unsupported", "UnsupportedModelError", "load", "random_inputs"]


class OnnxModule(ModelChecks, ModelSpecialization, ModelExecution, ModelReports):
    """A loaded ONNX model: call it with the graph inputs, get the graph outputs.

    Inputs: positionally in graph-input order and/or by ONNX name as keywords;
    numpy arrays or tk Tensors of the declared element type and rank (dynamic
    dimensions take any size; static ones must match). Outputs: a list of numpy
    arrays in graph-output order, or with `return_dict=True` a dict keyed by
    output name. `input_names`, `output_names`, `input_types` describe the model.
    """

    def __init__(self, model, name: str, backend: str = "c", opt_level: int = 2, debug: bool | None = None,
                 precision: str = "fp32"):
        self.model_name = name
        self.backend = backend
        graph = model.graph
        self.opsets = model_opsets(model)
        initializer_names = {t.name for t in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in initializer_names]
        self.output_names = [o.name for o in graph.output]
        self._unsupported: list[Unsupported] = []
        self._model, self._types = model, None
        self.input_types = {}
        for value in graph.input:
            if value.name in initializer_names:
                continue
            self.input_types[value.name] = self._value_type(value, "input")
        # declared (dtype, dims) per graph output, None where undeclared: checked against what is computed
        self.output_types = {value.name: self._value_type(value, "output") for value in graph.output}
        self._nodes = self._check_nodes(graph, initializer_names)
        self._constants: dict[str, Tensor] = {}
        for init in graph.initializer:
            try:
                self._constants[init.name] = tensor_from_proto(init)
            except UnsupportedOpError as err:
                self._unsupported.append(Unsupported(f"initializer '{init.name}'", str(err)))
            except Exception as err:
                raise OnnxImportError(f"initializer '{init.name}' cannot be read: {err}") from None
        for sparse in graph.sparse_initializer:
            self._unsupported.append(Unsupported(f"sparse initializer '{sparse.values.name}'",
                                                 "sparse tensors are not supported"))
        if self._unsupported:
            raise UnsupportedModelError(self._unsupported, name)
        self.value_inputs = self._find_value_inputs(initializer_names)
        self.dim_params = self._dim_params(graph)
        self._model = self._types = None  # not needed after loading
        options = dict(opt_level=opt_level, debug=debug, backend=backend, precision=precision)
        self.jit_options = options  # what tk.onnx.load was given: a quantized copy compiles alike
        # dims named by a dim_param are size symbols (one name, one symbol); without any, automatic dynamic
        self._jit = jit(self._make_function(), dynamic=self.dim_params or None, **options)
        self._make_jit = lambda fn: jit(fn, **options)
        self._staged: StagedGraph | None = None  # set when shapes depend on data (staged.py)
        # ((shape, dtype) per input) of the last call of plain numpy arrays the checks accepted: a call
        # with the same goes straight to the compiled function (inputs read as values or stored as
        # bfloat16 need the full conversion)
        self._plain_signature: tuple | None = None
        self._plain_calls = not self.value_inputs and all(
            dtype is not dt.bfloat16 for dtype, _ in self.input_types.values())

    def _arguments(self, args, kwargs) -> list:
        if len(args) > len(self.input_names):
            raise TypeError(f"the model takes {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {len(args)} positional arguments")
        values = dict(zip(self.input_names, args))
        for key, value in kwargs.items():
            if key not in self.input_types:
                raise TypeError(f"the model has no input {key!r} (inputs: {', '.join(self.input_names)})")
            if key in values:
                raise TypeError(f"input {key!r} given twice")
            values[key] = value
        missing = [n for n in self.input_names if n not in values]
        if missing:
            raise TypeError(f"missing model input{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
        result = []
        for name in self.input_names:
            dtype, dims = self.input_types[name]
            value = values[name]
            if isinstance(value, Tensor):
                if value.dtype != dtype:
                    raise DTypeError(f"model input {name!r} expects {dtype.name}, got {value.dtype.name}")
                array = value.numpy() if dtype is not dt.bfloat16 else value._value
                tensor = value
            else:
                array = np.asarray(value)
                if dtype is dt.bfloat16 and array.dtype.name in ("bfloat16", "float32"):
                    array = dt.to_storage(array.astype(np.float32), dt.bfloat16)
                elif array.dtype != dtype.storage:
                    raise DTypeError(f"model input {name!r} expects {dtype.name} "
                                     f"(numpy {dtype.storage}), got {array.dtype}")
                tensor = None
            if dims is not None:
                shape = tuple(array.shape)
                if len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape)):
                    declared = [d if d is not None else "?" for d in dims]
                    raise ShapeError(f"model input {name!r} expects shape {declared}, got {list(shape)}")
            if name in self.value_inputs:
                result.append(FrozenValue.of(array, dtype))
            else:
                result.append(tensor if tensor is not None else Tensor._from_value(array, dtype))
        return result

    def __call__(self, *args, return_dict: bool = False, **kwargs):
        """Run the model: outputs as a list of numpy arrays (a dict by name with return_dict=True)."""
        if kwargs and not args and list(kwargs) == self.input_names:  # every input by name, in order:
            args, kwargs = tuple(kwargs.values()), {}  # the same call as positional, and its shortcut
        if not kwargs and self._staged is None and self._plain_signature is not None \
                and all(type(a) is np.ndarray for a in args) \
                and tuple((a.shape, a.dtype) for a in args) == self._plain_signature:
            outputs = self._jit(*args)  # the arguments the checks below accepted last time
            arrays = [o.numpy() if isinstance(o, Tensor) else np.asarray(o) for o in outputs]
            return dict(zip(self.output_names, arrays)) if return_dict else arrays
        arguments = self._arguments(args, kwargs)
        if self._plain_calls and not kwargs and len(args) == len(self.input_names) \
                and all(type(a) is np.ndarray for a in args):
            self._plain_signature = tuple((a.shape, a.dtype) for a in args)
        if self._staged is None:
            try:
                outputs = self._jit(*arguments)
            except DataDependentOutput:  # some shape depends on data: compiled stages from now on
                self._staged = StagedGraph(self, self._make_jit)
                outputs = self._staged(arguments)
        else:
            outputs = self._staged(arguments)
        arrays = [o.numpy() if isinstance(o, Tensor) else np.asarray(o) for o in outputs]
        return dict(zip(self.output_names, arrays)) if return_dict else arrays

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {self.input_types[n][0].name}{list(self.input_types[n][1] or [])}"
                        for n in self.input_names)
        return f"<OnnxModule {self.model_name!r} ({ins}) -> {', '.join(self.output_names)}; {self.backend}>"


def load(source, *, base_dir: str | os.PathLike | None = None, backend: str = "c", opt_level: int = 2,
         debug: bool | None = None, precision: str = "fp32") -> OnnxModule:
    """Load an ONNX model (path, bytes or onnx.ModelProto) as a callable compiled per input signature.

    backend="c" compiles each signature to C (the default); backend="interpreter"
    runs the optimized graph with the reference interpreter (fast checks of many
    small models). Raises UnsupportedOpError listing every unsupported operator
    at once, and OnnxImportError for a malformed model, before anything runs.

    External tensor data is read only from inside one directory: `base_dir`, or
    for a model given by path its own directory. A model given as bytes or as a
    ModelProto reads no external data unless `base_dir` is given.
    precision="bf16" computes matmuls, convolutions and attention with bf16 operands (tk.jit's option).
    """
    CompileOptions(opt_level=opt_level, debug=debug, backend=backend, precision=precision)  # checked first
    with Progress("importing ONNX model") as progress:  # a large model takes seconds to read
        progress.stage("reading")
        model, name = read_model(source, base_dir)
        progress.stage(f"importing {name}: {len(model.graph.node)} nodes, {len(model.graph.initializer)} tensors")
        return _module(model, name, backend, opt_level, debug, precision)


def _module(model, name: str, backend: str, opt_level: int, debug: bool | None, precision: str) -> OnnxModule:
    try:
        model = inline_functions(model, name)
        return OnnxModule(model, name, backend=backend, opt_level=opt_level, debug=debug, precision=precision)
    except onnx_errors() as err:  # onnx's checker or shape inference, called on the way, found the model invalid
        raise OnnxImportError(f"invalid ONNX model {name!r}: {type(err).__name__}: {err}") from None


def random_inputs(module: OnnxModule, seed: int = 0, dynamic: int = 1,
                  shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """Seeded random data for every input of `module`: of the shape `shapes` gives, else the declared one
    with dynamic dimensions = `dynamic`."""
    rng = np.random.default_rng(seed)
    result = {}
    for name in module.input_names:
        dtype, dims = module.input_types[name]
        shape = tuple(dynamic if d is None else d for d in (dims or ()))
        if shapes and name in shapes:
            shape = tuple(shapes[name])
        if dtype.is_floating:
            array = rng.standard_normal(shape).astype(np.float32)
            result[name] = dt.to_storage(array, dtype) if dtype is not dt.bfloat16 else array
        elif dtype.is_bool:
            result[name] = rng.random(shape) < 0.5
        else:
            result[name] = rng.integers(0, 10, size=shape).astype(dtype.storage)
    return result
