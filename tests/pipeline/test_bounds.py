"""Symbolic bounds inference against brute force: the interval of an index expression over a loop
contains every value it takes, and a stencil's taps merge to one interval."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.loops import expr as L
from tensorkiln.pipeline.bounds import interval, tighten, union_boxes, widen_box

i, t = L.Var("i"), L.Var("t")


def clamp(e, lo, hi):
    return L.maximum(L.minimum(e, L.const(hi)), L.const(lo))


EXPRS = [
    i * 3 - t * 2 + 5,
    (i - 7) // 4 + t,
    (i * -2 + t) % 5,
    clamp(i * 2 - 9, 0, 10) + t,
    L.minimum(i + 3, t * 2) - L.maximum(i - 1, L.const(2)),
    L.where(L.lt(i, t), i + 1, -i),
]


@pytest.mark.parametrize("k", range(len(EXPRS)))
@pytest.mark.parametrize("extent", [1, 5, 13])
def test_interval_contains_every_value(k, extent):
    e = EXPRS[k]
    span = interval(e, "i", L.const(0), L.const(extent - 1))
    assert span is not None
    for tv in range(-3, 4):
        values = [L.evaluate(e, {"i": iv, "t": tv}) for iv in range(extent)]
        lo, hi = (L.evaluate(s, {"t": tv}) for s in span)
        assert lo <= min(values) and max(values) <= hi


def test_unbounded_products_and_half_bounded_clamps():
    assert interval(i * t, "i", L.const(0), L.const(9)) is None
    assert interval(L.minimum(i * t, L.const(5)), "i", L.const(0), L.const(9)) is None      # no lower end
    span = interval(clamp(i * t, 0, 5), "i", L.const(0), L.const(9))                         # both ends
    assert [L.evaluate(s, {}) for s in span] == [0, 5]


def test_stencil_taps_merge_to_one_interval():
    origin = L.minimum(t * 16, L.const(35))
    boxes = [[(origin + dx, origin + dx)] for dx in (-1, 0, 1)]
    widened = [widen_box(b, "t", L.const(0), L.const(3), {}) for b in boxes]
    merged = union_boxes(boxes, {"t": (0, 3)})
    assert L.format_expr(merged[0][0]) == "min(t*16, 35) - 1"
    assert L.format_expr(merged[0][1]) == "min(t*16, 35) + 1"
    assert [L.evaluate(e, {}) for e in union_boxes(widened, {})[0]] == [-1, 36]
    assert tighten(L.maximum(origin + 2, origin), {}) == tighten(origin + 2, {})
    rng = np.random.default_rng(0)
    for _ in range(20):  # tighten keeps the value
        a, b = (int(v) for v in rng.integers(-5, 5, 2))
        e = L.minimum(L.minimum(origin + a, origin + b), origin)
        for tv in range(4):
            assert L.evaluate(tighten(e, {}), {"t": tv}) == L.evaluate(e, {"t": tv})
