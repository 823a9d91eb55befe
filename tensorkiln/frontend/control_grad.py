"""Gradients of traced tk.cond and tk.scan, JAX's rules, built from the sub-graphs the forward traced.

A control-flow node's results get tape nodes (autodiff/tape.py) whose rules
differentiate the op's sub-graphs, replayed as front-end calls (`replay`), so
the backward pass is control flow again:

- cond: the gradient is a cond of the branches' gradients: for a result's
  cotangent g, `cond(pred, vjp(then), vjp(else), *operands, g)`;
- scan: the forward scan also stacks the carry each step starts from (the
  saved per-step values); the gradient is a reverse scan over them whose carry
  is the carry's cotangent plus the captured values' accumulated cotangents,
  and whose per-step output is the cotangent of that step's xs.

Operands include the values a body captured from outside (parameters read by a
loop body get their gradients). Integer and bool values carry no gradient. Each
result's rule is one backward op for that result's cotangent (a node with k
differentiated results builds k of them). while_loop has no rule: it is
forward-only (frontend/control.py says so when differentiated).
"""
from __future__ import annotations

from typing import Callable

from ..ir.graph import Graph
from ..ir.ops.control import CONTROL_OPS, sub_graphs
from .autodiff.functional import grad
from .autodiff.tape import TapeNode, attach
from .tensor import Tensor, apply


def replay(graph: Graph, args: list[Tensor], control: Callable) -> list[Tensor]:
    """The outputs of `graph` computed by front-end calls on `args` (so the tape sees them);
    `control(node, operands)` computes a nested control-flow node's results."""
    values: dict[int, object] = {node.id: a for node, a in zip(graph.inputs, args)}
    for node in graph.nodes:
        if node.id in values:
            continue
        operands = [values[i.id] for i in node.inputs]
        if node.op == "constant":
            values[node.id] = Tensor._from_value(node.attrs["value"].array, node.dtype)
        elif node.op in CONTROL_OPS:
            values[node.id] = control(node, operands)
        elif node.op == "result":
            values[node.id] = operands[0][node.attrs["index"]]
        else:
            values[node.id] = apply(node.op, operands, **dict(node.attrs))
    return [values[n.id] for n in graph.outputs]  # type: ignore[misc]


def _floating(tensors: list[Tensor]) -> list[int]:
    return [i for i, t in enumerate(tensors) if t.dtype.is_floating]


def _vjp(fn: Callable[[list[Tensor]], Tensor], values: list[Tensor], positions: list[int]) -> tuple:
    """Gradients of scalar fn(values) with respect to values[positions]."""
    def scalar(*chosen):
        args = list(values)
        for p, v in zip(positions, chosen):
            args[p] = v
        return fn(args)
    return tuple(grad(scalar, argnums=tuple(range(len(positions))))(*[values[p] for p in positions]))


def attach_cond_gradient(results: list[Tensor], pred: Tensor, operands: list[Tensor], graphs: list,
                         cond: Callable, control: Callable) -> None:
    """Tape nodes for a traced cond's floating results (operands: explicit ones, then captured ones)."""
    def rule_for(k: int):
        def rule(g, inputs, output, attrs, needs, build):
            prim = list(inputs[1:])
            positions = [i for i in _floating(prim) if needs[1 + i]]
            if not positions:
                return [None] * len(inputs)

            def branch(graph):
                def vjp(*vals):
                    cotangent = vals[-1]
                    return _vjp(lambda a: (replay(graph.graph, a, control)[k] * cotangent).sum(),
                                list(vals[:-1]), positions)
                return vjp
            grads = cond(inputs[0], branch(graphs[0]), branch(graphs[1]), *prim, g)
            out: list = [None] * len(inputs)
            for p, gi in zip(positions, grads):
                out[1 + p] = gi
            return out
        return rule

    for k, result in enumerate(results):
        if result.dtype.is_floating:
            attach(result, TapeNode("cond", rule_for(k), (pred, *operands), result, None))


def attach_scan_gradient(results: list[Tensor], saved: list[Tensor], operands: list[Tensor], graph,
                         carried: int, scanned: int, length: int, reverse: bool, scan: Callable,
                         control: Callable) -> None:
    """Tape nodes for a traced scan's floating results; `saved` are the carries each step started from,
    stacked (operands: init, xs, then captured values)."""
    body = graph.graph

    def rule_for(k: int):
        def rule(g, inputs, output, attrs, needs, build):
            init, xs, caps = (list(inputs[:carried]), list(inputs[carried:carried + scanned]),
                              list(inputs[carried + scanned:]))
            fc, fx, fp = _floating(init), _floating(xs), _floating(caps)
            start = [g if i == k else (init[i] * 0.0) for i in fc]  # the carry's cotangent after the last step
            cap_zero = [caps[i] * 0.0 for i in fp]
            ys_cotangent = [g] if k >= carried else []

            def step(carry, x):
                c_bar, cap_bar = carry
                c_t, x_t, y_bar = x[:carried], x[carried:carried + scanned], x[carried + scanned:]

                def total(a):
                    outs = replay(body, a, control)
                    terms = [(outs[i] * cb).sum() for i, cb in zip(fc, c_bar)]
                    terms += [(outs[k] * yb).sum() for yb in y_bar]
                    return sum(terms[1:], terms[0])
                values = list(c_t) + list(x_t) + caps
                positions = fc + [carried + i for i in fx] + [carried + scanned + i for i in fp]
                grads = _vjp(total, values, positions)
                nc, nx = len(fc), len(fx)
                new_cap = [a + b for a, b in zip(cap_bar, grads[nc + nx:])]
                return (list(grads[:nc]), new_cap), list(grads[nc:nc + nx])

            (c_bar, cap_bar), x_bar = scan(step, (start, cap_zero), list(saved) + xs + ys_cotangent,
                                           length=length, reverse=not reverse)
            out: list = [None] * len(inputs)
            for i, gi in zip(fc, c_bar):
                out[i] = gi
            for i, gi in zip(fx, x_bar):
                out[carried + i] = gi
            for i, gi in zip(fp, cap_bar):
                out[carried + scanned + i] = gi
            return out
        return rule

    for k, result in enumerate(results):
        if result.dtype.is_floating:
            attach(result, TapeNode("scan", rule_for(k), tuple(operands), result, None))


__all__ = ["attach_cond_gradient", "attach_scan_gradient", "replay", "sub_graphs"]
