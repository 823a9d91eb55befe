"""Program: the kernels of one graph and the buffers they share.

A Program is what the C backend compiles into one shared library with one
entry function. Its buffers fall in four groups:

- inputs and outputs: passed by the caller on every call;
- constants (weights): bound once when the library is loaded;
- temps (intermediates between kernels): live in one arena that the runtime
  allocates once; `arena_offsets` says where each one starts. A memory planner
  may give two temps with disjoint lifetimes overlapping offsets; without a
  plan, temps are packed one after another, each 64-byte aligned.

Kernels run in order; each kernel parameter must be one of these buffers
(matched by name). The entry passes every kernel its buffers by pointer.

`subprograms` are the branches and loop bodies of control-flow ops: Programs
of their own (own buffers, own arena plan), compiled into the same C file as
static entry functions that a kernel of this program calls (`ProgramCall`,
inside C `if`/`for`/`while` statements), on pointers into its buffers.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Optional

from tensorkiln.loops.buffer import Buffer, check_identifier
from tensorkiln.loops.expr import Var, is_size_var, symbolic_expr, walk
from tensorkiln.loops.ir import Kernel, LoopIRError, ProgramCall, iter_stmts, stmt_exprs, verify_kernel
from tensorkiln.loops.types import itemsize
from tensorkiln.shapes.symint import sym_max

ARENA_ALIGNMENT = 64  # a cache line, and enough for any vector load


def _align(offset: int, alignment: int = ARENA_ALIGNMENT) -> int:
    return (offset + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class Program:
    """Kernels of one graph, run in order over its inputs, outputs, constants and arena temps."""

    name: str
    kernels: tuple[Kernel, ...]
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    constants: tuple[Buffer, ...] = ()
    temps: tuple[Buffer, ...] = ()
    arena_offsets: Optional[tuple[tuple[str, int], ...]] = None  # (temp name, byte offset); None: packed
    # Pairs of temps (written, read) that one elementwise kernel updates in place: they may share
    # arena bytes, and codegen drops `restrict` from their pointers.
    aliases: tuple[tuple[str, str], ...] = ()
    subprograms: tuple["Program", ...] = ()  # bodies of control-flow ops, called by ProgramCall
    # The size symbols' variables (`s_batch`) the kernels and buffer shapes read, sorted: the entry
    # takes their values per call, in this order (derived from the kernels and buffers).
    sizes: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        check_identifier(self.name, "program")
        for field_name in ("kernels", "inputs", "outputs", "constants", "temps", "subprograms"):
            object.__setattr__(self, field_name, tuple(getattr(self, field_name)))
        if self.arena_offsets is not None:
            object.__setattr__(self, "arena_offsets", tuple((str(n), o if symbolic_expr(o) is not None else int(o))
                                                            for n, o in self.arena_offsets))
        object.__setattr__(self, "sizes", _size_vars(self))
        self._verify()

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        """Every program-level buffer: inputs, outputs, constants, temps (in that order)."""
        return self.inputs + self.outputs + self.constants + self.temps

    def arena_layout(self) -> dict[str, int]:
        """Byte offset of each temp in the arena."""
        if self.arena_offsets is not None:
            return dict(self.arena_offsets)
        layout, offset = {}, 0
        for temp in self.temps:
            layout[temp.name] = offset
            offset = _align(offset + temp.nbytes)
        return layout

    @property
    def arena_bytes(self) -> int:
        """Bytes the arena needs (0 when there are no temps)."""
        layout = self.arena_layout()
        ends = [layout[t.name] + t.nbytes for t in self.temps]
        if self.sizes and ends:  # symbolic sizes: the largest end without comparing sizes (no guard)
            if self.arena_offsets is None:
                return _align(ends[-1])  # packed: the last temp ends last
            return _align(functools.reduce(sym_max, ends))
        return _align(max(ends)) if ends else 0

    def __str__(self) -> str:
        def group(title: str, buffers: tuple[Buffer, ...]) -> list[str]:
            return [f"  {title}: {', '.join(map(str, buffers))}"] if buffers else []

        lines = [f"program {self.name}:"]
        lines += group("inputs", self.inputs) + group("outputs", self.outputs)
        lines += group("constants", self.constants) + group("temps", self.temps)
        if self.temps:
            lines.append(f"  arena: {self.arena_bytes} bytes")
        for kernel in self.kernels:
            lines += ["", *("  " + line for line in str(kernel).splitlines())]
        for sub in self.subprograms:
            lines += ["", *("  " + line for line in str(sub).splitlines())]
        return "\n".join(lines)

    def all_programs(self) -> list["Program"]:
        """This program and its sub-programs at every depth, callees before their callers."""
        found: list[Program] = []
        for sub in self.subprograms:
            found += sub.all_programs()
        return found + [self]

    def _verify(self) -> None:
        by_name: dict[str, Buffer] = {}
        for buffer in self.buffers:
            if buffer.name in by_name:
                raise LoopIRError(f"program {self.name}: buffer name {buffer.name} is used twice")
            if buffer.scope != "global":
                raise LoopIRError(f"program {self.name}: buffer {buffer.name} must have scope 'global'")
            by_name[buffer.name] = buffer
        kernel_names = [k.name for k in self.kernels]
        for name in kernel_names:
            if kernel_names.count(name) > 1:
                raise LoopIRError(f"program {self.name}: kernel name {name} is used twice")
        for kernel in self.kernels:
            verify_kernel(kernel)
            for param in kernel.params:
                if by_name.get(param.name) != param:
                    raise LoopIRError(
                        f"program {self.name}: kernel {kernel.name} takes {param}, "
                        "which is not one of the program's buffers"
                    )
            for call in (s for s in iter_stmts(kernel.body) if isinstance(s, ProgramCall)):
                callee = next((p for p in self.subprograms if p.name == call.program), None)
                if callee is None or len(call.args) != len(callee.buffers) - len(callee.temps):
                    raise LoopIRError(f"program {self.name}: kernel {kernel.name} calls {call.program}, which is "
                                      "not a sub-program taking that many arguments")
            written = kernel.written_buffers()
            for name in written:
                if any(b.name == name for b in self.inputs + self.constants):
                    raise LoopIRError(f"program {self.name}: kernel {kernel.name} writes input/constant {name}")
        self._verify_arena()

    def _verify_arena(self) -> None:
        if self.arena_offsets is None or self.sizes:
            return  # packed; or symbolic offsets, placed by a planner that keeps slots apart
        layout = dict(self.arena_offsets)
        for temp in self.temps:
            if temp.name not in layout:
                raise LoopIRError(f"program {self.name}: arena plan has no offset for temp {temp.name}")
            offset = layout[temp.name]
            if offset < 0 or offset % itemsize(temp.dtype):
                raise LoopIRError(
                    f"program {self.name}: temp {temp.name} at offset {offset} is not aligned to its "
                    f"{itemsize(temp.dtype)}-byte elements"
                )
        unknown = set(layout) - {t.name for t in self.temps}
        if unknown:
            raise LoopIRError(f"program {self.name}: arena plan names unknown temps {sorted(unknown)}")
        # Kernels declare their pointers restrict: temps that one kernel takes must not overlap.
        temps = {t.name: t for t in self.temps}
        for kernel in self.kernels:
            spans = sorted((layout[p.name], layout[p.name] + p.nbytes, p.name) for p in kernel.params
                           if p.name in temps and p.nbytes)
            allowed = {frozenset(pair) for pair in self.aliases}
            for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
                if start < end and frozenset((first, second)) not in allowed:
                    raise LoopIRError(f"program {self.name}: kernel {kernel.name} takes temps {first} and "
                                      f"{second}, which overlap in the arena plan")


def _size_vars(program: Program) -> tuple[str, ...]:
    """The size symbols' variables read by the program's kernels and buffer shapes (and its sub-programs'), sorted."""
    exprs = [e for k in program.kernels for st in iter_stmts(k.body) for e in stmt_exprs(st)]
    exprs += [symbolic_expr(d) for b in program.buffers for d in b.shape if symbolic_expr(d) is not None]
    exprs += [symbolic_expr(o) for _, o in program.arena_offsets or () if symbolic_expr(o) is not None]
    names = {n.name for e in exprs for n in walk(e) if isinstance(n, Var) and is_size_var(n.name)}
    names.update(size for sub in program.subprograms for size in sub.sizes)  # set by the outer entry
    return tuple(sorted(names))
