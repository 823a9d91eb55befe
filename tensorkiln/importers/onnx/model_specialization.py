"""Which sizes and values a model's compiled programs depend on: size symbols and value-specialized inputs.

An input dimension declared with a `dim_param` ("batch") is a size symbol
(docs/dynamic_shapes.md): one program serves its sizes. A graph input whose
value reaches a shape argument (Reshape's shape, Slice's starts) through
shape arithmetic only is value-specialized: its value is part of the signature.
"""
from __future__ import annotations

from typing import Iterator, Sequence

from .control import SubGraphBody, value_positions
from .registry import VALUE_INPUTS

# Ops through which a graph input may reach a shape argument and still be value-specialized
# (shape arithmetic); a reduction, a matmul, ... in between makes the shape data-dependent.
SHAPE_ARITHMETIC = {"Identity", "Cast", "CastLike", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Gather",
                    "Slice", "Split", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Max", "Min", "Floor", "Ceil",
                    "Round", "Equal", "Less", "Greater", "Not", "And", "Or", "Where", "Range", "Expand", "Tile",
                    "ConstantOfShape", "Transpose", "Sqrt", "Pow", "Clip", "Sign", "Relu"}


class ModelSpecialization:
    """OnnxModule's value inputs and size symbols, found as it loads, from `input_names`, `input_types` and
    `_nodes` (model.py); an input read as a value has no size symbols."""

    def _dim_params(self, graph) -> dict[str, dict[int, str]]:
        """{input argument name: {axis: symbol name}} for every input axis declared with a dim_param."""
        arguments = dict(zip(self.input_names, identifiers(self.input_names)))
        result: dict[str, dict[int, str]] = {}
        for value in graph.input:
            if value.name not in arguments or value.name in self.value_inputs:
                continue
            t = value.type
            if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
                continue
            for axis, d in enumerate(t.tensor_type.shape.dim):
                if d.HasField("dim_param") and d.dim_param:
                    result.setdefault(arguments[value.name], {})[axis] = identifiers([d.dim_param])[0]
        return result

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


def _with_bodies(nodes: list) -> Iterator:
    """The nodes, and the nodes of their branches and loop bodies at every depth."""
    for node in nodes:
        yield node
        for value in node.attrs.values():
            if isinstance(value, SubGraphBody):
                yield from _with_bodies(value.nodes)


def identifiers(names: Sequence[str]) -> list[str]:
    """Distinct Python identifiers for ONNX names (other characters become _, a clash gets a suffix)."""
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
