"""Operators whose output shape depends on input values: NonZero, Unique, Compress, NonMaxSuppression.

A compiled program has the shapes of its values fixed before it runs, so these
operators cannot sit inside one. Given values already known (eager tensors:
constants, initializers, or the results of a compiled segment) they compute at
once with numpy, as ONNX's reference does; given traced values they raise
DataDependentOutput, and the module then runs the graph in stages (staged.py):
compiled segments between such nodes, each node computed on the actual values
of the segment before it. A converter's `ctx.values()` of a computed input (a
Reshape's runtime shape, TopK's runtime k) raises the same error, so those
nodes become stage boundaries too.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...errors import ShapeError
from ...frontend.tensor import Tensor, as_tensor
from .registry import DataDependentOutput, converter


def _known(ctx, t: Tensor | None, what: str) -> np.ndarray | None:
    """The value of input `what`, or DataDependentOutput when it is computed by the program."""
    if t is None:
        return None
    if t.is_traced:
        raise DataDependentOutput(f"node '{ctx.name}' ({ctx.op_type}): the shape of its output depends on the "
                                  f"values of input '{what}'")
    return t.numpy()


def _int64(array) -> Tensor:
    return as_tensor(np.ascontiguousarray(array, dtype=np.int64), dt.int64)


@converter("NonZero")
def _nonzero(ctx, inputs, attrs):
    x = _known(ctx, inputs[0], "X")
    if x.ndim == 0:  # as ONNX's reference: no rows, one column when the scalar is nonzero
        return _int64(np.empty((0, int(np.count_nonzero(x)))))
    return _int64(np.vstack(np.nonzero(x)))


@converter("Compress")
def _compress(ctx, inputs, attrs):
    x_tensor = inputs[0]
    x = _known(ctx, x_tensor, "input")
    condition = _known(ctx, inputs[1], "condition")
    if condition.ndim != 1:
        raise ShapeError(f"node '{ctx.name}' (Compress): condition must be 1-D, got shape {list(condition.shape)}")
    axis = attrs.get("axis")
    length = x.size if axis is None else x.shape[axis if axis >= 0 else axis + x.ndim]
    if condition.shape[0] > length:
        raise ShapeError(f"node '{ctx.name}' (Compress): condition has {condition.shape[0]} elements, the "
                         f"{'flattened input' if axis is None else f'axis {axis}'} only {length}")
    return as_tensor(np.ascontiguousarray(np.compress(condition.astype(bool), x, axis=axis)), x_tensor.dtype)


@converter("Unique")
def _unique(ctx, inputs, attrs):
    x_tensor = inputs[0]
    x = _known(ctx, x_tensor, "X")
    axis = attrs.get("axis")
    if axis is not None:
        axis = axis + x.ndim if axis < 0 else axis
        if not 0 <= axis < x.ndim:
            raise ShapeError(f"node '{ctx.name}' (Unique): axis {attrs['axis']} out of range for rank {x.ndim}")
    y, indices, inverse, counts = np.unique(x, True, True, True, axis=axis)
    if not attrs.get("sorted", 1):  # in order of first occurrence
        order = np.argsort(indices, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        indices, counts, inverse = indices[order], counts[order], rank[inverse.reshape(-1)]
        y = np.take(x.reshape(-1) if axis is None else x, indices, axis=0 if axis is None else axis)
    return [as_tensor(np.ascontiguousarray(y), x_tensor.dtype), _int64(indices), _int64(inverse.reshape(-1)),
            _int64(counts)]


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(y_min, x_min, y_max, x_max) per box from either ONNX box format."""
    if center_point_box:
        x, y, w, h = (boxes[..., i] for i in range(4))
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], -1)
    y1, x1, y2, x2 = (boxes[..., i] for i in range(4))
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], -1)


def _suppresses(a: np.ndarray, b: np.ndarray, iou_threshold: float) -> bool:
    """Box b suppresses box a (corner form): their intersection over union exceeds the threshold."""
    height = min(a[2], b[2]) - max(a[0], b[0])
    width = min(a[3], b[3]) - max(a[1], b[1])
    if height <= 0 or width <= 0:
        return False
    intersection = height * width
    area_a, area_b = (a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1])
    union = area_a + area_b - intersection
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return intersection / union > iou_threshold


@converter("NonMaxSuppression")
def _non_max_suppression(ctx, inputs, attrs):
    boxes = _known(ctx, inputs[0], "boxes")
    scores = _known(ctx, inputs[1], "scores")
    limit = _known(ctx, inputs[2] if len(inputs) > 2 else None, "max_output_boxes_per_class")
    iou = _known(ctx, inputs[3] if len(inputs) > 3 else None, "iou_threshold")
    threshold = _known(ctx, inputs[4] if len(inputs) > 4 else None, "score_threshold")
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[0] != boxes.shape[0] \
            or scores.shape[2] != boxes.shape[1]:
        raise ShapeError(f"node '{ctx.name}' (NonMaxSuppression): boxes {list(boxes.shape)} must be "
                         f"[batches, boxes, 4] and scores {list(scores.shape)} [batches, classes, boxes]")
    per_class = 0 if limit is None or limit.size == 0 else max(int(limit.reshape(-1)[0]), 0)
    iou_threshold = 0.0 if iou is None or iou.size == 0 else float(iou.reshape(-1)[0])
    corners = _corners(boxes, attrs.get("center_point_box", 0))  # in the boxes' precision, as ONNX's reference
    selected = []
    for batch in range(scores.shape[0]):
        for klass in range(scores.shape[1]):
            row = scores[batch, klass]
            candidates = np.arange(row.size)
            if threshold is not None and threshold.size:
                candidates = candidates[row > threshold.reshape(-1)[0]]
            # highest score first; equal scores: the lower box index first (ONNX's reference order)
            candidates = candidates[np.lexsort((candidates, -row[candidates]))]
            kept: list[int] = []
            for box in candidates:
                if len(kept) >= per_class:
                    break
                if not any(_suppresses(corners[batch, box], corners[batch, k], iou_threshold) for k in kept):
                    kept.append(int(box))
            selected += [(batch, klass, box) for box in kept]
    return _int64(np.array(selected, dtype=np.int64).reshape(-1, 3))
