"""Pipeline parallelism against one process training the whole model on the whole batch.

`train` (2 ranks): a 4-layer MLP and a small transformer, split over 2 stages, trained a few SGD-momentum
steps with GPipe and 1F1B, eager and compiled stages: the losses and every parameter equal one process's
to 1e-5 (relative); GPipe keeps m microbatches' activations, 1F1B at most p - s; a batch the microbatch
count does not divide raises on every rank, which then go on.
`three_stages` (3 ranks): the MLP over 3 stages, both schedules, and the same error.
`data_parallel` (4 ranks): 2 pipelines of 2 stages, each stage replicated over 2 ranks, against one process.
`mismatch` (2 ranks): stage 1's first layer does not fit stage 0's output; the error names both stages.
"""
import sys
import warnings

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist
import tensorkiln.nn.functional as F
from tensorkiln import nn
from tensorkiln.distributed import pipeline

warnings.simplefilter("error")
dist.init()
RANK, SIZE = dist.rank(), dist.world_size()
STEPS = 3


def mlp():
    return nn.Sequential(nn.Linear(7, 16), nn.ReLU(), nn.Linear(16, 12), nn.GELU(), nn.Linear(12, 9), nn.ReLU(),
                         nn.Linear(9, 5))


class Embed(nn.Module):
    def __init__(self, vocab, width, length):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(tk.randn(length, width) * 0.1)

    def forward(self, ids):
        return self.tokens(ids) + self.positions


