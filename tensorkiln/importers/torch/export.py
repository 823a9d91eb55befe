"""tk.from_torch: import a PyTorch module ahead of time through torch.export.

    program = tk.from_torch(model.eval(), (example_input,))
    logits = program(x)               # numpy arrays, tk Tensors or torch tensors in; tk Tensors out

`torch.export.export(module, example_inputs)` gives an ATen graph whose
parameters, buffers and tensor constants are lifted to inputs. When the
lowering table covers every op of it (conv2d, linear, batch_norm, in-place
relu_ on intermediates...) it is converted as is; otherwise
`run_decompositions()` first reduces it to core ATen (which retraces the
graph, about half of the import time of a ResNet). The lifted tensors
become tensorkiln constants (snapshots taken at import), the user inputs
become the compiled function's inputs. Shapes are those of the example
inputs, except the dimensions made dynamic with torch.export's
`dynamic_shapes` (`torch.export.Dim`): those stay size symbols, named after
torch's, with its bounds, so one compiled program serves every size in range
(docs/dynamic_shapes.md).
"""
from __future__ import annotations

import dataclasses
import functools

import warnings
from typing import Any

import numpy as np
import torch
from torch.export.graph_signature import InputKind, OutputKind

from ...errors import ShapeError, UnsupportedOpError
from ...frontend.jit import jit
from ...frontend.tensor import Tensor, as_tensor
from .backend import decompositions
from .convert import ConvertedGraph, convert_graph, rebuild_outputs, unsupported_nodes
from .export_hints import export_for_inference
from .tensors import to_tk
from ...shapes import Dim
from ...shapes.env import MAX_SIZE, MIN_SIZE


