"""Lowerings of PyTorch's random ops onto tensorkiln's Philox numbers (ir/ops/random.py).

Each op transforms uniform [0, 1) or standard normal numbers drawn under the
graph's per-call key (random_key.py): exponential by inversion, Cauchy by the
tangent, log-normal as exp of a normal, geometric by the logarithm's ratio,
Bernoulli and dropout by comparing a uniform number with the probability. The
distributions are PyTorch's; the values are not (PyTorch's CPU generator is a
Mersenne twister), as with Inductor, whose generated code has its own generator.
A `generator=` argument is refused: the numbers would not come from it.
"""
from __future__ import annotations

import math

import torch

from ... import dtypes as dt
from ...frontend.functions import where
from ...frontend.random import philox
from ...frontend.tensor import Tensor, as_tensor
from .lowering import _dtype, register_lowering
from .lowering_scan import sort_indices
from .random_key import next_stream

aten = torch.ops.aten


def _no_generator(node) -> str | None:
    generator = node.kwargs.get("generator")
    return "an explicit generator= (tensorkiln draws from its own Philox streams)" if generator is not None else None


def _draw(shape, dtype, distribution: str = "uniform") -> Tensor:
    """Numbers of `shape` (float64 for a float64 result, else float32; the converter casts to the node's dtype)."""
    key, stream = next_stream()
    width = dt.float64 if dtype == dt.float64 else dt.float32
    return philox(key, 0, tuple(int(d) for d in shape), width, distribution, stream)


def _float_dtype(dtype, like: Tensor | None = None):
    if dtype is not None:
        return _dtype(dtype)
    return like.dtype if like is not None and like.dtype.is_floating else dt.float32


@register_lowering(aten.rand.default, check=_no_generator)
def rand(size, *, dtype=None, **_):
    return _draw(size, _float_dtype(dtype))


@register_lowering(aten.randn.default, check=_no_generator)
def randn(size, *, dtype=None, **_):
    return _draw(size, _float_dtype(dtype), "normal")


@register_lowering(aten.rand_like.default, check=_no_generator)
def rand_like(x, *, dtype=None, **_):
    return _draw(x.shape, _float_dtype(dtype, x))


@register_lowering(aten.randn_like.default, check=_no_generator)
def randn_like(x, *, dtype=None, **_):
    return _draw(x.shape, _float_dtype(dtype, x), "normal")


def _integers(low, high, shape) -> Tensor:
    """Uniform integers in [low, high): floor(low + u * (high - low)) in float64, below high."""
    if high <= low:
        raise ValueError(f"random integers: need low < high, got [{low}, {high})")
    u = _draw(shape, dt.float64)
    return (u * float(high - low) + float(low)).floor().clamp(max=float(high - 1)).to(dt.int64)


@register_lowering(aten.randint_like.default, check=_no_generator)
def randint_like(x, high, *, dtype=None, **_):
    return _integers(0, int(high), x.shape)


@register_lowering(aten.randint_like.low_dtype, check=_no_generator)
def randint_like_low(x, low, high, *, dtype=None, **_):
    return _integers(int(low), int(high), x.shape)


@register_lowering(aten.randint.default, check=_no_generator)
def randint(high, size, *, dtype=None, **_):
    return _integers(0, int(high), size)


@register_lowering(aten.randint.low, check=_no_generator)
def randint_low(low, high, size, *, dtype=None, **_):
    return _integers(int(low), int(high), size)


@register_lowering(aten.uniform.default, check=_no_generator)
def uniform(x, low=0.0, high=1.0, *, generator=None):
    return _draw(x.shape, x.dtype) * (high - low) + low


@register_lowering(aten.normal_functional.default, check=_no_generator)
def normal_functional(x, mean=0.0, std=1.0, *, generator=None):
    return _draw(x.shape, x.dtype, "normal") * std + mean


def _broadcast_shape(*values) -> tuple:
    shapes = [tuple(v.shape) for v in values if isinstance(v, Tensor)]
    return tuple(torch.broadcast_shapes(*shapes)) if shapes else ()


@register_lowering(aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor,
                   check=_no_generator)
def normal(mean, std=1.0, *, generator=None):
    like = mean if isinstance(mean, Tensor) else std
    return _draw(_broadcast_shape(mean, std), like.dtype, "normal") * std + mean


@register_lowering(aten.normal.float_float, check=_no_generator)
def normal_sized(mean, std, size, *, dtype=None, **_):
    return _draw(size, _float_dtype(dtype), "normal") * std + mean


@register_lowering(aten.exponential.default, check=_no_generator)
def exponential(x, lambd=1.0, *, generator=None):
    # 1 - u is in (0, 1]: the logarithm is finite
    return -(1.0 - _draw(x.shape, x.dtype)).log() / lambd


@register_lowering(aten.geometric.default, check=_no_generator)
def geometric(x, p, *, generator=None):
    # trials until the first success: ceil(log(1 - u) / log(1 - p)), at least 1
    return ((1.0 - _draw(x.shape, dt.float64)).log() / math.log1p(-p)).ceil().clamp(min=1.0)


@register_lowering(aten.log_normal.default, check=_no_generator)
def log_normal(x, mean=1.0, std=2.0, *, generator=None):
    return (_draw(x.shape, x.dtype, "normal") * std + mean).exp()


@register_lowering(aten.cauchy.default, check=_no_generator)
def cauchy(x, median=0.0, sigma=1.0, *, generator=None):
    return (_draw(x.shape, x.dtype) - 0.5).mul(math.pi).tan() * sigma + median


@register_lowering(aten.bernoulli.default, check=_no_generator)
def bernoulli(x, *, generator=None):
    return (_draw(x.shape, x.dtype) < x).to(x.dtype)


@register_lowering(aten.bernoulli.p, check=_no_generator)
def bernoulli_p(x, p=0.5, *, generator=None):
    return (_draw(x.shape, x.dtype) < p).to(x.dtype)


@register_lowering(aten.native_dropout.default)
def native_dropout(x, p, train):
    """(output, mask): each element kept with probability 1 - p and scaled by 1 / (1 - p)."""
    if not train or p == 0:
        return x, as_tensor(True).expand(*x.shape) if x.shape else as_tensor(True)
    keep = _draw(x.shape, x.dtype) >= p
    scaled = x * (1.0 / (1.0 - p)) if p < 1 else x * 0.0
    return where(keep, scaled, 0.0).to(x.dtype), keep


@register_lowering(aten.rrelu_with_noise.default, check=_no_generator)
def rrelu_with_noise(x, noise, lower=1 / 8, upper=1 / 3, training=False, generator=None):
    """Leaky ReLU whose negative slope is uniform in [lower, upper] per element when training
    (the noise argument PyTorch also fills is not returned by this overload)."""
    if not training:
        return where(x >= 0, x, x * ((lower + upper) / 2))
    slope = _draw(x.shape, x.dtype) * (upper - lower) + lower
    return where(x >= 0, x, x * slope)


@register_lowering(aten.randperm.default, check=_no_generator)
def randperm(n, *, dtype=None, **_):
    """The order that sorts n uniform float64 numbers (53 bits: ties have probability below n**2 / 2**53)."""
    return sort_indices(_draw((int(n),), dt.float64), False)
