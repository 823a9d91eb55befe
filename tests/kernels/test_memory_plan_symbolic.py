"""The planner for temps of symbolic size: at every size, temps live at the same time never share bytes."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorkiln.kernels.memory_plan_symbolic import plan_symbolic_memory
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Kernel, Store, block
from tensorkiln.loops.program import Program
from tensorkiln.shapes import ShapeEnv, SymInt


def _value(size, values: dict[str, int]) -> int:
    return size.poly.evaluate(values) if isinstance(size, SymInt) else int(size)


def _program(spans: list[tuple[object, int, int]]) -> Program:
    """Temp i of `size` elements (an int or SymInt) is written by kernel `first` and read until `last`."""
    temps = [Buffer(f"t{i}", "float32", (size,)) for i, (size, _, _) in enumerate(spans)]
    out = Buffer("out0", "float32", (1,))
    kernels = []
    for step in range(max(last for _, _, last in spans) + 1):
        params = [t for t, (_, first, last) in zip(temps, spans) if step in (first, last)]
        written = [t for t, (_, first, _) in zip(temps, spans) if first == step]
        body = [Store(t, E.const(0), E.Const(0.0, "float32")) for t in written] or [
            Store(out, E.const(0), E.Const(0.0, "float32"))]
        kernels.append(Kernel(f"k{step}", tuple(dict.fromkeys(params + ([out] if not written else []))), block(*body)))
    return Program("p", tuple(kernels), (), (out,), (), tuple(temps))


@settings(max_examples=60, deadline=None)
@given(raw=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 300), st.integers(0, 6), st.integers(0, 6)),
                    min_size=1, max_size=10),
       hints=st.tuples(st.integers(2, 40), st.integers(2, 40)),
       calls=st.lists(st.tuples(st.integers(2, 200), st.integers(2, 200)), min_size=1, max_size=4))
def test_slots_never_overlap_live_temps_at_any_size(raw, hints, calls):
    env = ShapeEnv()
    s, t = env.symbol("s", hints[0], ("x", 0, 0)), env.symbol("t", hints[1], ("x", 0, 1))
    kinds = [lambda c: c, lambda c: c * s, lambda c: c * s * t, lambda c: c * t + s]
    spans = [(kinds[kind](c), min(a, b), max(a, b)) for kind, c, a, b in raw]
    program = _program(spans)
    offsets, arena, figures = plan_symbolic_memory(program)
    assert not env.guards  # planned at the hints, sized symbolically: no decision on a size
    temps = {b.name: b for b in program.temps}
    for values in [dict(zip("st", hints))] + [dict(zip("st", call)) for call in calls]:
        ends = {}
        for name, temp in temps.items():
            start = _value(offsets[name], values)
            ends[name] = (start, start + _value(temp.nbytes, values))
        assert max(end for _, end in ends.values()) <= _value(arena, values)
        for i, (_, a_first, a_last) in enumerate(spans):
            for j, (_, b_first, b_last) in enumerate(spans[i + 1:], start=i + 1):
                if a_first <= b_last and b_first <= a_last:
                    (a0, a1), (b0, b1) = ends[f"t{i}"], ends[f"t{j}"]
                    assert a1 <= b0 or b1 <= a0, (spans[i], spans[j], values)
    assert figures.lower_bound_bytes <= figures.arena_bytes <= figures.naive_bytes