class TorchProgram:
    """A PyTorch module imported by from_torch: call it with the user inputs (flattened in order)."""

    def __init__(self, exported, converted: ConvertedGraph, input_shapes: list[tuple], opt_level: int = 2,
                 debug: bool | None = None, precision: str = "fp32", dynamic: dict | None = None,
                 bounds: dict | None = None):
        self.exported_program = exported
        self.converted = converted
        self.input_shapes = input_shapes
        spec = exported.call_spec.out_spec
        self._single_output = spec is not None and spec.is_leaf()  # common case: skip the pytree rebuild
        # one tensor out, the first flat result: the jitted function returns it alone, no structure
        self._first_result = self._single_output and converted.output_structure in ((0,), [0])
        fn = converted.fn
        if self._first_result:
            fn = functools.wraps(converted.fn)(lambda *tensors: converted.fn(*tensors)[0])
        # input_shapes holds None where a dimension is symbolic (dynamic_shapes); tk.jit traces those as symbols
        self.jit = jit(fn, opt_level=opt_level, debug=debug, precision=precision, dynamic=dynamic or None)
        self._shapes = tuple(tuple(shape) for shape in input_shapes)
        self._dynamic = bool(dynamic)
        self.bounds = bounds or {}  # (input, axis) -> torch.export's (min, max) of a dynamic dimension
        # sizes 0 and 1 are never symbols in tensorkiln (broadcasting differs): such calls trace static
        self._static_jit = functools.partial(jit, fn, opt_level=opt_level, debug=debug, precision=precision,
                                             dynamic=False)
        self.specialized: dict[str, Any] | None = None  # non-tensor example inputs, checked at each call

    def _inputs(self, args, kwargs) -> list:
        leaves = torch.utils._pytree.tree_leaves((list(args), dict(kwargs)),
                                                 is_leaf=lambda v: isinstance(v, (Tensor, np.ndarray)))
        if self.specialized is not None:
            given = _non_tensor_leaves(args, kwargs)
            if given != self.specialized:
                changed = sorted(k for k in set(given) | set(self.specialized)
                                 if given.get(k, "absent") != self.specialized.get(k, "absent"))
                raise ValueError(f"non-tensor input(s) {', '.join(changed)} differ from the example inputs "
                                 f"({', '.join(f'{k}={self.specialized.get(k)!r}' for k in changed)}): "
                                 f"torch.export bakes such values into the program; call tk.from_torch again")
        tensors = [to_tk(v) if isinstance(v, torch.Tensor) else as_tensor(v)
                   for v in leaves if isinstance(v, (Tensor, np.ndarray, torch.Tensor))]
        if len(tensors) != len(self.input_shapes):
            raise TypeError(f"this program takes {len(self.input_shapes)} tensor input(s), got {len(tensors)}")
        for (i, axis), (low, high) in self.bounds.items():
            size = tensors[i].shape[axis] if i < len(tensors) and axis < len(tensors[i].shape) else None
            if size is not None and not (low <= size <= high):
                raise ShapeError(f"input {i} ({self.converted.input_names[i]}) has size {size} in dimension "
                                 f"{axis}, outside the range [{low}, {high}] it was exported with")
        for i, (t, shape) in enumerate(zip(tensors, self.input_shapes)):
            if not _fits(tuple(t.shape), shape):
                exported = ["*" if size is None else size for size in shape]
                raise ShapeError(f"input {i} ({self.converted.input_names[i]}) has shape {list(t.shape)}, but "
                                 f"the model was exported with shape {exported} (* = dynamic); call "
                                 f"tk.from_torch with example inputs of the new shape, or make that dimension "
                                 f"dynamic with dynamic_shapes")
        return tensors

    def __call__(self, *args, **kwargs):
        """Run on numpy arrays, tk Tensors or torch tensors; returns tk Tensors in the module's output structure."""
        if not kwargs and not self._dynamic and all(type(a) is np.ndarray for a in args) and \
                tuple(a.shape for a in args) == self._shapes:
            flat = self.jit(*args)  # plain arrays of the exported shapes: no flattening needed
        else:
            tensors = self._inputs(args, kwargs)
            flat = self._function_for(tensors)(*tensors)
        if self._first_result:
            return flat
        outputs = rebuild_outputs(self.converted.output_structure, flat)
        if self._single_output:
            return outputs[0]
        return torch.utils._pytree.tree_unflatten(list(outputs), self.exported_program.call_spec.out_spec)

    def report(self, *args, **kwargs):
        """tk.jit's CompileReport (kernels, passes, timings) for these inputs."""
        tensors = self._inputs(args, kwargs)
        return self._function_for(tensors).report(*tensors)

    def explain(self, *args, **kwargs) -> str:
        """tk.jit's explanation: graph after each pass, kernels, generated source."""
        tensors = self._inputs(args, kwargs)
        return self._function_for(tensors).explain(*tensors)

    def profile(self, *args, repeat: int = 20, **kwargs):
        """tk.jit's per-kernel profile (time per call of each kernel) for these inputs."""
        tensors = self._inputs(args, kwargs)
        return self._function_for(tensors).profile(*tensors, repeat=repeat)

    def _function_for(self, tensors: list):
        """The symbolic program, or (a dynamic dimension of size 0 or 1) the one that traces static."""
        if any(tensors[i].shape[axis] < MIN_SIZE for i, axis in self.bounds):
            if not isinstance(self._static_jit, type(self.jit)):
                self._static_jit = self._static_jit()
            return self._static_jit
        return self.jit


