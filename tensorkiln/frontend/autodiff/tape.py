"""The tape: one node per recorded operation, and backward() walking it in reverse.

When grad mode is on and an input of `apply(op, ...)` requires grad, the
result gets a `TapeNode` holding the op, its attrs, the input tensors and the
output. `backward` orders the nodes reachable from the roots topologically,
sums the gradients arriving at each node (branches), and calls each node's
rule — the op's rule from its op table entry (`OpDef.gradient`), or a `tk.Function`'s
backward — under no_grad, or with grad mode on when `create_graph=True`
(higher order). The caller of `backward` passes the `Build` the rules make new
tensors with (autodiff/build.py); the rules use Tensor operations, so the same
walk builds a backward graph while tracing inside tk.jit.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ...ir.ops import get_op
from ...ir.ops.gradient import NOT_DIFFERENTIABLE, Build
from ..trace import current_trace
from .mode import enable_grad, no_grad

# rule(grad, inputs, output, attrs, needs, build) -> one gradient (or None) per input
Rule = Callable

# Run once by the next backward() that accumulates into leaves, after it has (torch's queue_callback):
# DistributedDataParallel averages the gradients over the ranks here.
_after_backward: list[Callable[[], None]] = []


def queue_after_backward(callback: Callable[[], None]) -> None:
    """Run `callback()` when the next backward() into the leaves' .grad has finished."""
    _after_backward.append(callback)


class TapeNode:
    """One recorded operation: `rule` maps the output's gradient to the inputs' gradients."""

    __slots__ = ("name", "rule", "inputs", "output", "attrs", "released", "__weakref__")

    def __init__(self, name: str, rule: Rule | None, inputs: tuple, output, attrs):
        self.name, self.rule, self.inputs, self.output, self.attrs = name, rule, inputs, output, attrs
        self.released = False

    def backward(self, grad, build: Build):
        if self.released:
            raise RuntimeError(f"backward through {self.name} a second time: its saved tensors were freed; "
                               "pass retain_graph=True to the first backward()")
        if self.rule is None:
            raise NotImplementedError(f"{self.name}: no gradient rule is registered for this op")
        needs = tuple(t._requires_grad for t in self.inputs)
        grads = self.rule(grad, self.inputs, self.output, self.attrs, needs, build)
        if len(grads) != len(self.inputs):
            raise RuntimeError(f"gradient rule of {self.name} returned {len(grads)} gradients "
                               f"for {len(self.inputs)} inputs")
        return grads

    def release(self) -> None:
        self.inputs, self.output, self.released = (), None, True

    def __repr__(self) -> str:
        return f"<TapeNode {self.name}>"


def record(op: str, attrs, inputs: Sequence, out) -> None:
    """Attach a tape node for primitive `op` to `out` (floating results only: others carry no gradient)."""
    if not out.dtype.is_floating:
        return
    rule = get_op(op).gradient
    attach(out, TapeNode(op, None if rule is NOT_DIFFERENTIABLE else rule, tuple(inputs), out, attrs))


def attach(out, node: TapeNode) -> None:
    out._requires_grad, out._grad_fn = True, node


def _topological(roots: Sequence) -> list[TapeNode]:
    """Tape nodes reachable from the roots, each before the nodes that made its inputs."""
    order, seen = [], set()
    stack = [(r._grad_fn, False) for r in roots if r._grad_fn is not None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for t in node.inputs:
            if t._grad_fn is not None and id(t._grad_fn) not in seen:
                stack.append((t._grad_fn, False))
    order.reverse()
    return order


def backward(roots: Sequence, grads: Sequence, retain_graph: bool = False, create_graph: bool = False,
             inputs: Sequence | None = None, *, build: Build):
    """Propagate `grads` (one per root) down the tape; the rules make new tensors with `build`.

    With `inputs=None`, gradients of leaves accumulate into their `.grad`.
    Otherwise nothing is accumulated and the gradients of `inputs` are returned
    (None for an input the roots do not depend on).
    """
    node_grads: dict[int, object] = {}
    wanted = None if inputs is None else {id(t): None for t in inputs}

    def add(tensor, g):
        if wanted is not None and id(tensor) in wanted:
            wanted[id(tensor)] = g if wanted[id(tensor)] is None else wanted[id(tensor)] + g
        node = tensor._grad_fn
        if node is not None:
            key = id(node)
            node_grads[key] = g if key not in node_grads else node_grads[key] + g
        elif wanted is None:
            accumulate_grad(tensor, g)

    with (enable_grad() if create_graph else no_grad()):
        order = _topological(roots)
        for root, g in zip(roots, grads):
            if not root._requires_grad:
                raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
            add(root, _match(g, root))
        for node in order:
            g = node_grads.pop(id(node), None)
            if g is None:
                continue
            for t, gi in zip(node.inputs, node.backward(g, build)):
                if gi is not None and t._requires_grad:
                    add(t, _match(gi, t))
            if not retain_graph:
                node.release()
    if wanted is not None:
        return [wanted[id(t)] for t in inputs]
    while _after_backward:
        _after_backward.pop(0)()
    return None


def _match(g, t):
    """A gradient in its tensor's dtype and shape."""
    if g.dtype != t.dtype:
        g = g.to(t.dtype)
    if tuple(g.shape) != tuple(t.shape):
        g = g.expand(t.shape)
    return g


def accumulate_grad(tensor, g) -> None:
    """tensor.grad += g (or = g when it has none)."""
    trace = current_trace()
    if trace is not None and trace.holds_eager(tensor):
        trace.note_grad_read(tensor)
    set_grad(tensor, g if tensor._grad is None else tensor._grad + g)


def set_grad(tensor, value) -> None:
    """Replace tensor.grad, recording the write when it happens inside a tk.jit trace."""
    trace = current_trace()
    if trace is not None and trace.holds_eager(tensor):
        trace.record_grad_write(tensor)
    tensor._grad = value
