"""tk.nn.functional: neural-network operations with PyTorch's names and signatures.

Every function here is a composition of primitive ops; the ones a later layer
recognises (softmax, layer_norm, attention, ...) are marked with @composite so
the nodes they create carry the composite's name. One file per family:
activations, convolution (and linear), pooling, normalization, attention,
losses, padding (and lookup), dropout; arguments holds the helpers they share.
"""
from __future__ import annotations

from ...frontend.tensor import Tensor, tensor_methods
from ..sampling import affine_grid, grid_sample  # torch.nn.functional's spatial sampling
from .activations import (elu, gelu, hardsigmoid, hardswish, hardtanh, leaky_relu, log_softmax, relu, relu6, sigmoid,
                          silu, softmax, softplus, tanh)
from .attention import causal_mask, scaled_dot_product_attention
from .convolution import conv2d, conv3d, conv_transpose, linear
from .dropout import dropout, new_dropout_seed
from .losses import cross_entropy, l1_loss, mse_loss, nll_loss
from .normalization import batch_norm, layer_norm, normalize
from .padding import embedding, one_hot, pad
from .pooling import (adaptive_avg_pool2d, adaptive_pool_matrix, avg_pool2d, max_pool2d, pool_divisors,
                      run_time_window_counts)


@tensor_methods
class TensorNN:
    """Tensor's neural-network methods (added to Tensor: tensor.py is below this module)."""

    __slots__ = ()

    def softmax(self, dim: int = -1, dtype=None) -> Tensor:
        return softmax(self, dim, dtype=dtype)

    def log_softmax(self, dim: int = -1, dtype=None) -> Tensor:
        return log_softmax(self, dim, dtype=dtype)

    def gelu(self, approximate: str = "none") -> Tensor:
        return gelu(self, approximate=approximate)

    def silu(self) -> Tensor:
        return silu(self)

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        return softplus(self, beta, threshold)


__all__ = ["adaptive_avg_pool2d", "adaptive_pool_matrix", "affine_grid", "avg_pool2d", "batch_norm", "causal_mask",
           "conv2d", "conv3d", "conv_transpose", "cross_entropy", "dropout", "elu", "embedding", "gelu", "grid_sample",
           "hardsigmoid", "hardswish", "hardtanh", "l1_loss", "layer_norm", "leaky_relu", "linear", "log_softmax",
           "max_pool2d", "mse_loss", "new_dropout_seed", "nll_loss", "normalize", "one_hot", "pad", "pool_divisors",
           "relu", "relu6", "run_time_window_counts", "scaled_dot_product_attention", "sigmoid", "silu", "softmax",
           "softplus", "tanh"]
