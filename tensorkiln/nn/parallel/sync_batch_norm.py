"""SyncBatchNorm: batch normalization whose training statistics cover the batch of every rank.

As torch.nn.SyncBatchNorm. With data parallelism each rank sees a shard of the
batch; plain batch norm would normalize each shard by its own statistics, so
the model trained on N ranks would differ from the one trained on the whole
batch. Here, in training mode, the per-channel mean and variance are those of
the global batch: one all-reduce of (element count, per-channel sums) gives
the mean, a second one of the per-channel sums of squared deviations from it
gives the variance (two passes, as numerically safe as one process's). Both
all-reduces are graph ops with gradients (an all-reduce's gradient is an
all-reduce), so backward, eager or compiled, flows through the statistics of
every rank as torch's does. Running statistics take the global mean and the
unbiased global variance. Eval mode, a group of one rank, or a process
without tensorkiln.distributed initialized, is BatchNorm.
"""
from __future__ import annotations

from ...distributed import ProcessGroup, all_reduce, is_initialized, world_size
from ...frontend.autodiff.mode import no_grad
from ...frontend.creation import full
from ...frontend.functions import cat
from ...frontend.tensor import as_tensor
from ..modules.module import Module
from ..modules.normalization import BatchNorm2d


class SyncBatchNorm(BatchNorm2d):
    """Batch normalization over dim 1 of (N, C, ...) inputs, with statistics over all ranks of `process_group`."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group: ProcessGroup | None = None, **kwargs):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, **kwargs)
        self.process_group = process_group

    def _check_input_dim(self, input) -> None:
        if input.ndim < 2:
            raise ValueError(f"SyncBatchNorm expects an (N, C, ...) input, got shape {list(input.shape)}")

    def forward(self, input):
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or not is_initialized() or world_size(self.process_group) == 1:
            return super().forward(input)
        self._check_input_dim(input)
        x = as_tensor(input)
        if x.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm({self.num_features}): input has {x.shape[1]} channels "
                             f"(shape {list(x.shape)})")
        dims = (0,) + tuple(range(2, x.ndim))
        channels = self.num_features
        local_count = x.numel() // channels
        totals = all_reduce(cat([full((1,), float(local_count), dtype=x.dtype), x.sum(dims)]), "sum",
                            self.process_group)
        count = totals[0]
        stat_shape = (1, channels) + (1,) * (x.ndim - 2)
        mean = (totals[1:] / count).reshape(stat_shape)
        centered = x - mean
        variance = (all_reduce((centered * centered).sum(dims), "sum", self.process_group) / count).reshape(stat_shape)
        if self.training and self.track_running_stats:
            self._update_running_stats(mean, variance, count)
        out = centered * (variance + self.eps).rsqrt()
        if self.weight is not None:
            out = out * self.weight.reshape(stat_shape)
        if self.bias is not None:
            out = out + self.bias.reshape(stat_shape)
        return out

    def _update_running_stats(self, mean, variance, count) -> None:
        self.num_batches_tracked.add_(1)
        momentum = self.momentum
        with no_grad():
            if momentum is None:  # cumulative moving average
                momentum = 1.0 / self.num_batches_tracked.to(mean.dtype)
            unbiased = variance.reshape(-1) * (count / (count - 1.0))
            for stat, batch in ((self.running_mean, mean.reshape(-1)), (self.running_var, unbiased)):
                stat.copy_(stat._inplace() * (1.0 - momentum) + batch.to(stat.dtype) * momentum)

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group: ProcessGroup | None = None) -> Module:
        """`module` with every BatchNorm2d replaced by a SyncBatchNorm holding the same parameters and
        running statistics (the module itself when it is one), as torch's classmethod."""
        if isinstance(module, BatchNorm2d) and not isinstance(module, SyncBatchNorm):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            if module.affine:
                converted.weight, converted.bias = module.weight, module.bias
            if module.track_running_stats:
                converted.running_mean, converted.running_var = module.running_mean, module.running_var
                converted.num_batches_tracked = module.num_batches_tracked
            converted.train(module.training)
            return converted
        for name, child in list(module.named_children()):
            setattr(module, name, cls.convert_sync_batchnorm(child, process_group))
        return module
