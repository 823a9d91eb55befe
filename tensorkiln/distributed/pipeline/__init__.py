"""Pipeline parallelism: a sequential model's layers split into stages, one per rank, fed microbatches.

    import tensorkiln.distributed as dist
    from tensorkiln.distributed import pipeline
    stages = pipeline.split_sequential(model, dist.world_size())
    stage = pipeline.PipelineStage(stages[dist.rank()], dist.rank(), dist.world_size())
    schedule = pipeline.Schedule1F1B(stage, n_microbatches=4, loss_fn=F.cross_entropy)   # or ScheduleGPipe
    opt.zero_grad()
    losses = schedule.step(x if stage.is_first else ..., target=y)   # first stage: x; last: target=
    opt.step()

The names follow torch.distributed.pipelining. See docs/distributed.md.
"""
from ..cost_model import pipeline_bubble_fraction as bubble_fraction
from .schedules import PipelineSchedule, Schedule1F1B, ScheduleGPipe, gpipe_actions, one_f_one_b_actions
from .split import split_sequential
from .stage import PipelineStage

__all__ = ["PipelineSchedule", "PipelineStage", "Schedule1F1B", "ScheduleGPipe", "bubble_fraction", "gpipe_actions",
           "one_f_one_b_actions", "split_sequential"]
