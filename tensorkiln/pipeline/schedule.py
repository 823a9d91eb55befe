"""The schedule of one stage: where it is computed and stored, and the steps that shape its loops.

A schedule is data: a list of `Step(name, args)` with loop names as strings,
plus the compute and store levels ("inline", "root", or (consumer, loop)).
Each step is checked when it is recorded (the loop exists, a new name is
free, a factor is positive) and again when the lowering replays it on the
stage's loop nest through the loop-IR primitives (loops/schedule.py), which
refuse what would change the result (a parallel loop over a scatter, ...).
`to_data`/`from_data` give and take plain lists and dicts (JSON-ready).

Loop names follow Halide: a stage starts with its pure Vars (and, for an
update, its RVars first), innermost first; `split(x, xo, xi, 8)` replaces x
by xi (inner) and xo (outer); `vectorize(x, 8)` is `split(x, x, x_v, 8)` and
vectorizes x_v, `parallel(y, 4)` and `unroll(x, 2)` likewise (y_p, x_u).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from tensorkiln.errors import TensorKilnError
from tensorkiln.loops.buffer import check_identifier

Level = Union[str, tuple[str, str]]  # "inline" | "root" | (consumer func, loop)
VECTOR_BYTES = 64  # one AVX-512 register
_ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "uint32": 4, "int32": 4, "float32": 4,
             "int64": 8, "float64": 8}


def vector_width(type_name: str) -> int:
    """Lanes of one vector register for values of a type (8 to 32)."""
    return max(8, min(32, VECTOR_BYTES // _ITEMSIZE[type_name]))


def default_steps(loops: list[str], type_name: str) -> list[Step]:
    """The output's schedule when it has none: its innermost loop vectorized, its outermost parallel."""
    inner, outer = loops[0], loops[-1]
    steps = [Step("split", (inner, inner, f"{inner}_v", vector_width(type_name))), Step("vectorize", (f"{inner}_v",))]
    if len(loops) > 1:
        steps.append(Step("parallel", (outer,)))
    return steps


class ScheduleStepError(TensorKilnError, ValueError):
    """A schedule step that names no loop, reuses a name, or has a bad factor."""


@dataclass(frozen=True)
class Step:
    """One recorded scheduling call, e.g. Step("split", ("x", "xo", "xi", 8))."""

    name: str
    args: tuple

    def __str__(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})"


def _name(v) -> str:
    name = v if isinstance(v, str) else getattr(v, "name", None)
    if name is None:
        raise ScheduleStepError(f"a schedule step names a loop by a Var or a string, got {v!r}")
    return check_identifier(name, "loop")


def _factor(f, what: str) -> int:
    if isinstance(f, bool) or not isinstance(f, int) or f < 1:
        raise ScheduleStepError(f"{what}: the factor must be a positive integer, got {f!r}")
    return f


