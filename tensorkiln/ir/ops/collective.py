"""Collective primitives over MPI ranks: all_reduce, all_gather, reduce_scatter, broadcast.

Each result is a value on every rank of a process group, so these are graph
ops like any other: the reference runs the collective (runtime/communicator.py)
and the gradient rules are collectives again (all-reduce's is all-reduce,
all-gather's is reduce-scatter and back). Attributes: `group`, the sorted world
ranks taking part (() for the whole world); `sequence`, the collective's number
in the program (the same on every rank; see communicator.next_sequence); and
per op `reduction` (sum | mean | max | min | prod), `axis` or `root` (a world rank).
Compiled, each is one runtime call (`runtime_call=describe`): the generated
C hands the operand's and result's buffers to runtime/collective_hook.py, which
runs the same collective; the generated code never links MPI.

Point-to-point messages (`send`, `recv`) are effects, not values: each takes
an `after` operand, the token of the message before it in the traced function
(frontend/trace.py chains them), so the graph keeps them and their order, and
`send`'s result is such a token (0-d int32). They have no gradient.
"""
from __future__ import annotations

import itertools

import numpy as np

from ... import dtypes as dt
from ...errors import DTypeError, ShapeError, UnsupportedOpError
from ...runtime import collective_hook, communicator
from .gradient import NOT_DIFFERENTIABLE, mask
from .registry import Attrs, MappingType, OpKind, TensorType, register


def describe(name: str):
    """The runtime-call description of collective `name` (parsed by runtime/collective_hook.py)."""
    if name not in collective_hook.COLLECTIVES:
        raise ValueError(f"the runtime has no handler for {name!r}")

    def description(attrs: Attrs, operand: TensorType, result: TensorType) -> str:
        def text(value) -> str:
            if isinstance(value, tuple):
                return ",".join(str(int(v)) for v in value)
            return str(value)

        data = result if name == "recv" else operand  # recv's operand is a token; its data is its result
        fields = [name, f"seq={attrs['sequence']}", f"dtype={data.dtype.name}", f"in={text(operand.shape)}",
                  f"out={text(result.shape)}", f"group={text(attrs['group']) or 'world'}"]
        fields += [f"{key}={text(attrs[key])}" for key in ("reduction", "axis", "root", "peer", "tag") if key in attrs]
        return " ".join(fields)
    return description


def _check_reduction(op: str, t: TensorType) -> None:
    if op not in communicator.REDUCE_OPS:
        raise ShapeError(f"unknown reduction {op!r}; one of {', '.join(communicator.REDUCE_OPS)}")
    if op == "mean" and not t.dtype.is_floating:
        raise DTypeError(f"the mean needs a floating tensor, got {t.dtype}")
    if op in ("sum", "prod") and t.dtype.is_bool:
        raise DTypeError(f"cannot {op} booleans; cast to an integer type first")


def _check_axis(axis: int, t: TensorType) -> None:
    if not 0 <= axis < t.ndim:
        raise ShapeError(f"axis {axis} out of range for rank {t.ndim}")


# ---- all_reduce ----------------------------------------------------------------------------------------

def _all_reduce_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    _check_reduction(attrs["reduction"], types[0])
    return types[0]


def _all_reduce_reference(inputs, attrs, out):
    return communicator.all_reduce(inputs[0], attrs["reduction"], attrs["group"])


def all_reduce_of(build, x, op: str, group):
    """An all_reduce node made by a gradient rule (a new sequence number: it is a new collective)."""
    return build.apply("all_reduce", [x], reduction=op, group=group, sequence=communicator.next_sequence())


def _all_reduce_gradient(g, inputs, out, attrs, needs, build):
    op, group = attrs["reduction"], attrs["group"]
    if op in ("sum", "mean"):  # d(sum_r x_r)/dx_r = 1: every rank's gradient is the sum of all of them
        return (all_reduce_of(build, g, op, group),)
    if op in ("max", "min"):  # the ranks holding the extreme share the total gradient evenly
        x = inputs[0]
        is_extreme = x == out
        count = all_reduce_of(build, is_extreme.to(g.dtype), "sum", group)
        total = all_reduce_of(build, g, "sum", group)
        return (mask(build, is_extreme, total / count),)
    raise UnsupportedOpError(f"all_reduce with op={op!r} has no gradient; use sum, mean, max or min")


register("all_reduce", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _all_reduce_infer, _all_reduce_reference, 1,
         "elementwise reduction (sum/mean/max/min/prod) of a tensor over the ranks of a group; every rank gets it",
         gradient=_all_reduce_gradient, runtime_call=describe("all_reduce"))


# ---- all_gather ----------------------------------------------------------------------------------------

def _all_gather_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    t, axis = types[0], attrs["axis"]
    _check_axis(axis, t)
    shape = list(t.shape)
    shape[axis] *= communicator.group_size(attrs["group"])
    return TensorType(tuple(shape), t.dtype)


def _all_gather_reference(inputs, attrs, out):
    return communicator.all_gather(inputs[0], attrs["axis"], attrs["group"])


