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
"""
from __future__ import annotations

import inspect
import os
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError, TensorKilnError, UnsupportedOpError
from ...frontend.tensor import Tensor, as_tensor
from ...driver.options import CompileOptions
from ...driver.progress import Progress
from .errors import OnnxImportError, OnnxOutputShapeWarning, onnx_errors
from .external_data import external_tensors, load_external_data
from .functions import BodyError, NotExpandable, expand_node
from .element_types import tensor_from_proto, tk_dtype
from .registry import CONVERTERS, VALUE_INPUTS, DataDependentOutput, NodeContext
from .shape_values import shape_arithmetic
from .frozen import FrozenValue
from .staged import StagedGraph
from .control import SubGraphBody, static_refusal, value_positions
from ...frontend.jit import jit
from ...runtime.export_format import model_name_from
from ...shapes import hint_of

ONNX_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")  # ai.onnx.ml's converters are keyed "ai.onnx.ml::Op"
MIN_OPSET = 1  # opsets below 7 are converted on a best-effort basis (the PyTorch conformance cases use 6)


# Ops through which a graph input may reach a shape argument and still be value-specialized
# (shape arithmetic); a reduction, a matmul, ... in between makes the shape data-dependent.
SHAPE_ARITHMETIC = {"Identity", "Cast", "CastLike", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Gather",
                    "Slice", "Split", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Max", "Min", "Floor", "Ceil",
                    "Round", "Equal", "Less", "Greater", "Not", "And", "Or", "Where", "Range", "Expand", "Tile",
                    "ConstantOfShape", "Transpose", "Sqrt", "Pow", "Clip", "Sign", "Relu"}


@dataclass(frozen=True)
class Unsupported:
    """One thing in a model tensorkiln cannot run."""

    where: str  # "node 'name' (domain::Op, opset N)" or "input 'x'"
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.why}"


class UnsupportedModelError(UnsupportedOpError):
    """Every unsupported operator and element type of a model, listed at once (`.items`)."""

    def __init__(self, items: list[Unsupported], model_name: str):
        self.items = items
        lines = "\n".join(f"  - {item}" for item in items)
        super().__init__(f"ONNX model {model_name!r} uses {len(items)} unsupported "
                         f"operator{'s' if len(items) != 1 else ''} or type{'s' if len(items) != 1 else ''}:\n"
                         f"{lines}")


# ---- reading ---------------------------------------------------------------------------------

def _read_model(source, base_dir: str | os.PathLike | None) -> tuple[Any, str]:
    """A ModelProto from a path, bytes or ModelProto, and a name for messages.

    External data is read from under `base_dir`, for a path by default the
    model's own directory (external_data.py's containment rules); a model
    given as bytes or ModelProto reads none without `base_dir`.
    """
    try:
        import onnx
    except ImportError:  # pragma: no cover
        raise ImportError("tk.onnx needs the onnx package: pip install onnx") from None
    if isinstance(source, onnx.ModelProto):
        model, name = source, source.graph.name or "model"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model = _parse_bytes(bytes(source))
        name = model.graph.name or "model"
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        model, name = _read_file(path), os.path.basename(path)
        if base_dir is None:
            base_dir = os.path.dirname(os.path.abspath(path))
    else:
        raise TypeError(f"tk.onnx.load expects a path, bytes or onnx.ModelProto, got {type(source).__name__}")
    _check_header(model, name)
    if isinstance(source, onnx.ModelProto) and any(True for _ in external_tensors(model)):
        model = _copy(model)  # the external data is read into the tensors: leave the caller's proto alone
    load_external_data(model, None if base_dir is None else os.fspath(base_dir), name)
    return model, name


def _parse_bytes(data: bytes):
    import onnx
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError and friends
        raise OnnxImportError(f"the bytes are not a readable ONNX model: {err}") from None
    return model


def _read_file(path: str):
    """The ModelProto in the file at `path`, its external data not read (load_external_data does that)."""
    import onnx
    if os.path.isdir(path):
        raise OnnxImportError(f"ONNX model path {path!r} is a directory, not a model file")
    if not os.path.exists(path):
        raise OnnxImportError(f"ONNX model file {path!r} does not exist")
    if not os.path.isfile(path):
        raise OnnxImportError(f"ONNX model path {path!r} is not a regular file")
    try:
        return onnx.load(path, load_external_data=False)
    except Exception as err:  # protobuf's DecodeError, OSError (permissions), ...
        raise OnnxImportError(f"{path!r} is not a readable ONNX model: {err}") from None


def _check_header(model, name: str) -> None:
    """A model needs a graph with outputs, an IR version and (from IR version 3) an opset import: an empty
    or truncated file parses as an empty ModelProto, which must not load as a model computing nothing."""
    if not model.HasField("graph"):
        raise OnnxImportError(f"ONNX model {name!r} has no graph (an empty or truncated file, or not a model)")
    if model.ir_version <= 0:
        raise OnnxImportError(f"ONNX model {name!r} has no IR version (ir_version {model.ir_version})")
    if not model.opset_import and model.ir_version >= 3:  # IR versions 1 and 2 predate opset imports
        raise OnnxImportError(f"ONNX model {name!r} imports no opset (IR version {model.ir_version} needs one)")
    if not model.graph.output:
        raise OnnxImportError(f"ONNX model {name!r} has no graph outputs")


def _copy(model):
    import onnx
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _attributes(node) -> dict:
    """A node's attributes as Python values (strings decoded, tensors as TensorProto)."""
    from onnx import helper
    result = {}
    for attr in node.attribute:
        if attr.ref_attr_name:
            raise OnnxImportError(f"node '{node.name}' ({node.op_type}): attribute {attr.name!r} refers to a "
                                  "function attribute outside a function")
        try:
            value = helper.get_attribute_value(attr)
        except Exception as err:  # an attribute of an unknown or inconsistent type
            raise OnnxImportError(f"node '{node.name}' ({node.op_type}): attribute {attr.name!r} cannot be read: "
                                  f"{err}") from None
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        result[attr.name] = value
    return result


