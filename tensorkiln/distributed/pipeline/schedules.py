"""Pipeline schedules: in which order each stage runs its microbatches forward (F) and backward (B).

With p stages and m microbatches both run every F and B once per stage; they
differ in the order, and so in how many microbatches' activations a stage
keeps at once:

- GPipe (Huang et al. 2019): all forwards, then all backwards. Stage s keeps
  all m microbatches' activations.
- 1F1B (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM): stage s runs
  p - 1 - s forwards to fill the pipeline, then alternates one forward and
  one backward, then drains the remaining backwards. Stage s keeps at most
  p - s microbatches, whatever m is.

Both take the same time on an ideal pipeline: each stage idles (the bubble)
for p - 1 of the m + p - 1 microbatch slots of a step, a fraction
(p - 1) / (m + p - 1). The losses and gradients are those of one process on
the whole batch: the loss of each microbatch is seeded with 1/m (the mean of
the microbatch means), and the gradients of the microbatches add up.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...errors import DistributedError
from ...frontend.creation import tensor
from ...frontend.functions import cat
from ...frontend.tensor import Tensor
from .stage import PipelineStage

FORWARD, BACKWARD = "F", "B"


def gpipe_actions(stage_index: int, num_stages: int, microbatches: int) -> list[tuple[str, int]]:
    """Every microbatch forward, then every microbatch backward."""
    return [(FORWARD, i) for i in range(microbatches)] + [(BACKWARD, i) for i in range(microbatches)]


def one_f_one_b_actions(stage_index: int, num_stages: int, microbatches: int) -> list[tuple[str, int]]:
    """p - 1 - s forwards to fill the pipeline, then one forward and one backward in turn, then the rest back."""
    warmup = min(num_stages - 1 - stage_index, microbatches)
    actions = [(FORWARD, i) for i in range(warmup)]
    for i in range(microbatches - warmup):
        actions += [(FORWARD, warmup + i), (BACKWARD, i)]
    return actions + [(BACKWARD, i) for i in range(microbatches - warmup, microbatches)]


class PipelineSchedule:
    """Runs one training step of a pipeline stage over `n_microbatches` microbatches of the batch.

    loss_fn(output, target) gives the last stage's loss per microbatch (a mean
    over its rows, as F.cross_entropy's default). Without one the schedule runs
    forward only and the last stage's `step` returns the whole batch's output.
    """

    actions_of: Callable[[int, int, int], list[tuple[str, int]]]

    def __init__(self, stage: PipelineStage, n_microbatches: int, loss_fn: Callable | None = None):
        if int(n_microbatches) < 1:
            raise ValueError(f"{stage.name}: n_microbatches must be at least 1, got {n_microbatches}")
        self.stage, self.n_microbatches, self.loss_fn = stage, int(n_microbatches), loss_fn
        stage.loss_fn = loss_fn

    def actions(self) -> list[tuple[str, int]]:
        """This stage's order of (F or B, microbatch index) in a step."""
        actions = type(self).actions_of(self.stage.stage_index, self.stage.num_stages, self.n_microbatches)
        return actions if self.loss_fn is not None else [a for a in actions if a[0] == FORWARD]

    def step(self, *args, target=None, losses: list | None = None):
        """One step: the first stage passes the batch, the last the target; every stage calls it.

        Returns the microbatches' losses on the last stage (also appended to
        `losses` when given, as torch.distributed.pipelining does), or, without a
        loss function, the whole batch's output there; None on the other stages.
        The parameters' gradients are added to their `.grad`; call the optimizer after.
        """
        stage, m = self.stage, self.n_microbatches
        stage.begin_step()
        inputs = self._split_batch(args) if stage.is_first else None
        targets, outputs = None, {}
        for kind, i in self.actions():
            if kind == FORWARD:
                x = inputs[i] if stage.is_first else stage.receive_input(i)
                if targets is None and stage.is_last and self.loss_fn is not None:
                    # after the first receive: an error of the first stage's batch is the one to report
                    targets = self._split_target(target, rows=x.shape[0] * m)
                outputs[i] = stage.forward(i, x, None if targets is None else targets[i],
                                           keep=self.loss_fn is not None)
            else:
                stage.backward(i, scale=1.0 / m)
        stage.finish_step()
        if not stage.is_last:
            return None
        ordered = [outputs[i] for i in range(m)]
        if self.loss_fn is None:
            return ordered[0] if m == 1 else cat(ordered, 0)
        if losses is not None:
            losses.extend(ordered)
        return ordered

    def _split_batch(self, args) -> list:
        if len(args) != 1:
            raise TypeError(f"{self.stage.name}: step takes the batch as one tensor on the first stage, "
                            f"got {len(args)} arguments")
        return self._split(args[0], "batch")

    def _split_target(self, target, rows: int) -> list:
        """The target in microbatches; it must have the batch's `rows`."""
        if target is None:
            raise TypeError(f"{self.stage.name}: the last stage's step needs target= for the loss function")
        target = target.numpy() if isinstance(target, Tensor) else np.asarray(target)
        if target.ndim == 0 or target.shape[0] != rows:
            raise DistributedError(f"{self.stage.name}: the target of shape {list(target.shape)} does not match "
                                   f"the batch of {rows} rows ({self.n_microbatches} microbatches)")
        return self._split(target, "target")

    def _split(self, value, what: str) -> list:
        """`value` cut along dim 0 into n_microbatches equal parts; every stage raises if it does not divide."""
        value = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        rows, m = (value.shape[0] if value.ndim else 0), self.n_microbatches
        if value.ndim == 0 or rows % m:
            message = (f"the {what} of shape {list(value.shape)} does not split into {m} microbatches: "
                       f"its first dimension ({rows} rows) must be a multiple of n_microbatches")
            if what == "batch":
                self.stage.report_error(message)  # the later stages raise too instead of waiting
            raise DistributedError(f"{self.stage.name}: {message}")
        size = rows // m
        return [tensor(value[i * size:(i + 1) * size]) for i in range(m)]


class ScheduleGPipe(PipelineSchedule):
    """GPipe: all microbatches forward, then all backward (keeps m microbatches' activations)."""

    actions_of = staticmethod(gpipe_actions)


class Schedule1F1B(PipelineSchedule):
    """1F1B: one forward, one backward in the steady state (keeps at most p - s microbatches' activations)."""

    actions_of = staticmethod(one_f_one_b_actions)
