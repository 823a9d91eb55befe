"""SizedCall: how one call of a program with size symbols reads its sizes and shapes its outputs.

A program compiled from a graph with symbolic dimensions (tensorkiln/shapes)
takes the values of its size symbols on every call. They are read from the
input arrays' shapes (a symbol on two inputs must have one value, else a
ShapeError naming both); every input's whole shape is then checked against
its symbolic shape, the outputs are allocated at their shapes evaluated with
those values, and the arena's size is evaluated too (the module grows the
arena when a call needs more). Nothing here records a guard: the values are
evaluated, not decided (jit's dispatch checked the program's guards).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Graph
from ..loops.expr import SIZE_VAR_PREFIX
from ..loops.program import Program
from ..shapes import ShapeEnv, SymInt


MEMO_SHAPES = 1024  # input shapes whose evaluated sizes a SizedCall keeps


def shape_env_of(graph: Graph) -> ShapeEnv | None:
    """The ShapeEnv of a graph whose inputs have symbolic dimensions, else None."""
    for node in graph.inputs:
        for d in node.shape:
            if isinstance(d, SymInt):
                return d.env
    return None


def evaluate(value, values: dict[str, int]) -> int:
    """A size's value for these symbol values (no guard)."""
    return value.poly.evaluate(values) if isinstance(value, SymInt) else int(value)


@dataclass
class SizedCall:
    """What a call of a symbolic program evaluates: sizes array, input checks, output shapes, arena bytes."""

    env: ShapeEnv
    input_shapes: list[tuple]
    input_names: list[str]
    output_shapes: list[tuple]
    size_names: list[str]  # the program's size symbols, without the variable prefix, in entry order
    arena_bytes: object  # int or SymInt
    # input shapes -> (sizes, output shapes, arena bytes), so a call at a shape seen before costs a lookup
    _seen: dict = field(default_factory=dict)

    @staticmethod
    def of(graph: Graph, program: Program) -> "SizedCall":
        env = shape_env_of(graph)
        return SizedCall(env, [tuple(n.shape) for n in graph.inputs], [n.attrs["name"] for n in graph.inputs],
                         [tuple(n.shape) for n in graph.outputs],
                         [name[len(SIZE_VAR_PREFIX):] for name in program.sizes], program.arena_bytes)

    def prepare(self, inputs: list[np.ndarray]) -> tuple[np.ndarray, list[tuple[int, ...]], int, dict[str, int]]:
        """(the sizes array for the entry, the output shapes, the arena bytes, the symbols' values)
        of a call on `inputs`."""
        key = tuple(a.shape for a in inputs)
        found = self._seen.get(key)
        if found is None:
            if len(self._seen) >= MEMO_SHAPES:
                self._seen.clear()
            found = self._seen[key] = self._evaluate(inputs)
        return found

    def _evaluate(self, inputs: list[np.ndarray]) -> tuple[np.ndarray, list[tuple[int, ...]], int, dict[str, int]]:
        values = self.env.values_from([a.shape for a in inputs])
        for array, shape, name in zip(inputs, self.input_shapes, self.input_names):
            expected = tuple(evaluate(d, values) for d in shape)
            if array.shape != expected:
                raise ShapeError(f"input {name}: expected shape {tuple(map(str, shape))} "
                                 f"(here {expected}), got {array.shape}")
        sizes = np.array([values[name] for name in self.size_names], dtype=np.int64)
        outputs = [tuple(evaluate(d, values) for d in shape) for shape in self.output_shapes]
        return sizes, outputs, evaluate(self.arena_bytes, values), values
