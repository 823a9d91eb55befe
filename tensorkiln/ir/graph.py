"""The graph IR: immutable nodes in SSA form, the Graph, its printer, verifier and interpreter.

A Node is one application of a registered op to earlier nodes. Nodes never
change after creation; a pass that rewrites a graph builds new nodes. The
reference interpreter runs a graph with each op's numpy reference and is the
oracle every compiled result is tested against.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as dt
from ..errors import TensorKilnError, VerifyError
from .ops import Attrs, ConstantValue, TensorType, get_op, infer_type
from .ops.registry import OpKind
from .ops.control import CONTROL_OPS, run_control, sub_graphs

_node_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Node:
    """One SSA value: `op` applied to `inputs` with `attrs`, of static `type`.

    `scope` is the stack of composite ops (e.g. ("softmax:12",)) whose
    definition created this node, so later layers can recognise softmax or
    attention; `location` is the user's source line that created it.
    """

    op: str
    inputs: tuple["Node", ...]
    attrs: Attrs
    type: TensorType
    scope: tuple[str, ...] = ()
    location: str | None = None
    id: int = field(default_factory=lambda: next(_node_ids))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> dt.DType:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    @property
    def kind(self) -> OpKind:
        return get_op(self.op).kind

    def __repr__(self) -> str:
        return f"Node({self.op}#{self.id}: {self.type})"


def make_node(op: str, inputs: list[Node] | tuple[Node, ...], attrs: Attrs | dict | None = None,
              scope: tuple[str, ...] = (), location: str | None = None) -> Node:
    """Create a node, inferring (and so checking) its type."""
    attrs = attrs if isinstance(attrs, Attrs) else Attrs(attrs or {})
    inputs = tuple(inputs)
    out_type = infer_type(op, [i.type for i in inputs], attrs, location)
    return Node(op, inputs, attrs, out_type, scope, location)


def constant_node(array: np.ndarray, dtype: dt.DType, location: str | None = None) -> Node:
    """A constant node holding `array` (already in `dtype`'s storage type).

    A strided view (a transposed weight) is copied to C order once, here:
    content digests and the generated code's constant arrays need it so, and
    would otherwise each copy it again. Broadcast views (zero strides) stay
    views: their copy could be far larger than the data.
    """
    if isinstance(array, np.ndarray) and not array.flags.c_contiguous and \
            all(stride != 0 for stride, size in zip(array.strides, array.shape) if size > 1):
        array = np.ascontiguousarray(array)
    ttype = TensorType(tuple(array.shape), dtype)
    return Node("constant", (), Attrs(value=ConstantValue(array), type=ttype), ttype, (), location)


def input_node(name: str, index: int, ttype: TensorType) -> Node:
    """A graph parameter."""
    return Node("input", (), Attrs(name=name, index=index, type=ttype), ttype)


def topological_order(outputs: list[Node], extra: list[Node] = ()) -> list[Node]:
    """Nodes reachable from `outputs` (plus `extra`), each after all of its inputs."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in list(extra) + list(outputs):
        if root.id in seen:
            continue
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if node.id in seen:
                continue
            seen.add(node.id)
            stack.append((node, True))
            for inp in reversed(node.inputs):
                if inp.id not in seen:
                    stack.append((inp, False))
    return order


class Graph:
    """A function as a DAG of nodes: parameters, outputs, nodes in topological order."""

    def __init__(self, inputs: list[Node], outputs: list[Node], name: str = "graph"):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.name = name
        self.nodes = topological_order(self.outputs, self.inputs)

    def users(self) -> dict[int, list[Node]]:
        """Map node id -> nodes that read it."""
        result: dict[int, list[Node]] = {n.id: [] for n in self.nodes}
        for node in self.nodes:
            for inp in node.inputs:
                result[inp.id].append(node)
        return result

    def __len__(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"


def _short_location(location: str | None) -> str:
    if not location:
        return ""
    path, _, line = location.rpartition(":")
    return f"{path.rsplit('/', 1)[-1]}:{line}"


def _format_attr(key: str, value) -> str:
    if isinstance(value, TensorType):
        return f"{key}={value}"
    if isinstance(value, dt.DType):
        return f"{key}={value.name}"
    if isinstance(value, float):
        return f"{key}={value:g}"
    return f"{key}={value!r}"


def node_names(graph: Graph) -> dict[int, str]:
    """SSA names as the printer shows them: %param for inputs, %0, %1, ... for the rest."""
    names: dict[int, str] = {n.id: "%" + n.attrs["name"] for n in graph.inputs}
    counter = 0
    for node in graph.nodes:
        if node.id not in names:
            names[node.id] = f"%{counter}"
            counter += 1
    return names


def format_node(node: Node, names: dict[int, str]) -> str:
    """One line of SSA text: `%3 = add(%1, %2) : f32[4,8]`."""
    if node.op == "constant":
        value = node.attrs["value"]
        if node.dtype is dt.bfloat16 and value.array.size <= 4:  # show values, not uint16 bit patterns
            value = ConstantValue(dt.f32_from_bf16_bits(value.array))
        text = f"constant {value!r}"
    else:
        args = ", ".join(names[i.id] for i in node.inputs)
        attrs = ", ".join(_format_attr(k, v) for k, v in node.attrs.items())
        text = f"{node.op}({args}{'; ' + attrs if attrs else ''})"
    return f"{names[node.id]} = {text} : {node.type}"


def node_notes(node: Node) -> str:
    """The composite a node belongs to and the user's source line, for comments."""
    return " ".join(x for x in (node.scope[0].split(":")[0] if node.scope else "",
                                _short_location(node.location)) if x)


def format_graph(graph: Graph) -> str:
    """Readable SSA text: one line per node with its type, composite scope and source line."""
    names = node_names(graph)
    params = ", ".join(f"{names[n.id]}: {n.type}" for n in graph.inputs)
    lines = [f"graph {graph.name}({params}) {{"]
    for node in graph.nodes:
        if node.op == "input":
            continue
        line = "  " + format_node(node, names)
        notes = node_notes(node)
        if notes:
            line = f"{line:<72} # {notes}"
        lines.append(line)
    outs = ", ".join(names[n.id] for n in graph.outputs)
    lines.append(f"  return {outs}")
    lines.append("}")
    for node in graph.nodes:  # branches and loop bodies of control-flow ops, below their graph
        for role, sub in sub_graphs(node.attrs) if node.op in CONTROL_OPS else ():
            lines.append(f"  {names[node.id]}.{role}:")
            lines += ["    " + line for line in format_graph(sub.graph).splitlines()]
    return "\n".join(lines)


def verify(graph: Graph) -> None:
    """Check the IR invariants; raise VerifyError naming the first broken one."""
    defined: set[int] = set()
    for i, node in enumerate(graph.inputs):
        if node.op != "input" or node.attrs["index"] != i:
            raise VerifyError(f"graph input {i} is not an input node with index {i}: {node}")
    for node in graph.nodes:
        for inp in node.inputs:
            if inp.id not in defined:
                raise VerifyError(f"{node} uses {inp} before it is defined")
        if node.op == "input" and node not in graph.inputs:
            raise VerifyError(f"{node} is an input node that is not a graph parameter")
        try:
            expected = infer_type(node.op, [i.type for i in node.inputs], node.attrs)
        except (TensorKilnError, TypeError, KeyError) as err:  # unknown op, wrong arity, missing attr
            raise VerifyError(f"{node}: its op rejects its operands: {err}") from None
        if expected != node.type:
            raise VerifyError(f"{node} has type {node.type}, its op infers {expected}")
        if node.op == "constant":
            array = node.attrs["value"].array
            if tuple(array.shape) != node.shape or array.dtype != node.dtype.storage:
                raise VerifyError(f"{node} holds a {array.dtype}{list(array.shape)} array")
        defined.add(node.id)
    for out in graph.outputs:
        if out.id not in defined:
            raise VerifyError(f"output {out} is not in the graph")


def evaluate(op: str, attrs: Attrs, inputs: list[np.ndarray], input_types: list[TensorType],
             out_type: TensorType) -> np.ndarray:
    """Run one op's numpy reference on storage arrays; returns a storage array of out_type.

    A control-flow op returns the tuple of its results (ops/control.py); `result` picks one.
    """
    if op in CONTROL_OPS:
        return run_control(op, attrs, inputs, interpret)
    if op == "result":
        return inputs[0][attrs["index"]]
    compute_inputs = [dt.to_compute(a, t.dtype) for a, t in zip(inputs, input_types)]
    result = get_op(op).reference(compute_inputs, attrs, out_type)
    result = dt.to_storage(np.asarray(result), out_type.dtype)
    if result.shape != out_type.shape:
        raise VerifyError(f"reference of {op} returned shape {result.shape}, expected {out_type.shape}")
    return result


def interpret(graph: Graph, *args: np.ndarray) -> list[np.ndarray]:
    """Run a graph with the numpy reference implementations (the oracle)."""
    if len(args) != len(graph.inputs):
        raise TypeError(f"{graph.name} takes {len(graph.inputs)} inputs, got {len(args)}")
    values: dict[int, np.ndarray] = {}
    for node, arg in zip(graph.inputs, args):
        values[node.id] = dt.to_storage(arg, node.dtype)
    remaining = {n.id: 0 for n in graph.nodes}
    for node in graph.nodes:
        for inp in node.inputs:
            remaining[inp.id] += 1
    keep = {n.id for n in graph.outputs}
    for node in graph.nodes:
        if node.id in values:
            continue
        if node.op == "constant":
            values[node.id] = node.attrs["value"].array
            continue
        ins = [values[i.id] for i in node.inputs]
        values[node.id] = evaluate(node.op, node.attrs, ins, [i.type for i in node.inputs], node.type)
        for inp in node.inputs:  # free intermediates as soon as their last reader ran
            remaining[inp.id] -= 1
            if remaining[inp.id] == 0 and inp.id not in keep:
                values.pop(inp.id, None)
    return [values[n.id] for n in graph.outputs]
