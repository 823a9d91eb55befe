"""Lowering of control-flow ops: one kernel of C `if`/`for`/`while` statements calling sub-programs.

Each sub-graph of a cond, while_loop or scan node is compiled by the same
stages as the graph around it (grouping, lowering, memory planning: the
`lower_subgraph` callback the driver passes in) into a sub-program: a Program
of its own, emitted into the same C file with a static entry function. The
control-flow node becomes one kernel of the outer program whose body is
structured loop IR around `ProgramCall`s of those entries:

    cond:        if (pred[0]) then(operands -> results) else else(operands -> results)
    while_loop:  results = init; cond(results -> flag)
                 while (flag[0]) { body(results -> next); results = next; cond(results -> flag) }
    scan:        carry = init
                 for t: body(carry, &xs[step * slice] -> next, &ys[step * slice]); carry = next

Branches write the results directly. A loop's carry lives in the result
buffers and is copied from a `next` temp after each step (the body's outputs
must not alias its inputs: its kernels take restrict pointers). A scan's
per-step slices are pointers into the stacked inputs and outputs at
`step * slice_size`: nothing is copied. The sub-programs' arenas live in one
temp of the outer arena (branches and the two functions of a while_loop never
run at the same time, so they share it), and their constants become constants
of the outer program, passed down by pointer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..ir.graph import Graph, Node
from ..ir.ops.control import sub_graphs
from ..loops import expr as E
from ..loops.buffer import Buffer
from ..loops.ir import Block, For, If, Kernel, Pointer, ProgramCall, Stmt, Store, While, block
from ..loops.program import Program
from ..loops.types import INDEX_DTYPE
from .small_body import serial_if_small

# lower_subgraph(graph named as its program, prefix of its kernels) -> (planned Program, its constant arrays)
LowerSubgraph = Callable[[Graph], tuple[Program, list[np.ndarray]]]


@dataclass
class ControlLowering:
    """What one control-flow node adds to the outer program besides its kernel."""

    kernel: Kernel
    temps: list[Buffer] = field(default_factory=list)
    constants: list[Buffer] = field(default_factory=list)
    constant_arrays: list[np.ndarray] = field(default_factory=list)
    subprograms: list[Program] = field(default_factory=list)


class _Builder:
    """Names fresh temps and loop variables of one control kernel and collects its sub-programs."""

    def __init__(self, name: str, new_name: Callable[[str], str], lower_subgraph: LowerSubgraph):
        self.name = name
        self.new_name = new_name
        self.lower_subgraph = lower_subgraph
        self.out = ControlLowering(kernel=None)  # type: ignore[arg-type]
        self.loops = 0
        self.constants_of: dict[str, list[Buffer]] = {}  # sub-program -> outer buffers of its constants

    def temp(self, like: Buffer, role: str) -> Buffer:
        buffer = Buffer(self.new_name(f"{self.name}_{role}"), like.dtype, like.shape)
        self.out.temps.append(buffer)
        return buffer

    def program(self, role: str, sub: Graph, loop_body: bool = False) -> Program:
        """The sub-program of `sub`; a loop's body (run once per step) on one thread when it is small."""
        named = Graph(sub.inputs, sub.outputs, f"{self.name}_{role}")
        program, arrays = self.lower_subgraph(named)
        if loop_body:
            program = serial_if_small(program)
        self.out.subprograms.append(program)
        lifted = [Buffer(self.new_name(f"{program.name}_{c.name}"), c.dtype, c.shape) for c in program.constants]
        self.out.constants += lifted
        self.out.constant_arrays += arrays
        self.constants_of[program.name] = lifted
        return program

    def arena(self, programs: list[Program]) -> Buffer | None:
        size = max((p.arena_bytes for p in programs), default=0)
        if not size:
            return None
        buffer = Buffer(self.new_name(f"{self.name}_arena"), "uint8", (size,))
        self.out.temps.append(buffer)
        return buffer

    def call(self, program: Program, inputs: list[Pointer], outputs: list[Pointer], arena: Buffer | None) -> Stmt:
        constants = [Pointer(c, E.const(0)) for c in self.constants_of[program.name]]
        return ProgramCall(program.name, tuple(inputs + outputs + constants),
                           tuple(dict.fromkeys(p.buffer.name for p in outputs)),
                           Pointer(arena, E.const(0)) if arena is not None else None)

    def copy(self, dst: Buffer, src: Buffer) -> Stmt | None:
        """dst[:] = src[:] (a loop carry moved to where the next step reads it)."""
        if dst.size == 0:
            return None
        self.loops += 1
        i = E.Var(f"i{self.loops}", INDEX_DTYPE)
        return For(i, E.const(dst.size), Store(dst, i, E.Load(src, i)), "vectorized")


