"""Pipeline parallelism without ranks: the schedules' orders (simulated over every stage), the bubble,
splitting a Sequential, and a one-stage pipeline in this process (a world of one rank)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln import nn
from tensorkiln.distributed import pipeline
from tensorkiln.errors import DistributedError

from mpi_programs import mpi_missing

SCHEDULES = {"gpipe": pipeline.gpipe_actions, "1f1b": pipeline.one_f_one_b_actions}


def simulate(actions_of, stages: int, microbatches: int) -> tuple[int, list[int]]:
    """Run every stage's actions as their messages allow (a stage waits at an action whose input is not
    there yet). Returns the number of time slots taken and each stage's peak of stored microbatches;
    fails if the stages deadlock."""
    orders = [list(actions_of(s, stages, microbatches)) for s in range(stages)]
    done: set[tuple[str, int, int]] = set()
    stored, peak, slots = [0] * stages, [0] * stages, 0
    while any(orders):
        ready = []
        for s, order in enumerate(orders):
            if not order:
                continue
            kind, i = order[0]
            needs = [("F", s - 1, i)] if kind == "F" and s > 0 else []
            if kind == "B":
                needs = [("F", s, i)] + ([("B", s + 1, i)] if s + 1 < stages else [])
            if all(n in done for n in needs):
                ready.append(s)
        assert ready, f"deadlock: {[o[:1] for o in orders]}"
        for s in ready:  # each ready stage runs one action in this slot
            kind, i = orders[s].pop(0)
            done.add((kind, s, i))
            stored[s] += 1 if kind == "F" else -1
            peak[s] = max(peak[s], stored[s])
        slots += 1
    return slots, peak


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("stages,microbatches", [(1, 1), (1, 3), (2, 1), (2, 4), (3, 2), (4, 8), (5, 3)])
def test_schedules_run_every_microbatch_once_without_deadlock(name, stages, microbatches):
    for s in range(stages):
        actions = SCHEDULES[name](s, stages, microbatches)
        assert sorted(actions) == sorted([(k, i) for k in "FB" for i in range(microbatches)])
        for i in range(microbatches):  # a microbatch goes backward after it went forward
            assert actions.index(("F", i)) < actions.index(("B", i))
    slots, peak = simulate(SCHEDULES[name], stages, microbatches)
    if name == "gpipe":
        assert peak == [microbatches] * stages
    else:
        assert peak == [min(stages - s, microbatches) for s in range(stages)]
    # forward and backward each take a slot: the whole step is 2 (m + p - 1) slots, of which each stage
    # works 2 m; the idle share is the bubble (p - 1) / (m + p - 1)
    assert slots == 2 * (microbatches + stages - 1)
    assert 1 - 2 * microbatches / slots == pytest.approx(pipeline.bubble_fraction(stages, microbatches))


def test_split_sequential_deals_layers_out_evenly_or_at_the_given_points():
    model = nn.Sequential(*[nn.Linear(3, 3) for _ in range(7)])
    assert [len(s) for s in pipeline.split_sequential(model, 3)] == [3, 2, 2]
    assert [len(s) for s in pipeline.split_sequential(model, 2, split_points=[1])] == [1, 6]
    stages = pipeline.split_sequential(model, 7)
    assert all(stage[0] is layer for stage, layer in zip(stages, model))  # the parameters are shared
    for bad in ({"num_stages": 8}, {"num_stages": 0}, {"num_stages": 3, "split_points": [4, 2]},
                {"num_stages": 2, "split_points": [7]}):
        with pytest.raises(ValueError, match="split"):
            pipeline.split_sequential(model, **bad)


@pytest.fixture(scope="module")
def dist():
    if mpi_missing():
        pytest.skip(mpi_missing())
    import tensorkiln.distributed as dist
    dist.init()
    return dist


def _model():
    tk.manual_seed(3)
    return nn.Sequential(nn.Linear(5, 9), nn.GELU(), nn.Linear(9, 4))


@pytest.mark.parametrize("schedule_type", [pipeline.ScheduleGPipe, pipeline.Schedule1F1B])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_one_stage_pipeline_trains_as_the_whole_batch(dist, schedule_type, compiled):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 4, 6)
    reference = _model()
    loss = F.cross_entropy(reference(tk.tensor(x)), tk.tensor(y))
    loss.backward()
    model = _model()
    stage = pipeline.PipelineStage(model, 0, 1, compiled=compiled)
    losses = schedule_type(stage, 3, loss_fn=F.cross_entropy).step(tk.tensor(x), target=tk.tensor(y))
    assert len(losses) == 3
    np.testing.assert_allclose(np.mean([v.numpy() for v in losses]), loss.numpy(), rtol=1e-6)
    for p, q in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert stage.stored_microbatches == 0


def test_forward_only_returns_the_whole_output(dist):
    model = _model()
    x = tk.randn(4, 5)
    out = pipeline.ScheduleGPipe(pipeline.PipelineStage(model, 0, 1), 2).step(x)
    np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    assert all(p.grad is None for p in model.parameters())  # nothing ran backward


def test_bad_microbatch_counts_and_stages_are_named(dist):
    stage = pipeline.PipelineStage(_model(), 0, 1)
    with pytest.raises(DistributedError, match=r"pipeline stage 0 of 1 \(rank 0\).*\[5, 5\] does not split into 2"):
        pipeline.ScheduleGPipe(stage, 2, loss_fn=F.cross_entropy).step(tk.randn(5, 5), target=np.zeros(5, np.int64))
    with pytest.raises(DistributedError, match=r"target of shape \[3\] does not match the batch of 4 rows"):
        pipeline.Schedule1F1B(stage, 2, loss_fn=F.cross_entropy).step(tk.randn(4, 5), target=np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="n_microbatches must be at least 1"):
        pipeline.ScheduleGPipe(stage, 0)
    with pytest.raises(DistributedError, match="needs a group of 2 ranks"):
        pipeline.PipelineStage(_model(), 0, 2)
    with pytest.raises(tk.errors.ShapeError, match=r"pipeline stage 0 of 1 \(rank 0\): microbatch 0 "
                       r"of its batch, shape \[2, 3\] float32, does not fit this stage: matmul"):
        pipeline.ScheduleGPipe(stage, 2).step(tk.randn(4, 3))


def test_the_alpha_beta_model_of_a_pipelined_step():
    from tensorkiln.distributed.cost_model import Network, predict_pipeline_step
    free = Network(0.0, 1e-15)
    # one stage: the microbatches one after another; two: one more slot (the bubble)
    assert predict_pipeline_step(0.01, 1, 4, 1e6, free) == pytest.approx(0.04)
    assert predict_pipeline_step(0.01, 2, 4, 1e6, free) == pytest.approx(0.05)
    link = Network(1e-5, 1e-9)  # 10 us, 1 GB/s: two messages of 1 MB on the critical path of 2 stages
    assert predict_pipeline_step(0.01, 2, 4, 1e6, link) == pytest.approx(0.05 + 2 * (1e-5 + 1e-3))
    ideal = 2 * 4 * 0.01 / predict_pipeline_step(0.01, 2, 4, 0, free)  # speedup over p m t_mb on one rank
    assert ideal == pytest.approx(2 * (1 - pipeline.bubble_fraction(2, 4)))
