"""Lowering a pipeline to one loop-IR kernel: loop nests from schedules, regions from bounds inference.

The steps, as in Halide:

1. Every Func the output reads is found; each gets its level: inlined into
   its callers (the default), computed at the root, or computed inside a
   loop of a consumer (`compute_at`). A Func with update definitions is never
   inlined.
2. Each stage (a Func's pure definition or one of its updates) becomes a
   loop nest: the stage's loops over its region, shaped by replaying its
   schedule steps with the loop-IR primitives (loops/schedule.py: split with
   Halide's shift-inwards tail for pure stages, reorder, vectorize, parallel,
   unroll) on a stand-in kernel that stores the stage's coordinates; those
   primitives check legality, and the coordinates they leave say where each
   loop puts the stage's point (stage_loops.py).
3. The output is lowered first over its whole region. Going outward through
   its loops, the region of every Func read inside is tracked as a box of
   symbolic (min, max) expressions (bounds.py); at the loop where a producer
   is computed, its box is known in terms of the loops outside, so it is
   allocated there (`Alloc`) and lowered the same way, recursively, over that
   box (realization.py addresses its buffer once the box is known). Root
   producers are lowered last, outside every loop.
4. Input buffers must cover what is read from them: the root boxes are
   constants, checked against the arrays' shapes (a boundary condition is how
   a pipeline reads outside an image).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from tensorkiln.loops import expr as L
from tensorkiln.loops import schedule as S
from tensorkiln.loops.bounds import Bounds
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import (
    For, Kernel, Let, Stmt, Store, block, iter_stmts, simplify_kernel, stmt_exprs,
)
from tensorkiln.loops.simplify import simplify
from tensorkiln.pipeline import expr as P
from tensorkiln.pipeline.bounds import Box, tighten, union_boxes, widen_box
from tensorkiln.pipeline.fold import Fold, StorageNote, fold_mask_name, merge_folds, window_fold
from tensorkiln.pipeline.lower_expr import ExprLowering, loop_dtype
from tensorkiln.pipeline.names import Buffer as InputBuffer
from tensorkiln.pipeline.names import PipelineError
from tensorkiln.pipeline.hoist import hoist_allocs
from tensorkiln.pipeline.partition import partition_clamps
from tensorkiln.pipeline.realization import (
    Realization, alloc_all, finalize, row_major_strides, substitute_box, value_buffers,
)
from tensorkiln.pipeline.schedule import default_steps
from tensorkiln.pipeline.stage_loops import Loop, stage_loops


def _callees(e: P.Expr) -> list[object]:
    return [n.target for n in P.walk(e) if isinstance(n, P.Call)]


class Lowering:
    """Lowers Func `output` over [0, sizes) with input arrays `arrays` (by Buffer name) to one Kernel."""

    def __init__(self, output, sizes: Sequence[int], arrays: dict[str, np.ndarray], fold_storage: bool = True):
        self.output = output
        self.fold_storage = fold_storage
        self.folds: dict[str, Optional[Fold]] = {}   # by Func: the fold of its window (store_at ones)
        self.storage: list[StorageNote] = []          # every buffer allocated, for explain()
        self.sizes = [int(s) for s in sizes]
        if len(self.sizes) != output.dimensions or any(s < 1 for s in self.sizes):
            raise PipelineError(f"{output.name} has {output.dimensions} dimension(s); realize it over as many "
                                f"positive sizes, got {list(sizes)}")
        self.arrays = arrays
        self.funcs, self.inputs = self._collect(output)
        self.level = {name: self._level(f) for name, f in self.funcs.items()}
        self.realized: dict[str, Realization] = {}
        self.ranges: dict[str, tuple[int, int]] = {}
        self.loop_kinds: dict[str, str] = {}
        self.order = list(self.funcs)  # producers before consumers
        self.lower_expr = ExprLowering(self._call, self._extent)
        self.input_buffers = {name: Buffer(name, b.type, self.arrays[name].shape) for name, b in self.inputs.items()}

    # ---- the graph of Funcs

    def _collect(self, output) -> tuple[dict, dict]:
        funcs: dict[str, object] = {}
        inputs: dict[str, InputBuffer] = {}
        seen: set[int] = set()

        def visit(f) -> None:  # depth-first, producers first; pipelines are shallow, so recursion is fine
            if id(f) in seen:
                return
            seen.add(id(f))
            if not f.defined:
                raise PipelineError(f"Func {f.name} is used but never defined")
            exprs = list(f.values) + [e for u in f.updates for e in (*u.args, *u.values)]
            exprs += [d for u in f.updates if u.rdom for r in u.rdom.dims for d in (r.min, r.extent)]
            for e in exprs:
                for target in _callees(e):
                    if isinstance(target, InputBuffer):
                        if inputs.setdefault(target.name, target) is not target:
                            raise PipelineError(f"two input Buffers are named {target.name}")
                    elif target is not f:
                        visit(target)
            for e in exprs:
                for node in P.walk(e):
                    if isinstance(node, P.Extent) and node.buffer.name not in inputs:
                        inputs[node.buffer.name] = node.buffer
            if funcs.setdefault(f.name, f) is not f:
                raise PipelineError(f"two Funcs are named {f.name}")

        visit(output)
        clash = set(funcs) & set(inputs)
        if clash:
            raise PipelineError(f"a Func and an input Buffer share the name(s) {sorted(clash)}")
        for name, b in inputs.items():
            if name not in self.arrays:
                self.arrays[name] = b.array
        return funcs, inputs

    def _level(self, f) -> object:
        if f is self.output:
            return "output"
        level = f.schedules[0].compute
        if level == "inline" and f.updates:
            return "root"
        if isinstance(level, tuple):
            consumer = self.funcs.get(level[0])
            if consumer is None:
                raise PipelineError(f"{f.name}.compute_at({level[0]}, {level[1]}): {level[0]} is not part of the "
                                    f"pipeline that computes {self.output.name}")
        return level

    def _extent(self, e: P.Extent) -> int:
        shape = self.arrays[e.buffer.name].shape
        if e.dim >= len(shape):
            raise PipelineError(f"{e.buffer.name} has {len(shape)} dimension(s), no extent of dimension {e.dim}")
        return int(shape[len(shape) - 1 - e.dim])

    # ---- calls

    def _call(self, node: P.Call, args: list[L.Expr], env: dict) -> L.Expr:
        target = node.target
        if isinstance(target, InputBuffer):
            buffer = self.input_buffers[target.name]
            extents = list(reversed(buffer.shape))
            at = Realization(buffer, [L.const(0)] * len(args), row_major_strides(extents)).index(args)
            value: L.Expr = L.Load(buffer, at)
            self.calls.append((target.name, args))
        elif self.level[target.name] == "inline":
            inner = dict(zip((a.name for a in target.args), args))
            return self.lower_expr(target.values[node.component or 0], inner)
        else:
            r = self.realized[target.name]
            value = L.Load(r.buffers[node.component or 0], r.index(args))
            self.calls.append((target.name, args))
        return value if value.dtype == loop_dtype(node.type) else L.Cast(value, loop_dtype(node.type))

    def lower_with_calls(self, e: P.Expr, env: dict) -> tuple[L.Expr, list]:
        """`e` lowered, and the calls it makes to realized Funcs and inputs: (name, args)."""
        saved, self.calls = getattr(self, "calls", None), []
        try:
            return self.lower_expr(e, env), self.calls
        finally:
            self.calls = saved if saved is not None else []

    # ---- stages

    def _stage_dims(self, f, k: int, box: Box) -> list[tuple[str, L.Expr, L.Expr]]:
        """(user name, first coordinate, extent) of each initial loop of stage k, innermost first."""
        sched = f.schedules[k]
        dims = []
        pure = {a.name: d for d, a in enumerate(f.args)}
        rvars = {r.name: r for r in (f.updates[k - 1].rdom.dims if k and f.updates[k - 1].rdom else [])}
        for name in sched.initial_loops:
            if name in rvars:
                r = rvars[name]
                lo = self.lower_expr(r.min, {})
                extent = self.lower_expr(r.extent, {})
                if not isinstance(extent, L.Const) or extent.value < 1:
                    raise PipelineError(f"RDom {r.rdom.name} of {f.name}: extent {L.format_expr(extent)} must be a "
                                        "positive constant")
                dims.append((name, lo, extent))
            else:
                lo_d, hi_d = box[pure[name]]
                dims.append((name, lo_d, simplify(hi_d - lo_d + 1, self.ranges)))
        return dims

    def _schedule_stage(self, f, k: int, box: Box, update_body=None) -> tuple[list[Loop], dict[str, L.Expr]]:
        """Stage k's loops over `box` and each coordinate's expression (stage_loops.py)."""
        dims = self._stage_dims(f, k, box)
        steps = f.schedules[k].steps
        if f is self.output and k == 0 and not steps:
            steps = default_steps(f.schedules[k].initial_loops, f.types[0])
        return stage_loops(f, k, dims, steps, self.ranges, update_body)

    # ---- Funcs over regions

    def lower_func(self, f, box: Box) -> tuple[Stmt, dict[str, list[Box]]]:
        """Statements computing f over `box` into its realization, and the boxes it reads of others."""
        stmts: list[Stmt] = []
        needs: dict[str, list[Box]] = {}
        r = self.realized[f.name]
        for k in range(len(f.schedules)):
            if k == 0:
                loops, coords = self._schedule_stage(f, 0, box)
                env = {a.name: coords[a.name] for a in f.args}
                index, stores, calls = r.index([env[a.name] for a in f.args]), [], []
                for buffer, value in zip(r.buffers, f.values):  # a Tuple Func's values: one store each
                    lowered, c = self.lower_with_calls(value, env)
                    stores.append(Store(buffer, index, self._stored(lowered, buffer)))
                    calls += c
                store = block(*stores)
            else:
                loops, coords, store, calls = self._update_stage(f, k, box)
            for loop in loops:  # outer first: an inner extent may use an outer loop
                self.ranges[loop.var] = (0, max(int(Bounds(self.ranges)(loop.extent)[1]) - 1, 0))
            body: Stmt = store
            stage_needs: dict[str, list[Box]] = {}
            for name, args in calls:
                stage_needs.setdefault(name, []).append([(a, a) for a in args])
            stage_needs = _distinct(stage_needs)
            for loop in reversed(loops):
                self.loop_kinds[loop.var] = loop.kind
                if k == len(f.schedules) - 1:  # producers computed at f's loops go in its last stage
                    body, stage_needs = self._inject(f, loop.user_name, body, stage_needs, loop.var)
                if loop.kind == "parallel" and any(n.startswith("#store:") for n in stage_needs):
                    names = [n[len("#store:"):] for n in stage_needs if n.startswith("#store:")]
                    raise PipelineError(f"{', '.join(names)} would be stored outside the parallel loop "
                                        f"{loop.user_name} of {f.name} and computed inside it: threads would "
                                        "share its buffer; store it inside the parallel loop")
                top = simplify(loop.extent - 1, self.ranges)
                # widened one loop at a time, outward; boxes that become equal (a stencil's taps, once
                # their loop has run) are kept once, so a deep inlined stencil stays cheap to bound
                stage_needs = _distinct({n: [widen_box(b, loop.var, L.const(0), top, self.ranges) for b in bs]
                                         for n, bs in stage_needs.items()})
                body = For(L.Var(loop.var), loop.extent, body, loop.kind)
            stmts.append(body)
            for n, bs in stage_needs.items():
                needs.setdefault(n, []).extend(bs)
        return block(*stmts), needs

    @staticmethod
    def _stored(value: L.Expr, buffer: Buffer) -> L.Expr:
        return value if value.dtype == buffer.value_dtype else L.Cast(value, buffer.value_dtype)

    def _update_stage(self, f, k: int, box: Box):
        update = f.updates[k - 1]
        r = self.realized[f.name]
        rnames = {rv.name for rv in (update.rdom.dims if update.rdom else [])}

        def body_for(coords: dict[str, L.Expr]):
            env = dict(coords)
            for d, a in enumerate(f.args):
                env.setdefault(a.name, L.const(0))
            stmt, _ = self._update_store(f, update, env)
            buffers = {ld.buffer.name: ld.buffer for ld in _loads_of(stmt)} | {b.name: b for b in r.buffers}
            params = [b for b in buffers.values() if b.scope == "global"]
            allocs = [b for b in buffers.values() if b.scope == "local"]
            declared = {s.var.name for s in iter_stmts(stmt) if isinstance(s, Let)}
            free = set().union(*(L.free_vars(e) for e in _exprs_of(stmt))) - {v.name for v in coords.values()}
            free -= declared
            lets = [Let(L.Var(n), L.const(0)) for n in sorted(free)]
            return block(*lets, stmt), params, allocs

        loops, coords = self._schedule_stage(f, k, box, update_body=body_for)
        env = dict(coords)
        store, calls = self._update_store(f, update, env)
        del rnames
        return loops, coords, store, calls

    def _update_store(self, f, update, env: dict) -> tuple[Stmt, list]:
        """The update's store (a Tuple Func's: every value into a local first, then the stores, so each value
        reads the point as it was before the update) and the calls it makes to other Funcs and inputs."""
        r = self.realized[f.name]
        args, calls = [], []
        for a in update.args:
            lowered, c = self.lower_with_calls(a, env)
            args.append(lowered)
            calls += c
        index, lets, stores = r.index(args), [], []
        for k, (buffer, value) in enumerate(zip(r.buffers, update.values)):
            lowered, c = self.lower_with_calls(value, env)
            calls += c
            lowered = self._stored(lowered, buffer)
            if len(r.buffers) > 1:
                local = L.Var(f"{f.name}_update_value_{k}", lowered.dtype)
                lets.append(Let(local, lowered))
                lowered = local
            stores.append(Store(buffer, index, lowered))
        calls = [(n, a) for n, a in calls if n != f.name]
        return (stores[0] if len(stores) == 1 else block(*lets, *stores)), calls

    def footprint(self, f, box: Box) -> list[Box]:
        """The boxes f's update definitions write and read of f itself, for f's pure region."""
        boxes = []
        for update in f.updates:
            env, spans = {}, []
            for d, a in enumerate(f.args):
                env[a.name] = L.Var(f"{f.name}_fp_{a.name}")
                spans.append((a.name, box[d]))
            for rv in (update.rdom.dims if update.rdom else []):
                env[rv.name] = L.Var(f"{f.name}_fp_{rv.name}")
                lo = self.lower_expr(rv.min, {})
                spans.append((rv.name, (lo, simplify(lo + self.lower_expr(rv.extent, {}) - 1))))
            points = [[self.lower_expr(a, env) for a in update.args]]
            calls = [c for value in update.values for c in self.lower_with_calls(value, env)[1]]
            points += [args for name, args in calls if name == f.name]
            for point in points:
                b: Box = [(a, a) for a in point]
                for name, span in spans:
                    if span is None:
                        b = [None] * len(b)
                        break
                    b = widen_box(b, f"{f.name}_fp_{name}", span[0], span[1], self.ranges)
                boxes.append(b)
        return boxes

    # ---- producers at a loop level

    def _producers_at(self, consumer, loop: str) -> list:
        found = [f for f in self.funcs.values() if self.level[f.name] == (consumer.name, loop)]
        return sorted(found, key=lambda f: -self.order.index(f.name))  # consumers first

    def _store_level(self, f) -> Optional[tuple[str, str]]:
        """Where f is stored when that is outside where it is computed (store_at / store_root), else None."""
        store = f.schedules[0].store
        if store is None or store == self.level[f.name] or self.level[f.name] in ("inline", "root", "output"):
            return None
        return store

    def _inject(self, consumer, loop: str, body: Stmt, needs: dict, loop_var: str = "") -> tuple[Stmt, dict]:
        for f in self._producers_at(consumer, loop):
            body, needs = self.realize_here(f, body, needs, where=f"{consumer.name}.{loop}", loop_var=loop_var)
        for f in self.funcs.values():
            if self._store_level(f) == (consumer.name, loop):
                body, needs = self.store_here(f, body, needs, where=f"{consumer.name}.{loop}")
        return body, needs

    def _required_box(self, f, needs: dict, where: str) -> Box:
        boxes = needs.pop(f.name, [])
        if not boxes:
            raise PipelineError(f"{f.name} is computed at {where}, but nothing inside that loop reads it")
        box = union_boxes(boxes, self.ranges)
        self._check_bounded(f.name, box, where)
        if f.updates:
            box = union_boxes([box] + self.footprint(f, box), self.ranges)
            self._check_bounded(f.name, box, where)
        return box

    def _sliding(self, box: Box, loop_var: str) -> Box:
        """Halide's sliding window: after the first iteration of the compute loop, only the part of
        the region the previous iteration did not compute (one dimension, moving forward)."""
        if not loop_var or self.loop_kinds.get(loop_var) != "serial":
            return box
        v = L.Var(loop_var)
        moving = [d for d, (lo, hi) in enumerate(box) if loop_var in L.free_vars(lo) | L.free_vars(hi)]
        if len(moving) != 1:
            return box
        d = moving[0]
        lo, hi = box[d]
        before = {loop_var: v - 1}
        step_lo = simplify(lo - S.substitute_expr(lo, before), self.ranges)
        step_hi = simplify(hi - S.substitute_expr(hi, before), self.ranges)
        if not (isinstance(step_lo, L.Const) and isinstance(step_hi, L.Const) and step_lo.value >= 0
                and step_hi.value >= 0):
            return box
        fresh = L.where(L.eq(v, L.const(0)), lo, tighten(L.maximum(lo, S.substitute_expr(hi, before) + 1), self.ranges))
        out = list(box)
        out[d] = (fresh, hi)
        return out

    def store_here(self, f, body: Stmt, needs: dict, where: str) -> tuple[Stmt, dict]:
        """Allocate f (computed further in) around `body`, over every region computed inside."""
        boxes = needs.pop(f"#store:{f.name}", [])
        if not boxes:
            raise PipelineError(f"{f.name} is stored at {where}, but computed outside that loop")
        box = union_boxes(boxes, self.ranges)
        self._check_bounded(f.name, box, where)
        return self._allocate(f, box, body, where), needs

    def _allocate(self, f, box: Box, body: Stmt, where: str) -> Stmt:
        fold = self.folds.get(f.name) if self.fold_storage else None
        buffers, values = self._buffer_over(f, box, f"stored at {where}", fold)
        masks = self.realized[f.name].masks or []
        unfolded = {m.name for m in masks if m.name not in values}
        return finalize(alloc_all(buffers, body), values, buffers, unfolded)

    def _buffer_over(self, f, box: Box, what: str, fold: Optional[Fold] = None) -> tuple[list[Buffer], dict]:
        """f's local buffers (one per value) over `box` (each extent at its largest), and the values of f's
        placeholder variables (its first point and strides, the mask of a folded dimension) that address them."""
        extents, values = [], {}
        placeholder = self.realized[f.name]
        for d, (lo, hi) in enumerate(box):
            extent = simplify(hi - lo + 1, self.ranges)
            top = Bounds(self.ranges)(extent)[1]
            if math.isinf(top):
                raise PipelineError(f"the region of {f.name} {what} has no bound in dimension {d} "
                                    f"(extent {L.format_expr(extent)}); clamp the coordinates that read it")
            extents.append(max(int(top), 1))
            # the first point is substituted, not bound by a Let: a consumer's index then
            # simplifies (its own tile origin minus the producer's cancels to a constant)
            values[placeholder.mins[d].name] = lo
        unfolded_extent = 0
        if fold is not None and fold.extent < extents[fold.dim]:
            unfolded_extent, extents[fold.dim] = extents[fold.dim], fold.extent
            values[placeholder.mins[fold.dim].name] = L.const(0)   # a row's slot is its coordinate & mask
            values[fold_mask_name(f.name, fold.dim)] = L.const(fold.extent - 1)
        else:
            fold = None
        for stride_var, stride in zip(placeholder.strides[1:], row_major_strides(extents)[1:]):
            values[stride_var.name] = L.const(stride)
        buffers = [Buffer(b.name, b.dtype, tuple(reversed(extents)), "local") for b in placeholder.buffers]
        for buffer in buffers:
            self.storage.append(StorageNote(buffer.name, what, buffer.shape,
                                            np.dtype(buffer.dtype).itemsize, fold, unfolded_extent))
        return buffers, values

    def realize_here(self, f, body: Stmt, needs: dict, where: str, loop_var: str = "") -> tuple[Stmt, dict]:
        """Allocate f around `body`, compute it over the region `needs` asks for, and return what it needs.

        Under store_at an outer loop, f is only computed here (over the part of the region the previous
        iteration did not compute, when the loop is serial), and allocated where it is stored."""
        box = self._required_box(f, needs, where)
        if self._store_level(f) is not None:
            fold = window_fold(box, loop_var, self.ranges) if loop_var and not f.updates else None
            self.folds[f.name] = merge_folds(self.folds[f.name], fold) if f.name in self.folds else fold
            stmt, produced_needs = self.lower_func(f, self._sliding(box, loop_var))
            for name, bs in produced_needs.items():
                needs.setdefault(name, []).extend(bs)
            needs.setdefault(f"#store:{f.name}", []).append(box)
            return block(stmt, body), needs
        buffers, values = self._buffer_over(f, box, f"computed at {where}")
        stmt, produced_needs = self.lower_func(f, box)
        produced_needs = {n: [substitute_box(b, values, self.ranges) for b in bs] for n, bs in produced_needs.items()}
        for name, bs in produced_needs.items():
            needs.setdefault(name, []).extend(bs)
        realized = finalize(alloc_all(buffers, block(stmt, body)), values, buffers)
        return realized, needs

    def _check_bounded(self, name: str, box: Box, where: str) -> None:
        for d, dim in enumerate(box):
            if dim is None:
                raise PipelineError(f"cannot bound the region of {name} read at {where} in dimension {d}: a "
                                    "coordinate that reads it is unbounded (a float converted to an integer, a "
                                    "product of two loop variables...); clamp it with pl.clamp")

    # ---- the whole pipeline

    def kernel(self, name: str) -> tuple[Kernel, tuple[Buffer, ...], list[Buffer]]:
        """The kernel computing the output, its output buffers (one per value) and its input buffers (in
        `inputs` order)."""
        out = self.output
        outs = value_buffers(out, tuple(reversed(self.sizes)), "global")
        self.realized[out.name] = Realization(outs[0], [L.const(0)] * len(self.sizes),
                                              row_major_strides(self.sizes), others=tuple(outs[1:]))
        for f in self.funcs.values():
            if self.level[f.name] not in ("inline", "output"):
                self.realized[f.name] = self._placeholder(f, foldable=self._store_level(f) is not None)
        box = [(L.const(0), L.const(s - 1)) for s in self.sizes]
        body, needs = self.lower_func(out, box)
        root = [f for f in self.funcs.values() if self.level[f.name] == "root"]
        for f in sorted(root, key=lambda f: -self.order.index(f.name)):
            body, needs = self.realize_here(f, body, needs, where="the root")
        for f in self.funcs.values():
            if self._store_level(f) == "root":
                body, needs = self.store_here(f, body, needs, where="the root")
        for f in self.funcs.values():
            level = self.level[f.name]
            if isinstance(level, tuple) and f.name not in self.realized:
                raise PipelineError(f"{f.name}.compute_at({level[0]}, {level[1]}): {level[0]} does not compute at "
                                    f"that loop anything that reads {f.name}")
        self._check_inputs(needs)
        inputs = [self.input_buffers[n] for n in self.inputs]
        body = hoist_allocs(partition_clamps(simplify_kernel(Kernel(name, (*outs, *inputs), body)).body))
        kernel = simplify_kernel(Kernel(name, (*outs, *inputs), body,
                                        comment=f"pipeline computing {out.name} over {' x '.join(map(str, self.sizes))}"))
        return kernel, tuple(outs), inputs

    @staticmethod
    def _placeholder(f, foldable: bool = False) -> Realization:
        """f's realization before its region is known: its first point and strides are variables (and, if
        it may be folded, the mask of each dimension)."""
        buffers = value_buffers(f, (1,), "local")
        mins = [L.Var(f"{f.name}_min_{d}") for d in range(f.dimensions)]
        strides = [L.const(1)] + [L.Var(f"{f.name}_stride_{d}") for d in range(1, f.dimensions)]
        masks = [L.Var(fold_mask_name(f.name, d)) for d in range(f.dimensions)] if foldable else None
        return Realization(buffers[0], mins, strides, masks, tuple(buffers[1:]))

    def _check_inputs(self, needs: dict) -> None:
        for name, boxes in needs.items():
            if name not in self.inputs:
                continue
            box = union_boxes(boxes, {})
            extents = list(reversed(self.arrays[name].shape))
            for d, dim in enumerate(box):
                if dim is None:
                    raise PipelineError(f"input {name} is read at an unbounded coordinate in dimension {d}; clamp "
                                        "it or use a boundary condition (pl.repeat_edge, ...)")
                lo, hi = Bounds({})(dim[0])[0], Bounds({})(dim[1])[1]
                if lo < 0 or hi > extents[d] - 1:
                    raise PipelineError(
                        f"the pipeline reads input {name} over [{_num(lo)}, {_num(hi)}] in dimension {d}, but its "
                        f"extent there is {extents[d]} (valid: [0, {extents[d] - 1}]); wrap it in a boundary "
                        "condition (pl.repeat_edge, pl.constant_exterior, pl.mirror_image) or realize a smaller "
                        "output")


def _distinct(needs: dict[str, list[Box]]) -> dict[str, list[Box]]:
    """`needs` with structurally equal boxes kept once."""
    return {name: list({tuple(box): box for box in boxes}.values()) for name, boxes in needs.items()}


def _num(v: float) -> str:
    return str(int(v)) if not math.isinf(v) else ("-inf" if v < 0 else "inf")


def _loads_of(stmt: Stmt) -> list[L.Load]:
    return [n for s in iter_stmts(stmt) for e in _exprs_of(s) for n in L.walk(e) if isinstance(n, L.Load)]


def _exprs_of(stmt: Stmt) -> list[L.Expr]:
    return [e for s in iter_stmts(stmt) for e in stmt_exprs(s)]
