"""One pipeline stage: a model's consecutive layers on one rank, run one microbatch at a time.

A stage runs a microbatch forward (its input received from the previous stage,
or taken from the batch on the first stage) and, later, backward (the gradient
of its output received from the next stage, or 1/m seeded at the loss on the
last), sends what the neighbour needs, and adds the parameters' gradients of
the microbatch to the step's sum. The schedule (schedules.py) says in which
order.

Two ways to compute:

- eager (`compiled=False`): forward records the tape; the stage keeps each
  microbatch's whole tape (every intermediate activation) until its backward.
- compiled (`compiled=True`, the default): forward and backward are two
  `tk.jit` functions. The compiled backward computes the stage's forward again
  before differentiating it (activation recomputation), so between the two the
  stage keeps only the microbatch's input. Modules that draw random numbers
  (dropout) or update buffers in training (batch norm) would do so twice:
  use eager stages for them.

The parameters' gradients of a step are summed apart from `.grad`; at the end
of the step they are averaged over the data-parallel group (if any) and then
added to `.grad`, as `backward()` adds (the optimizer step is the caller's).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...errors import DistributedError, DTypeError, ShapeError
from ...frontend.autodiff.build import TENSOR_BUILD
from ...frontend.autodiff.mode import enable_grad, no_grad
from ...frontend.autodiff.tape import accumulate_grad, backward
from ...frontend.creation import tensor, zeros_like
from ...frontend.jit import jit
from ...frontend.tensor import Tensor
from ..collectives import all_reduce, broadcast
from ..process import ProcessGroup, group_ranks, rank
from .messages import (ACTIVATION_TAG, BAD_MICROBATCH_COUNT, GRADIENT_TAG, OK, Header, Outbox, receive,
                       recv_header, send_header)


class PipelineStage:
    """Stage `stage_index` of `num_stages`: `module` on this rank, its neighbours on the group's next ranks.

    group: the ranks of the pipeline, stage s on the group's s-th rank (default:
    the world). data_parallel_group: the ranks holding replicas of this same
    stage (one per pipeline); their parameters start as the group's first
    rank's and their gradients are averaged each step.
    """

    def __init__(self, module, stage_index: int, num_stages: int, group: ProcessGroup | None = None,
                 data_parallel_group: ProcessGroup | None = None, compiled: bool = True):
        ranks = group_ranks(group)
        where = f"rank {rank()}"
        if not 0 <= stage_index < num_stages:
            raise ValueError(f"{where}: stage_index {stage_index} is outside 0..{num_stages - 1}")
        if len(ranks) != num_stages:
            raise DistributedError(f"{where}: a pipeline of {num_stages} stages needs a group of {num_stages} "
                                   f"ranks, one per stage; the group has {len(ranks)} ({list(ranks)})")
        if ranks[stage_index] != rank():
            raise DistributedError(f"{where}: stage {stage_index} belongs on rank {ranks[stage_index]} of the "
                                   f"pipeline's group {list(ranks)}")
        self.module, self.stage_index, self.num_stages = module, stage_index, num_stages
        self.previous_rank = ranks[stage_index - 1] if stage_index > 0 else None
        self.next_rank = ranks[stage_index + 1] if stage_index + 1 < num_stages else None
        self.data_parallel_group, self.compiled = data_parallel_group, compiled
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.loss_fn: Callable | None = None  # the schedule sets it (the last stage applies it)
        self.peak_stored = 0  # the most microbatches whose activations were kept at once, in any step
        self._stored: dict[int, tuple] = {}
        self._outbox = Outbox()
        self._input_header: Header | None = None
        self._output_type: tuple[tuple[int, ...], str] = ((), "float32")
        self._step_grads: list[np.ndarray | None] = []
        self._backward_ran = False
        if data_parallel_group is not None:
            self._start_like_first_replica()
        if compiled:
            self._forward_compiled = jit(self._run)
            self._backward_compiled = jit(self._gradients)

    # ---- names and roles ---------------------------------------------------------------------
    @property
    def is_first(self) -> bool:
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        return self.stage_index == self.num_stages - 1

    @property
    def name(self) -> str:
        return f"pipeline stage {self.stage_index} of {self.num_stages} (rank {rank()})"

    @property
    def stored_microbatches(self) -> int:
        """Microbatches run forward whose backward has not run yet (their activations are kept)."""
        return len(self._stored)

    # ---- a step --------------------------------------------------------------------------------
    def begin_step(self) -> None:
        self._step_grads = [None] * len(self.params)
        self._input_header, self._backward_ran = None, False
        self._stored.clear()  # what a step that raised left behind

    def finish_step(self) -> None:
        """Wait for the sends, average the step's gradients over the replicas, add them to `.grad`."""
        self._outbox.wait_all()
        if self._stored:
            raise DistributedError(f"{self.name}: microbatches {sorted(self._stored)} ran forward but not backward")
        if not self._backward_ran:  # forward only: no gradients to add
            return
        grads = [np.zeros(p.shape, p.numpy().dtype) if g is None else g for g, p in zip(self._step_grads, self.params)]
        if self.data_parallel_group is not None and grads:
            flat = all_reduce(tensor(np.concatenate([g.ravel() for g in grads])), "mean",
                              group=self.data_parallel_group).numpy()
            offsets = np.cumsum([0] + [g.size for g in grads])
            grads = [flat[a:b].reshape(g.shape) for a, b, g in zip(offsets, offsets[1:], grads)]
        for p, g in zip(self.params, grads):
            accumulate_grad(p, tensor(g))

    def report_error(self, message: str) -> None:
        """Tell every later stage (they are waiting for a header) that this step failed, then raise."""
        if self.next_rank is not None:
            send_header(Header(BAD_MICROBATCH_COUNT), self.next_rank)
        raise DistributedError(f"{self.name}: {message}")

    # ---- one microbatch ------------------------------------------------------------------------
    def receive_input(self, index: int) -> np.ndarray:
        """Microbatch `index`'s activation from the previous stage (the step's header first)."""
        if index == 0:
            header = recv_header(self.previous_rank)
            if header.status != OK:
                if self.next_rank is not None:
                    send_header(header, self.next_rank)
                raise DistributedError(f"{self.name}: stage 0 could not split its batch into microbatches "
                                       f"(it raised the error that says why); this step did not run")
            self._input_header = header
        return receive(self._input_header.shape, self._input_header.dtype, self.previous_rank, ACTIVATION_TAG)

    def forward(self, index: int, x, target=None, keep: bool = True) -> Tensor:
        """Run microbatch `index` forward; the next stage gets the output. Returns the output (the loss on
        the last stage when the schedule has a loss function). keep: keep what its backward needs."""
        x = x if isinstance(x, Tensor) else tensor(x)
        try:
            if self.compiled:
                with enable_grad():  # the trace then reads the parameters on every call, not as constants
                    out = self._forward_compiled(x, target)
                saved = (x, target)
            else:
                with enable_grad() if keep else no_grad():
                    leaf = x.detach().requires_grad_() if keep and self._needs_input_grad(x) else x
                    out = self._run(leaf, target)
                saved = (leaf, out)
            if keep:
                self._stored[index] = saved
        except (ShapeError, DTypeError) as err:
            raise type(err)(f"{self.name}: {self._input_description(index, x)} does not fit this stage: {err}") from err
        self.peak_stored = max(self.peak_stored, len(self._stored))
        out = out.detach()
        if self.next_rank is not None:
            value = out.numpy()
            self._output_type = (tuple(value.shape), value.dtype.name)  # what its gradient will be
            if index == 0:
                send_header(Header(OK, tuple(value.shape), value.dtype.name), self.next_rank)
            self._outbox.send(value, self.next_rank, ACTIVATION_TAG)
        return out

    def backward(self, index: int, scale: float = 1.0) -> None:
        """Run microbatch `index` backward: its output's gradient is received from the next stage (the last
        stage seeds `scale` at its loss); the input's gradient goes to the previous stage."""
        saved = self._stored.pop(index)
        if self.next_rank is None:
            grad_out = tensor(np.asarray(scale, np.float32))
        else:
            shape, dtype = self._output_type
            grad_out = tensor(receive(shape, dtype, self.next_rank, GRADIENT_TAG))
        if self.compiled:
            x, target = saved
            with enable_grad():
                grads = self._backward_compiled(x, grad_out, target)
        else:
            leaf, out = saved
            wanted = ([leaf] if leaf.requires_grad else []) + self.params
            grads = [zeros_like(t) if g is None else g
                     for g, t in zip(backward([out], [grad_out.to(out.dtype)], inputs=wanted, build=TENSOR_BUILD),
                                     wanted)]
            x = leaf
        grads, self._backward_ran = list(grads), True
        if self._needs_input_grad(x):
            input_grad = grads.pop(0)
            if self.previous_rank is not None:
                self._outbox.send(input_grad.numpy(), self.previous_rank, GRADIENT_TAG)
        for i, g in enumerate(grads):
            value = g.numpy()
            self._step_grads[i] = value.copy() if self._step_grads[i] is None else self._step_grads[i] + value

    # ---- the computation -------------------------------------------------------------------------
    def _run(self, x, target=None):
        """The stage's function: its layers, then the loss on the last stage."""
        out = self.module(x)
        return self.loss_fn(out, target) if self.loss_fn is not None and self.is_last else out

    def _gradients(self, x, grad_out, target=None) -> tuple:
        """The gradients of the stage's input (unless it is the first stage or an integer input) and of its
        parameters, for output gradient `grad_out`: the forward computed again, then differentiated."""
        with enable_grad():
            leaf = x.detach().requires_grad_() if self._needs_input_grad(x) else x
            out = self._run(leaf, target)
            wanted = ([leaf] if leaf.requires_grad else []) + self.params
            grads = backward([out], [grad_out.to(out.dtype)], inputs=wanted, build=TENSOR_BUILD)
        return tuple(zeros_like(t) if g is None else g for g, t in zip(grads, wanted))

    def _needs_input_grad(self, x) -> bool:
        return not self.is_first and x.dtype.is_floating

    def _input_description(self, index: int, x) -> str:
        source = f"microbatch {index} of its batch" if self.is_first else \
            f"the activation of microbatch {index} received from stage {self.stage_index - 1} " \
            f"(rank {self.previous_rank})"
        return f"{source}, shape {list(x.shape)} {x.dtype.name},"

    def _start_like_first_replica(self) -> None:
        """Every replica of the stage starts from the data-parallel group's first rank's parameters."""
        root = group_ranks(self.data_parallel_group)[0]
        for p in self.module.parameters():
            p.data = broadcast(p.detach(), src=root, group=self.data_parallel_group)
