"""Checking a model before anything is traced: each node and value is supported and well formed.

Every unsupported operator and element type is collected (`Unsupported`) and
reported at once (UnsupportedModelError); a malformed graph (a dangling input,
a cycle, an attribute of the wrong kind) raises OnnxImportError. The nodes that
pass become `_Node`s ready to convert: sorted, their attributes read, an operator
the standard defines as a function expanded into its body, sub-graphs prepared too.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import UnsupportedOpError
from .control import SubGraphBody, static_refusal
from .element_types import tk_dtype
from .errors import OnnxImportError
from .functions import BodyError, NotExpandable, expand_node
from .registry import CONVERTERS

# the domains whose operators convert; those other than ai.onnx have converters keyed "domain::Op"
# (ai.onnx.ml's; com.microsoft's: ONNX Runtime's quantization operators, quant_contrib.py)
KEYED_DOMAINS = ("ai.onnx.ml", "com.microsoft")
ONNX_DOMAINS = ("", "ai.onnx") + KEYED_DOMAINS
MIN_OPSET = 1  # opsets below 7 are converted on a best-effort basis (the PyTorch conformance cases use 6)


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


class ModelChecks:
    """OnnxModule's checks, run while it loads. They read `model_name`, `opsets`, `input_names` and `_model`,
    note what is unsupported in `_unsupported` and keep onnx's inferred types in `_types` (model.py)."""

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
        if domain in KEYED_DOMAINS:  # converters keyed "domain::Op"; no function bodies to expand
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
