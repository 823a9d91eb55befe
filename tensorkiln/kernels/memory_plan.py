"""Memory planning: liveness of intermediate buffers over the kernel order, and a best-fit arena.

Every intermediate (temp) lives from the kernel that writes it to the last
kernel that reads it. Two temps whose lifetimes do not overlap may share
bytes of the one arena the runtime allocates. Placement is greedy by size,
best fit (the approach of TFLite's and MNN's planners): the largest temps are
placed first, each into the smallest gap left between the already-placed
temps it is live together with, or at the end.

In-place updates: an elementwise kernel whose output is a temp and which
reads another temp only at the element it writes (the same flat index), on
the last use of that temp, writes over it. Such pairs share one place in the
arena (they are planned as one buffer), and the generated C drops `restrict`
from the two pointers.

Three numbers describe the result (CompileReport and explain() show them):
- naive_bytes: every temp in its own memory (the sum of their sizes);
- lower_bound_bytes: the largest total size of temps live at one moment; no
  plan can use less;
- arena_bytes: what this plan uses.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..loops.expr import Load, walk
from ..loops.index_equality import loop_extents, provably_equal
from ..loops.ir import Alloc, Kernel, ProgramCall, Store, iter_stmts, stmt_exprs
from ..loops.program import ARENA_ALIGNMENT, Program


def _align(n: int) -> int:
    return (n + ARENA_ALIGNMENT - 1) // ARENA_ALIGNMENT * ARENA_ALIGNMENT


@dataclass(frozen=True)
class Lifetime:
    """A temp is live from kernel `first` to kernel `last` (inclusive)."""

    name: str
    size: int
    first: int
    last: int

    def overlaps(self, other: "Lifetime") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass
class MemoryPlan:
    """Arena offsets of the temps, and the figures that judge them."""

    offsets: dict[str, int]
    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    lifetimes: list[Lifetime]
    aliases: tuple[tuple[str, str], ...] = ()


def lifetimes(kernels: tuple[Kernel, ...], temps) -> list[Lifetime]:
    """Liveness of each temp over the kernel sequence."""
    result = []
    for temp in temps:
        used = [i for i, k in enumerate(kernels) if any(p.name == temp.name for p in k.params)]
        if not used:
            continue
        result.append(Lifetime(temp.name, _align(temp.nbytes), used[0], used[-1]))
    return result


def inplace_pairs(program: Program, lives: list[Lifetime]) -> list[tuple[str, str]]:
    """(written temp, read temp) pairs that an elementwise kernel can update in place."""
    by_name = {l.name: l for l in lives}
    temps = {t.name: t for t in program.temps}
    pairs = []
    taken: set[str] = set()
    for step, kernel in enumerate(program.kernels):
        stores = [s for s in iter_stmts(kernel.body) if isinstance(s, Store)]
        if any(isinstance(s, (Alloc, ProgramCall)) for s in iter_stmts(kernel.body)) or len(stores) != 1:
            continue  # (a sub-program call writes through pointers: not an elementwise update)
        out = stores[0].buffer
        if out.name not in temps or out.name in taken:
            continue
        loads = [e for s in iter_stmts(kernel.body) for x in stmt_exprs(s) for e in walk(x) if isinstance(e, Load)]
        for candidate in kernel.params:
            life = by_name.get(candidate.name)
            if (life is None or candidate.name == out.name or life.last != step or life.first >= step
                    or candidate.name in taken or candidate.nbytes != out.nbytes or candidate.dtype != out.dtype):
                continue
            reads = [e for e in loads if e.buffer.name == candidate.name]
            if reads and all(e.index == stores[0].index for e in reads):
                pairs.append((out.name, candidate.name))
                taken |= {out.name, candidate.name}
                break
    return pairs


def state_update_pairs(program: Program, candidates: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(output, input) pairs whose output may be written into the input's own memory.

    A training step's new parameter (or optimizer state) may overwrite the old
    one when a single kernel computes it, that kernel reads the old value only
    at the index it writes (elementwise), and no later kernel reads the old value.
    """
    pairs: list[tuple[str, str]] = []
    taken: set[str] = set()
    for out_name, in_name in candidates:
        if out_name in taken or in_name in taken:
            continue
        writers = [i for i, k in enumerate(program.kernels)
                   if any(isinstance(s, Store) and s.buffer.name == out_name for s in iter_stmts(k.body))]
        if len(writers) != 1:
            continue
        step = writers[0]
        kernel = program.kernels[step]
        stores = [s for s in iter_stmts(kernel.body) if isinstance(s, Store)]
        if any(isinstance(s, (Alloc, ProgramCall)) for s in iter_stmts(kernel.body)) or len(stores) != 1:
            continue  # (a sub-program call writes through pointers: not an elementwise update)
        out = stores[0].buffer
        source = next((b for b in program.inputs if b.name == in_name), None)
        if source is None or source.nbytes != out.nbytes or source.dtype != out.dtype:
            continue
        if any(p.name == in_name for k in program.kernels[step + 1:] for p in k.params):
            continue  # the old value is read after the update
        loads = [e for s in iter_stmts(kernel.body) for x in stmt_exprs(s) for e in walk(x)
                 if isinstance(e, Load) and e.buffer.name == in_name]
        extents = loop_extents(kernel.body)  # equal indices may be spelled apart with run-time sizes
        if all(provably_equal(e.index, stores[0].index, extents) for e in loads):
            pairs.append((out_name, in_name))
            taken |= {out_name, in_name}
    return pairs


