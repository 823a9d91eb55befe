"""ONNX control flow: If, Loop and Scan as tk.cond, tk.while_loop and tk.scan.

A branch or body (a GraphProto attribute) is prepared with its model
(model_checks.py: its nodes checked and expanded like the model's own, unsupported
operators in it reported with the rest) and held as a `SubGraphBody`; a
converter runs it with `ctx.run_graph(body, args)`, which reads names the body
does not define from the enclosing scope, as ONNX says. Traced, the front-end
turns each body into a sub-graph of one control-flow op, and the values it
reads from outside into operands of that op.

- If: tk.cond on the condition. Branches that return different shapes give an
  output whose shape only the run-time condition decides: refused (a size
  symbol stands for one size of every call, not for a choice between two).
- Loop: without scan outputs, a tk.while_loop over (iteration, condition,
  carried values): trip count and condition may both be runtime values. Scan
  outputs are stacked over the iterations run, so their length must be known
  when the model is compiled: the trip count must be a value (a constant, an
  initializer, or a graph input, which is then specialized per value,
  `value_positions`) and the body must hand its condition on unchanged; then
  it is a tk.scan over the iteration numbers. Otherwise it is refused.
- Scan (opset 9 and later): tk.scan after moving each scan axis to the front
  and flipping the inputs and outputs scanned in reverse. Scan-8 (a leading
  batch axis on every state and scan input): each batch entry of a
  compile-time batch scanned as Scan-9 scans it, the results stacked; with a
  sequence_lens input (a length per entry) it is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes as dt
from ...frontend.control import BranchTypeError, cond, scan, while_loop
from ...frontend.creation import arange
from ...frontend.functions import flip, stack
from ...frontend.tensor import Tensor, as_tensor
from .registry import NodeContext, UnsupportedOpError, converter

DYNAMIC = "need an output shape that only run-time values decide, which compiled control flow cannot give"


@dataclass
class SubGraphBody:
    """A branch or loop body: its GraphProto and its nodes ready to convert (model_checks.py's _Node)."""

    graph: object
    nodes: list


def _declared_shapes(graph) -> list:
    """Declared output shapes of a GraphProto (None where a dimension or the shape is not static)."""
    shapes = []
    for value in graph.output:
        tensor = value.type.tensor_type
        if not tensor.HasField("shape") or any(not d.HasField("dim_value") for d in tensor.shape.dim):
            shapes.append(None)
        else:
            shapes.append(tuple(d.dim_value for d in tensor.shape.dim))
    return shapes


def _passes_condition_on(body) -> bool:
    """True when a Loop body's condition output is its condition input (through Identity nodes)."""
    producers = {out: node for node in body.node for out in node.output}
    name = body.output[0].name
    while name in producers and producers[name].op_type == "Identity":
        name = producers[name].input[0]
    return len(body.input) > 1 and name == body.input[1].name


def static_refusal(op: str, attrs: dict, inputs: list[str], outputs: list[str], opset: int) -> str | None:
    """Why a control-flow node cannot be compiled, decided when the model is loaded (None: it can)."""
    if op == "If":
        then, else_ = (_declared_shapes(attrs[k]) for k in ("then_branch", "else_branch"))
        if any(a is not None and b is not None and a != b for a, b in zip(then, else_)):
            return f"If branches with different output shapes ({then} vs {else_}) {DYNAMIC}"
    if op == "Loop":
        carried = len(inputs) - 2
        if len(outputs) > carried:  # scan outputs: their length is the number of iterations run
            if not inputs[0]:
                return f"Loop scan outputs without a trip count have a length known only at run time: they {DYNAMIC}"
            if not _passes_condition_on(attrs["body"]):
                return (f"Loop scan outputs whose length depends on a runtime condition (the body computes its "
                        f"condition) {DYNAMIC}")
    if op == "Scan" and opset < 9 and inputs and inputs[0]:
        return ("Scan before opset 9 with sequence_lens (a length per batch entry) is not supported; without "
                "it, or opset 9's Scan, is")
    return None


def value_positions(op: str, inputs: list[str], outputs: list[str]) -> set[int]:
    """Inputs whose values decide shapes for this node: a Loop's trip count and condition when it has
    scan outputs (their length)."""
    if op == "Loop" and len(outputs) > len(inputs) - 2:
        return {0, 1}
    return set()


def _scalar_bool(t: Tensor) -> Tensor:
    t = t.reshape(())
    return t if t.dtype is dt.bool_ else t != 0


@converter("If")
def if_(ctx: NodeContext, inputs: list, attrs: dict):
    def branch(key: str):
        return lambda: list(ctx.run_graph(attrs[key], []))
    try:
        return cond(_scalar_bool(inputs[0]), branch("then_branch"), branch("else_branch"))
    except BranchTypeError as err:
        raise ctx.unsupported(f"If branches with different output types {DYNAMIC} ({err})") from None


@converter("Loop")
def loop(ctx: NodeContext, inputs: list, attrs: dict):
    body = attrs["body"]
    trip, condition, carried = inputs[0], inputs[1], list(inputs[2:])
    n = len(carried)
    if ctx.n_outputs > n:  # scan outputs: a scan over the iteration numbers (static_refusal checked why it can)
        steps = int(ctx.values(trip, "M").reshape(()))
        if condition is not None and not bool(ctx.values(condition, "cond").reshape(())):
            steps = 0
        true = as_tensor(np.array(True))

        def step(state, i):
            outs = ctx.run_graph(body, [i, true, *state])
            return list(outs[1:1 + n]), list(outs[1 + n:])
        state, ys = scan(step, carried, arange(max(steps, 0), dtype=dt.int64))
        return list(state) + list(ys)
    limit = None if trip is None else trip.reshape(()).to(dt.int64)
    start = as_tensor(np.array(True)) if condition is None else _scalar_bool(condition)

    def keep_going(state):
        go = state[1]
        return go if limit is None else go.logical_and(state[0] < limit)

    def iterate(state):
        outs = ctx.run_graph(body, [state[0], state[1], *state[2:]])
        return [state[0] + 1, _scalar_bool(outs[0]), *outs[1:1 + n]]
    state = while_loop(keep_going, iterate, [as_tensor(np.array(0, np.int64)), start, *carried])
    return list(state[2:])


def _to_front(x: Tensor, axis: int) -> Tensor:
    axis %= max(x.ndim, 1)
    return x if axis == 0 else x.permute(axis, *[a for a in range(x.ndim) if a != axis])


def _from_front(y: Tensor, axis: int) -> Tensor:
    axis %= max(y.ndim, 1)
    if axis == 0:
        return y
    order = list(range(1, y.ndim))
    order.insert(axis, 0)
    return y.permute(*order)


def _scan_step(ctx: NodeContext, body, n: int):
    """A Scan body as tk.scan's step: (n states, the slices) -> (n new states, the scan outputs)."""
    def step(state, slices):
        outs = ctx.run_graph(body, [*state, *slices])
        return list(outs[:n]), list(outs[n:])
    return step


@converter("Scan")
def scan_(ctx: NodeContext, inputs: list, attrs: dict):
    if ctx.opset < 9:
        return _batched_scan(ctx, inputs, attrs)
    m = attrs["num_scan_inputs"]
    states, xs = list(inputs[:len(inputs) - m]), list(inputs[len(inputs) - m:])
    in_dirs = attrs.get("scan_input_directions") or [0] * m
    in_axes = attrs.get("scan_input_axes") or [0] * m
    xs = [_to_front(x, a) for x, a in zip(xs, in_axes)]
    xs = [flip(x, 0) if d else x for x, d in zip(xs, in_dirs)]
    state, ys = scan(_scan_step(ctx, attrs["body"], len(states)), states, xs)
    k = len(ys)
    out_dirs = attrs.get("scan_output_directions") or [0] * k
    out_axes = attrs.get("scan_output_axes") or [0] * k
    ys = [flip(y, 0) if d else y for y, d in zip(ys, out_dirs)]
    return list(state) + [_from_front(y, a) for y, a in zip(ys, out_axes)]


def _batched_scan(ctx: NodeContext, inputs: list, attrs: dict):
    """Scan of opsets 8 and earlier: every state and scan input carries a leading batch axis (the scan
    axis of an input is axis 1), and each batch entry is scanned on its own, as opset 9's Scan of that
    entry. The batch must be a compile-time size; a sequence_lens input is refused when the model loads
    (static_refusal)."""
    m = attrs["num_scan_inputs"]
    operands = inputs[1:]
    states, xs = list(operands[:len(operands) - m]), list(operands[len(operands) - m:])
    batch = (states or xs)[0].shape[0]
    if not isinstance(batch, int) or batch < 1:
        raise UnsupportedOpError(f"node '{ctx.name}' (Scan, opset {ctx.opset}): the batch axis must be a fixed "
                                 f"size of at least 1, got {batch}")
    directions = attrs.get("directions") or [0] * m
    n, step = len(states), _scan_step(ctx, attrs["body"], len(states))
    finals, scanned = [], []
    for b in range(batch):
        entry_xs = [flip(x[b], 0) if d else x[b] for x, d in zip(xs, directions)]
        state, ys = scan(step, [s[b] for s in states], entry_xs)
        finals.append(list(state))
        scanned.append(list(ys))
    return [stack([f[i] for f in finals]) for i in range(n)] + \
        [stack([y[i] for y in scanned]) for i in range(len(scanned[0]))]
