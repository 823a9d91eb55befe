"""auto_schedule: choose tiles and compute_at levels from a cost model over the lowered loop nests.

The candidates are those of the classic hand schedule: the output tiled
(tile sizes from a small grid), its inner tile loop vectorized at the
machine's vector width, its tile rows parallel; every stencil producer (a Func
read at two or more different points by one consumer) computed at the
output's tile, and so is a Func several others read (computed once, not per
reader); pointwise Funcs and boundary conditions inlined; Funcs with update
definitions, and
those read at data-dependent points, computed at the root with their pure
loop vectorized. The breadth-first candidates (auto_root.py) compute every
Func that is not cheap to inline once, at the root: they win where a tile's
producers would reach far beyond the tile (a deep pyramid).

The cost model lowers each candidate (bounds inference gives every
producer's region per tile) and counts, over the loop nest, the points each
stage computes times the operations of its definition, plus a charge per
loop iteration for loop overhead, and MEMORY_COST per vector stored to a
root buffer larger than half the L2 cache; a candidate whose per-tile buffers
do not fit in half of the L2 cache is refused (and larger tiles are not
lowered). `trials` > 0 then times the best few
candidates on the bound inputs and keeps the fastest.
"""
from __future__ import annotations

import json
import math
import time
from typing import Sequence


from tensorkiln.loops import expr as L
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.ir import Alloc, For, If, Stmt, Store, stmt_exprs
from tensorkiln.pipeline import expr as P
from tensorkiln.pipeline.auto_root import (all_at_root, at_sole_readers, breadth_first_candidate, inlined_funcs,
                                          is_boundary_condition, root_points, root_steps)
from tensorkiln.pipeline.compile import CompiledPipeline, lower_pipeline
from tensorkiln.pipeline.func import Func, apply_schedule, pipeline_funcs
from tensorkiln.pipeline.names import PipelineError
from tensorkiln.pipeline.schedule import vector_width

L2_BYTES = 1 << 20
LOOP_OVERHEAD = 4.0          # cost of one loop iteration, in operations
MEMORY_COST = 64.0           # a vector stored to memory and loaded back, in operations
TILE_WIDTHS = (128, 256, 512)
TILE_HEIGHTS = (16, 32, 64)


def _stencil_producers(funcs: list[Func]) -> tuple[set[str], set[str], dict[str, set[str]]]:
    """(Funcs read at several points by one consumer, Funcs read at a data-dependent point, readers of each)."""
    stencil, gathered, consumers = set(), set(), {}
    for consumer in funcs:
        exprs = list(consumer.values) + [e for u in consumer.updates for e in (*u.args, *u.values)]
        points: dict[str, set[str]] = {}
        for e in exprs:
            for node in P.walk(e):
                if isinstance(node, P.Call) and isinstance(node.target, Func):
                    if node.target is not consumer:
                        consumers.setdefault(node.target.name, set()).add(consumer.name)
                    points.setdefault(node.target.name, set()).add(str(node.args))
                    if any(isinstance(n, P.Call) for a in node.args for n in P.walk(a)):
                        gathered.add(node.target.name)
        stencil |= {name for name, seen in points.items() if len(seen) > 1}
    return stencil, gathered, consumers


def _candidate(output: Func, funcs: list[Func], tx: int, ty: int) -> dict:
    """The schedule data of one candidate (tile tx x ty)."""
    stencil, gathered, consumers = _stencil_producers(funcs)
    data = {}
    x, y = output.args[0].name, (output.args[1].name if output.dimensions > 1 else None)
    at_tile = {output.name}  # Funcs whose points are computed inside the output's tiles
    for f in reversed(funcs):  # consumers first: a producer goes in a tile only if all its readers are there
        readers = consumers.get(f.name, set())
        if f is not output and not f.updates and f.name not in gathered and readers and readers <= at_tile:
            at_tile.add(f.name)
    for f in funcs:
        stages = [{"compute": "inline", "store": None, "steps": []} for _ in f.schedules]
        first = f.args[0].name
        vector = vector_width(f.types[0])
        if f is output:
            steps = []
            if y is not None:
                steps += [["split", x, x, "xi", tx], ["split", y, y, "yi", ty], ["reorder", "xi", "yi", x, y],
                          ["split", "xi", "xi", "xi_v", vector], ["vectorize", "xi_v"], ["parallel", y]]
            else:
                steps += [["split", x, x, "xi_v", vector], ["vectorize", "xi_v"]]
            stages[0] = {"compute": "inline", "store": None, "steps": steps}
        elif is_boundary_condition(f):
            pass  # one clamped read of an input, inlined where it is read
        elif f.updates or f.name in gathered or f.name not in at_tile:
            stages[0] = {"compute": "root", "store": None, "steps": root_steps(f)}
        elif (f.name in stencil or len(consumers.get(f.name, ())) > 1) and y is not None and not output.updates:
            stages[0] = {"compute": [output.name, x], "store": None,
                         "steps": [["split", first, first, f"{first}_v", vector], ["vectorize", f"{first}_v"]]}
        data[f.name] = stages
    return data


