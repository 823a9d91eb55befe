"""Collectives on tensors: all_reduce, all_gather, reduce_scatter, broadcast.

Each returns a new tensor (the functional form: the argument is left as it
was) and works eagerly and inside tk.jit, where it is a graph op; gradients
flow through them (ir/ops/collective.py). Every rank of the group must make
the same calls in the same order, as with MPI.
"""
from __future__ import annotations

from ..errors import DistributedError
from ..frontend.tensor import Tensor, apply, as_tensor, normalize_dim
from ..runtime import communicator
from .process import ProcessGroup, _group


class ReduceOp:
    """The reductions, by torch.distributed's names (plain strings are accepted too)."""

    SUM = "sum"
    AVG = "mean"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    PRODUCT = "prod"


def _reduction(op) -> str:
    name = str(op).lower()
    name = {"avg": "mean", "product": "prod"}.get(name, name)
    if name not in communicator.REDUCE_OPS:
        raise DistributedError(f"{communicator.where()}: unknown reduction {op!r}; one of "
                               f"{', '.join(communicator.REDUCE_OPS)}")
    return name


def all_reduce(tensor, op=ReduceOp.SUM, group: ProcessGroup | None = None) -> Tensor:
    """The elementwise sum (mean, max, min, prod) of `tensor` over the group's ranks, on every rank."""
    return apply("all_reduce", [as_tensor(tensor)], reduction=_reduction(op), group=_group(group),
                 sequence=communicator.next_sequence())


def all_gather(tensor, dim: int = 0, group: ProcessGroup | None = None) -> Tensor:
    """Every rank's tensor concatenated along `dim` in rank order (torch's all_gather_into_tensor)."""
    x = as_tensor(tensor)
    return apply("all_gather", [x], axis=normalize_dim(dim, x.ndim, "all_gather"), group=_group(group),
                 sequence=communicator.next_sequence())


def reduce_scatter(tensor, op=ReduceOp.SUM, dim: int = 0, group: ProcessGroup | None = None) -> Tensor:
    """The reduction over the ranks, split into equal blocks along `dim`: rank r gets block r."""
    x = as_tensor(tensor)
    return apply("reduce_scatter", [x], reduction=_reduction(op), axis=normalize_dim(dim, x.ndim, "reduce_scatter"),
                 group=_group(group), sequence=communicator.next_sequence())


def broadcast(tensor, src: int = 0, group: ProcessGroup | None = None) -> Tensor:
    """World rank `src`'s tensor, on every rank of the group."""
    return apply("broadcast", [as_tensor(tensor)], root=int(src), group=_group(group),
                 sequence=communicator.next_sequence())
