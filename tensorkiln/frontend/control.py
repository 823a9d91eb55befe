"""tk.cond, tk.while_loop and tk.scan: structured control flow with JAX's names and semantics.

Eagerly they run as plain Python (so eager autodiff sees every step). Inside a
tk.jit trace each branch or body is traced into a sub-graph (`BodyTrace`): its
arguments become the sub-graph's inputs, and tensors of the enclosing traces it
reads become extra inputs too ("captured"), passed to the control-flow node as
operands. The call becomes one graph op holding its sub-graphs
(ir/ops/control.py), read by one `result` node per value, which the compiler
turns into C `if`/`for`/`while` statements (docs/control_flow.md). Traced cond
and scan results that need gradients get tape nodes from control_grad.py (a cond
of the branches' gradients, a reverse scan over the saved carries); while_loop
is forward-only.

Operands and carries are pytrees: tuples, lists and dicts of tensors (None for
nothing); numpy arrays and Python scalars are made tensors.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import ShapeError, TraceError, UnsupportedOpError, at_user_line, user_location
from ..ir.graph import Graph, Node, input_node, make_node
from ..ir.ops.control import SubGraph, describe_types, result_types, sub_graphs
from ..ir.ops.registry import TensorType
from .autodiff.mode import is_grad_enabled
from .control_grad import attach_cond_gradient, attach_scan_gradient, replay
from .functions import stack
from .tensor import Tensor, as_tensor
from .trace import Trace, current_trace, substitute, tracing

# ---- pytrees ----------------------------------------------------------------------------------------


def tree_flatten(tree) -> tuple[list, Any]:
    """(leaves, structure) of nested tuples, lists and dicts; None is an empty subtree."""
    if tree is None:
        return [], ("none",)
    if isinstance(tree, (tuple, list)):
        leaves, children = [], []
        for item in tree:
            sub, structure = tree_flatten(item)
            leaves += sub
            children.append(structure)
        return leaves, (type(tree).__name__, tuple(children))
    if isinstance(tree, dict):
        keys = tuple(sorted(tree))
        leaves, children = [], []
        for key in keys:
            sub, structure = tree_flatten(tree[key])
            leaves += sub
            children.append(structure)
        return leaves, ("dict", keys, tuple(children))
    return [tree], ("leaf",)


def tree_unflatten(structure, leaves: list):
    """The tree of `structure` with `leaves` in order."""
    it = iter(leaves)

    def build(s):
        if s[0] == "none":
            return None
        if s[0] == "leaf":
            return next(it)
        if s[0] == "dict":
            return {k: build(c) for k, c in zip(s[1], s[2])}
        items = [build(c) for c in s[1]]
        return tuple(items) if s[0] == "tuple" else items
    return build(structure)


def _tensors(leaves: list) -> list[Tensor]:
    return [leaf if isinstance(leaf, Tensor) else as_tensor(leaf) for leaf in leaves]


def _types(tensors: list[Tensor]) -> list[TensorType]:
    return [t.type for t in tensors]


class BranchTypeError(ShapeError):
    """The two branches of a cond return different structures, shapes or dtypes."""


def _check_same(what: str, first: str, first_types, second: str, second_types,
                first_structure=None, second_structure=None, error: type = ShapeError) -> None:
    """Raise `error` naming both sides unless their structures and types match."""
    if first_structure is not None and first_structure != second_structure:
        raise error(at_user_line(f"{what}: {first} and {second} have different structures: "
                                      f"{first_structure} vs {second_structure}"))
    if list(first_types) != list(second_types):
        raise error(at_user_line(f"{what}: {first} has types {describe_types(first_types)} but {second} "
                                      f"has {describe_types(second_types)}"))


# ---- tracing a body into a sub-graph ----------------------------------------------------------------
class BodyTrace(Trace):
    """Traces a branch or loop body: tensors of enclosing traces it reads become extra inputs."""

    def __init__(self, name: str, parent: Trace, types: list[TensorType]):
        super().__init__(name)
        self.parent = parent
        self.scope = parent.scope
        self.inputs = [input_node(f"a{k}", k, t) for k, t in enumerate(types)]
        self.captured: dict[int, tuple[Node, Node]] = {}  # outer node id -> (outer node, input here)
        self.captured_tensors: dict[int, Tensor] = {}  # outer node id -> the tensor read (for gradients)

    def reaches(self, other: Trace) -> bool:
        return other is self.parent or self.parent.reaches(other)

    def node_of(self, tensor) -> Node:
        if tensor._node is not None and tensor._trace is self:
            return tensor._node
        if tensor._node is None and not self.is_state(tensor):
            return self.constant_for(tensor)  # a literal or weight: a constant of the body itself
        outer = self.parent.node_of(tensor)  # through every enclosing body up to the jit trace
        if outer.id not in self.captured:
            inner = input_node(f"cap{len(self.captured)}", len(self.inputs) + len(self.captured), outer.type)
            self.captured[outer.id] = (outer, inner)
            self.captured_tensors[outer.id] = tensor
        return self.captured[outer.id][1]

    def record_write(self, tensor, node: Node) -> None:
        raise TraceError(at_user_line("in-place writes to tensors are not supported inside a tk.cond, "
                                      "tk.while_loop or tk.scan body; return the new value instead"))

    def record_grad_write(self, tensor) -> None:
        self.record_write(tensor, None)


def _trace_body(call: Callable[[list[Tensor]], Any], types: list[TensorType], name: str, parent: Trace):
    """Trace `call` on symbolic tensors of `types`: (BodyTrace, output nodes, output structure)."""
    body = BodyTrace(name, parent, types)
    with tracing(body):
        out = call([Tensor._from_node(n, body) for n in body.inputs])
    leaves, structure = tree_flatten(out)
    nodes = [body.node_of(t) for t in _tensors(leaves)]
    return body, nodes, structure


def _sub_graph(bodies: list[BodyTrace], outputs: list[list[Node]]
               ) -> tuple[list[SubGraph], list[Node], list[Tensor]]:
    """Sub-graphs of bodies that share one input list: their arguments, then every capture of any of them;
    with the captured nodes and the tensors they were read from."""
    captured: dict[int, Node] = {}
    tensors: dict[int, Tensor] = {}
    for body in bodies:
        for outer, _ in body.captured.values():
            captured.setdefault(outer.id, outer)
            tensors.setdefault(outer.id, body.captured_tensors[outer.id])
    graphs = []
    for body, outs in zip(bodies, outputs):
        n = len(body.inputs)
        shared = [input_node(f"cap{k}", n + k, outer.type) for k, outer in enumerate(captured.values())]
        position = {oid: k for k, oid in enumerate(captured)}
        mapping = {inner.id: shared[position[oid]] for oid, (_, inner) in body.captured.items()}
        graphs.append(SubGraph(Graph(body.inputs + shared, substitute(list(outs), mapping), body.name)))
    return graphs, list(captured.values()), list(tensors.values())


def _control_results(op: str, operands: list[Node], attrs: dict, trace: Trace) -> list[Tensor]:
    """One control-flow node and its result tensors."""
    location = user_location()
    node = make_node(op, operands, attrs, trace.scope, location)
    return [Tensor._from_node(make_node("result", [node], {"index": k, "type": t}, trace.scope, location), trace)
            for k, t in enumerate(result_types(op, node.attrs))]


def _active_trace(tensors: list[Tensor]) -> Trace | None:
    trace = current_trace()
    if trace is None and any(t._node is not None for t in tensors):
        raise TraceError(at_user_line("a traced tensor was used outside the tk.jit function that created it"))
    return trace


def _wants_grad(tensors: list[Tensor]) -> bool:
    return is_grad_enabled() and any(t._requires_grad for t in tensors)


def _replay_control(node: Node, operands: list[Tensor]) -> tuple:
    """A control-flow node of a sub-graph recomputed by front-end calls (control_grad.replay)."""
    graphs = dict(sub_graphs(node.attrs))

    def run(role: str):
        return lambda *args: tuple(replay(graphs[role].graph, list(args), _replay_control))
    if node.op == "cond":
        return tuple(cond(operands[0], run("branches0"), run("branches1"), *operands[1:]))
    carried = node.attrs["carried"]
    carry = tuple(operands[:carried])
    if node.op == "while_loop":
        captured = operands[carried:]
        return tuple(while_loop(lambda c: run("cond")(*c, *captured)[0], lambda c: run("body")(*c, *captured),
                                carry))
    scanned = node.attrs["scanned"]
    xs, captured = tuple(operands[carried:carried + scanned]), operands[carried + scanned:]

    def step(c, x):
        out = run("body")(*c, *x, *captured)
        return tuple(out[:carried]), tuple(out[carried:])
    final, ys = scan(step, carry, xs, length=node.attrs["length"], reverse=node.attrs["reverse"])
    return tuple(final) + tuple(ys)


# ---- the API ------------------------------------------------------------------------------------------
def cond(pred, true_fn: Callable, false_fn: Callable, *operands):
    """true_fn(*operands) if pred else false_fn(*operands); both must return the same structure and types."""
    leaves, structure = tree_flatten(list(operands))
    tensors = _tensors(leaves)
    pred_t = as_tensor(pred)
    trace = _active_trace(tensors + [pred_t])
    if trace is None or (pred_t._node is None and not trace.is_state(pred_t)):
        # eager, or a predicate known while tracing (a constant, a shape): only the branch taken is traced
        return true_fn(*operands) if bool(pred_t) else false_fn(*operands)
    if pred_t.ndim != 0:
        raise ShapeError(at_user_line(f"cond: the predicate must be a scalar, got shape {pred_t.shape}"))
    types = _types(tensors)
    then_body, then_out, then_structure = _trace_body(lambda ts: true_fn(*tree_unflatten(structure, ts)), types,
                                                      "cond_then", trace)
    else_body, else_out, else_structure = _trace_body(lambda ts: false_fn(*tree_unflatten(structure, ts)), types,
                                                      "cond_else", trace)
    _check_same("cond", "true_fn's result", [n.type for n in then_out], "false_fn's result",
                [n.type for n in else_out], then_structure, else_structure, BranchTypeError)
    graphs, captured, captured_tensors = _sub_graph([then_body, else_body], [then_out, else_out])
    pred_node = trace.node_of(pred_t)
    if not pred_t.dtype.is_bool:
        pred_node = make_node("ne", [pred_node, trace.constant_for(as_tensor(np.zeros((), pred_t.dtype.storage)))])
    results = _control_results("cond", [pred_node] + [trace.node_of(t) for t in tensors] + captured,
                               {"branches": tuple(graphs)}, trace)
    if _wants_grad(tensors + captured_tensors):
        attach_cond_gradient(results, pred_t, tensors + captured_tensors, graphs, cond, _replay_control)
    return tree_unflatten(then_structure, results)


def while_loop(cond_fun: Callable, body_fun: Callable, init_val):
    """val = init_val; while cond_fun(val): val = body_fun(val); return val (forward-only)."""
    leaves, structure = tree_flatten(init_val)
    tensors = _tensors(leaves)
    trace = _active_trace(tensors)
    if is_grad_enabled() and any(t._requires_grad for t in tensors):
        raise UnsupportedOpError(at_user_line(
            "while_loop is forward-only: its trip count is known only at run time, so reverse mode has no "
            "values to save; use tk.scan with a fixed length to differentiate, or wrap the call in tk.no_grad()"))
    if trace is None:
        val = tree_unflatten(structure, tensors)
        while bool(cond_fun(val)):
            val = body_fun(val)
            out_leaves, out_structure = tree_flatten(val)
            _check_same("while_loop", "body_fun's result", _types(_tensors(out_leaves)), "init_val",
                        _types(tensors), out_structure, structure)
        return val
    types = _types(tensors)
    cond_body, cond_out, _ = _trace_body(lambda ts: cond_fun(tree_unflatten(structure, ts)), types,
                                         "while_cond", trace)
    body, body_out, body_structure = _trace_body(lambda ts: body_fun(tree_unflatten(structure, ts)), types,
                                                 "while_body", trace)
    _check_same("while_loop", "body_fun's result", [n.type for n in body_out], "init_val", types,
                body_structure, structure)
    if len(cond_out) != 1 or cond_out[0].shape != ():
        raise ShapeError(at_user_line(f"while_loop: cond_fun must return a scalar, got "
                                      f"{describe_types([n.type for n in cond_out])}"))
    if not cond_out[0].dtype.is_bool:
        zero = cond_body.constant_for(as_tensor(np.zeros((), cond_out[0].dtype.storage)))
        cond_out = [make_node("ne", [cond_out[0], zero])]
    graphs, captured, captured_tensors = _sub_graph([cond_body, body], [cond_out, body_out])
    if _wants_grad(captured_tensors):
        raise UnsupportedOpError(at_user_line(
            "while_loop is forward-only: its trip count is known only at run time, so reverse mode has no "
            "values to save; use tk.scan with a fixed length to differentiate, or wrap the call in tk.no_grad()"))
    results = _control_results("while_loop", [trace.node_of(t) for t in tensors] + captured,
                               {"cond": graphs[0], "body": graphs[1], "carried": len(tensors)}, trace)
    return tree_unflatten(structure, results)


def scan(f: Callable, init, xs, length: int | None = None, reverse: bool = False):
    """carry, y[t] = f(carry, x[t]) for t in order (reversed when reverse); returns (carry, stacked ys)."""
    carry_leaves, carry_structure = tree_flatten(init)
    x_leaves, x_structure = tree_flatten(xs)
    carry, x_tensors = _tensors(carry_leaves), _tensors(x_leaves)
    lengths = {t.shape[0] if t.ndim else None for t in x_tensors}
    if None in lengths:
        raise ShapeError(at_user_line("scan: every xs leaf needs a leading axis to scan over (got a scalar)"))
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise ShapeError(at_user_line(f"scan: xs leaves and length disagree on the length: {sorted(lengths)}"
                                      if lengths else "scan: give xs or length"))
    length = lengths.pop()
    trace = _active_trace(carry + x_tensors)
    if trace is None and length > 0:
        return _eager_scan(f, carry, carry_structure, x_tensors, x_structure, length, reverse)
    outer = trace or Trace("eager_scan")
    carry_types = _types(carry)
    slice_types = [TensorType(t.shape[1:], t.dtype) for t in x_tensors]
    n = len(carry)
    body, out, out_structure = _trace_body(
        lambda ts: f(tree_unflatten(carry_structure, ts[:n]), tree_unflatten(x_structure, ts[n:])),
        carry_types + slice_types, "scan_body", outer)
    if out_structure[0] not in ("tuple", "list") or len(out_structure[1]) != 2:
        raise ShapeError(at_user_line(f"scan: f must return a pair (carry, y), got the structure {out_structure}"))
    new_carry = out[:len(carry)]
    _check_same("scan", "f's carry", [n.type for n in new_carry], "init", carry_types,
                out_structure[1][0], carry_structure)
    y_structure = out_structure[1][1]
    if trace is None:  # length 0, eager: nothing runs, the ys are empty
        ys = [Tensor._from_value(np.zeros((0,) + n.shape, n.dtype.storage), n.dtype) for n in out[len(carry):]]
        return tree_unflatten(carry_structure, carry), tree_unflatten(y_structure, ys)
    graphs, captured, captured_tensors = _sub_graph([body], [out])
    operands = carry + x_tensors + captured_tensors
    wants_grad = _wants_grad(operands)
    body_graph = graphs[0]
    if wants_grad:  # the forward also stacks the carry each step starts from: reverse mode's saved values
        g = body_graph.graph
        body_graph = SubGraph(Graph(g.inputs, g.outputs + g.inputs[:n], g.name))
    results = _control_results("scan", [trace.node_of(t) for t in carry + x_tensors] + captured,
                               {"body": body_graph, "carried": n, "scanned": len(x_tensors),
                                "length": length, "reverse": bool(reverse)}, trace)
    results, saved = results[:len(out)], results[len(out):]
    if wants_grad:
        attach_scan_gradient(results, saved, operands, graphs[0], n, len(x_tensors), length, bool(reverse),
                             scan, _replay_control)
    return tree_unflatten(carry_structure, results[:n]), tree_unflatten(y_structure, results[n:])


def _eager_scan(f, carry, carry_structure, x_tensors, x_structure, length, reverse):
    carry_types = _types(carry)
    value = tree_unflatten(carry_structure, carry)
    ys: list[list[Tensor]] = [[] for _ in range(length)]
    y_structure, y_types = None, None
    for t in (range(length - 1, -1, -1) if reverse else range(length)):
        out = f(value, tree_unflatten(x_structure, [x[t] for x in x_tensors]))
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ShapeError(at_user_line(f"scan: f must return a pair (carry, y), got {type(out).__name__}"))
        value, y = out
        new_leaves, new_structure = tree_flatten(value)
        _check_same("scan", "f's carry", _types(_tensors(new_leaves)), "init", carry_types,
                    new_structure, carry_structure)
        y_leaves, structure = tree_flatten(y)
        ys[t] = _tensors(y_leaves)
        if y_structure is not None:
            _check_same("scan", f"f's y at step {t}", _types(ys[t]), "its y at the first step", y_types,
                        structure, y_structure)
        y_structure, y_types = structure, _types(ys[t])
    stacked = [stack([step[k] for step in ys]) for k in range(len(ys[0]))]
    return value, tree_unflatten(y_structure, stacked)


__all__ = ["BranchTypeError", "cond", "scan", "tree_flatten", "tree_unflatten", "while_loop"]