def estimate_cost(stmt: Stmt, ranges: dict | None = None, trips: float = 1.0,
                  in_memory: frozenset = frozenset()) -> tuple[float, int]:
    """(operations the loop nest performs, largest bytes allocated inside a loop) of a lowered kernel body.

    A store into a buffer allocated outside every loop and larger than half the L2 cache (`in_memory`: a
    root Func's) also costs MEMORY_COST: that value goes out to memory and comes back for its readers."""
    ranges = dict(ranges or {})
    if isinstance(stmt, For):
        extent = Bounds(ranges)(stmt.extent)[1]
        extent = 1 if math.isinf(extent) else max(int(extent), 1)
        ranges[stmt.var.name] = (0, extent - 1)
        width = extent if stmt.kind != "vectorized" else max(1, extent // 16)
        ops, local = estimate_cost(stmt.body, ranges, trips * width, in_memory)
        return ops + trips * width * LOOP_OVERHEAD, local
    if isinstance(stmt, Store):
        nodes = sum(1 for e in stmt_exprs(stmt) for _ in L.walk(e))
        return trips * (nodes + (MEMORY_COST if stmt.buffer.name in in_memory else 0)), 0
    if isinstance(stmt, Alloc):
        if trips <= 1 and stmt.buffer.nbytes > L2_BYTES // 2:
            in_memory = in_memory | {stmt.buffer.name}
        ops, local = estimate_cost(stmt.body, ranges, trips, in_memory)
        return ops, max(local, stmt.buffer.nbytes if trips > 1 else 0)
    if isinstance(stmt, If):  # a partitioned loop's steady state or its edge: the dearer one
        branches = [estimate_cost(b, ranges, trips, in_memory) for b in (stmt.then, stmt.else_) if b is not None]
        return max(ops for ops, _ in branches), max(local for _, local in branches)
    total, local = 0.0, 0
    for child in getattr(stmt, "stmts", ()):
        ops, inner = estimate_cost(child, ranges, trips, in_memory)
        total, local = total + ops, max(local, inner)
    return total, local


def candidates(output: Func, funcs: list[Func], sizes: Sequence[int]) -> list[tuple[tuple, dict]]:
    """(tile, schedule data) of every candidate: the tiled ones, smallest tiles first (tile sizes that fit the
    output), then the breadth-first ones (auto_root.py; tile ()), each schedule once."""
    found = []
    heights = TILE_HEIGHTS if output.dimensions > 1 else (1,)
    for tx in TILE_WIDTHS:
        for ty in heights:
            if tx > 2 * sizes[0] or (output.dimensions > 1 and ty > 2 * sizes[1]):
                continue
            found.append(((tx, ty), _candidate(output, funcs, tx, ty)))
    everything = all_at_root(output, funcs)
    apply_schedule(output, everything)
    points = root_points(lower_pipeline(output, sizes)[0], funcs)
    points[output.name] = math.prod(sizes)
    found += [((), everything), ((), breadth_first_candidate(output, funcs, inlined_funcs(funcs, output, points)))]
    found += [(tile, moved) for tile, data in found if (moved := at_sole_readers(output, funcs, data)) is not None]
    unique = {json.dumps(data, sort_keys=True): (tile, data) for tile, data in found}
    return list(unique.values())


def auto_schedule(output: Func, sizes: Sequence[int], trials: int = 0) -> dict:
    """Choose and apply a schedule for the pipeline of `output` over `sizes`; returns its data.

    trials=0 trusts the cost model; trials=k times the k cheapest candidates on
    the bound inputs and keeps the fastest.
    """
    funcs = pipeline_funcs(output)
    if not output.defined:
        raise PipelineError(f"Func {output.name} is not defined")
    ranked, too_big = [], []
    for tile, data in candidates(output, funcs, sizes):
        if tile and any(tile[0] >= w and tile[1] >= h for w, h in too_big):
            continue  # a larger tile than one whose buffers did not fit: not lowered at all
        apply_schedule(output, data)
        try:
            program, _ = lower_pipeline(output, sizes)
        except PipelineError:
            continue  # a candidate the lowering refuses (a tile whose producer regions it cannot place)
        ops, local = estimate_cost(program.kernels[0].body)
        if local <= L2_BYTES // 2:
            ranked.append((ops, data))
        elif tile:
            too_big.append(tile)
    if not ranked:
        ranked.append((0.0, all_at_root(output, funcs)))
    ranked.sort(key=lambda r: r[0])
    best = ranked[0][1]
    if trials > 0:
        best = _fastest([r[1] for r in ranked[:trials]], output, sizes)
    apply_schedule(output, best)
    return best


def _fastest(schedules: list[dict], output: Func, sizes: Sequence[int]) -> dict:
    timings = []
    for data in schedules:
        apply_schedule(output, data)
        fn = CompiledPipeline(output, sizes)
        out = fn()
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            fn(out=out)
            runs.append(time.perf_counter() - start)
        timings.append((sorted(runs)[len(runs) // 2], data))
    return min(timings, key=lambda t: t[0])[1]

