"""Memory planning for temps of symbolic size: slots chosen at the hints, sized and placed per call.

A program with size symbols (tensorkiln/shapes) cannot place its temps at
fixed byte offsets: their sizes are polynomials over the symbols. Comparing
those sizes to place them (what the best-fit planner does, memory_plan.py)
would record a guard per comparison. So the choice is made once, at the sizes
seen when tracing (the hints), in a form that stays valid at every size:

- temps are assigned to *slots*, greedily by size at the hints: a temp goes
  into the smallest slot whose temps are all dead while it lives and that is
  large enough at the hints, else into the largest such slot, else a new one;
  temps of one slot never live at the same time, whatever the sizes;
- a slot's size is the symbolic maximum of its temps' (aligned) sizes
  (`sym_max`: an opaque max when the bounds do not decide it — no guard);
- slot offsets are prefix sums of those sizes, so the arena's layout is a set
  of polynomials the entry evaluates on every call (codegen/c_entry.py), and the
  arena's size is the last slot's end.

No in-place pairs: the elementwise in-place updates of memory_plan.py compare
sizes too. The figures reported are those of the hints.
"""
from __future__ import annotations

from ..loops.program import ARENA_ALIGNMENT, Program
from ..shapes import hint_of, sym_max
from .memory_plan import Lifetime, MemoryPlan, lifetimes, lower_bound


def _align(n):
    """Round a (symbolic) byte count up to the arena alignment."""
    return (n + ARENA_ALIGNMENT - 1) // ARENA_ALIGNMENT * ARENA_ALIGNMENT


def plan_symbolic_memory(program: Program) -> tuple[dict[str, object], object, MemoryPlan]:
    """(temp name -> symbolic offset, the symbolic arena size, the figures at the hints)."""
    temps = {t.name: t for t in program.temps}
    lives = lifetimes(program.kernels, program.temps)  # sizes are symbolic here: only lifetimes are read
    hints = {l.name: hint_of(_align(temps[l.name].nbytes)) for l in lives}
    slots: list[list[Lifetime]] = []
    for life in sorted(lives, key=lambda l: (-hints[l.name], l.first, l.name)):
        free = [s for s in slots if not any(other.overlaps(life) for other in s)]
        fits = [s for s in free if max(hints[o.name] for o in s) >= hints[life.name]]
        if fits:
            slot = min(fits, key=lambda s: max(hints[o.name] for o in s))
        elif free:
            slot = max(free, key=lambda s: max(hints[o.name] for o in s))
        else:
            slot = []
            slots.append(slot)
        slot.append(life)
    offsets: dict[str, object] = {}
    end = 0
    for slot in slots:
        size = 0
        for life in slot:
            offsets[life.name] = end
            size = sym_max(size, _align(temps[life.name].nbytes))
        end = end + size
    for name in temps:  # temps no kernel touches still need an offset
        offsets.setdefault(name, 0)
    hinted = [Lifetime(l.name, hints[l.name], l.first, l.last) for l in lives]
    naive = sum(hint_of(_align(t.nbytes)) for t in program.temps)
    figures = MemoryPlan({n: hint_of(o) for n, o in offsets.items()}, hint_of(end), naive,
                         lower_bound(hinted, len(program.kernels)), hinted)
    return offsets, end, figures
