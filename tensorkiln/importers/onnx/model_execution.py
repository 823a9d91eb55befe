"""Running a model's nodes on tk Tensors: the Python function that tk.jit traces per input signature.

Each node goes through its converter (registry.py), or through shape
arithmetic when its inputs are sizes, so that they stay symbolic; a failure
names the node. Sub-graphs (If, Loop, Scan) run the same way, reading the
names they do not define from the enclosing scope. The computed outputs are
checked against the declared types.
"""
from __future__ import annotations

import inspect
import warnings

from ...errors import TensorKilnError, UnsupportedOpError
from ...frontend.tensor import Tensor, as_tensor
from ...shapes import hint_of
from .control import SubGraphBody
from .element_types import tensor_from_proto
from .errors import OnnxImportError, OnnxOutputShapeWarning, onnx_errors
from .frozen import FrozenValue
from .model_specialization import identifiers
from .registry import CONVERTERS, NodeContext
from .shape_values import shape_arithmetic


class ModelExecution:
    """OnnxModule's traced function, over `input_names`, `output_names`, `output_types`, `_nodes` and
    `_constants` (model.py); staged.py runs `_run_nodes` on actual values between compiled stages."""

    def _make_function(self):
        names = identifiers(self.input_names)

        def run(*args):
            return self._execute(args)

        run.__name__ = identifiers([self.model_name.rsplit(".", 1)[0] or "onnx_model"])[0]
        run.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
        return run

    def _execute(self, args) -> list[Tensor]:
        env: dict[str, Tensor | None] = dict(self._constants)
        env[""] = None
        for name, value in zip(self.input_names, args):
            env[name] = as_tensor(value.array, value.dtype) if isinstance(value, FrozenValue) else value
        self._run_nodes(self._nodes, env)
        outputs = [env[name] for name in self.output_names]
        self._check_outputs(outputs)
        return outputs

    def _run_graph(self, body: "SubGraphBody", args: list, outer: dict) -> list:
        """A sub-graph's outputs for `args` (its inputs in order); names it does not define are read
        from the enclosing scope `outer`, as ONNX says."""
        env = dict(outer)
        for init in body.graph.initializer:
            env[init.name] = tensor_from_proto(init)
        for value, arg in zip(body.graph.input, args):
            env[value.name] = arg
        self._run_nodes(body.nodes, env)
        return [env[o.name] for o in body.graph.output]

    def _run_nodes(self, nodes: list, env: dict) -> None:
        """Convert `nodes` in order, reading and writing values by name in `env`."""
        for node in nodes:
            inputs = [env[i] for i in node.inputs]
            ctx = NodeContext(node.op_type, node.name, node.opset, len(node.outputs),
                              [bool(o) for o in node.outputs],
                              run_graph=lambda body, args, env=env: self._run_graph(body, args, env))
            try:
                result = shape_arithmetic(node.op_type, inputs, node.attrs, node.opset)  # sizes stay symbolic
                if result is None:
                    result = CONVERTERS[node.op_type](ctx, inputs, node.attrs)
            except TensorKilnError as err:
                message = str(err)
                if f"'{node.name}'" not in message:
                    message = f"node '{node.name}' ({node.op_type}, opset {node.opset}): {message}"
                raise _rewrap(err, message) from err
            except onnx_errors() as err:  # an onnx helper the converter called found the node invalid
                raise OnnxImportError(f"node '{node.name}' ({node.op_type}, opset {node.opset}): "
                                      f"{type(err).__name__}: {err}") from None
            results = list(result) if isinstance(result, (list, tuple)) else [result]
            for out, value in zip(node.outputs, results):
                if out:
                    env[out] = value
            for out in node.outputs[len(results):]:
                if out:
                    raise UnsupportedOpError(f"node '{node.name}' ({node.op_type}): output {out!r} is not "
                                             "supported by tensorkiln's converter")

    def _check_outputs(self, outputs: list) -> None:
        """Computed outputs against the declared types: another element type is an error (the caller would
        get arrays of a type the model promises not to produce); another static shape warns, as ONNX Runtime
        does (declared shapes are often stale after a model is edited; symbolic dimensions match any size)."""
        for name, value in zip(self.output_names, outputs):
            declared = self.output_types.get(name)
            if declared is None or not isinstance(value, Tensor):
                continue
            dtype, dims = declared
            if value.dtype != dtype:
                raise OnnxImportError(f"ONNX model {self.model_name!r}: graph output {name!r} is declared "
                                      f"{dtype.name} but the model computes {value.dtype.name}")
            shape = tuple(hint_of(d) for d in value.shape)  # the sizes of this trace: a diagnostic, no guard
            if dims is not None and not _shape_matches(dims, shape):
                declared_shape = [d if d is not None else "?" for d in dims]
                warnings.warn(f"ONNX model {self.model_name!r}: graph output {name!r} is declared with shape "
                              f"{declared_shape} but the model computes {list(shape)}", OnnxOutputShapeWarning,
                              stacklevel=2)


def _shape_matches(dims: tuple, shape: tuple) -> bool:
    """Whether a computed shape fits declared dims (None, a symbolic or unset dimension, fits any size)."""
    return len(dims) == len(shape) and all(d is None or d == s for d, s in zip(dims, shape))


def _rewrap(err: TensorKilnError, message: str) -> TensorKilnError:
    try:
        new = type(err)(message)
    except TypeError:
        new = TensorKilnError(message)
    return new
