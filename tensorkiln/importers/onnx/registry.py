"""The table of ONNX operator converters (domain ai.onnx; ai.onnx.ml and com.microsoft as "domain::Op") and what a
converter is given.

Each converter is `fn(ctx, inputs, attrs) -> Tensor | list[Tensor | None]`:
`inputs` holds one Tensor per node input (None for an omitted optional one),
`attrs` the node's attributes as Python values, `ctx` the node (its opset,
name, how many outputs are wanted) and `ctx.values(t)` to read an input that
must be known at compile time (a shape, axes, pads...).

The operator families (elementwise.py, movement.py, conv.py, ..., quant.py,
rnn.py, scatter.py) register their converters here with `@converter(...)`
when the package is imported (its __init__ imports them all); model_checks.py and
model_execution.py look them up in `CONVERTERS`. `VALUE_INPUTS` names the inputs each op needs as
values; the loader uses it to specialize graph inputs that feed them.

Converters only call tensorkiln's Tensor methods, `tensorkiln.frontend.functions` and
`tk.nn.functional`, so the graph optimizer and the C backend see ordinary
primitives. Ops on values that are all eager (initializers, constants, shapes)
compute at once: that is how Shape -> Gather -> Concat chains become
constants at trace time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...errors import UnsupportedOpError
from ...frontend.tensor import Tensor
from .shape_values import ShapeValue


class DataDependentOutput(UnsupportedOpError):
    """A node needs the value of a tensor the program computes (its output shape depends on data): inside
    one compiled program it cannot be converted; the module runs the graph in stages instead (staged.py)."""


@dataclass
class NodeContext:
    """What a converter knows about the node it converts."""

    op_type: str
    name: str
    opset: int
    n_outputs: int
    outputs_used: list[bool] = field(default_factory=list)
    # run_graph(body, args) -> the outputs of a sub-graph (If, Loop, Scan) that reads this node's scope
    run_graph: Callable | None = None

    def values(self, t: Tensor | None, what: str) -> np.ndarray | None:
        """The value of an input that must be known at compile time (shape, axes, pads, ...)."""
        if t is None:
            return None
        if t.is_traced:
            raise DataDependentOutput(
                f"node '{self.name}' ({self.op_type}): input '{what}' must be known when the model is "
                "compiled (a constant, an initializer, a graph input, or computed from shapes); here it is "
                "computed from runtime data, which makes the output shape data-dependent")
        return t.numpy()

    def ints(self, t: Tensor | None, what: str) -> list[int] | None:
        v = self.values(t, what)
        return None if v is None else [int(i) for i in v.reshape(-1)]

    def sizes(self, t: Tensor | None, what: str) -> list | None:
        """Like `ints`, but a shape computed from symbolic sizes keeps its size symbols (shape_values.py)."""
        if isinstance(t, ShapeValue):
            return list(t.sizes.reshape(-1))
        return self.ints(t, what)

    def unsupported(self, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"node '{self.name}' ({self.op_type}, opset {self.opset}): {why}")


Converter = Callable[[NodeContext, list, dict], object]
CONVERTERS: dict[str, Converter] = {}
# op -> function(opset) -> positions of inputs that must be values at compile time
VALUE_INPUTS: dict[str, Callable[[int], set[int]]] = {}


def converter(*names: str, values: Callable[[int], set[int]] | set[int] | None = None):
    """Register a converter for ONNX ops `names` (domain ai.onnx)."""
    def decorate(fn: Converter) -> Converter:
        for n in names:
            CONVERTERS[n] = fn
            if values is not None:
                VALUE_INPUTS[n] = values if callable(values) else (lambda opset, v=frozenset(values): set(v))
        return fn
    return decorate


def supported_ops() -> list[str]:
    """The ONNX operators the importer converts (domain ai.onnx; ai.onnx.ml and com.microsoft ones as "domain::Op")."""
    return sorted(CONVERTERS)
