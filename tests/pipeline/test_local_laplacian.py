"""The local Laplacian example (examples/pipelines/local_laplacian.py) against its numpy reference: three
pyramid levels (eight in the benchmark), hand and automatic schedules, odd sizes and a single pixel."""
from __future__ import annotations

import numpy as np
import pytest

import local_laplacian
import tensorkiln.pipeline as pl

RNG = np.random.default_rng(29)


@pytest.mark.parametrize("schedule", ["hand", "auto"])
@pytest.mark.parametrize("shape", [(1, 1), (19, 23)])
def test_local_laplacian_matches_numpy(schedule, shape):
    image = RNG.random(shape, dtype=np.float32)
    out, size, funcs = local_laplacian.algorithm(image, pyramid_levels=3)
    if schedule == "hand":
        local_laplacian.hand_schedule(funcs)
    else:
        pl.auto_schedule(out, size)
    np.testing.assert_allclose(out.realize(size), local_laplacian.reference(image, pyramid_levels=3),
                               rtol=2e-4, atol=1e-4)


def test_the_reference_enhances_detail_and_keeps_flat_regions():
    """The oracle itself: a flat image stays flat (every Laplacian level is 0), and with alpha > 0 the
    remapping adds detail, so a step edge gets steeper next to the edge than in the input."""
    flat = np.full((16, 16), 0.5, np.float32)
    np.testing.assert_allclose(local_laplacian.reference(flat, pyramid_levels=3), flat, atol=1e-6)
    step = np.tile(np.where(np.arange(32) < 16, 0.45, 0.55).astype(np.float32), (8, 1))
    result = local_laplacian.reference(step, pyramid_levels=3)
    assert abs(result[4, 16] - result[4, 15]) > abs(step[4, 16] - step[4, 15])
