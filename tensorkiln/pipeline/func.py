"""Func: a stage of a pipeline, its definitions and its schedule.

`f.realize([W, H])` returns an (H, W) array: x is the innermost coordinate.

A Func has one pure definition, `f[x, y] = expr` (its arguments distinct
Vars), and any number of update definitions after it, `f[e0, e1] = expr`
(arguments any expressions, usually of an RDom), applied in order.

A Tuple Func is defined as a tuple of expressions, `f[x, y] = (a, b)`: its
values are computed together, in one loop nest, each into its own buffer;
`f[x, y][1]` reads one of them, an update gives every value (all of them
read before any is written, as in Halide), and `realize` returns a tuple of
arrays.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from tensorkiln.errors import DTypeError, user_location
from tensorkiln.loops.buffer import check_identifier
from tensorkiln.pipeline import types as T
from tensorkiln.pipeline.compile import CompiledPipeline, compile_func, explain, lower_pipeline
from tensorkiln.pipeline.expr import Call, Expr, as_expr, cast, format_expr, walk
from tensorkiln.pipeline.names import PipelineError, RDom, RVar, Var, call, unique_name
from tensorkiln.pipeline.schedule import StageSchedule


class Update:
    """One update definition: `func[args] = value` (args are any integer expressions)."""

    def __init__(self, args: tuple[Expr, ...], values: tuple[Expr, ...], location: str):
        self.args, self.values, self.location = args, values, location
        self.value = values[0]
        rvars = {}
        for e in list(args) + list(values):
            for n in walk(e):
                if isinstance(n, RVar):
                    rvars[n.name] = n
        rdoms = {id(r.rdom): r.rdom for r in rvars.values()}
        if len(rdoms) > 1:
            raise PipelineError(f"update at {location} uses {len(rdoms)} RDoms; one update may use one")
        self.rdom: Optional[RDom] = next(iter(rdoms.values()), None)
        self.pure_vars = [a for a in args if isinstance(a, Var)]


class Func:
    """A stage of a pipeline (Halide's `Func`): a pure definition, updates, and its schedule."""

    def __init__(self, name: Optional[str] = None):
        self.name = check_identifier(name or unique_name("f"), "Func")
        self.args: Optional[tuple[Var, ...]] = None
        self.value: Optional[Expr] = None        # the first (for most Funcs, the only) value
        self.values: tuple[Expr, ...] = ()       # every value: more than one for a Tuple Func
        self.updates: list[Update] = []
        self.location = ""
        self.schedules: list[StageSchedule] = []

    # ---- the algorithm

    @property
    def defined(self) -> bool:
        return self.value is not None

    @property
    def type(self) -> str:
        types = self.types
        if len(types) > 1:
            raise DTypeError(f"Func {self.name} is a Tuple of {len(types)} values ({', '.join(types)}); read one "
                             f"of them with {self.name}[...][k]")
        return types[0]

    @property
    def types(self) -> tuple[str, ...]:
        """The type of each value (one for most Funcs)."""
        if self.value is None:
            raise PipelineError(f"Func {self.name} is used before it is defined")
        return tuple(v.type for v in self.values)

    @property
    def dimensions(self) -> int:
        if self.args is None:
            raise PipelineError(f"Func {self.name} is used before it is defined")
        return len(self.args)

    def __getitem__(self, args) -> Call:
        if self.args is None:
            raise PipelineError(f"Func {self.name} is called at {user_location()} before it is defined")
        return call(self, args, len(self.args))

    def __setitem__(self, args, value) -> None:
        args = args if isinstance(args, tuple) else (args,)
        location = user_location()
        if self.value is None:
            self._define(args, value, location)
        else:
            self._update(args, value, location)

    def _define(self, args: tuple, value, location: str) -> None:
        if not all(isinstance(a, Var) for a in args) or len({a.name for a in args}) != len(args):
            raise PipelineError(f"the pure definition of {self.name} at {location} needs distinct Vars as "
                                f"arguments, got ({', '.join(map(str, args))}); define it on Vars first, "
                                "then add update definitions")
        values = _values(value, location)
        free = {n.name for v in values for n in walk(v) if isinstance(n, Var)} - {a.name for a in args}
        if free:
            raise PipelineError(f"the definition of {self.name} at {location} uses Var(s) {sorted(free)} that are "
                                "not its arguments")
        if any(isinstance(n, RVar) for v in values for n in walk(v)):
            raise PipelineError(f"the pure definition of {self.name} at {location} uses an RDom; "
                                "reductions go in update definitions")
        self.args, self.values, self.value, self.location = tuple(args), values, values[0], location
        self.schedules = [StageSchedule(self.name, 0, [a.name for a in args])]

    def _update(self, args: tuple, value, location: str) -> None:
        assert self.args is not None
        if len(args) != len(self.args):
            raise PipelineError(f"update of {self.name} at {location} has {len(args)} argument(s); "
                                f"{self.name} has {len(self.args)}")
        exprs = tuple(cast("int32", as_expr(a)) for a in args)
        if any(not T.is_int(as_expr(a).type) for a in args):
            raise DTypeError(f"update of {self.name} at {location}: coordinates must be integers")
        raw = _values(value, location, like=self.values)
        if len(raw) != len(self.values):
            raise PipelineError(f"update of {self.name} at {location} gives {len(raw)} value(s); {self.name} has "
                                f"{len(self.values)}")
        values = tuple(as_expr(v, like) for v, like in zip(raw, self.values))
        for k, (v, like) in enumerate(zip(values, self.values)):
            if v.type != like.type:
                which = f" value {k}" if len(values) > 1 else ""
                raise DTypeError(f"update of {self.name} at {location} has{which} type {v.type}, but {self.name}"
                                 f"{which} is {like.type}; use pl.cast")
        pure = {a.name for a in self.args}
        free = {n.name for e in exprs + values for n in walk(e) if isinstance(n, Var)}
        bad = free - pure
        if bad:
            raise PipelineError(f"update of {self.name} at {location} uses Var(s) {sorted(bad)}, which are not "
                                f"arguments of its pure definition")
        for k, a in enumerate(exprs):
            if isinstance(a, Var) and a.name != self.args[k].name:
                raise PipelineError(f"update of {self.name} at {location}: a pure Var may only appear in its own "
                                    f"position ({a.name} is argument {k})")
        update = Update(exprs, values, location)
        self.updates.append(update)
        loops = [a.name for a in update.pure_vars]
        rnames = [r.name for r in update.rdom.dims] if update.rdom else []
        self.schedules.append(StageSchedule(self.name, len(self.updates), rnames + loops))

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.name} (undefined)"
        lines = [f"{self.name}({', '.join(a.name for a in self.args)}) = {_format_values(self.values)}"]
        for u in self.updates:
            lines.append(f"{self.name}({', '.join(format_expr(a) for a in u.args)}) = {_format_values(u.values)}")
        return "\n".join(lines)

    # ---- the schedule (each method records a step in the pure stage's schedule and returns self)

    def _stage(self) -> StageSchedule:
        if not self.schedules:
            raise PipelineError(f"Func {self.name} must be defined before it is scheduled")
        return self.schedules[0]

    def update(self, k: int = 0) -> StageSchedule:
        """The schedule of update definition `k` (split, reorder, vectorize, parallel, unroll)."""
        if not 0 <= k < len(self.updates):
            raise PipelineError(f"Func {self.name} has {len(self.updates)} update definition(s), no update {k}")
        return self.schedules[k + 1]

    def split(self, var, outer, inner, factor: int) -> "Func":
        self._stage().split(var, outer, inner, factor)
        return self

    def tile(self, x, y, xo, yo, xi=None, yi=None, xf=None, yf=None) -> "Func":
        """`tile(x, y, xi, yi, fx, fy)` or `tile(x, y, xo, yo, xi, yi, fx, fy)`, as in Halide."""
        self._stage().tile(x, y, xo, yo, xi, yi, xf, yf)
        return self

    def fuse(self, inner, outer, fused) -> "Func":
        """One loop `fused` for the adjacent loops inner and outer (outer just outside inner), as in Halide."""
        self._stage().fuse(inner, outer, fused)
        return self

    def reorder(self, *vars) -> "Func":
        """Loop order, innermost first (Halide's convention)."""
        self._stage().reorder(*vars)
        return self

    def vectorize(self, var, factor: Optional[int] = None) -> "Func":
        self._stage().vectorize(var, factor)
        return self

    def parallel(self, var, factor: Optional[int] = None) -> "Func":
        self._stage().parallel(var, factor)
        return self

    def unroll(self, var, factor: Optional[int] = None) -> "Func":
        self._stage().unroll(var, factor)
        return self

    def compute_root(self) -> "Func":
        self._stage().set_level("compute", "root")
        return self

    def compute_inline(self) -> "Func":
        if self.updates:
            raise PipelineError(f"Func {self.name} has update definitions and cannot be inlined")
        self._stage().set_level("compute", "inline")
        return self

    def compute_at(self, consumer: "Func", var) -> "Func":
        self._stage().set_level("compute", self._level(consumer, var, "compute_at"))
        return self

    def store_at(self, consumer: "Func", var) -> "Func":
        self._stage().set_level("store", self._level(consumer, var, "store_at"))
        return self

    def store_root(self) -> "Func":
        self._stage().set_level("store", "root")
        return self

    def _level(self, consumer: "Func", var, what: str) -> tuple[str, str]:
        if not isinstance(consumer, Func):
            raise PipelineError(f"{self.name}.{what}: the consumer must be a Func, got {type(consumer).__name__}")
        if consumer is self:
            raise PipelineError(f"{self.name}.{what}({self.name}, ...): a Func cannot be computed inside itself")
        name = var if isinstance(var, str) else getattr(var, "name", None)
        if name is None:
            raise PipelineError(f"{self.name}.{what}: name a loop of {consumer.name} with a Var, got {var!r}")
        last = consumer.schedules[-1]  # as in Halide, a loop of the consumer's last stage (its last update)
        if name not in last.loops():
            stage = f"{consumer.name}.update({last.stage - 1})" if last.stage else consumer.name
            raise PipelineError(f"{self.name}.{what}({consumer.name}, {name}): {stage} has no loop {name} "
                                f"(its loops, innermost first: {', '.join(last.loops())})")
        return (consumer.name, name)

    # ---- running

    def realize(self, sizes: Sequence[int]):
        """Compute the Func over [0, sizes[0]) x [0, sizes[1]) ...: an array of shape reversed(sizes)
        (a tuple of them for a Tuple Func)."""
        return compile_func(self, sizes)()

    def compile(self, sizes: Sequence[int], *, debug: bool = False, fold_storage: bool = True):
        """A callable `fn(**arrays)` (or positional, in `fn.inputs` order) that runs the pipeline on new
        input arrays; output shape reversed(sizes). Input shapes may change between calls (recompiled, cached).
        `fold_storage=False` turns storage folding off (to compare against it)."""
        return compile_func(self, sizes, debug=debug, fold_storage=fold_storage)

    def explain(self, sizes: Sequence[int], *, fold_storage: bool = True) -> str:
        """The algorithm, the schedule of each stage, the loop nest the schedule produces, and its buffers."""
        return explain(self, sizes, fold_storage=fold_storage)