def from_torch(module: torch.nn.Module, example_inputs: Any, example_kwargs: dict | None = None, *,
               opt_level: int = 2, debug: bool | None = None, strict: bool = False,
               precision: str = "fp32", dynamic_shapes: Any = None) -> TorchProgram:
    """Import `module` (in eval mode) via torch.export at the example inputs' shapes; returns a TorchProgram.

    precision="bf16": matmuls, convolutions and attention take bf16 operands (tk.jit's option).
    dynamic_shapes: torch.export's argument (e.g. {"x": {0: torch.export.Dim("batch", max=64)}}); those
    dimensions stay symbolic in the compiled program."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if getattr(module, "training", False):
        warnings.warn("tk.from_torch: the module is in training mode (dropout active, batch norm uses batch "
                      "statistics); call module.eval() for inference", UserWarning, stacklevel=3)
    with torch.no_grad():
        exported = export_for_inference(module, example_inputs, example_kwargs, strict, dynamic_shapes)
        if unsupported_nodes(exported.graph):  # else convert as is: decomposing retraces the whole graph
            exported = exported.run_decompositions(decompositions())
    signature = exported.graph_signature
    constants: dict[str, torch.Tensor] = {}
    for spec in signature.input_specs:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = exported.state_dict.get(spec.target)
            if value is None:
                value = exported.constants[spec.target]
            constants[spec.arg.name] = value
        elif spec.kind == InputKind.USER_INPUT and not isinstance(_placeholder_value(exported, spec.arg.name),
                                                                    torch.Tensor):
            constants[spec.arg.name] = _placeholder_value(exported, spec.arg.name)  # specialized by export
        elif spec.kind != InputKind.USER_INPUT:
            raise UnsupportedOpError(f"torch.export input {spec.arg.name} of kind {spec.kind.name}")
    written = [spec.target for spec in signature.output_specs if spec.kind == OutputKind.USER_INPUT_MUTATION]
    if written:  # e.g. a StaticCache's index_copy_
        raise UnsupportedOpError(f"the exported program writes its input(s) {', '.join(written)} in place: "
                                 f"tk.from_torch imports pure functions; torch.compile(backend=\"tensorkiln\") "
                                 f"writes such inputs back after each call")
    mutations = [spec.arg.name for spec in signature.output_specs if spec.kind != OutputKind.USER_OUTPUT]
    if mutations:
        raise UnsupportedOpError(f"the exported program updates state ({', '.join(mutations)}): tensorkiln "
                                 f"imports inference graphs; call module.eval()")
    converted = convert_graph(exported.graph_module, constants, what="model")
    if converted.random:  # an inference graph keeps dropout(train=False): it draws nothing, so takes no key
        fn = converted.fn
        converted = dataclasses.replace(converted, fn=lambda *tensors: fn(*tensors, None), random=False)
    placeholders = {n.name: n for n in exported.graph.nodes if n.op == "placeholder"}
    values = [placeholders[name].meta["val"] for name in converted.input_names]
    shapes = [tuple(None if isinstance(size, torch.SymInt) else int(size) for size in v.shape) for v in values]
    dynamic, bounds = _symbolic_dims(exported, values)
    program = TorchProgram(exported, converted, shapes, opt_level, debug, precision, dynamic, bounds)
    program.specialized = _non_tensor_leaves(example_inputs, example_kwargs or {})
    return program


def _symbolic_dims(exported, values: list[torch.Tensor]) -> tuple[dict, dict]:
    """(tk.jit's `dynamic` for the inputs' symbolic sizes: {"arg<i>": {axis: Dim(torch's symbol)}},
    {(input, axis): torch.export's (min, max) of that size})."""
    dynamic: dict[str, dict[int, Dim]] = {}
    bounds: dict[tuple[int, int], tuple[int, int]] = {}
    for i, value in enumerate(values):
        for axis, size in enumerate(value.shape):
            if not isinstance(size, torch.SymInt):
                continue
            expr = size.node.expr
            if not expr.is_Symbol:
                raise UnsupportedOpError(f"input {i}'s dimension {axis} is the expression {expr} of other sizes; "
                                         f"tensorkiln takes each dynamic input dimension as a symbol of its own")
            found = exported.range_constraints.get(expr)
            low = int(found.lower) if found is not None and found.lower.is_finite else 0
            high = int(found.upper) if found is not None and found.upper.is_finite else MAX_SIZE
            bounds[(i, axis)] = (low, high)
            dynamic.setdefault(f"arg{i}", {})[axis] = Dim(str(expr), min=max(low, MIN_SIZE), max=high)
    return dynamic, bounds


def _fits(shape: tuple, exported: tuple) -> bool:
    """True when `shape` has the exported rank and static sizes (None: a dynamic dimension, any size)."""
    return len(shape) == len(exported) and all(e is None or s == e for s, e in zip(shape, exported))


def _placeholder_value(exported, name: str):
    return next(n for n in exported.graph.nodes if n.op == "placeholder" and n.name == name).meta.get("val")


def _non_tensor_leaves(args, kwargs) -> dict[str, Any]:
    """{argument path: value} of the non-tensor inputs (use_cache=False, ...): torch.export bakes them in."""
    leaves, _ = torch.utils._pytree.tree_flatten_with_path((list(args), dict(kwargs)))
    return {torch.utils._pytree.keystr(path): value for path, value in leaves
            if not isinstance(value, (torch.Tensor, Tensor, np.ndarray))}
