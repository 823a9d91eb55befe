"""ONNX loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both read, for each sample n and spatial position d, the entry of class
target[n, d] (a gather along the class axis 1), scale it by that class's
weight, and zero positions whose target is `ignore_index`. "mean" divides by
the sum of the weights that were applied (the count of positions that were not
ignored when there are no weights), as the ONNX standard defines it.
SoftmaxCrossEntropyLoss is the same loss of log_softmax(scores) along axis 1.
"""
from __future__ import annotations

from ...errors import ShapeError
from ...frontend.functions import where
from ...frontend.tensor import Tensor
from ...nn import functional as F
from .registry import NodeContext, converter

REDUCTIONS = ("none", "sum", "mean")


def _check(ctx: NodeContext, x: Tensor, target: Tensor, weight: Tensor | None, reduction: str) -> None:
    """Input (N, C, d1..dk), target (N, d1..dk) of integers, weight (C): a ShapeError names the node otherwise."""
    where_ = f"node '{ctx.name}' ({ctx.op_type})"
    if reduction not in REDUCTIONS:
        raise ShapeError(f"{where_}: reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")
    if x.ndim < 2:
        raise ShapeError(f"{where_}: input must be (N, C, d1, ..., dk), got shape {list(x.shape)}")
    if not target.dtype.is_integer:
        raise ShapeError(f"{where_}: target must hold integers, got {target.dtype.name}")
    expected = (x.shape[0],) + tuple(x.shape[2:])
    if tuple(target.shape) != expected:
        raise ShapeError(f"{where_}: target shape {list(target.shape)} does not match input shape "
                         f"{list(x.shape)} (expected {list(expected)})")
    if weight is not None and tuple(weight.shape) != (x.shape[1],):
        raise ShapeError(f"{where_}: weight shape {list(weight.shape)} is not [C] = [{x.shape[1]}]")


def negative_log_likelihood(x: Tensor, target: Tensor, weight: Tensor | None, reduction: str,
                            ignore_index: int | None) -> Tensor:
    """ONNX's NegativeLogLikelihoodLoss of log-probabilities `x` (N, C, d...) at integer `target` (N, d...)."""
    keep = None if ignore_index is None else target != ignore_index
    # an ignored position may hold any value, even one outside [0, C): read class 0 there instead
    safe = target if keep is None else where(keep, target, 0)
    picked = x.gather(1, safe.unsqueeze(1)).squeeze(1)
    w = None if weight is None else weight.gather(0, safe.reshape(-1)).reshape(tuple(safe.shape))
    if keep is not None:
        mask = keep.to(x.dtype)
        w = mask if w is None else w * mask
    loss = -picked if w is None else -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum() if w is not None else loss.mean()


def _nll_arguments(ctx: NodeContext, inputs: list, attrs: dict):
    x, target = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    reduction = attrs.get("reduction", "mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    _check(ctx, x, target, weight, reduction)
    return x, target, weight, reduction, attrs.get("ignore_index")


@converter("NegativeLogLikelihoodLoss")
def _negative_log_likelihood_loss(ctx, inputs, attrs):
    return negative_log_likelihood(*_nll_arguments(ctx, inputs, attrs))


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy_loss(ctx, inputs, attrs):
    scores, target, weight, reduction, ignore_index = _nll_arguments(ctx, inputs, attrs)
    log_prob = F.log_softmax(scores, 1)
    loss = negative_log_likelihood(log_prob, target, weight, reduction, ignore_index)
    return [loss, log_prob] if ctx.n_outputs > 1 else loss