def _whole(buffers: list[Buffer]) -> list[Pointer]:
    return [Pointer(b, E.const(0)) for b in buffers]


def lower_control(node: Node, operands: list[Buffer], results: list[Buffer], name: str, comment: str,
                  new_name: Callable[[str], str], lower_subgraph: LowerSubgraph) -> ControlLowering:
    """The kernel (and temps, constants, sub-programs) of control-flow `node` reading `operands`
    and writing `results`; `new_name` makes a unique program-level name."""
    b = _Builder(name, new_name, lower_subgraph)
    graphs = dict(sub_graphs(node.attrs))
    if node.op == "cond":
        then, else_ = b.program("then", graphs["branches0"].graph), b.program("else", graphs["branches1"].graph)
        arena = b.arena([then, else_])
        args = _whole(operands[1:])
        body: Stmt = If(E.Load(operands[0], E.const(0)), b.call(then, args, _whole(results), arena),
                        b.call(else_, args, _whole(results), arena))
    elif node.op == "while_loop":
        carried = node.attrs["carried"]
        step = b.program("body", graphs["body"].graph, loop_body=True)  # sub_graphs order: lifted constants
        cond = b.program("cond", graphs["cond"].graph, loop_body=True)
        arena = b.arena([cond, step])
        flag = b.temp(Buffer("flag", "bool", ()), "flag")
        carry, captured = results[:carried], _whole(operands[carried:])
        following = [b.temp(c, f"next{k}") for k, c in enumerate(carry)]
        test = b.call(cond, _whole(carry) + captured, _whole([flag]), arena)
        inits = [b.copy(c, o) for c, o in zip(carry, operands[:carried])]
        moves = [b.copy(c, n) for c, n in zip(carry, following)]
        loop = While(E.Load(flag, E.const(0)),
                     block(b.call(step, _whole(carry) + captured, _whole(following), arena),
                           *[m for m in moves if m is not None], test))
        body = block(*[s for s in inits if s is not None], test, loop)
    else:
        body = _scan_body(node, operands, results, b, graphs["body"].graph)
    b.out.kernel = Kernel(name, tuple(dict.fromkeys(operands + results + b.out.temps + b.out.constants)), body,
                          comment)
    return b.out


def _scan_body(node: Node, operands: list[Buffer], results: list[Buffer], b: _Builder, graph: Graph) -> Stmt:
    carried, scanned, length = node.attrs["carried"], node.attrs["scanned"], node.attrs["length"]
    step_program = b.program("body", graph, loop_body=True)
    arena = b.arena([step_program])
    carry, ys = results[:carried], results[carried:]
    xs, captured = operands[carried:carried + scanned], operands[carried + scanned:]
    following = [b.temp(c, f"next{k}") for k, c in enumerate(carry)]
    t = E.Var("t", INDEX_DTYPE)
    step = (E.const(length - 1) - t) if node.attrs["reverse"] else t  # reverse: ys keep their order

    def sliced(buffers: list[Buffer]) -> list[Pointer]:
        return [Pointer(x, step * (x.size // max(length, 1))) for x in buffers]

    inits = [b.copy(c, o) for c, o in zip(carry, operands[:carried])]
    moves = [b.copy(c, n) for c, n in zip(carry, following)]
    call = b.call(step_program, _whole(carry) + sliced(xs) + _whole(captured), _whole(following) + sliced(ys), arena)
    loop = For(t, E.const(length), block(call, *[m for m in moves if m is not None]), "serial") if length else None
    stmts = [s for s in inits + [loop] if s is not None]
    return block(*stmts) if stmts else Block(())


__all__ = ["ControlLowering", "LowerSubgraph", "lower_control"]