class StageSchedule:
    """The schedule of stage `stage` of Func `func` (0: the pure definition, k: update k-1)."""

    def __init__(self, func: str, stage: int, loops: list[str]):
        self.func, self.stage = func, stage
        self.initial_loops = list(loops)      # innermost first
        self._loops = list(loops)
        self.steps: list[Step] = []
        self.compute: Level = "inline" if stage == 0 else "root"
        self.store: Optional[Level] = None    # None: where it is computed
        self.vectorized: set[str] = set()

    def loops(self) -> list[str]:
        """Current loop names, innermost first."""
        return list(self._loops)

    def _where(self) -> str:
        return f"{self.func}" + (f".update({self.stage - 1})" if self.stage else "")

    def _existing(self, v, what: str) -> str:
        name = _name(v)
        if name not in self._loops:
            raise ScheduleStepError(f"{self._where()}.{what}: no loop {name} (loops, innermost first: "
                                    f"{', '.join(self._loops)})")
        return name

    def _fresh(self, v, what: str, allowed: tuple[str, ...] = ()) -> str:
        name = _name(v)
        if name in self._loops and name not in allowed:
            raise ScheduleStepError(f"{self._where()}.{what}: the name {name} is already a loop")
        return name

    def record(self, step: Step) -> None:
        """Replay a recorded step (from `from_data`): the same checks as calling the method."""
        getattr(self, step.name)(*step.args)

    # ---- loop shaping

    def split(self, var, outer, inner, factor: int) -> "StageSchedule":
        v = self._existing(var, "split")
        o = self._fresh(outer, "split", allowed=(v,))
        i = self._fresh(inner, "split", allowed=(v,) if o != v else ())
        if o == i:
            raise ScheduleStepError(f"{self._where()}.split: outer and inner loops need two names, got {o} twice")
        factor = _factor(factor, f"{self._where()}.split({v})")
        k = self._loops.index(v)
        self._loops[k:k + 1] = [i, o]
        self.steps.append(Step("split", (v, o, i, factor)))
        return self

    def tile(self, x, y, xo, yo, xi=None, yi=None, xf=None, yf=None) -> "StageSchedule":
        if xf is None and yf is None:  # tile(x, y, xi, yi, fx, fy): xo, yo keep the names x, y
            xo, yo, xi, yi, xf, yf = x, y, xo, yo, xi, yi
        x, y = _name(x), _name(y)
        self.split(x, xo, xi, xf)
        self.split(y, yo, yi, yf)
        return self.reorder(xi, yi, xo, yo)

    def reorder(self, *vars) -> "StageSchedule":
        names = [self._existing(v, "reorder") for v in vars]
        if len(set(names)) != len(names):
            raise ScheduleStepError(f"{self._where()}.reorder: a loop is named twice in {names}")
        slots = sorted(self._loops.index(n) for n in names)
        for slot, name in zip(slots, names):
            self._loops[slot] = name
        self.steps.append(Step("reorder", tuple(names)))
        return self

    def fuse(self, inner, outer, fused) -> "StageSchedule":
        """Halide's `fuse(inner, outer, fused)`: two adjacent loops, `outer` just outside `inner`, become one
        loop `fused` over the product of their extents (inner = fused % extent, outer = fused / extent)."""
        i, o = self._existing(inner, "fuse"), self._existing(outer, "fuse")
        f = self._fresh(fused, "fuse", allowed=(i, o))
        k = self._loops.index(i)
        if k + 1 >= len(self._loops) or self._loops[k + 1] != o:
            raise ScheduleStepError(f"{self._where()}.fuse({i}, {o}, {f}): {o} must be the loop just outside {i} "
                                    f"(loops, innermost first: {', '.join(self._loops)}); reorder first")
        self._loops[k:k + 2] = [f]
        self.steps.append(Step("fuse", (i, o, f)))
        return self

    def _mark(self, kind: str, var, factor: Optional[int], suffix: str) -> "StageSchedule":
        v = self._existing(var, kind)
        if factor is not None:
            self.split(v, v, self._fresh(f"{v}_{suffix}", kind), factor)
            v = f"{v}_{suffix}" if kind != "parallel" else v
        self.steps.append(Step(kind, (v,)))
        return self

    def vectorize(self, var, factor: Optional[int] = None) -> "StageSchedule":
        return self._mark("vectorize", var, factor, "v")

    def parallel(self, var, factor: Optional[int] = None) -> "StageSchedule":
        return self._mark("parallel", var, factor, "p")

    def unroll(self, var, factor: Optional[int] = None) -> "StageSchedule":
        return self._mark("unroll", var, factor, "u")

    # ---- levels

    def set_level(self, which: str, level: Level) -> None:
        """Record where this stage is computed ("compute") or stored ("store")."""
        if self.stage != 0:
            raise ScheduleStepError(f"{self._where()}: compute and store levels belong to the whole Func")
        if which == "compute":
            self.compute = level
        else:
            self.store = level

    def describe(self) -> list[str]:
        """Lines for explain(): level and steps."""
        level = self.compute if isinstance(self.compute, str) else f"compute_at({self.compute[0]}, {self.compute[1]})"
        if self.stage:  # an update runs where its Func is computed
            level = "where the pure definition is"
        lines = [f"{self._where()}: {level}" + (f", store_at({self.store[0]}, {self.store[1]})"
                                                if isinstance(self.store, tuple) else "")]
        lines += [f"  .{s}" for s in self.steps]
        return lines

    def to_data(self) -> dict:
        """This schedule as plain data."""
        return {"compute": self.compute if isinstance(self.compute, str) else list(self.compute),
                "store": self.store if not isinstance(self.store, tuple) else list(self.store),
                "steps": [[s.name, *s.args] for s in self.steps]}

    def load_data(self, data: dict) -> None:
        """Replace this schedule by one `to_data` gave (each step checked again)."""
        self._loops, self.steps = list(self.initial_loops), []
        for entry in data["steps"]:
            self.record(Step(entry[0], tuple(entry[1:])))
        if self.stage == 0:
            level = data["compute"]
            self.compute = level if isinstance(level, str) else tuple(level)
            store = data.get("store")
            self.store = store if not isinstance(store, list) else tuple(store)