def schedule_data(output: Func) -> dict:
    """The schedule of every Func in `output`'s pipeline as plain data (JSON-ready), by Func name."""
    funcs = pipeline_funcs(output)
    return {f.name: [s.to_data() for s in f.schedules] for f in funcs}


def apply_schedule(output: Func, data: dict) -> None:
    """Replay a schedule that `schedule_data` gave onto the pipeline of `output` (each step checked again)."""
    funcs = {f.name: f for f in pipeline_funcs(output)}
    for name, stages in data.items():
        if name not in funcs:
            raise PipelineError(f"the schedule names Func {name}, which is not in the pipeline of {output.name}")
        f = funcs[name]
        if len(stages) != len(f.schedules):
            raise PipelineError(f"the schedule has {len(stages)} stage(s) for {name}, which has {len(f.schedules)}")
        for sched, stage in zip(f.schedules, stages):
            sched.load_data(stage)


def pipeline_funcs(output: Func) -> list[Func]:
    """Every Func `output` reads, directly or not, each after all the Funcs it reads; `output` last."""
    order: list[Func] = []
    done: set[int] = set()
    stack: list[tuple[Func, bool]] = [(output, False)]
    while stack:  # depth-first, a Func appended once all its producers are
        f, expanded = stack.pop()
        if id(f) in done:
            continue
        if expanded:
            done.add(id(f))
            order.append(f)
            continue
        stack.append((f, True))
        exprs = list(f.values) + [e for u in f.updates for e in (*u.args, *u.values)]
        for e in exprs:
            for node in walk(e):
                if isinstance(node, Call) and isinstance(node.target, Func) and node.target is not f \
                        and id(node.target) not in done:
                    stack.append((node.target, False))
    return order


def _values(value, location: str, like: tuple = ()) -> tuple:
    """The values of a definition: a tuple (or list) of expressions for a Tuple Func, else one."""
    if isinstance(value, (tuple, list)):
        if len(value) < 1:
            raise PipelineError(f"the definition at {location} gives an empty tuple of values")
        return tuple(value) if like else tuple(as_expr(v) for v in value)
    return (value,) if like else (as_expr(value),)


def _format_values(values: tuple) -> str:
    return format_expr(values[0]) if len(values) == 1 else "{" + ", ".join(map(format_expr, values)) + "}"