class Block(nn.Module):
    """A pre-norm transformer block: attention, then an MLP, each added to its input."""

    def __init__(self, width, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


VOCAB, WIDTH, LENGTH = 11, 16, 5


def transformer():
    return nn.Sequential(Embed(VOCAB, WIDTH, LENGTH), Block(WIDTH, 2), Block(WIDTH, 2), nn.LayerNorm(WIDTH),
                         nn.Linear(WIDTH, VOCAB))


def token_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def data(kind, batch, rng):
    if kind == "mlp":
        return [(rng.standard_normal((batch, 7)).astype(np.float32), rng.integers(0, 5, batch))
                for _ in range(STEPS)]
    return [(rng.integers(0, VOCAB, (batch, LENGTH)), rng.integers(0, VOCAB, (batch, LENGTH)))
            for _ in range(STEPS)]


def one_process(kind, batches, loss_fn):
    """The reference: the whole model, the whole batch, one process."""
    tk.manual_seed(0)
    model = mlp() if kind == "mlp" else transformer()
    opt = tk.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = loss_fn(model(tk.tensor(x)), tk.tensor(y))
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    return model, losses


def pipelined(kind, batches, loss_fn, schedule_type, compiled, microbatches, pipe_group=None, dp_group=None,
              rows=slice(None)):
    """The same training, this rank holding one stage; returns its stage module, step losses, schedule."""
    tk.manual_seed(0)
    model = mlp() if kind == "mlp" else transformer()
    num_stages = 2 if pipe_group is not None else SIZE
    stages = pipeline.split_sequential(model, num_stages, split_points=None if kind == "mlp" else [2])
    index = dist.rank(pipe_group) if pipe_group is not None else RANK
    if dp_group is not None and dist.rank(dp_group) == 1:  # the replicas must start from the first's weights
        for p in stages[index].parameters():
            p.data = p.detach() + 1.0
    stage = pipeline.PipelineStage(stages[index], index, num_stages, group=pipe_group, data_parallel_group=dp_group,
                                   compiled=compiled)
    schedule = schedule_type(stage, microbatches, loss_fn=loss_fn)
    opt = tk.optim.SGD(stages[index].parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        recorded = []
        result = schedule.step(*([tk.tensor(x[rows])] if stage.is_first else []),
                               target=tk.tensor(y[rows]) if stage.is_last else None, losses=recorded)
        opt.step()
        if stage.is_last:
            assert len(result) == microbatches and len(recorded) == microbatches
            losses.append(float(np.mean([loss.numpy() for loss in result])))
    return stages[index], losses, schedule, stage


def check(kind, schedule_type, compiled, microbatches, batch):
    loss_fn = F.cross_entropy if kind == "mlp" else token_loss
    batches = data(kind, batch, np.random.default_rng(1))
    reference, ref_losses = one_process(kind, batches, loss_fn)
    mine, losses, schedule, stage = pipelined(kind, batches, loss_fn, schedule_type, compiled, microbatches)
    what = f"rank {RANK}: {kind} {schedule_type.__name__} {'compiled' if compiled else 'eager'} m={microbatches}"
    if stage.is_last:
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, err_msg=what)
    ref_stage = pipeline.split_sequential(reference, SIZE, split_points=None if kind == "mlp" else [2])[RANK]
    for (name, p), q in zip(mine.named_parameters(), ref_stage.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{what}: {name}")
    expected_peak = microbatches if schedule_type is pipeline.ScheduleGPipe else min(SIZE - RANK, microbatches)
    assert stage.peak_stored == expected_peak, (what, stage.peak_stored, expected_peak)
    return schedule, stage


def expect_indivisible_batch_error(schedule, stage):
    x, y = tk.randn(10, 7), tk.tensor(np.zeros(10, np.int64))
    try:
        schedule.step(*([x] if stage.is_first else []), target=y if stage.is_last else None)
    except dist.DistributedError as err:
        text = str(err)
        assert f"pipeline stage {RANK} of {SIZE} (rank {RANK})" in text, text
        if RANK == 0:
            assert "[10, 7] does not split into 4 microbatches" in text, text
        return
    raise AssertionError(f"rank {RANK}: a batch of 10 rows in 4 microbatches should have failed")


mode = sys.argv[1]
if mode == "train":
    for schedule_type in (pipeline.ScheduleGPipe, pipeline.Schedule1F1B):
        for compiled in (False, True):
            schedule, stage = check("mlp", schedule_type, compiled, microbatches=4, batch=12)
        check("transformer", schedule_type, True, microbatches=3, batch=6)
    check("transformer", pipeline.Schedule1F1B, False, microbatches=2, batch=4)
    check("mlp", pipeline.Schedule1F1B, True, microbatches=1, batch=5)  # one microbatch: no overlap at all
    expect_indivisible_batch_error(schedule, stage)
    # after the error the ranks still agree on what comes next
    check("mlp", pipeline.ScheduleGPipe, True, microbatches=2, batch=4)
elif mode == "three_stages":  # a middle stage receives and sends both ways
    for schedule_type in (pipeline.ScheduleGPipe, pipeline.Schedule1F1B):
        schedule, stage = check("mlp", schedule_type, True, microbatches=4, batch=8)
    expect_indivisible_batch_error(schedule, stage)
elif mode == "data_parallel":
    pipe_group_a, pipe_group_b = dist.new_group([0, 1]), dist.new_group([2, 3])
    dp_group_a, dp_group_b = dist.new_group([0, 2]), dist.new_group([1, 3])
    pipe_group = pipe_group_a if RANK < 2 else pipe_group_b
    dp_group = dp_group_a if RANK % 2 == 0 else dp_group_b
    batches = data("mlp", 8, np.random.default_rng(2))
    reference, ref_losses = one_process("mlp", batches, F.cross_entropy)
    half = slice(0, 4) if RANK < 2 else slice(4, 8)
    for schedule_type in (pipeline.ScheduleGPipe, pipeline.Schedule1F1B):
        mine, losses, _, stage = pipelined("mlp", batches, F.cross_entropy, schedule_type, True, 2, pipe_group,
                                           dp_group, rows=half)
        if stage.is_last:  # each pipeline's loss is over its half; their mean is the whole batch's
            mean = dist.all_reduce(tk.tensor(np.array(losses, np.float32)), "mean", group=dp_group).numpy()
            np.testing.assert_allclose(mean, ref_losses, rtol=1e-5, err_msg=f"rank {RANK}")
        ref_stage = pipeline.split_sequential(reference, 2)[stage.stage_index]
        for (name, p), q in zip(mine.named_parameters(), ref_stage.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"rank {RANK}: {name}")
elif mode == "mismatch":
    tk.manual_seed(0)
    layers = [nn.Linear(6, 8), nn.Linear(9, 3)] if RANK == 1 else [nn.Linear(6, 8), nn.Linear(8, 3)]
    stage = pipeline.PipelineStage(nn.Sequential(layers[RANK]), RANK, 2)
    schedule = pipeline.ScheduleGPipe(stage, 2, loss_fn=F.cross_entropy)
    schedule.step(*([tk.randn(4, 6)] if RANK == 0 else []), target=tk.tensor(np.zeros(4, np.int64)))
    print(f"rank {RANK}: the mismatched pipeline ran")
print(f"OK pipeline_parallel rank {RANK}")
