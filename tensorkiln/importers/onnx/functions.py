"""Operators without a converter but with an ONNX function body are replaced by that body.

Many ONNX operators (Attention, RMSNormalization, the losses, Swish, ...) are
defined by the standard as functions of simpler operators, some of them
context-dependent (the body depends on the node's attributes and input types).
`expand_node` asks onnx's schema for the body at the model's opset, substitutes
the node's attributes (`ref_attr_name`) and renames the body's internal values,
recursively, so every resulting node has a converter; the body's nodes keep
the opset the function was written for.
"""
from __future__ import annotations

import itertools
from typing import Callable

_counter = itertools.count()


class NotExpandable(Exception):
    """The node has no function body, or its body uses something unsupported: the model is unsupported."""


class BodyError(Exception):
    """onnx could not build the node's function body (attributes or input types it rejects): the model is
    malformed. Any other exception while expanding is a bug in tensorkiln and propagates as it is."""


def _schema(op_type: str, opset: int):
    import onnx
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:  # no such operator at this opset
        return None


def _body(node, opset: int, input_types: Callable[[str], object]):
    """The FunctionProto of `node`'s operator at `opset`, or None."""
    schema = _schema(node.op_type, opset)
    if schema is None:
        return None
    if schema.has_function:
        return _onnx_call(node, lambda: _plain_body(schema, opset))
    if schema.has_context_dependent_function:
        types = _input_types(node, input_types)  # NotExpandable (unknown types) is not onnx's failure
        return _onnx_call(node, lambda: _context_dependent_body(schema, node, opset, types))
    return None


def _onnx_call(node, build: Callable[[], object]):
    """`build()`, with onnx's failures (its C++ checks raise RuntimeError, ValidationError...) as BodyError."""
    try:
        return build()
    except Exception as err:
        raise BodyError(f"onnx cannot build the function body of {node.op_type}: {type(err).__name__}: "
                        f"{err}") from None


def _input_types(node, input_types: Callable[[str], object]) -> list[bytes]:
    """The serialized TypeProto of each node input (context-dependent bodies depend on them)."""
    import onnx
    types = []
    for name in node.input:
        t = input_types(name) if name else onnx.TypeProto()
        if t is None:
            raise NotExpandable(f"the type of input {name!r} is unknown (its function body depends on it)")
        types.append(t.SerializeToString())
    return types


def _plain_body(schema, opset: int):
    """The schema's fixed function body, in the newest version not above `opset`."""
    import onnx
    versions = [v for v in schema.function_opset_versions if v <= opset]
    data = schema.get_function_with_opset_version(max(versions)) if versions else None
    if data is None:
        return schema.function_body
    return data if isinstance(data, onnx.FunctionProto) else onnx.FunctionProto.FromString(data)


def _context_dependent_body(schema, node, opset: int, types: list[bytes]):
    """The body onnx builds for this node's attributes and input types (newest version not above `opset`)."""
    import onnx
    versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if versions:
        data = schema.get_context_dependent_function_with_opset_version(max(versions), node.SerializeToString(),
                                                                        types)
    else:
        data = schema.get_context_dependent_function(node.SerializeToString(), types)
    return onnx.FunctionProto.FromString(data)


def _default_attributes(node, opset: int) -> dict:
    schema = _schema(node.op_type, opset)
    defaults = {}
    if schema is not None:
        for name, attr in schema.attributes.items():
            if attr.default_value is not None and attr.default_value.type:
                defaults[name] = attr.default_value
    return defaults


def expand_node(node, opset: int, is_supported: Callable[[str], bool], input_types: Callable[[str], object],
                depth: int = 0) -> list[tuple[object, int]]:
    """`node` as a list of (NodeProto, opset) of supported operators, via its function body."""
    import onnx
    if depth > 4:
        raise NotExpandable("function bodies nest too deeply")
    body = _body(node, opset, input_types)
    if body is None:
        raise NotExpandable("operator not supported")
    body_opset = next((int(o.version) for o in body.opset_import if o.domain in ("", "ai.onnx")), opset)
    prefix = f"{node.name or node.op_type}__fn{next(_counter)}__"
    rename = {"": ""}
    for formal, actual in zip(body.input, list(node.input) + [""] * len(body.input)):
        rename[formal] = actual
    for formal, actual in zip(body.output, list(node.output) + [""] * len(body.output)):
        rename[formal] = actual or prefix + formal
    attributes = _default_attributes(node, opset)
    attributes.update({a.name: a for a in node.attribute})
    result = []
    for inner in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        del copy.input[:]
        del copy.output[:]
        copy.input.extend(rename.get(n, prefix + n) if n else "" for n in inner.input)
        copy.output.extend(rename.setdefault(n, prefix + n) if n else "" for n in inner.output)
        copy.name = prefix + (inner.name or inner.op_type)
        del copy.attribute[:]
        for attr in inner.attribute:
            if attr.ref_attr_name:
                if attr.ref_attr_name in attributes:
                    value = onnx.AttributeProto()
                    value.CopyFrom(attributes[attr.ref_attr_name])
                    value.name = attr.name
                    copy.attribute.append(value)
            else:
                if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    raise NotExpandable(f"its function body uses {inner.op_type} with a subgraph")
                copy.attribute.append(attr)
        if copy.domain not in ("", "ai.onnx"):
            raise NotExpandable(f"its function body uses {copy.domain}::{copy.op_type}")
        if is_supported(copy.op_type):
            result.append((copy, body_opset))
        else:
            try:
                result += expand_node(copy, body_opset, is_supported, lambda n: None, depth + 1)
            except NotExpandable as err:
                raise NotExpandable(f"its function body uses {copy.op_type}: {err}") from None
    return result
