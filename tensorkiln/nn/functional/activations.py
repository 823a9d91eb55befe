"""Activations and the softmax family, with PyTorch's names and signatures."""
from __future__ import annotations

import math

from ...frontend.functions import where
from ...frontend.tensor import Tensor, normalize_dim
from ...frontend.trace import composite
from .arguments import _floating


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


@composite("gelu")
def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU, exact (erf) or with PyTorch's tanh approximation."""
    x = _floating(input)
    if approximate == "none":
        return 0.5 * x * (1.0 + (x * (1.0 / math.sqrt(2.0))).erf())
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + inner.tanh())
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


@composite("silu")
def silu(input: Tensor, inplace: bool = False) -> Tensor:
    x = _floating(input)
    return x * x.sigmoid()


@composite("softplus")
def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, linear above `threshold` like PyTorch."""
    x = _floating(input)
    z = x * beta
    smooth = (z.relu() + (-z.abs()).exp().log1p()) * (1.0 / beta)  # log1p: exp(-|z|) may be tiny
    return where(z > threshold, x, smooth)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return where(input >= 0, input, input * negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    x = _floating(input)
    return where(x > 0, x, alpha * (x.exp() - 1.0))


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    return input.clamp(min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return input.clamp(0, 6)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return (_floating(input) * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return input * hardsigmoid(input)


def _shifted_rows(input: Tensor, dim: int | None, dtype, op: str) -> tuple[Tensor, int] | tuple[None, Tensor]:
    """x - max(x) along `dim` (stable softmax), or (None, x) when the axis is empty."""
    x = _floating(input.to(dtype) if dtype is not None else input)
    d = normalize_dim(-1 if dim is None else dim, x.ndim, op)
    if x.ndim and x.shape[d] == 0:  # nothing to normalize (and no max of an empty axis)
        return None, x
    return x - x.amax(d, keepdim=True), d


@composite("softmax")
def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim`, computed stably (max subtracted first)."""
    shifted, d = _shifted_rows(input, dim, dtype, "softmax")
    if shifted is None:
        return d
    e = shifted.exp()
    return e / e.sum(d, keepdim=True)


@composite("log_softmax")
def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    """log(softmax(x)) along `dim`, computed stably."""
    shifted, d = _shifted_rows(input, dim, dtype, "log_softmax")
    if shifted is None:
        return d
    return shifted - shifted.exp().sum(d, keepdim=True).log()