def _check_attribute_kinds(node, opset: int, where: str) -> None:
    """OnnxImportError when an attribute's kind is not the one the operator's schema declares
    (string `axes`, float `perm`): the converters read attributes as the standard defines them."""
    from onnx import AttributeProto, defs
    try:
        declared = defs.get_schema(node.op_type, opset, node.domain or "").attributes
    except defs.SchemaError:  # not a standard operator at this opset: its converter checks what it reads
        return
    for attr in node.attribute:
        schema = declared.get(attr.name)
        if schema is None or attr.ref_attr_name or attr.type in (schema.type, AttributeProto.UNDEFINED):
            continue
        got = AttributeProto.AttributeType.Name(attr.type)
        want = AttributeProto.AttributeType.Name(schema.type)
        raise OnnxImportError(f"{where}: attribute {attr.name!r} must be of type {want}, got {got}")


def _node_label(node, index: int) -> str:
    return node.name or f"#{index} {node.op_type}"


@dataclass
class _Node:
    """A node ready to convert."""

    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict
    opset: int


class OnnxModule:
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
        self.opsets = _opsets(model)
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

    def _dim_params(self, graph) -> dict[str, dict[int, str]]:
        """{input argument name: {axis: symbol name}} for every input axis declared with a dim_param."""
        arguments = dict(zip(self.input_names, _identifiers(self.input_names)))
        result: dict[str, dict[int, str]] = {}
        for value in graph.input:
            if value.name not in arguments or value.name in self.value_inputs:
                continue
            t = value.type
            if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
                continue
            for axis, d in enumerate(t.tensor_type.shape.dim):
                if d.HasField("dim_param") and d.dim_param:
                    result.setdefault(arguments[value.name], {})[axis] = _identifiers([d.dim_param])[0]
        return result

    # ---- checks ------------------------------------------------------------------------------
    def _value_type(self, value, kind: str):
        """(dtype, dims) of a graph input/output; dims hold None for dynamic sizes, or dims is None."""
        t = value.type
        if t.WhichOneof("value") != "tensor_type":
            self._unsupported.append(Unsupported(f"{kind} '{value.name}'",
                                                 f"{t.WhichOneof('value') or 'untyped'} values are not supported "
                                                 "(only tensors)"))
            return None
        if kind == "output" and t.tensor_type.elem_type == 0:
            return None  # an output's type may be left to inference
        try:
            dtype = tk_dtype(t.tensor_type.elem_type)
        except UnsupportedOpError as err:
            self._unsupported.append(Unsupported(f"{kind} '{value.name}'", str(err)))
            return None
        dims = None
        if t.tensor_type.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim)
        return dtype, dims

    def _check_nodes(self, graph, initializer_names) -> list[_Node]:
        defined = set(initializer_names) | set(self.input_names) | {""}
        problems, nodes = [], []
        producers = {}
        for index, node in enumerate(graph.node):
            for out in node.output:
                if out:
                    producers.setdefault(out, index)
        pending = list(enumerate(graph.node))
        ordered = []
        while pending:  # ONNX nodes should be topologically sorted; accept any order that resolves
            rest = []
            for index, node in pending:
                if all(i in defined for i in node.input):
                    ordered.append((index, node))
                    defined.update(o for o in node.output if o)
                else:
                    rest.append((index, node))
            if len(rest) == len(pending):
                for index, node in rest:
                    missing = [i for i in node.input if i not in defined and i not in producers]
                    if missing:
                        problems.append(f"node '{_node_label(node, index)}' ({node.op_type}) reads "
                                        f"{', '.join(repr(m) for m in missing)}, which no graph input, initializer "
                                        "or node defines")
                if not problems:
                    problems.append("the graph has a cycle among nodes " +
                                    ", ".join(f"'{_node_label(n, i)}'" for i, n in rest[:5]))
                break
            pending = rest
        for out in self.output_names:
            if out not in defined and not any(out == p for p in problems):
                problems.append(f"graph output {out!r} is not produced by any node, input or initializer")
        if problems:
            raise OnnxImportError(f"malformed ONNX model {self.model_name!r}:\n  - " + "\n  - ".join(problems))
        for index, node in ordered:
            nodes += self._prepare(node, index)
        for node in nodes:
            self._check_attribute_types(node)
        return nodes

    def _prepare(self, node, index: int, scope: str = "") -> list[_Node]:
        """The _Nodes one ONNX node converts as (a function's body when the standard defines one), its
        sub-graphs (If, Loop, Scan) prepared too; unsupported operators are noted, not raised."""
        nodes: list[_Node] = []
        domain = node.domain or ""
        label = scope + _node_label(node, index)
        opset = self.opsets.get("ai.onnx" if domain == "" else domain)
        where = f"node '{label}' ({(domain or 'ai.onnx')}::{node.op_type}, opset {opset})"
        if domain not in ONNX_DOMAINS:
            self._unsupported.append(Unsupported(where, f"operator domain {domain!r} is not supported"))
            return nodes
        if opset is None:
            raise OnnxImportError(f"malformed ONNX model {self.model_name!r}: it imports no opset for "
                                  f"the default domain, which node '{label}' uses")
        if domain == "ai.onnx.ml":  # its converters are keyed "ai.onnx.ml::Op"; it defines no function bodies
            key = f"{domain}::{node.op_type}"
            if key not in CONVERTERS:
                self._unsupported.append(Unsupported(where, "operator not supported"))
                return nodes
            _check_attribute_kinds(node, opset, f"malformed ONNX model {self.model_name!r}: {where}")
            nodes.append(_Node(key, label, list(node.input), list(node.output), _attributes(node), opset))
            return nodes
        if node.op_type not in CONVERTERS:
            try:  # an operator the standard defines as a function of others: convert its body
                expanded = expand_node(node, opset, CONVERTERS.__contains__, self._inferred_type)
            except NotExpandable as err:  # no body, or one using an unsupported operator
                self._unsupported.append(Unsupported(where, str(err)))
                return nodes
            except BodyError as err:  # onnx rejects the node's attributes or input types
                raise OnnxImportError(f"malformed ONNX model {self.model_name!r}: {where}: {err}") from None
            # any other exception is tensorkiln's own failure: it propagates, it is not "unsupported"
            for inner, inner_opset in expanded:
                nodes.append(_Node(inner.op_type, f"{label}/{inner.name.rsplit('__', 1)[-1]}",
                                   list(inner.input), list(inner.output), _attributes(inner), inner_opset))
            return nodes
        _check_attribute_kinds(node, opset, f"malformed ONNX model {self.model_name!r}: {where}")
        attrs = _attributes(node)
        refusal = static_refusal(node.op_type, attrs, list(node.input), list(node.output), opset)
        if refusal:
            self._unsupported.append(Unsupported(where, refusal))
            return nodes
        for key, value in attrs.items():
            if type(value).__name__ == "GraphProto":  # a branch or loop body: its nodes, ready to convert
                body = [inner for k, n in enumerate(value.node) for inner in self._prepare(n, k, f"{label}/")]
                for inner in body:
                    self._check_attribute_types(inner)
                attrs[key] = SubGraphBody(value, body)
        nodes.append(_Node(node.op_type, label, list(node.input), list(node.output), attrs, opset))
        return nodes

    def _check_attribute_types(self, node: _Node) -> None:
        """Element types named by attributes (Cast's `to`, Constant's value, ...) must be supported."""
        where = f"node '{node.name}' (ai.onnx::{node.op_type}, opset {node.opset})"
        attrs = node.attrs
        for key in ("to", "dtype"):
            if key in attrs and isinstance(attrs[key], int):
                try:
                    tk_dtype(attrs[key])
                except UnsupportedOpError as err:
                    self._unsupported.append(Unsupported(where, f"attribute {key}: {err}"))
        if "value" in attrs and hasattr(attrs["value"], "data_type"):
            try:
                tk_dtype(attrs["value"].data_type)
            except UnsupportedOpError as err:
                self._unsupported.append(Unsupported(where, f"attribute value: {err}"))
        if node.op_type == "Constant" and not ({"value", "value_float", "value_floats", "value_int",
                                                "value_ints"} & set(attrs)):
            self._unsupported.append(Unsupported(where, f"Constant of kind {sorted(attrs)} is not supported"))

    def _inferred_type(self, name: str):
        """The TypeProto of a value from onnx's shape inference (run once, on demand)."""
        if self._types is None:
            import onnx
            self._types = {}
            try:
                inferred = onnx.shape_inference.infer_shapes(self._model)
            except Exception:
                inferred = self._model
            graph = inferred.graph
            for value in list(graph.input) + list(graph.value_info) + list(graph.output):
                self._types[value.name] = value.type
            for init in graph.initializer:
                self._types.setdefault(init.name, onnx.helper.make_tensor_type_proto(init.data_type, init.dims))
        return self._types.get(name)

    def _find_value_inputs(self, initializer_names) -> set[str]:
        """Graph inputs whose values (not just shapes) decide shapes: they are specialized per value."""
        producer = {}
        nodes = list(_with_bodies(self._nodes))  # a branch's shapes may come from the model's inputs too
        for node in nodes:
            for out in node.outputs:
                producer[out] = node
        needed, result, seen = [], set(), set()
        for node in nodes:
            positions = VALUE_INPUTS.get(node.op_type, lambda opset: set())(node.opset)
            positions = positions | value_positions(node.op_type, node.inputs, node.outputs)
            needed += [name for i, name in enumerate(node.inputs) if i in positions and name]
        while needed:
            name = needed.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in self.input_types:
                result.add(name)
            elif name in producer and producer[name].op_type in SHAPE_ARITHMETIC:
                needed += [i for i in producer[name].inputs if i]
            elif name in producer and producer[name].op_type == "If":  # through the branches' results
                branches = [v for v in producer[name].attrs.values() if isinstance(v, SubGraphBody)]
                needed += [i for i in producer[name].inputs if i]
                needed += [o.name for b in branches for o in b.graph.output]
        return result

    # ---- the traced function -------------------------------------------------------------------
    def _make_function(self):
        names = _identifiers(self.input_names)

        def run(*args):
            return self._execute(args)

        run.__name__ = _identifiers([self.model_name.rsplit(".", 1)[0] or "onnx_model"])[0]
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

    # ---- calling -------------------------------------------------------------------------------
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

    @property
    def compile_count(self) -> int:
        """Programs compiled so far (one serves every size of its dim_params that its guards admit)."""
        return self._jit.compile_count

    def graph(self, *args, **kwargs):
        """The traced tensorkiln graph for these inputs' signature."""
        return self._jit.graph(*self._arguments(args, kwargs))

    def optimized_graph(self, *args, **kwargs):
        """The graph after the optimization passes (batch norm folded, ...) for these inputs' signature."""
        return self._jit.optimized_graph(*self._arguments(args, kwargs))

    def profile(self, *args, repeat: int = 20, **kwargs):
        """Mean time per call of each kernel for these inputs' signature (tk.jit's profile)."""
        return self._jit.profile(*self._arguments(args, kwargs), repeat=repeat)

    def report(self, *args, **kwargs):
        """The CompileReport for these inputs' signature (compiles it if needed); a model run in stages:
        one report of all its segments (staged.py)."""
        arguments = self._arguments(args, kwargs)
        if self._staged is None:
            try:
                return self._jit.report(*arguments)
            except DataDependentOutput:
                self._staged = StagedGraph(self, self._make_jit)
        return self._staged.report(arguments)

    def cache_size(self) -> int:
        """Number of compiled programs this model holds (one per input signature called, at most 64;
        a model run in stages: those of every stage)."""
        return self._jit.cache_size() + (self._staged.cache_size() if self._staged is not None else 0)

    @property
    def stages(self) -> str | None:
        """How a model whose shapes depend on data runs: its compiled segments and the nodes run on
        actual values between them (staged.py); None for a model that is one compiled program."""
        return None if self._staged is None else self._staged.describe()

    def explain(self, *args, **kwargs) -> str:
        """Graph after each pass, kernels and generated source for these inputs' signature."""
        return self._jit.explain(*self._arguments(args, kwargs))

    def clear_cache(self) -> None:
        """Forget the compiled signatures (the next call compiles again: after tk.tune, with its records)."""
        self._jit.clear_cache()

    def export(self, directory, *args, name: str | None = None, input_shapes: dict | None = None,
               weights: str = "auto", openmp: bool = True, **kwargs):
        """Export the model as a standalone C library in `directory` (tk.load_compiled reads it back).

        The shapes come from example inputs (`args`/`kwargs`, as for a call) or, for inputs not given,
        from the declared shapes, with `input_shapes` {name: shape} for dynamic dimensions. Inputs the
        model reads as values (a Reshape's shape) must be given. name: the C prefix (default: the file's).
        """
        values = dict(zip(self.input_names, args))
        values.update(kwargs)
        for input_name in self.input_names:
            if input_name not in values:
                values[input_name] = self._placeholder(input_name, (input_shapes or {}).get(input_name))
        arguments = self._arguments((), values)
        names = [n for n in self.input_names if n not in self.value_inputs]
        default = model_name_from(self.model_name.rsplit(".", 1)[0] or "onnx_model")
        return self._jit.export(directory, *arguments, name=name or default, input_names=names,
                                output_names=self.output_names, weights=weights, openmp=openmp)

    def _placeholder(self, name: str, shape) -> np.ndarray:
        """Zeros of input `name`'s declared shape (dynamic dimensions from `shape`), to trace an export."""
        dtype, dims = self.input_types[name]
        if name in self.value_inputs:
            raise TypeError(f"the model reads input {name!r} as a value (a shape or an axis): pass it to export")
        if shape is None:
            if dims is None or any(d is None for d in dims):
                declared = "unknown" if dims is None else [d if d is not None else "?" for d in dims]
                raise ShapeError(f"input {name!r} has dynamic dimensions (declared {declared}): give its shape "
                                 f"(input_shapes={{{name!r}: (...)}} or --input {name}=SHAPE)")
            shape = dims
        shape = tuple(int(d) for d in shape)
        if dims is not None and (len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape))):
            declared = [d if d is not None else "?" for d in dims]
            raise ShapeError(f"input {name!r} is declared with shape {declared}, not {list(shape)}")
        return np.zeros(shape, dtype.storage)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {self.input_types[n][0].name}{list(self.input_types[n][1] or [])}"
                        for n in self.input_names)
        return f"<OnnxModule {self.model_name!r} ({ins}) -> {', '.join(self.output_names)}; {self.backend}>"


