"""The tracing context: while a Trace is active, operations on its symbolic tensors build nodes.

Eager tensors that a traced function reads (weights captured in a closure,
module parameters) enter the graph as constants, once each. Eager tensors that
are *state* instead become extra graph inputs, read fresh on every call: those
that require grad (read while grad mode is on), those marked with
`mark_mutable`, and those the traced function writes in place (`p.copy_(...)`,
`p.data = ...`, optimizer updates, `.grad`). A write is recorded, not done:
the tensor shows the new traced value until the trace ends, and `finish()`
turns each write into an extra graph output that tk.jit writes back after
every call (see docs/autodiff.md). Effects (point-to-point messages) are
chained: each takes the token of the one before (`effect_token`) and leaves
its own (`record_effect`), and `finish()` makes the last token an output, so
the graph keeps every message in program order. Composite ops
(softmax, layer_norm, ...) push their name on the scope stack so every node
they create records where it came from.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable

from ..ir.graph import Node, constant_node, input_node, topological_order
from .autodiff.mode import is_grad_enabled
from .writes import write_count

class _State(threading.local):
    """Per-thread stack of active traces; the class attribute is every thread's default."""

    # Found on the class while a thread has no stack yet: getattr with a default on a missing
    # thread-local attribute raises and catches AttributeError inside (slow, on every call).
    stack = None


_state = _State()
_composite_ids = itertools.count()


class Trace:
    """Collects nodes for one traced function call."""

    def __init__(self, name: str):
        self.name = name
        self.scope: tuple[str, ...] = ()
        self._constants: dict[int, tuple[object, Node]] = {}
        self._state: dict[int, Callable] = {}  # id(eager tensor) -> reads its value at call time
        self._reads_value: set[int] = set()  # state read as the tensor's own value (not its .grad's)
        self._written: dict[int, object] = {}  # eager tensors written in place (now showing a traced node)
        self._grad_written: dict[int, tuple[object, object]] = {}  # id(tensor) -> (tensor, .grad before)
        self._guards: dict[int, tuple[object, bool]] = {}  # id(tensor) -> (tensor, had a .grad)
        self._effect: Node | None = None  # the token of the last effect recorded

    def effect_token(self, make_first: Callable[[], Node]) -> Node:
        """The token the next effect must come after (`make_first()`'s node before the first effect)."""
        if self._effect is None:
            self._effect = make_first()
        return self._effect

    def record_effect(self, token: Node) -> None:
        """An effect happened; `token` (its node, or one that depends on it) orders the next one."""
        self._effect = token

    def constant_for(self, tensor) -> Node:
        """The node of an eager tensor read by the trace: a constant, created once per tensor per trace."""
        entry = self._constants.get(id(tensor))
        if entry is None or entry[0] is not tensor:
            node = constant_node(tensor._value, tensor.dtype)
            entry = (tensor, node)  # keep the tensor alive so id() stays unique
            self._constants[id(tensor)] = entry
        if id(tensor) not in self._state and (_is_mutable(tensor) or (
                tensor._requires_grad and is_grad_enabled())):
            self.mark_state(tensor)
        return entry[1]

    # ---- state: eager tensors that become graph inputs, and in-place writes -------------
    @staticmethod
    def is_state(tensor) -> bool:
        """An eager tensor whose reads must be symbolic: it requires grad or is marked mutable."""
        return tensor._requires_grad or _is_mutable(tensor)

    def track(self, tensor) -> None:
        """Read eager `tensor` symbolically from now on (it is about to be updated in place)."""
        if tensor._node is None:
            node = self.constant_for(tensor)
            self.mark_state(tensor)
            self.record_write(tensor, node)

    def mark_state(self, tensor, source: Callable | None = None) -> None:
        """Make eager `tensor` a graph input read by `source()` (default: its value) on every call."""
        self._state[id(tensor)] = source or (lambda t=tensor: t._value)
        if source is None:
            self._reads_value.add(id(tensor))
        else:
            self._reads_value.discard(id(tensor))

    def holds_eager(self, tensor) -> bool:
        """True for an eager tensor, also while it shows a value written in this trace."""
        return tensor._node is None or id(tensor) in self._written

    def record_write(self, tensor, node: Node) -> None:
        """Eager `tensor` is assigned traced `node` in place: show it until the trace ends."""
        if tensor._node is None and id(tensor) in self._constants:
            self.mark_state(tensor)  # read before this write: its old value is a graph input
        self._written[id(tensor)] = tensor
        tensor._node, tensor._trace = node, self

    def record_grad_write(self, tensor) -> None:
        """Eager `tensor`'s .grad is about to be replaced: remember the one it had."""
        if id(tensor) not in self._grad_written:
            self._grad_written[id(tensor)] = (tensor, tensor._grad)

    def note_grad_read(self, tensor) -> None:
        """backward() accumulates into eager `tensor`'s existing .grad: make it an input and guard on it."""
        if id(tensor) in self._grad_written or id(tensor) in self._guards:
            return
        self._guards[id(tensor)] = (tensor, tensor._grad is not None)
        if tensor._grad is not None:
            self.constant_for(tensor._grad)
            self.mark_state(tensor._grad, lambda t=tensor: t._grad._value)

    def restore(self) -> None:
        """Undo the visible effects of recorded writes (eager tensors get their values back)."""
        for tensor, before in self._grad_written.values():
            tensor._grad = before
        for tensor in self._written.values():
            tensor._node, tensor._trace = None, None

    def finish(self, outputs: list[Node], first_index: int) -> "TraceState":
        """End the trace: state inputs, write-back outputs and guards; restores the eager tensors."""
        mutations, extra = [], []
        for tensor, _ in self._grad_written.values():
            grad = tensor._grad
            mutations.append((tensor, "grad", grad is None))
            if grad is not None:
                extra.append(grad._node if grad._node is not None else self.constant_for(grad))
        for tensor in self._written.values():
            mutations.append((tensor, "data", False))
            extra.append(tensor._node)
        if self._effect is not None and self._effect.op != "constant":  # keeps every effect, in order
            mutations.append((None, "effect", False))
            extra.append(self._effect)
        self.restore()
        inputs, sources, mapping, read_values = [], [], {}, []
        for key, source in self._state.items():
            entry = self._constants.get(key)
            if entry is None:
                continue  # written before it was ever read: no input needed
            tensor, constant = entry
            node = input_node(f"state{len(inputs)}", first_index + len(inputs), constant.type)
            mapping[constant.id] = node
            inputs.append(node)
            sources.append(source)
            read_values.append(tensor if key in self._reads_value else None)
        all_outputs = substitute(list(outputs) + extra, mapping)
        guards = [(t, had) for t, had in self._guards.values()]
        # parameters and buffers baked in as constants: valid while they keep these exact arrays
        # (every update replaces a tensor's array, so identity is a version check)
        baked = [(t, t._value, write_count(t._value)) for key, (t, _) in self._constants.items()
                 if key not in mapping_keys(self._state, self._constants) and _is_guarded_constant(t)]
        return TraceState(all_outputs, inputs, sources, mutations, guards, baked, read_values)


