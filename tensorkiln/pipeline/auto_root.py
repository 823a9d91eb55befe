"""auto_schedule's breadth-first candidates: cheap Funcs inlined, every other Func computed at the root.

The tiled candidates (auto.py) compute producers per output tile, which pays
off when a producer's region per tile is close to the tile; in a deep
pyramid it is not: a tile of the output needs a window of the coarsest
level, and that window needs a region of every finer level many times the
tile, so per-tile producers recompute the image several times over. Those
pipelines are scheduled breadth first (Mullapudi et al. 2016 call these
single-stage groups): each Func that is not inlined is computed once, over
everything its readers need, at the root, its rows in parallel strips and
its innermost loop vectorized.

Which Funcs are inlined is decided from the regions bounds inference gives
(Mullapudi et al.'s trade of recomputation against memory traffic): the
candidate with every Func at the root but the boundary conditions is lowered
once, and its buffers say how many points each Func has. Then, consumers
first, a Func is inlined when evaluating its definition wherever its readers
need it (each reader's evaluations times the places it reads the Func) costs
no more than computing its points once and storing them (MEMORY_PER_POINT
operations a point more). So a lookup table read per pixel stays at the root,
and a pyramid level read at two of its eight intensity levels per pixel is
inlined. Funcs with update definitions are never inlined.
"""
from __future__ import annotations

import numpy as np

from tensorkiln.loops.ir import Alloc, iter_stmts
from tensorkiln.pipeline import expr as P
from tensorkiln.pipeline.schedule import vector_width

STRIP_ROWS = 8          # rows of a parallel strip of a root Func
MEMORY_PER_POINT = 16.0  # a value stored to memory and loaded back, in operations


def definition_exprs(f) -> list[P.Expr]:
    """Every expression of f's definitions (pure values, update arguments and values)."""
    return list(f.values) + [e for u in f.updates for e in (*u.args, *u.values)]


def _calls(f) -> dict[str, int]:
    """How many calls f's definitions make to each other Func, by name."""
    sites: dict[str, int] = {}
    for e in definition_exprs(f):
        for node in P.walk(e):
            if isinstance(node, P.Call) and hasattr(node.target, "schedules") and node.target is not f:
                sites[node.target.name] = sites.get(node.target.name, 0) + 1
    return sites


def _value_operations(e: P.Expr) -> int:
    """Nodes of `e` that compute a value: a call counts once (one load), its coordinates not at all (they are
    index arithmetic, mostly hoisted out of the inner loop or folded into the address)."""
    if isinstance(e, P.Call):
        return 1
    return 1 + sum(_value_operations(c) for c in P.children(e))


def is_boundary_condition(f) -> bool:
    """A Func whose one value is one read of an input Buffer (pl.repeat_edge and the like)."""
    return len(f.values) == 1 and isinstance(f.value, P.Call) and not hasattr(f.value.target, "schedules")


def inlined_funcs(funcs: list, output, points: dict[str, int]) -> set[str]:
    """Names of the Funcs worth inlining, given each Func's points when computed at the root (`points`)."""
    calls = {f.name: _calls(f) for f in funcs}
    evaluations: dict[str, float] = {output.name: float(points.get(output.name, 1))}
    inlined: set[str] = set()
    for f in reversed(funcs):  # consumers first: a Func's evaluations follow from its readers'
        if f is output:
            continue
        needed = sum(evaluations.get(c.name, 0.0) * calls[c.name].get(f.name, 0) for c in funcs)
        size = sum(_value_operations(e) for e in definition_exprs(f))
        own = float(points.get(f.name, needed))
        cheaper = needed * size <= own * (size + MEMORY_PER_POINT)
        if not f.updates and (is_boundary_condition(f) or cheaper):
            inlined.add(f.name)
            evaluations[f.name] = needed
        else:
            evaluations[f.name] = own
    return inlined


def root_steps(f) -> list[list]:
    """A root Func's loop steps: rows (its second dimension) outermost in parallel strips, x vectorized."""
    first = f.args[0].name
    vector = vector_width(f.types[0])
    steps: list[list] = []
    if f.dimensions > 1:
        rows = f.args[1].name
        others = [a.name for a in f.args if a.name not in (first, rows)]
        if others:
            steps.append(["reorder", first, *others, rows])
        steps += [["split", rows, rows, f"{rows}_p", STRIP_ROWS], ["parallel", rows]]
    steps += [["split", first, first, f"{first}_v", vector], ["vectorize", f"{first}_v"]]
    return steps


def breadth_first_candidate(output, funcs: list, inlined: set[str]) -> dict:
    """The schedule data of the breadth-first candidate that inlines the Funcs named in `inlined`."""
    data = {}
    for f in funcs:
        stages = [{"compute": "inline", "store": None, "steps": []} for _ in f.schedules]
        if f is output:
            stages[0]["steps"] = root_steps(f)
        elif f.name not in inlined:
            stages[0] = {"compute": "root", "store": None, "steps": root_steps(f)}
        data[f.name] = stages
    return data


def at_sole_readers(output, funcs: list, data: dict) -> dict | None:
    """`data` with each root Func with update definitions that one other root Func alone reads computed in
    that reader's parallel row strips (Halide's bilateral grid: the histogram per strip of the z blur), or
    None where there is no such Func.

    A root Func's updates run serially over its whole region (a scatter's rows may collide, so they are
    not parallel); per strip of its reader they run in the strips' parallel loop, over the region the
    strip reads, in a buffer that stays in cache. Pure Funcs are left where they are: their rows are
    parallel at the root already, and moving a chain of them would recompute each strip's halo."""
    readers: dict[str, set[str]] = {}
    for f in funcs:
        for name in _calls(f):
            readers.setdefault(name, set()).add(f.name)
    by_name = {f.name: f for f in funcs}
    moved = {name: [dict(stage) for stage in stages] for name, stages in data.items()}
    changed = False
    for f in funcs:
        sole = readers.get(f.name, set())
        if f is output or not f.updates or len(sole) != 1 or data[f.name][0]["compute"] != "root":
            continue
        reader = by_name[next(iter(sole))]
        if reader is output or reader.updates or reader.dimensions < 2 or f.dimensions < 2 \
                or data[reader.name][0]["compute"] != "root":
            continue
        first, vector = f.args[0].name, vector_width(f.types[0])
        moved[f.name][0] = {"compute": [reader.name, reader.args[1].name],  # root_steps' strip loop
                            "store": None, "steps": [["split", first, first, f"{first}_v", vector],
                                                     ["vectorize", f"{first}_v"]]}
        changed = True
    return moved if changed else None


def all_at_root(output, funcs: list) -> dict:
    """The breadth-first candidate that inlines only the boundary conditions."""
    return breadth_first_candidate(output, funcs, {f.name for f in funcs if is_boundary_condition(f)})


def root_points(program, funcs: list) -> dict[str, int]:
    """Points of each Func's buffer in a lowered program (a Tuple Func's first value's)."""
    by_buffer = {(f.name if len(f.types) == 1 else f"{f.name}_0"): f.name for f in funcs}
    points = {}
    for s in iter_stmts(program.kernels[0].body):
        if isinstance(s, Alloc) and s.buffer.name in by_buffer:
            points[by_buffer[s.buffer.name]] = int(np.prod(s.buffer.shape))
    return points