def _merge(lives: list[Lifetime], pairs: list[tuple[str, str]]) -> tuple[list[Lifetime], dict[str, str]]:
    """Plan each in-place pair as one buffer spanning both lifetimes; returns members' representative."""
    parent = {l.name: l.name for l in lives}

    def find(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    for written, read in pairs:
        parent[find(written)] = find(read)
    groups: dict[str, list[Lifetime]] = {}
    for life in lives:
        groups.setdefault(find(life.name), []).append(life)
    merged = [Lifetime(root, max(l.size for l in members), min(l.first for l in members), max(l.last for l in members))
              for root, members in groups.items()]
    return merged, {l.name: find(l.name) for l in lives}


def lower_bound(lives: list[Lifetime], steps: int) -> int:
    """The largest total size of temps live at the same kernel."""
    return max((sum(l.size for l in lives if l.first <= t <= l.last) for t in range(steps)), default=0)


def plan_memory(program: Program, in_place: bool = True) -> MemoryPlan:
    """Best-fit placement of the program's temps in one arena."""
    original = lifetimes(program.kernels, program.temps)
    pairs = inplace_pairs(program, original) if in_place else []
    lives, representative = _merge(original, pairs)
    placed: list[tuple[int, Lifetime]] = []
    offsets: dict[str, int] = {}
    for life in sorted(lives, key=lambda l: (-l.size, l.first)):
        busy = sorted((off, off + other.size) for off, other in placed if other.overlaps(life))
        best, best_gap, cursor = None, None, 0
        for start, end in busy:
            gap = start - cursor
            if gap >= life.size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, end)
        offset = best if best is not None else cursor
        offsets[life.name] = offset
        placed.append((offset, life))
    for name, root in representative.items():
        offsets[name] = offsets[root]
    for temp in program.temps:  # temps no kernel touches (empty ones) still need an offset
        offsets.setdefault(temp.name, 0)
    arena = max((off + life.size for off, life in placed), default=0)
    naive = sum(_align(t.nbytes) for t in program.temps)
    return MemoryPlan(offsets, arena, naive, lower_bound(lives, len(program.kernels)), lives, tuple(pairs))


def apply_plan(program: Program, plan: MemoryPlan) -> Program:
    """The same program with the plan's arena offsets."""
    return Program(program.name, program.kernels, program.inputs, program.outputs, program.constants,
                   program.temps, tuple(sorted(plan.offsets.items())), plan.aliases, program.subprograms)
