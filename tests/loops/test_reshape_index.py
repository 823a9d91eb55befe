"""reshape_index: a reshape's input index, matched dimension group by group, equals numpy's
unravel(ravel(index)) everywhere, and keeps whole dimensions free of div/mod."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorkiln.loops import expr as E
from tensorkiln.kernels.inline import reshape_index

SHAPES = [((128, 768), (1, 128, 12, 64)), ((1, 128, 768), (128, 768)), ((6, 4), (2, 3, 4)), ((2, 3, 4), (4, 6)),
          ((12,), (3, 4)), ((3, 1, 4), (1, 12)), ((2, 6), (3, 4)), ((5,), (5,)), ((1,), ()), ((4, 0), (0, 2))]


@pytest.mark.parametrize("src,dst", SHAPES + [(b, a) for a, b in SHAPES])
def test_reshape_index_matches_numpy(src, dst):
    names = [E.Var(f"i{k}") for k in range(len(dst))]
    index = reshape_index(names, dst, src)
    for point in itertools.islice(itertools.product(*[range(min(d, 7)) for d in dst]), 500):
        env = {f"i{k}": v for k, v in enumerate(point)}
        flat = int(np.ravel_multi_index(point, dst)) if dst else 0
        want = [int(w) for w in np.unravel_index(flat, src)] if src else []
        assert [int(E.evaluate(e, env)) for e in index] == want


def test_leading_unit_dims_map_straight_through():
    rows, cols = E.Var("r"), E.Var("c")
    index = reshape_index([rows, cols], (128, 768), (1, 128, 768))
    assert index[1] is rows and index[2] is cols
