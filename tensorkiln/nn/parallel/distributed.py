"""DistributedDataParallel: the same model on every rank, each on its share of the batch.

As torch.nn.parallel.DistributedDataParallel: wrapping broadcasts the
parameters and buffers of rank 0 (the group's first rank) to every rank, so all
replicas start equal; `.module` is the wrapped model; after each backward the
gradients are averaged over the ranks, bucket by bucket (buckets.py), so every
replica takes the same optimizer step. Eagerly the buckets' all-reduces are all
started before the first is waited for; inside a tk.jit training step each
bucket is one all_reduce node of the step's graph, reading only its own
gradients, started as soon as they are computed (kernels/overlap.py). Without
`bucket_cap_mb` the bucket size comes from the alpha-beta model of the link
(cost_model.bucket_bytes_for), measured by a short ping-pong when wrapping
where MPI progresses in the background (else one bucket).
`no_sync()` skips the averaging for the backward passes inside it
(gradient accumulation): the gradients they add up locally are averaged with
the first backward after it, as torch's.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

from ... import dtypes as dt
from ...distributed import ProcessGroup, all_reduce, world_size
from ...distributed.cost_model import Network, bucket_bytes_for
from ...distributed.ping_pong import QUICK_SIZES, measure_network
from ...distributed.process import _group
from ...distributed.wait_policy import progresses_in_background
from ...frontend.autodiff.mode import is_grad_enabled
from ...frontend.autodiff.tape import queue_after_backward, set_grad
from ...frontend.creation import zeros_like
from ...frontend.tensor import Tensor
from ...runtime import communicator
from ..modules.module import Module
from .buckets import (Bucket, flatten_arrays, flatten_tensors, plan_buckets, unflatten_arrays,
                      unflatten_tensor)


class DistributedDataParallel(Module):
    """Data parallelism over the ranks of `process_group` (all ranks by default)."""

    def __init__(self, module: Module, process_group: ProcessGroup | None = None,
                 bucket_cap_mb: float | None = None, broadcast_buffers: bool = True, device_ids=None,
                 output_device=None, dim: int = 0, network: Network | None = None):
        """bucket_cap_mb: the most megabytes of gradients per all-reduce; None: the alpha-beta model's
        size for `network` (None: measured between the group's first two ranks now)."""
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel wraps a tk.nn.Module, got {type(module).__name__}")
        if bucket_cap_mb is not None and bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.module = module
        self.process_group = process_group
        trainable = [p for p in module.parameters() if p.requires_grad]
        self.network = network
        if bucket_cap_mb is None:
            cap_bytes = self._modelled_bucket_bytes(sum(p.numel() * p.dtype.itemsize for p in trainable))
        else:
            cap_bytes = int(bucket_cap_mb * 2 ** 20)
        self.bucket_cap_mb = cap_bytes / 2 ** 20
        self.buckets = plan_buckets(trainable, cap_bytes)
        self._sync_queued = False
        self._require_sync = True  # False inside no_sync()
        tensors = list(module.parameters()) + (list(module.buffers()) if broadcast_buffers else [])
        broadcast_from_first_rank(tensors, _group(process_group))

    def _modelled_bucket_bytes(self, total_bytes: int) -> int:
        """The bucket size the alpha-beta model gives (one bucket on one rank, and where MPI moves bytes
        only inside its calls: then several buckets hide nothing and cost a latency and two runtime
        calls each)."""
        group = _group(self.process_group)
        if communicator.group_size(group) == 1 or not progresses_in_background():
            return max(total_bytes, 1)
        if self.network is None:
            self.network, _ = measure_network(QUICK_SIZES, repeats=10, group=group)
        return bucket_bytes_for(total_bytes, self.network)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes of forwards run inside this block keep their gradients local (accumulated);
        the first backward of a forward outside it averages the sum over the ranks."""
        previous = self._require_sync
        self._require_sync = False
        try:
            yield
        finally:
            self._require_sync = previous

    def forward(self, *args, **kwargs):
        if is_grad_enabled() and self.buckets and self._require_sync and not self._sync_queued:
            queue_after_backward(self._average_gradients)
            self._sync_queued = True
        return self.module(*args, **kwargs)

    def _average_gradients(self) -> None:
        """Replace every gradient by its mean over the ranks (run after backward)."""
        self._sync_queued = False
        group = _group(self.process_group)
        if world_size(self.process_group) == 1:
            return
        grads = [[p.grad if p.grad is not None else zeros_like(p) for p in b.params] for b in self.buckets]
        if any(g.is_traced for bucket in grads for g in bucket):
            for bucket, bucket_grads in zip(self.buckets, grads):
                _average_traced(bucket, bucket_grads, self.process_group)
        else:
            _average_eager(self.buckets, grads, group)


def _average_traced(bucket: Bucket, grads: list[Tensor], group: ProcessGroup | None) -> None:
    mean = all_reduce(flatten_tensors(grads), "mean", group)
    for p, g in zip(bucket.params, unflatten_tensor(mean, [tuple(p.shape) for p in bucket.params])):
        set_grad(p, g)


def _average_eager(buckets: list[Bucket], grads: list[list[Tensor]], group: tuple[int, ...]) -> None:
    started = []
    for bucket, bucket_grads in zip(buckets, grads):  # every bucket on the wire before the first wait
        flat = flatten_arrays([dt.to_compute(g._value, g.dtype) for g in bucket_grads])
        started.append(communicator.start_all_reduce(flat, "mean", group))
    for bucket, pending in zip(buckets, started):
        mean = pending.wait()
        for p, piece in zip(bucket.params, unflatten_arrays(mean, [tuple(p.shape) for p in bucket.params])):
            set_grad(p, Tensor._from_value(dt.to_storage(piece, p.dtype), p.dtype))


def broadcast_from_first_rank(tensors: list[Tensor], group: tuple[int, ...]) -> None:
    """Overwrite each eager tensor with the value the group's first rank holds (one message per dtype)."""
    if communicator.group_size(group) == 1:
        return
    root = communicator.group_ranks(group)[0]
    by_dtype: dict[str, list[Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t._value.dtype.str, []).append(t)
    for key in sorted(by_dtype):  # the same order on every rank
        same = by_dtype[key]
        flat = communicator.broadcast(flatten_arrays([t._value for t in same]), root, group)
        for t, piece in zip(same, unflatten_arrays(flat, [tuple(t.shape) for t in same])):
            t._value = np.array(piece)
