"""Megatron-LM's four communication functions of tensor parallelism, each with its own gradient.

In tensor parallelism every rank of the group computes the same (replicated)
loss, so the gradient of a value that all ranks hold alike is not summed over
the ranks. Hence these differ from the plain collectives' gradients
(ir/ops/collective.py, which differentiate each rank's own function):

- copy_to_group (Megatron's f): forward the identity, backward an all-reduce
  (the ranks' partial gradients of the replicated input add up);
- reduce_from_group (g): forward an all-reduce of partial sums, backward the
  identity;
- gather_from_group: forward all-gather along the last axis, backward this
  rank's slice;
- scatter_to_group: forward this rank's slice of the last axis, backward an
  all-gather.
"""
from __future__ import annotations

from ...distributed import ProcessGroup, all_gather, all_reduce, world_size
from ...distributed import rank as group_rank
from ...frontend.autodiff.function import Function


def _slice_last(x, group: ProcessGroup | None):
    n = world_size(group)
    width = x.shape[-1] // n
    start = group_rank(group) * width
    return x[..., start:start + width]


class _CopyToGroup(Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad, "sum", ctx.group), None


class _ReduceFromGroup(Function):
    @staticmethod
    def forward(ctx, x, group):
        return all_reduce(x, "sum", group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromGroup(Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return all_gather(x, dim=x.ndim - 1, group=group)

    @staticmethod
    def backward(ctx, grad):
        return _slice_last(grad, ctx.group), None


class _ScatterToGroup(Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _slice_last(x, group)

    @staticmethod
    def backward(ctx, grad):
        return all_gather(grad, dim=grad.ndim - 1, group=ctx.group), None


def copy_to_group(x, group: ProcessGroup | None = None):
    """x unchanged; its gradient is summed over the group (the input of a column-parallel layer)."""
    return x if world_size(group) == 1 else _CopyToGroup.apply(x, group)


def reduce_from_group(x, group: ProcessGroup | None = None):
    """The sum of the ranks' partial results (the output of a row-parallel layer)."""
    return x if world_size(group) == 1 else _ReduceFromGroup.apply(x, group)


def gather_from_group(x, group: ProcessGroup | None = None):
    """The ranks' shards of the last axis, concatenated."""
    return x if world_size(group) == 1 else _GatherFromGroup.apply(x, group)


def scatter_to_group(x, group: ProcessGroup | None = None):
    """This rank's shard of the last axis."""
    return x if world_size(group) == 1 else _ScatterToGroup.apply(x, group)
