"""Memory planning: liveness of intermediate buffers over the kernel order, and a best-fit arena.

Every intermediate (temp) lives from the kernel that writes it to the last
kernel that reads it. Two temps whose lifetimes do not overlap may share
bytes of the one arena the runtime allocates. Placement is greedy by size,
best fit (the approach of TFLite's and MNN's planners): the largest temps are
placed first, each into the smallest gap left between the already-placed
temps it is live together with, or at the end.

Three numbers describe the result (CompileReport and explain() show them):
- naive_bytes: every temp in its own memory (the sum of their sizes);
- lower_bound_bytes: the largest total size of temps live at one moment; no
  plan can use less;
- arena_bytes: what this plan uses.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..loops.ir import Kernel
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


def lifetimes(kernels: tuple[Kernel, ...], temps) -> list[Lifetime]:
    """Liveness of each temp over the kernel sequence."""
    result = []
    for temp in temps:
        used = [i for i, k in enumerate(kernels) if any(p.name == temp.name for p in k.params)]
        if not used:
            continue
        result.append(Lifetime(temp.name, _align(temp.nbytes), used[0], used[-1]))
    return result


def lower_bound(lives: list[Lifetime], steps: int) -> int:
    """The largest total size of temps live at the same kernel."""
    return max((sum(l.size for l in lives if l.first <= t <= l.last) for t in range(steps)), default=0)


def plan_memory(program: Program) -> MemoryPlan:
    """Best-fit placement of the program's temps in one arena."""
    lives = lifetimes(program.kernels, program.temps)
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
    for temp in program.temps:  # temps no kernel touches (empty ones) still need an offset
        offsets.setdefault(temp.name, 0)
    arena = max((off + life.size for off, life in placed), default=0)
    naive = sum(_align(t.nbytes) for t in program.temps)
    return MemoryPlan(offsets, arena, naive, lower_bound(lives, len(program.kernels)), lives)


def apply_plan(program: Program, plan: MemoryPlan) -> Program:
    """The same program with the plan's arena offsets."""
    return Program(program.name, program.kernels, program.inputs, program.outputs, program.constants,
                   program.temps, tuple(sorted(plan.offsets.items())))
