"""Which input dimensions tk.jit traces as size symbols, and whether a symbolic trace applies to a call.

tk.jit's `dynamic` option (driver/options.py normalizes it):
- True: every input dimension of size >= 2 is a symbol of its own (`x_0`, `x_1`, ...);
- a mapping {argument name: {axis: name or tk.Dim}}: those axes are symbols; one name on two
  inputs is one symbol (their sizes must agree on every call);
- None (the default), automatic dynamic as torch.compile's: the first call of a tensor-signature
  pattern (ranks, dtypes, non-tensor values) traces static; a later call whose sizes differ from an
  earlier one's only in some dimensions traces those dimensions as symbols;
- False: always static (every new shape traces again).

Sizes 0 and 1 never become symbols (as in torch): broadcasting and empty tensors behave differently.
A symbolic trace applies to a call when its static dimensions match, the values its symbols take
are consistent and within their bounds, and every guard its trace and compile recorded holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ShapeError
from ..ir.ops.registry import TensorType
from ..shapes import Dim, ShapeEnv
from ..shapes.env import MAX_SIZE, MIN_SIZE


@dataclass(frozen=True)
class SymbolPlan:
    """The symbol one input axis is traced as: its name and bounds."""

    name: str
    lo: int | None = None
    hi: int | None = None


def pattern_of(shapes: list[tuple[int, ...]], dtypes: list[str]) -> tuple:
    """The part of a tensor signature that symbolic traces share: each input's rank and dtype."""
    return tuple((len(s), d) for s, d in zip(shapes, dtypes))


@dataclass
class SizeHistory:
    """Sizes seen per (input, axis) for one signature pattern: automatic dynamic's memory."""

    seen: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    static_only: bool = False  # a symbolic trace of this pattern failed: its later traces are static

    def add(self, shapes: list[tuple[int, ...]]) -> None:
        for i, shape in enumerate(shapes):
            for axis, size in enumerate(shape):
                self.seen.setdefault((i, axis), set()).add(int(size))

    def varying(self, shapes: list[tuple[int, ...]]) -> set[tuple[int, int]]:
        """The axes whose size in `shapes` differs from one seen before (and is >= 2)."""
        return {(i, axis) for i, shape in enumerate(shapes) for axis, size in enumerate(shape)
                if size >= MIN_SIZE and self.seen.get((i, axis), {size}) - {size}}


def symbol_plan(dynamic, names: list[str], shapes: list[tuple[int, ...]],
                history: SizeHistory | None) -> dict[tuple[int, int], SymbolPlan]:
    """(input position, axis) -> SymbolPlan for the next trace of a call with these shapes."""
    plan: dict[tuple[int, int], SymbolPlan] = {}
    if dynamic is False or history is not None and history.static_only:
        return plan
    if dynamic is True or dynamic is None:
        axes = ({(i, a) for i, s in enumerate(shapes) for a in range(len(s))} if dynamic is True
                else history.varying(shapes) if history is not None else set())
        for i, axis in sorted(axes):
            if MIN_SIZE <= shapes[i][axis] <= MAX_SIZE:
                plan[(i, axis)] = SymbolPlan(f"{names[i]}_{axis}")
        return plan
    for argument, axes in dynamic:
        for i, name in enumerate(names):
            if name != argument:
                continue
            for axis, dim in axes:
                if axis >= len(shapes[i]) or axis < -len(shapes[i]):
                    raise ShapeError(f"tk.jit dynamic: {argument} has {len(shapes[i])} dimensions, "
                                     f"no axis {axis}")
                axis %= len(shapes[i])
                size = shapes[i][axis]
                if dim.min is not None and size < dim.min or dim.max is not None and size > dim.max:
                    raise ShapeError(f"tk.jit dynamic: {argument}.shape[{axis}] = {size} is outside the bounds "
                                     f"of Dim {dim.name!r} [{dim.min}, {dim.max}]")
                if MIN_SIZE <= size <= MAX_SIZE:  # a size beyond a symbol's default bound stays static
                    plan[(i, axis)] = SymbolPlan(dim.name, dim.min, dim.max)
    _check_shared_sizes(plan, names, shapes)
    return plan


def check_dynamic_arguments(dynamic, leaf_names: list[str], parameters: list[str] | None,
                            function: str) -> None:
    """A ValueError when `dynamic` names an argument the function does not have (a typo would
    otherwise leave every size static, silently). `parameters`: the function's parameter names, None
    where its signature takes *args or **kwargs (then any name may be meant)."""
    if not isinstance(dynamic, tuple) or parameters is None:
        return
    for argument, _ in dynamic:
        if argument not in leaf_names and argument not in parameters:
            tensors = ", ".join(leaf_names) or "none"
            raise ValueError(f"tk.jit({function}, dynamic=...): {argument!r} is not an argument of {function}; "
                             f"its parameters are {', '.join(parameters) or 'none'} (tensor inputs of this "
                             f"call: {tensors})")


def _check_shared_sizes(plan: dict[tuple[int, int], SymbolPlan], names: list[str],
                        shapes: list[tuple[int, ...]]) -> None:
    """A ShapeError when one symbol name stands for axes of different sizes in this call."""
    first: dict[str, tuple[int, int]] = {}
    for (i, axis), symbol in sorted(plan.items()):
        j, other_axis = first.setdefault(symbol.name, (i, axis))
        if shapes[j][other_axis] != shapes[i][axis]:
            raise ShapeError(f"inputs {names[j]} and {names[i]} share the size {symbol.name} (their axes "
                             f"{other_axis} and {axis}) but have sizes {shapes[j][other_axis]} and "
                             f"{shapes[i][axis]}: {names[j]} has shape {shapes[j]}, {names[i]} has shape {shapes[i]}")


def symbolic_types(types: list[TensorType], names: list[str],
                   plan: dict[tuple[int, int], SymbolPlan]) -> tuple[list[TensorType], ShapeEnv | None]:
    """The input types with the planned axes as SymInts of one new ShapeEnv (None when no axis is)."""
    if not plan:
        return types, None
    env = ShapeEnv()
    result = []
    for i, t in enumerate(types):
        shape = tuple(env.symbol(plan[(i, a)].name, d, (names[i], i, a), plan[(i, a)].lo, plan[(i, a)].hi)
                      if (i, a) in plan else d for a, d in enumerate(t.shape))
        result.append(TensorType(shape, t.dtype))
    return result, env


def applies(env: ShapeEnv, types: list[TensorType], shapes: list[tuple[int, ...]]) -> bool:
    """True when a trace with these symbolic input `types` may run a call with these `shapes`.

    A ShapeError (one symbol, two sizes) propagates: no trace would apply either, and the
    caller passed inputs that contradict the sizes they were declared to share.
    """
    if len(types) != len(shapes):
        return False
    for t, shape in zip(types, shapes):
        if len(t.shape) != len(shape):
            return False
        for d, size in zip(t.shape, shape):
            if isinstance(d, int) and d != size:
                return False
    values = env.values_from(shapes, None)
    if env.bound_violations(values):
        return False
    return env.check(values)
