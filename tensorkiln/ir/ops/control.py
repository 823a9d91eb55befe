"""Structured control flow: cond, while_loop and scan, each one graph op holding its sub-graphs.

A control-flow node computes several results at once, so it is a value of its
own (`RESULTS`, a placeholder type that no kernel stores) read by one `result`
node per result (attrs index, type). Its sub-graphs are attributes
(`SubGraph`): their inputs are, in order,

- cond(pred, *operands; branches=(then, else)): both branches take the operands
  and return the results; pred is a scalar (nonzero: then);
- while_loop(*carry, *captured; cond, body, carried=n): cond takes carry +
  captured and returns a bool scalar; body takes the same and returns the new
  carry; the results are the final carry;
- scan(*carry, *xs, *captured; body, carried=n, scanned=m, length, reverse):
  body takes carry + one slice of each xs (its axis 0 removed) + captured and
  returns the new carry and one slice of each stacked output ys; the results
  are the final carry and the ys (length, ...).

The reference runs the sub-graphs with the interpreter it is given, so this
module does not import graph.py (which imports the op table).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError, UnsupportedOpError
from .registry import Attrs, MappingType, OpKind, TensorType, register

RESULTS = TensorType((0,), dt.uint8)  # the type of a control-flow node: its values are its `result` nodes
CONTROL_OPS = ("cond", "while_loop", "scan")


class SubGraph:
    """A graph held as an attribute; compared by identity (CSE merges only the same body)."""

    __slots__ = ("graph",)

    def __init__(self, graph):
        self.graph = graph

    @property
    def input_types(self) -> list[TensorType]:
        return [n.type for n in self.graph.inputs]

    @property
    def output_types(self) -> list[TensorType]:
        return [n.type for n in self.graph.outputs]

    def __repr__(self) -> str:
        return f"<graph {self.graph.name}: {len(self.graph.inputs)} -> {len(self.graph.outputs)}>"


def sub_graphs(attrs: Attrs) -> list[tuple[str, SubGraph]]:
    """(role, sub-graph) of a control-flow node's attributes, in a fixed order."""
    found = []
    for key, value in attrs.items():
        if isinstance(value, SubGraph):
            found.append((key, value))
        elif isinstance(value, tuple) and value and all(isinstance(v, SubGraph) for v in value):
            found += [(f"{key}{k}", v) for k, v in enumerate(value)]
    return found


def describe_types(types) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


def _check_takes(op: str, what: str, graph: SubGraph, types: list[TensorType]) -> None:
    if graph.input_types != list(types):
        raise ShapeError(f"{what} takes {describe_types(graph.input_types)} but is given "
                         f"{describe_types(types)}")


def result_types(op: str, attrs: Attrs) -> list[TensorType]:
    """The types of a control-flow node's results."""
    if op == "cond":
        return attrs["branches"][0].output_types
    if op == "while_loop":
        return attrs["body"].output_types
    carried, length = attrs["carried"], attrs["length"]
    outs = attrs["body"].output_types
    return outs[:carried] + [TensorType((length,) + t.shape, t.dtype) for t in outs[carried:]]


def _cond_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    if not types or types[0].shape != ():
        raise ShapeError(f"the predicate must be a scalar, got {types[0] if types else 'nothing'}")
    then, else_ = attrs["branches"]
    _check_takes("cond", "the true branch", then, types[1:])
    _check_takes("cond", "the false branch", else_, types[1:])
    if then.output_types != else_.output_types:
        raise ShapeError(f"the true branch returns {describe_types(then.output_types)} but the false branch "
                         f"returns {describe_types(else_.output_types)}")
    return RESULTS


def _while_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    carried = attrs["carried"]
    cond, body = attrs["cond"], attrs["body"]
    _check_takes("while_loop", "cond_fun", cond, types)
    _check_takes("while_loop", "body_fun", body, types)
    if cond.output_types != [TensorType((), dt.bool_)]:
        raise DTypeError(f"cond_fun must return one bool scalar, got {describe_types(cond.output_types)}")
    if body.output_types != types[:carried]:
        raise ShapeError(f"body_fun returns {describe_types(body.output_types)} but the loop carries "
                         f"{describe_types(types[:carried])}")
    return RESULTS


