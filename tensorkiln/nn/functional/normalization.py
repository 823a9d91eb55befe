"""layer_norm, batch_norm (with its running statistics) and normalize."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError, at_user_line
from ...frontend.autodiff.mode import no_grad
from ...frontend.functions import mean, var
from ...frontend.tensor import Tensor, as_tensor
from ...frontend.trace import composite
from .arguments import _floating


@composite("layer_norm")
def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing `normalized_shape` dims, then scale and shift."""
    x = _floating(as_tensor(input))
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape or len(shape) > x.ndim:
        raise ShapeError(at_user_line(f"layer_norm: normalized_shape {list(shape)} does not match "
                                      f"the trailing dims of input {list(x.shape)}"))
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    mu = mean(x, dims, True)
    centered = x - mu
    variance = mean(centered * centered, dims, True)
    out = centered * (variance + eps).rsqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


@composite("batch_norm")
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalization over dim 1; in training mode uses batch statistics and updates running ones."""
    x = _floating(as_tensor(input))
    if x.ndim < 2:
        raise ShapeError(at_user_line(f"batch_norm: expects (N, C, ...) input, got {list(x.shape)}"))
    c = x.shape[1]
    stat_shape = (1, c) + (1,) * (x.ndim - 2)

    def per_channel(t):
        t = as_tensor(t)
        if tuple(t.shape) != (c,):
            raise ShapeError(at_user_line(f"batch_norm: expected per-channel tensor of shape [{c}], "
                                          f"got {list(t.shape)}"))
        return t.reshape(stat_shape)

    if training:
        dims = (0,) + tuple(range(2, x.ndim))
        mu = mean(x, dims, True)
        variance = var(x, dims, correction=0, keepdim=True)
        if running_mean is not None or running_var is not None:
            _update_running_stats(x, mu, variance, running_mean, running_var, momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are required when training=False")
        mu, variance = per_channel(running_mean), per_channel(running_var)
    out = (x - mu) * (variance + eps).rsqrt()
    if weight is not None:
        out = out * per_channel(weight)
    if bias is not None:
        out = out + per_channel(bias)
    return out


def _update_running_stats(x, mu, variance, running_mean, running_var, momentum):
    """Exponential moving averages, as PyTorch (running_var uses the unbiased batch variance).

    The statistics are updated in place; inside tk.jit the update is recorded
    and becomes a graph output written back into the buffers after each call.
    """
    count = x.numel() // x.shape[1]
    with no_grad():
        for stat, batch in ((running_mean, mu), (running_var, variance * (count / max(count - 1, 1)))):
            if stat is None:
                continue
            stat = as_tensor(stat)
            new = stat._inplace() * (1.0 - momentum) + batch.reshape(-1).to(stat.dtype) * momentum
            stat.copy_(new)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along `dim`."""
    x = _floating(as_tensor(input))
    norm = (x.abs() ** p).sum(dim, keepdim=True) ** (1.0 / p)
    return x / norm.clamp(min=eps)
