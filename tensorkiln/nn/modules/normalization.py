"""BatchNorm2d and LayerNorm."""
from __future__ import annotations

from ... import dtypes as dt
from ...frontend.creation import ones, zeros
from ...frontend.tensor import as_tensor
from .. import functional as F
from .module import Module, Parameter


class BatchNorm2d(Module):
    """Batch normalization over (N, H, W) per channel.

    Training mode normalizes with the batch statistics and updates the running
    ones in place (running_var with the unbiased batch variance); eval mode
    uses the running statistics. Works inside compiled training steps: the
    buffer updates become graph outputs written back after each call.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, dtype=dt.float32):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(ones(num_features, dtype=dtype)) if affine else None
        self.bias = Parameter(zeros(num_features, dtype=dtype)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", as_tensor(0, dt.int64))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def _check_input_dim(self, input) -> None:
        if input.ndim != 4:
            raise ValueError(f"BatchNorm2d expects a 4-d input (N, C, H, W), got shape {list(input.shape)}")

    def forward(self, input):
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / self.num_batches_tracked.to(input.dtype)
        use_batch_stats = self.training or not self.track_running_stats
        return F.batch_norm(input, self.running_mean if not self.training or self.track_running_stats else None,
                            self.running_var if not self.training or self.track_running_stats else None,
                            self.weight, self.bias, use_batch_stats, momentum, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


class LayerNorm(Module):
    """Normalize over the trailing normalized_shape dims, with elementwise weight and bias."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 dtype=dt.float32):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.weight = Parameter(ones(*shape, dtype=dtype)) if elementwise_affine else None
        self.bias = Parameter(zeros(*shape, dtype=dtype)) if elementwise_affine and bias else None

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"
