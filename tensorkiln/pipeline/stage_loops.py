"""One stage's loops: its schedule replayed with the loop-IR primitives on a stand-in kernel.

A stage (a Func's pure definition or one of its updates) starts as one loop
per dimension over its region, innermost first. Its schedule steps (split with
Halide's shift-inwards tail for pure stages, fuse, reorder, vectorize,
parallel, unroll) are replayed by loops/schedule.py's primitives on a kernel
that only stores the stage's coordinates (or runs an update's store), so those
primitives check legality; the loops they leave and the coordinates' lets say
where each loop puts the stage's point (lower.py's `lower_func` then builds
the real nest from them).
"""
from __future__ import annotations

from dataclasses import dataclass

from tensorkiln.loops import expr as L
from tensorkiln.loops import schedule as S
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Alloc, For, Kernel, Let, Stmt, Store, block, iter_stmts
from tensorkiln.loops.simplify import simplify
from tensorkiln.pipeline.names import PipelineError


@dataclass
class Loop:
    """One loop of a scheduled stage."""

    var: str
    extent: L.Expr
    kind: str
    user_name: str


def stage_loops(f, k: int, dims: list[tuple[str, L.Expr, L.Expr]], steps: list, ranges: dict,
                update_body=None) -> tuple[list[Loop], dict[str, L.Expr]]:
    """Replay stage k's schedule `steps` on a stand-in kernel over `dims` (user name, first coordinate and
    extent of each initial loop, innermost first); its loops and each coordinate's expression.

    `update_body(coords)`, for an update stage, gives the statement the stand-in runs at each point (with the
    parameters and local buffers it needs); a pure stage stores its coordinates. `ranges` bounds the loops
    outside the stage (a run-time extent is replaced by its largest value while the steps are replayed)."""
    sched = f.schedules[k]
    prefix = f"{f.name}_s{k}_"
    exact = k == 0  # pure stages may recompute a point: shift-inwards tails where extents are constant
    lets: list[Stmt] = []
    coords = {}
    for name, lo, extent in dims:
        coords[name] = L.Var(prefix + name)
    inner: list[Stmt] = [Let(L.Var(prefix + "c_" + name), coords[name]) for name, _, _ in dims]
    out = Buffer(prefix + "points", "int64", (1,))
    params = [out]
    if update_body is not None:
        stmt, params_extra, allocs = update_body(coords)
        inner.append(stmt)
        params += params_extra
    else:
        index: L.Expr = L.const(0)
        stride: L.Expr = L.const(1)
        for name, _, extent in dims:
            index = index + coords[name] * stride
            stride = stride * extent
        inner.append(Store(out, index, L.const(0)))
        allocs = []
    nest: Stmt = block(*inner)
    for name, _, extent in reversed(dims):
        if not isinstance(extent, L.Const):
            ext_var = L.Var(prefix + "extent_" + name)
            lets.append(Let(ext_var, L.const(int(Bounds(ranges)(extent)[1]))))
            extent = ext_var
    body: Stmt = nest
    for name, _, extent in dims:  # innermost first: wrap outward
        ext = extent if isinstance(extent, L.Const) else L.Var(prefix + "extent_" + name)
        body = For(L.Var(prefix + name), ext, body)
    body = block(*lets, body)
    for buffer in allocs:
        body = Alloc(buffer, body)
    kernel = Kernel(prefix.rstrip("_"), tuple(params), body)
    kernel = replay(kernel, sched, steps, prefix, exact)
    loops, lets_found = [], {}
    for s in iter_stmts(kernel.body):
        if isinstance(s, For):
            user = s.var.name[len(prefix):]
            loops.append(Loop(s.var.name, s.extent, s.kind, user))
        elif isinstance(s, Let) and s.var.name.startswith(prefix + "c_"):
            lets_found[s.var.name[len(prefix) + 2:]] = s.value
    actual_extent = {prefix + "extent_" + name: extent for name, _, extent in dims}
    loops = [Loop(l.var, simplify(S.substitute_expr(l.extent, actual_extent)), l.kind, l.user_name)
             for l in loops]
    coords_out = {name: simplify(lo + lets_found[name]) for name, lo, _ in dims}
    return loops, coords_out


def replay(kernel: Kernel, sched, steps: list, prefix: str, exact: bool) -> Kernel:
    """`kernel` with the schedule steps applied to its loops (each named `prefix` + the user's name); a pure
    stage (`exact`) splits a loop of constant extent with a shift-inwards tail. A refused step raises
    PipelineError naming the stage and the step."""
    tail = "shift_inwards" if exact else "min"
    try:
        for step in steps:
            a = step.args
            if step.name == "split":
                # shift-inwards needs a constant extent: decided per loop (a sliding window's rows vary,
                # its columns do not)
                extent = next(l.extent for l in iter_stmts(kernel.body)
                              if isinstance(l, For) and l.var.name == prefix + a[0])
                this_tail = tail if isinstance(extent, L.Const) else "min"
                kernel = S.split(kernel, prefix + a[0], a[3], tail=this_tail, outer=prefix + a[1],
                                 inner=prefix + a[2])
            elif step.name == "fuse":
                kernel = S.fuse(kernel, prefix + a[1], prefix + a[0], fused=prefix + a[2])
            elif step.name == "reorder":
                kernel = S.reorder(kernel, *[prefix + n for n in reversed(a)])
            elif step.name == "vectorize":
                kernel = S.vectorize(kernel, prefix + a[0])
            elif step.name == "parallel":
                kernel = S.parallel(kernel, prefix + a[0])
            elif step.name == "unroll":
                kernel = S.unroll(kernel, prefix + a[0])
    except S.ScheduleError as err:
        where = sched.func + (f".update({sched.stage - 1})" if sched.stage else "")
        raise PipelineError(f"schedule of {where}, step {step}: {err}".replace(prefix, "")) from None
    return kernel