def _scan_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    carried, scanned, length = attrs["carried"], attrs["scanned"], attrs["length"]
    if length < 0:
        raise ShapeError(f"length must be >= 0, got {length}")
    xs = types[carried:carried + scanned]
    for t in xs:
        if t.ndim == 0 or t.shape[0] != length:
            raise ShapeError(f"every scanned input needs a leading axis of length {length}, got {t}")
    slices = [TensorType(t.shape[1:], t.dtype) for t in xs]
    given = types[:carried] + slices + types[carried + scanned:]
    body = attrs["body"]
    _check_takes("scan", "f", body, given)
    if body.output_types[:carried] != types[:carried]:
        raise ShapeError(f"f returns the carry {describe_types(body.output_types[:carried])} but the scan "
                         f"carries {describe_types(types[:carried])}")
    return RESULTS


def _result_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    if types != [RESULTS]:
        raise ShapeError("result reads the results of a control-flow op")
    return attrs["type"]


Interpreter = Callable[..., list]


def run_control(op: str, attrs: Attrs, inputs: list[np.ndarray], interpret: Interpreter) -> tuple:
    """The results of a control-flow node (storage arrays), its sub-graphs run by `interpret`."""
    if op == "cond":
        branch = attrs["branches"][0 if bool(np.asarray(inputs[0]).reshape(())) else 1]
        return tuple(interpret(branch.graph, *inputs[1:]))
    carried = attrs["carried"]
    if op == "while_loop":
        carry, captured = list(inputs[:carried]), list(inputs[carried:])
        while bool(interpret(attrs["cond"].graph, *carry, *captured)[0]):
            carry = interpret(attrs["body"].graph, *carry, *captured)
        return tuple(carry)
    scanned, length = attrs["scanned"], attrs["length"]
    carry = list(inputs[:carried])
    xs, captured = inputs[carried:carried + scanned], list(inputs[carried + scanned:])
    out_types = attrs["body"].output_types[carried:]
    ys = [np.empty((length,) + t.shape, t.dtype.storage) for t in out_types]
    steps = range(length - 1, -1, -1) if attrs["reverse"] else range(length)
    for t in steps:
        results = interpret(attrs["body"].graph, *carry, *(x[t] for x in xs), *captured)
        carry = results[:carried]
        for y, value in zip(ys, results[carried:]):
            y[t] = value
    return tuple(carry) + tuple(ys)


def _no_direct_reference(inputs, attrs, out_type):
    raise UnsupportedOpError("control-flow ops are run by the graph interpreter (ir/graph.py's evaluate)")


def _not_differentiable_while(grad, inputs, output, attrs, needs, build):
    raise UnsupportedOpError("while_loop is forward-only: its trip count is known only at run time, so "
                             "reverse mode has no values to save; use scan with a fixed length to differentiate")


def _attached_by_the_front_end(name: str):
    """The tape never reaches this rule: tk.cond and tk.scan attach their own tape nodes when traced
    (frontend/control_grad.py: a cond of the branches' gradients, a reverse scan over saved carries)."""
    def rule(grad, inputs, output, attrs, needs, build):
        raise UnsupportedOpError(f"{name}: its gradient is built by tk.{name} when traced "
                                 "(frontend/control_grad.py), not from a recorded node")
    return rule


register("cond", OpKind.CONTROL, MappingType.MANY_TO_MANY, _cond_infer, _no_direct_reference, None,
         "cond(pred, *operands; branches): the results of branches[0] if pred else branches[1]",
         gradient=_attached_by_the_front_end("cond"))
register("while_loop", OpKind.CONTROL, MappingType.MANY_TO_MANY, _while_infer, _no_direct_reference, None,
         "while_loop(*carry, *captured; cond, body, carried): carry = body(carry) while cond(carry)",
         gradient=_not_differentiable_while)
register("scan", OpKind.CONTROL, MappingType.MANY_TO_MANY, _scan_infer, _no_direct_reference, None,
         "scan(*carry, *xs, *captured; body, carried, scanned, length, reverse): carry, y[t] = body(carry, x[t])",
         gradient=_attached_by_the_front_end("scan"))
register("result", OpKind.CONTROL, MappingType.ONE_TO_ONE, _result_infer, _no_direct_reference, 1,
         "result(control; index, type): one result of a control-flow op",
         gradient=_attached_by_the_front_end("result"))