def _with_bodies(nodes: list) -> Iterator:
    """The nodes, and the nodes of their branches and loop bodies at every depth."""
    for node in nodes:
        yield node
        for value in node.attrs.values():
            if isinstance(value, SubGraphBody):
                yield from _with_bodies(value.nodes)


def _shape_matches(dims: tuple, shape: tuple) -> bool:
    """Whether a computed shape fits declared dims (None, a symbolic or unset dimension, fits any size)."""
    return len(dims) == len(shape) and all(d is None or d == s for d, s in zip(dims, shape))


def _rewrap(err: TensorKilnError, message: str) -> TensorKilnError:
    try:
        new = type(err)(message)
    except TypeError:
        new = TensorKilnError(message)
    return new


def _opsets(model) -> dict[str, int]:
    result = {}
    for entry in model.opset_import:
        domain = entry.domain or "ai.onnx"
        result[domain] = int(entry.version)
    if not model.opset_import and model.ir_version and model.ir_version < 3:
        result["ai.onnx"] = 1  # IR version 1/2 models implied opset 1
    return result


def _identifiers(names: Sequence[str]) -> list[str]:
    result, seen = [], set()
    for n in names:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in n) or "arg"
        if base[0].isdigit():
            base = "_" + base
        candidate, k = base, 1
        while candidate in seen:
            candidate, k = f"{base}_{k}", k + 1
        seen.add(candidate)
        result.append(candidate)
    return result


def _inline_functions(model, name: str):
    """Inline model-local functions (onnx.inliner), so every node is an ai.onnx operator or unknown."""
    if not len(model.functions):
        return model
    try:
        from onnx import inliner
    except ImportError:  # an onnx without the inliner: the function calls are reported as unsupported
        return model
    try:
        return inliner.inline_local_functions(model)
    except Exception as err:  # the inliner's checks: a malformed function or call
        raise OnnxImportError(f"ONNX model {name!r}: its model-local functions cannot be inlined: {err}") from None


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
        model, name = _read_model(source, base_dir)
        progress.stage(f"importing {name}: {len(model.graph.node)} nodes, {len(model.graph.initializer)} tensors")
        return _module(model, name, backend, opt_level, debug, precision)


def _module(model, name: str, backend: str, opt_level: int, debug: bool | None, precision: str) -> OnnxModule:
    try:
        model = _inline_functions(model, name)
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
