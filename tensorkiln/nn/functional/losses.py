"""Losses (nll, cross entropy, mse, l1) and their reductions."""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError, at_user_line
from ...frontend.functions import where
from ...frontend.tensor import Tensor, as_tensor
from ...frontend.trace import composite
from .activations import log_softmax
from .arguments import _floating


def _reduce_loss(loss: Tensor, reduction: str, denominator=None) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / denominator if denominator is not None else loss.mean()
    raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _class_axis_view(n_classes: int, ndim: int) -> Tensor:
    """arange(C) shaped to broadcast against (N, C, d1, ...) logits."""
    shape = (1, n_classes) + (1,) * (ndim - 2) if ndim >= 2 else (n_classes,)
    return as_tensor(np.arange(n_classes, dtype=np.int64).reshape(shape))


def _check_targets(target: Tensor, n_classes: int, ignore_index: int, op: str) -> None:
    if target.is_traced:
        return
    values = target.numpy()
    bad = values[((values < 0) | (values >= n_classes)) & (values != ignore_index)]
    if bad.size:
        raise IndexError(f"{op}: target {bad.reshape(-1)[0]} is out of range for {n_classes} classes")


@composite("nll_loss")
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class-index targets given log-probabilities (N, C, ...)."""
    logp, target = as_tensor(input), as_tensor(target)
    class_dim = 1 if logp.ndim >= 2 else 0
    n_classes = logp.shape[class_dim]
    expected = tuple(logp.shape[:class_dim] + logp.shape[class_dim + 1:])
    if not target.dtype.is_integer:
        raise DTypeError(at_user_line(f"nll_loss: class-index targets must be integers, got {target.dtype.name}"))
    if tuple(target.shape) != expected:
        raise ShapeError(at_user_line(f"nll_loss: target shape {list(target.shape)} does not match "
                                      f"input {list(logp.shape)} (expected {list(expected)})"))
    _check_targets(target, n_classes, ignore_index, "nll_loss")
    target = target.to(dt.int64)
    onehot = target.unsqueeze(class_dim) == _class_axis_view(n_classes, logp.ndim)
    picked = where(onehot, logp, 0.0).sum(class_dim)
    valid = (target != ignore_index).to(logp.dtype)
    if weight is not None:
        w = as_tensor(weight).to(logp.dtype)
        sample_weight = where(onehot, w.reshape(_class_axis_view(n_classes, logp.ndim).shape), 0.0).sum(class_dim)
        valid = valid * sample_weight
    return _reduce_loss(-picked * valid, reduction, valid.sum())


@composite("cross_entropy")
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,
                  ignore_index: int = -100, reduce=None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits (N, C, ...) against class indices or class probabilities."""
    logits, target = _floating(as_tensor(input)), as_tensor(target)
    class_dim = 1 if logits.ndim >= 2 else 0
    n_classes = logits.shape[class_dim]
    logp = log_softmax(logits, class_dim)
    w = None
    if weight is not None:
        w = as_tensor(weight).to(logp.dtype).reshape(_class_axis_view(n_classes, logits.ndim).shape)
    if target.dtype.is_floating:  # class probabilities
        if tuple(target.shape) != tuple(logits.shape):
            raise ShapeError(at_user_line(f"cross_entropy: probability target shape {list(target.shape)} "
                                          f"must equal input shape {list(logits.shape)}"))
        probs = target.to(logp.dtype)
        if label_smoothing:
            probs = probs * (1.0 - label_smoothing) + label_smoothing / n_classes
        terms = probs * logp if w is None else probs * logp * w
        loss = -terms.sum(class_dim)
        return _reduce_loss(loss, reduction)
    if not label_smoothing:
        return nll_loss(logp, target, weight, ignore_index, reduction)
    loss = nll_loss(logp, target, weight, ignore_index, "none")
    valid = (target.to(dt.int64) != ignore_index).to(logp.dtype)
    smooth = -(logp if w is None else logp * w).sum(class_dim) * valid
    combined = loss * (1.0 - label_smoothing) + smooth * (label_smoothing / n_classes)
    if reduction != "mean":
        return _reduce_loss(combined, reduction)
    if w is None:
        denominator = valid.sum()
    else:
        onehot = target.to(dt.int64).unsqueeze(class_dim) == _class_axis_view(n_classes, logits.ndim)
        denominator = (where(onehot, w, 0.0).sum(class_dim) * valid).sum()
    return combined.sum() / denominator


def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    diff = as_tensor(input) - target
    return _reduce_loss(diff * diff, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    return _reduce_loss((as_tensor(input) - target).abs(), reduction)