def _all_gather_gradient(g, inputs, out, attrs, needs, build):
    # Rank r's block of the result is x_r on every rank: its gradient is the sum of those blocks' gradients.
    return (build.apply("reduce_scatter", [g], reduction="sum", axis=attrs["axis"], group=attrs["group"],
                        sequence=communicator.next_sequence()),)


register("all_gather", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _all_gather_infer, _all_gather_reference, 1,
         "every rank's tensor concatenated along `axis` in rank order, on every rank of a group",
         gradient=_all_gather_gradient, runtime_call=describe("all_gather"))


# ---- reduce_scatter -------------------------------------------------------------------------------------

def _reduce_scatter_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    t, axis = types[0], attrs["axis"]
    _check_reduction(attrs["reduction"], t)
    _check_axis(axis, t)
    size = communicator.group_size(attrs["group"])
    if t.shape[axis] % size:
        raise ShapeError(f"reduce_scatter along axis {axis} needs a length divisible by the group size {size}, "
                         f"got {t.shape[axis]}")
    shape = list(t.shape)
    shape[axis] //= size
    return TensorType(tuple(shape), t.dtype)


def _reduce_scatter_reference(inputs, attrs, out):
    return communicator.reduce_scatter(inputs[0], attrs["reduction"], attrs["axis"], attrs["group"])


def _reduce_scatter_gradient(g, inputs, out, attrs, needs, build):
    op, group = attrs["reduction"], attrs["group"]
    if op not in ("sum", "mean"):
        raise UnsupportedOpError(f"reduce_scatter with op={op!r} has no gradient; use sum or mean")
    gathered = build.apply("all_gather", [g], axis=attrs["axis"], group=group, sequence=communicator.next_sequence())
    return (gathered if op == "sum" else gathered / communicator.group_size(group),)


register("reduce_scatter", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _reduce_scatter_infer,
         _reduce_scatter_reference, 1,
         "reduction over the ranks of a group, rank r keeping the r-th of equal blocks along `axis`",
         gradient=_reduce_scatter_gradient, runtime_call=describe("reduce_scatter"))


# ---- broadcast ----------------------------------------------------------------------------------------

def _broadcast_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    ranks = communicator.group_ranks(attrs["group"])
    if attrs["root"] not in ranks:
        raise ShapeError(f"broadcast root {attrs['root']} is not a rank of the group {list(ranks)}")
    return types[0]


def _broadcast_reference(inputs, attrs, out):
    return communicator.broadcast(inputs[0], attrs["root"], attrs["group"])


def _broadcast_gradient(g, inputs, out, attrs, needs, build):
    # Only the root's tensor reaches the result: it gets every rank's gradient, the others none.
    total = all_reduce_of(build, g, "sum", attrs["group"])
    return (total * build.constant(1.0 if communicator.rank() == attrs["root"] else 0.0, g.dtype),)


register("broadcast", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _broadcast_infer, _broadcast_reference, 1,
         "the tensor of rank `root` on every rank of a group", gradient=_broadcast_gradient,
         runtime_call=describe("broadcast"))


# ---- point-to-point messages ------------------------------------------------------------------------

TOKEN = TensorType((), dt.int32)  # what orders messages: send's result, recv's `after` operand
_messages = itertools.count(1)  # numbers messages apart (not shared across ranks, unlike `sequence`)


def next_message() -> int:
    """A number for the next message recorded in a graph (keeps CSE from merging two of them)."""
    return next(_messages)


def _send_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    if types[1] != TOKEN:
        raise ShapeError(f"send's second operand is the previous message's token ({TOKEN}), got {types[1]}")
    return TOKEN


def _send_reference(inputs, attrs, out):
    communicator.send(inputs[0], attrs["peer"], attrs["tag"], attrs["group"])
    return np.zeros((), np.int32)


def _recv_infer(types: list[TensorType], attrs: Attrs) -> TensorType:
    if types[0] != TOKEN:
        raise ShapeError(f"recv's operand is the previous message's token ({TOKEN}), got {types[0]}")
    return TensorType(tuple(attrs["shape"]), dt.as_dtype(attrs["dtype"]))


def _recv_reference(inputs, attrs, out):
    buffer = np.empty(tuple(attrs["shape"]), dt.as_dtype(attrs["dtype"]).storage)
    return communicator.recv(buffer, attrs["peer"], attrs["tag"], attrs["group"])


register("send", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _send_infer, _send_reference, 2,
         "sends a tensor to world rank `peer` (tag `tag`) after the message whose token it takes; "
         "its result is this message's token", gradient=NOT_DIFFERENTIABLE, runtime_call=describe("send"))
register("recv", OpKind.REDUCTION, MappingType.MANY_TO_MANY, _recv_infer, _recv_reference, 1,
         "a tensor of `shape` and `dtype` received from world rank `peer` (tag `tag`) after the message "
         "whose token it takes", gradient=NOT_DIFFERENTIABLE, runtime_call=describe("recv"))
