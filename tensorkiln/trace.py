"""The tracing context: while a Trace is active, operations on its symbolic tensors build nodes.

Eager tensors that a traced function reads (weights captured in a closure,
module parameters) enter the graph as constants, once each. Composite ops
(softmax, layer_norm, ...) push their name on the scope stack so every node
they create records where it came from.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import threading

from .graph import Node, constant_node

_state = threading.local()
_composite_ids = itertools.count()


class Trace:
    """Collects nodes for one traced function call."""

    def __init__(self, name: str):
        self.name = name
        self.scope: tuple[str, ...] = ()
        self._constants: dict[int, tuple[object, Node]] = {}

    def constant_for(self, tensor) -> Node:
        """The constant node of an eager tensor (created once per tensor per trace)."""
        entry = self._constants.get(id(tensor))
        if entry is None or entry[0] is not tensor:
            node = constant_node(tensor._value, tensor.dtype)
            entry = (tensor, node)  # keep the tensor alive so id() stays unique
            self._constants[id(tensor)] = entry
        return entry[1]


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