@dataclass
class TraceState:
    """What a finished trace adds to its graph: state inputs, in-place writes to replay, guards.

    `mutations` lists (tensor, "data" | "grad" | "effect", set_to_none) in the order of
    the extra outputs (none for a .grad set to None; "effect": the last effect's token,
    kept so the graph keeps the effects, written nowhere); `guards` lists (tensor, had_grad):
    the trace is valid only while `(tensor.grad is not None) == had_grad`;
    `baked` lists (tensor, array, write count) of values baked in as constants.
    """

    outputs: list[Node]
    state_inputs: list[Node]
    state_sources: list[Callable] = field(default_factory=list)
    mutations: list[tuple] = field(default_factory=list)
    guards: list[tuple] = field(default_factory=list)
    baked: list[tuple] = field(default_factory=list)
    state_tensors: list = field(default_factory=list)  # per state input: the tensor whose value it reads, or None


def mapping_keys(state: dict, constants: dict) -> set:
    """ids of captured tensors that became state inputs."""
    return {key for key in state if key in constants}


def substitute(outputs: list[Node], mapping: dict[int, Node]) -> list[Node]:
    """Rebuild the graph above `outputs` with node id -> replacement node from `mapping`."""
    if not mapping:
        return list(outputs)
    new: dict[int, Node] = dict(mapping)
    for node in topological_order(outputs):
        if node.id in new:
            continue
        inputs = tuple(new.get(i.id, i) for i in node.inputs)
        if any(a is not b for a, b in zip(inputs, node.inputs)):
            new[node.id] = Node(node.op, inputs, node.attrs, node.type, node.scope, node.location)
    return [new.get(o.id, o) for o in outputs]


_mutable: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
_buffers: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()


def mark_buffer(tensor) -> None:
    """Module state that is not a parameter (running statistics): a trace that bakes it in as a
    constant is valid only while it keeps that value (tk.jit retraces after an update)."""
    _buffers[id(tensor)] = tensor


def _is_guarded_constant(tensor) -> bool:
    return tensor._requires_grad or _buffers.get(id(tensor)) is tensor


def mark_mutable(tensor) -> None:
    """Read eager `tensor` as a graph input (never a baked constant) in every trace: its value changes
    between calls of a compiled function (a learning rate, a random seed)."""
    _mutable[id(tensor)] = tensor


def _is_mutable(tensor) -> bool:
    return _mutable.get(id(tensor)) is tensor


def current_trace() -> Trace | None:
    """The innermost active trace, or None in eager mode."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def tracing(trace: Trace):
    """Make `trace` the active trace inside the block."""
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    stack.append(trace)
    try:
        yield trace
    finally:
        stack.pop()


@contextlib.contextmanager
def composite_scope(name: str):
    """Mark nodes created inside the block as parts of one instance of composite `name`."""
    trace = current_trace()
    if trace is None:
        yield
        return
    saved = trace.scope
    trace.scope = saved + (f"{name}:{next(_composite_ids)}",)
    try:
        yield
    finally:
        trace.scope = saved


def composite(name: str):
    """Decorator: the function defines composite op `name` by composition of primitives."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if current_trace() is None:
                return fn(*args, **kwargs)
            with composite_scope(name):
                return fn(*args, **kwargs)
        wrapper.composite_name = name
        return wrapper
    return decorate

