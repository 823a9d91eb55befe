"""Every example in examples/pipelines/ against its numpy reference: default, hand and automatic schedules,
at small odd sizes; and the compiled callable on new inputs."""
from __future__ import annotations

import numpy as np
import pytest

import bilateral_grid
import blur
import harris
import histogram_equalize
import tensorkiln.pipeline as pl
import unsharp

RNG = np.random.default_rng(11)


def image_for(example, shape):
    if example is blur:
        return RNG.integers(0, 65536, shape, dtype=np.uint16)
    if example is histogram_equalize:
        return RNG.integers(0, 256, shape, dtype=np.uint8)
    return RNG.random(shape, dtype=np.float32)


def check(example, result, image):
    expected = example.reference(image)
    if np.issubdtype(expected.dtype, np.integer):
        np.testing.assert_array_equal(result, expected)
    else:
        np.testing.assert_allclose(result, expected, rtol=2e-4, atol=1e-5)


EXAMPLES = [blur, unsharp, harris, histogram_equalize, bilateral_grid]


# The bilateral grid's default schedule inlines three 5-tap blurs of the grid into every pixel's 8
# lookups (2,000 grid reads a pixel): correct, but a C expression that takes minutes to compile.
CASES = [(e, s) for e in EXAMPLES for s in ("default", "hand", "auto") if (e, s) != (bilateral_grid, "default")]


@pytest.mark.parametrize("example,schedule", CASES, ids=lambda c: getattr(c, "__name__", c))
def test_example_matches_numpy(example, schedule):
    image = image_for(example, (37, 45))
    out, size, funcs = example.algorithm(image)
    if schedule == "hand":
        example.hand_schedule(funcs)
    elif schedule == "auto":
        pl.auto_schedule(out, size)
    check(example, out.realize(size), image)


def test_compiled_pipeline_takes_new_inputs_of_other_shapes():
    image = image_for(unsharp, (20, 30))
    out, size, funcs = unsharp.algorithm(image)
    unsharp.hand_schedule(funcs, tile=(16, 8), vector=8)
    fn = out.compile(size)
    assert fn.inputs == ["input"]
    other = image_for(unsharp, (20, 30))
    check(unsharp, fn(other), other)
    check(unsharp, fn(input=image), image)
    bigger = image_for(unsharp, (25, 31))                 # the edges come from the array's own extents
    result = np.empty((20, 30), np.float32)
    assert fn(bigger, out=result) is result
    np.testing.assert_allclose(result, unsharp.reference(bigger)[:20, :30], rtol=2e-4, atol=1e-5)
    with pytest.raises(pl.PipelineError.__mro__[1], match="float32"):
        fn(np.zeros((20, 30), np.float64))


def test_interior_tiles_run_without_clamps():
    """Loop partitioning: tiles inside the image load without the boundary condition's clamps."""
    image = image_for(unsharp, (41, 67))
    out, size, funcs = unsharp.algorithm(image)
    unsharp.hand_schedule(funcs, tile=(16, 8), vector=8)
    nest = out.explain(size).split("loop nest:")[1]
    steady = nest.split("else:")[0]                      # the first branch: rows and columns inside the image
    assert "if 0 <= " in steady and "max(" not in steady.split("for sharpen_s0_yi")[0].split("if 0 <= ")[-1]
    check(unsharp, out.realize(size), image)
