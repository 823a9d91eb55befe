"""auto_schedule on deep pipelines: the lowering grows linearly with pyramid depth, the breadth-first
candidate inlines what is cheap to recompute, the cost model sees both sides of a partitioned loop, a
scatter read by one root Func is computed in that Func's parallel strips, and the automatic schedules of
a deep local Laplacian and of the bilateral grid compute what numpy does."""
from __future__ import annotations

import numpy as np
import pytest

import bilateral_grid
import local_laplacian
import unsharp
import tensorkiln.pipeline as pl
from tensorkiln.loops import expr as L
from tensorkiln.loops.ir import If, iter_stmts, stmt_exprs
from tensorkiln.pipeline.auto import _candidate, estimate_cost
from tensorkiln.pipeline.auto_root import all_at_root, at_sole_readers, inlined_funcs, root_points
from tensorkiln.pipeline.bounds import tighten
from tensorkiln.pipeline.compile import lower_pipeline
from tensorkiln.pipeline.func import apply_schedule, pipeline_funcs

RNG = np.random.default_rng(41)


def lowered_size(program) -> int:
    """Statement and expression nodes of a lowered pipeline."""
    body = program.kernels[0].body
    return sum(1 + sum(1 for e in stmt_exprs(s) for _ in L.walk(e)) for s in iter_stmts(body))


def tiled_laplacian_size(levels: int) -> int:
    """The lowering's size for the local Laplacian with its input pyramid computed per 128 x 16 output tile
    (the schedule whose regions, a union of readers per level, used to grow fourfold a level)."""
    image = RNG.random((64, 256), dtype=np.float32)
    out, size, _ = local_laplacian.algorithm(image, pyramid_levels=levels)
    apply_schedule(out, _candidate(out, pipeline_funcs(out), 128, 16))
    return lowered_size(lower_pipeline(out, size)[0])


def test_lowering_grows_linearly_with_pyramid_depth():
    sizes = [tiled_laplacian_size(levels) for levels in (3, 4, 5)]
    steps = [b - a for a, b in zip(sizes, sizes[1:])]
    assert all(step > 0 for step in steps)
    # each level adds about as much as the one before (it used to add four times as much)
    assert steps[1] <= 2 * steps[0], (sizes, steps)


def test_a_union_of_reads_keeps_each_bound_once():
    y = L.Var("y")
    ranges = {"y": (0, 15)}
    finer, coarser = y // 2 - 2, (y // 4) * 2 - 5       # coarser <= finer, which intervals cannot show
    nested = L.minimum(L.minimum(L.minimum(finer, coarser), coarser), coarser)
    assert tighten(nested, ranges) == tighten(coarser, ranges)
    m = L.minimum((y // 5) * 4, 11)                      # a tile's first row, shifted inwards at the edge
    assert L.format_expr(tighten(L.minimum(m + 1, m), ranges)) == "min(y//5*4, 11)"
    assert L.format_expr(tighten(L.maximum(m + 1, m), ranges)) == L.format_expr(tighten(m + 1, ranges))


def test_breadth_first_candidate_inlines_what_is_cheap_to_recompute():
    image = RNG.random((64, 96), dtype=np.float32)
    out, size, funcs = local_laplacian.algorithm(image, pyramid_levels=4)
    found = pipeline_funcs(out)
    apply_schedule(out, all_at_root(out, found))
    points = root_points(lower_pipeline(out, size)[0], found)
    points[out.name] = size[0] * size[1]
    inlined = inlined_funcs(found, out, points)
    assert "input_repeat_edge" in inlined                    # a boundary condition
    assert "remap" not in inlined                            # a lookup table read per pixel and level
    assert "l_pyramid_0" in inlined                          # read at 2 of its 8 intensity levels per pixel
    assert "g_down_1_dx" in inlined                          # 4 taps in x inside 4 taps in y


def test_cost_model_counts_both_sides_of_a_partitioned_loop():
    image = RNG.random((200, 300), dtype=np.float32)

    out, size, _ = unsharp.algorithm(image)
    apply_schedule(out, _candidate(out, pipeline_funcs(out), 128, 16))
    body = lower_pipeline(out, size)[0].kernels[0].body
    assert any(isinstance(s, If) for s in iter_stmts(body))
    ops, _ = estimate_cost(body)
    assert ops > size[0] * size[1] / 16               # at least a vector operation per 16 output points


@pytest.mark.parametrize("shape", [(23, 41)])
def test_auto_schedule_of_a_deep_local_laplacian_matches_numpy(shape):
    image = RNG.random(shape, dtype=np.float32)
    out, size, _ = local_laplacian.algorithm(image, pyramid_levels=5)
    pl.auto_schedule(out, size)
    np.testing.assert_allclose(out.realize(size), local_laplacian.reference(image, pyramid_levels=5),
                               rtol=2e-4, atol=1e-4)


def test_a_scatter_read_by_one_root_func_moves_into_its_strips():
    image = RNG.random((40, 56), dtype=np.float32)
    out, size, _ = bilateral_grid.algorithm(image)
    found = pipeline_funcs(out)
    moved = at_sole_readers(out, found, all_at_root(out, found))
    assert moved is not None
    assert moved["histogram"][0]["compute"] == ["blurz", "y"]     # the update runs per strip of blurz's rows
    assert not any(step[0] == "parallel" for step in moved["histogram"][0]["steps"])  # inside a parallel loop
    for pure in ("blurz", "blurx", "blury"):                       # pure Funcs stay at the root
        assert moved[pure][0]["compute"] == "root"
    assert at_sole_readers(out, found, moved) is None              # nothing left to move


def test_auto_schedule_of_the_bilateral_grid_matches_numpy():
    image = RNG.random((70, 90), dtype=np.float32)
    out, size, _ = bilateral_grid.algorithm(image)
    data = pl.auto_schedule(out, size)
    assert data["input_repeat_edge"][0]["compute"] == "inline"      # a boundary condition
    np.testing.assert_allclose(out.realize(size), bilateral_grid.reference(image), rtol=2e-4, atol=1e-5)
