"""tk.nn.functional against hand-written references derived from PyTorch's documented semantics.

References are plain numpy in float64 (nested loops for pooling, explicit
math for attention, norms and losses). Composites round a 16-bit result after
every primitive, so 16-bit cases use COMPOSITE_FACTOR (see helpers.py).
Every composite is also run through tk.jit and must agree with eager exactly.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special

import tensorkiln as tk
import tensorkiln.nn.functional as F

from helpers import FRONT_END, COMPOSITE_FACTOR, FLOAT_DTYPES, assert_close, eager_and_jit, make_tensor, stored

pytestmark = FRONT_END

SHAPES = [(5,), (2, 3), (3, 1, 4), (1, 1), (2, 0, 3), ()]


def _factor(dtype):
    return COMPOSITE_FACTOR if dtype.bits == 16 else 1.0


def _softmax(v, axis):
    with np.errstate(all="ignore"):
        e = np.exp(v - np.max(v, axis=axis, keepdims=True, initial=-np.inf))
        return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(v, axis):
    m = np.max(v, axis=axis, keepdims=True, initial=-np.inf)
    return v - m - np.log(np.exp(v - m).sum(axis=axis, keepdims=True))


# ---- activations -------------------------------------------------------------------------------

def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


ACTIVATIONS = {
    "relu": (lambda x: F.relu(x), lambda v: np.maximum(v, 0)),
    "sigmoid": (lambda x: F.sigmoid(x), _sigmoid),
    "tanh": (lambda x: F.tanh(x), np.tanh),
    "gelu": (lambda x: F.gelu(x), lambda v: 0.5 * v * (1 + scipy.special.erf(v / math.sqrt(2)))),
    "gelu_method": (lambda x: x.gelu(), lambda v: 0.5 * v * (1 + scipy.special.erf(v / math.sqrt(2)))),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))),
    "silu": (lambda x: F.silu(x), lambda v: v * _sigmoid(v)),
    "silu_method": (lambda x: x.silu(), lambda v: v * _sigmoid(v)),
    "softplus": (lambda x: F.softplus(x), lambda v: np.where(v > 20, v, np.log1p(np.exp(v)))),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.0, threshold=3.0),
                      lambda v: np.where(2 * v > 3, v, np.log1p(np.exp(2 * v)) / 2)),
    "softplus_method": (lambda x: x.softplus(0.5), lambda v: np.where(0.5 * v > 20, v, np.log1p(np.exp(0.5 * v)) / 0.5)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), lambda v: np.where(v >= 0, v, 0.1 * v)),
    "elu": (lambda x: F.elu(x, alpha=1.5), lambda v: np.where(v > 0, v, 1.5 * (np.exp(v) - 1))),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 2.0), lambda v: np.clip(v, -0.5, 2.0)),
    "relu6": (lambda x: F.relu6(x), lambda v: np.clip(v, 0, 6)),
    "hardsigmoid": (lambda x: F.hardsigmoid(x), lambda v: np.clip(v / 6 + 0.5, 0, 1)),
    "hardswish": (lambda x: F.hardswish(x), lambda v: v * np.clip(v + 3, 0, 6) / 6),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(name, dtype, rng):
    fn, reference = ACTIVATIONS[name]
    for shape in SHAPES:
        x, v = make_tensor(rng, shape, dtype, -8, 8, "transpose")
        out = eager_and_jit(fn, x)
        assert out.shape == shape and out.dtype is dtype
        with np.errstate(over="ignore"):
            assert_close(out, reference(v), dtype, factor=_factor(dtype))


def test_activations_on_integer_inputs_compute_in_float32():
    x = tk.tensor([-2, 0, 3])
    for fn in (F.gelu, F.silu, F.softplus, F.elu, F.hardsigmoid, F.sigmoid, F.tanh):
        assert fn(x).dtype is tk.float32
    assert F.relu(x).dtype is tk.int64


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(tk.zeros(2), approximate="fast")


def test_softplus_is_stable_for_large_inputs():
    x = tk.tensor([-1000.0, -30.0, 0.0, 30.0, 1000.0])
    with np.errstate(all="raise"):
        out = F.softplus(x, threshold=1e9).numpy()
    np.testing.assert_allclose(out, [0.0, np.log1p(np.exp(-30.0)), np.log(2), 30.0, 1000.0], rtol=1e-6)


# ---- softmax / log_softmax ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("which", ["softmax", "log_softmax"])
def test_softmax_log_softmax(which, dtype, rng):
    reference = _softmax if which == "softmax" else _log_softmax
    for shape in [(5,), (2, 3), (3, 1, 4), (2, 0, 3), (4, 1)]:
        x, v = make_tensor(rng, shape, dtype, -6, 6, "transpose")
        for dim in range(-len(shape), len(shape)):
            with np.errstate(all="ignore"):
                expected = reference(v, dim)
            assert_close(eager_and_jit(lambda t: getattr(F, which)(t, dim), x), expected, dtype, factor=_factor(dtype))
            assert_close(getattr(x, which)(dim), expected, dtype, factor=_factor(dtype))
            assert_close(getattr(tk, which)(x, dim), expected, dtype, factor=_factor(dtype))


def test_softmax_default_dim_dtype_and_int_input():
    x = tk.tensor([[1, 2, 3]])
    assert x.softmax().dtype is tk.float32
    assert_close(x.softmax(), _softmax(np.array([[1.0, 2, 3]]), -1), tk.float32)
    out = tk.tensor([[1.0, 2.0]]).softmax(-1, dtype=tk.float64)
    assert out.dtype is tk.float64
    assert F.log_softmax(tk.tensor([1.0, 2.0], dtype=tk.float16), 0, dtype=tk.float32).dtype is tk.float32


def test_softmax_is_stable_and_handles_masked_entries():
    x = tk.tensor([[1000.0, 1000.0, -np.inf], [-1e30, 0.0, 1e30], [-np.inf, -np.inf, -np.inf]])
    with np.errstate(all="ignore"):
        out = x.softmax(-1).numpy()
        logp = x.log_softmax(-1).numpy()
    np.testing.assert_allclose(out[0], [0.5, 0.5, 0.0])
    np.testing.assert_allclose(out[1], [0.0, 0.0, 1.0])
    assert np.isnan(out[2]).all()  # a fully masked row is nan, as in PyTorch
    np.testing.assert_allclose(logp[0], [np.log(0.5), np.log(0.5), -np.inf])


# ---- layer_norm / batch_norm ---------------------------------------------------------------------

def _layer_norm(v, normalized_ndim, w=None, b=None, eps=1e-5):
    axes = tuple(range(v.ndim - normalized_ndim, v.ndim))
    mu = v.mean(axis=axes, keepdims=True)
    var = ((v - mu) ** 2).mean(axis=axes, keepdims=True)
    out = (v - mu) / np.sqrt(var + eps)
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape, normalized", [((4, 6), 6), ((2, 3, 5), (5,)), ((2, 3, 4), (3, 4)), ((7,), (7,)),
                                               ((3, 1), 1), ((0, 4), 4)])
def test_layer_norm(shape, normalized, dtype, rng):
    x, v = make_tensor(rng, shape, dtype, -3, 3, "transpose")
    nshape = (normalized,) if isinstance(normalized, int) else normalized
    w, wv = make_tensor(rng, nshape, dtype, 0.5, 1.5)
    b, bv = make_tensor(rng, nshape, dtype, -1, 1)
    f = _factor(dtype) * (2 if dtype.bits == 16 else 1)
    assert_close(eager_and_jit(lambda t: F.layer_norm(t, normalized), x), _layer_norm(v, len(nshape)), dtype, factor=f)
    assert_close(eager_and_jit(lambda t, ww, bb: F.layer_norm(t, normalized, ww, bb, eps=1e-3), x, w, b),
                 _layer_norm(v, len(nshape), wv, bv, 1e-3), dtype, factor=f)


def test_layer_norm_shape_error():
    with pytest.raises(tk.ShapeError, match=r"layer_norm: normalized_shape \[3\] does not match .* \[2, 4\]"):
        F.layer_norm(tk.zeros(2, 4), 3)
    with pytest.raises(tk.ShapeError):
        F.layer_norm(tk.zeros(4), (2, 4))


@pytest.mark.parametrize("dtype", [tk.float32, tk.float64, tk.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_eval(shape, dtype, rng):
    c = shape[1]
    x, v = make_tensor(rng, shape, dtype, -3, 3, "transpose")
    rm, rmv = make_tensor(rng, (c,), dtype, -1, 1)
    rv, rvv = make_tensor(rng, (c,), dtype, 0.5, 2)
    w, wv = make_tensor(rng, (c,), dtype, 0.5, 1.5)
    b, bv = make_tensor(rng, (c,), dtype, -1, 1)
    bshape = (1, c) + (1,) * (len(shape) - 2)
    expected = (v - rmv.reshape(bshape)) / np.sqrt(rvv.reshape(bshape) + 1e-5) * wv.reshape(bshape) + bv.reshape(bshape)
    out = eager_and_jit(lambda t, a, bb, cc, dd: F.batch_norm(t, a, bb, cc, dd), x, rm, rv, w, b)
    assert_close(out, expected, dtype, factor=_factor(dtype))
    plain = (v - rmv.reshape(bshape)) / np.sqrt(rvv.reshape(bshape) + 1e-3)
    assert_close(F.batch_norm(x, rm, rv, eps=1e-3), plain, dtype, factor=_factor(dtype))


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_training_uses_batch_stats_and_updates_running_stats(shape, rng):
    c = shape[1]
    x, v = make_tensor(rng, shape, tk.float64, -3, 3)
    axes = (0,) + tuple(range(2, len(shape)))
    bshape = (1, c) + (1,) * (len(shape) - 2)
    mu, var = v.mean(axis=axes), v.var(axis=axes)
    running_mean, running_var = tk.zeros(c, dtype=tk.float64), tk.ones(c, dtype=tk.float64)
    w = tk.tensor(np.linspace(0.5, 1.5, c))
    out = F.batch_norm(x, running_mean, running_var, w, None, training=True, momentum=0.2)
    expected = (v - mu.reshape(bshape)) / np.sqrt(var.reshape(bshape) + 1e-5) * np.linspace(0.5, 1.5, c).reshape(bshape)
    assert_close(out, expected, tk.float64)
    n = v.size // c
    assert_close(running_mean, 0.8 * 0 + 0.2 * mu, tk.float64)
    assert_close(running_var, 0.8 * 1 + 0.2 * var * n / (n - 1), tk.float64)  # unbiased, as PyTorch
    # no running stats: batch statistics only, and traceable
    assert_close(eager_and_jit(lambda t: F.batch_norm(t, None, None, training=True), x),
                 (v - mu.reshape(bshape)) / np.sqrt(var.reshape(bshape) + 1e-5), tk.float64)


def test_batch_norm_errors():
    with pytest.raises(ValueError, match="running_mean and running_var are required"):
        F.batch_norm(tk.zeros(2, 3), None, None)
    with pytest.raises(tk.ShapeError, match=r"per-channel tensor of shape \[3\], got \[4\]"):
        F.batch_norm(tk.zeros(2, 3), tk.zeros(4), tk.ones(3))
    with pytest.raises(tk.ShapeError):
        F.batch_norm(tk.zeros(3), tk.zeros(3), tk.ones(3))


def test_batch_norm_training_under_jit_updates_running_stats_like_eager(rng):
    x = tk.tensor(rng.normal(size=(4, 3, 2)))
    eager_mean, eager_var = tk.zeros(3, dtype=tk.float64), tk.ones(3, dtype=tk.float64)
    jit_mean, jit_var = tk.zeros(3, dtype=tk.float64), tk.ones(3, dtype=tk.float64)

    @tk.jit(opt_level=0)
    def train_step(t):
        return F.batch_norm(t, jit_mean, jit_var, training=True)

    for _ in range(2):  # the update is applied on every call, not only while tracing
        expected = F.batch_norm(x, eager_mean, eager_var, training=True)
        np.testing.assert_array_equal(train_step(x).numpy(), expected.numpy())
        np.testing.assert_array_equal(jit_mean.numpy(), eager_mean.numpy())
        np.testing.assert_array_equal(jit_var.numpy(), eager_var.numpy())
    assert train_step.cache_size() == 1


# ---- scaled dot-product attention ----------------------------------------------------------------

def _attention(q, k, v, mask=None, is_causal=False, scale=None, gqa=False):
    """softmax(q k^T * scale + mask) v by its definition (PyTorch's math reference)."""
    if gqa and q.shape[-3] != k.shape[-3]:
        groups = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, groups, axis=-3), np.repeat(v, groups, axis=-3)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("...le,...se->...ls", q, k) * scale
    length, source = q.shape[-2], k.shape[-2]
    if is_causal:
        scores = np.where(np.tril(np.ones((length, source), bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    return np.einsum("...ls,...sv->...lv", _softmax(scores, -1), v)


ATTENTION_CASES = [
    # (q shape, k shape, v shape, kwargs)
    ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5), {}),
    ((4, 8), (6, 8), (6, 8), {}),
    ((1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), {"is_causal": True}),
    ((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), {"is_causal": True}),   # L < S: tril of the (L, S) matrix
    ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3), {"scale": 0.3}),
    ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3), {"mask": "bool"}),
    ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3), {"mask": "float"}),
    ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3), {"mask": "bool-broadcast"}),
    ((1, 4, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3), {"enable_gqa": True}),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{sorted(c[3].items())}")
def test_scaled_dot_product_attention(case, dtype, rng):
    qs, ks, vs, kwargs = case
    q, qv = make_tensor(rng, qs, dtype, -1, 1, "transpose")
    k, kv = make_tensor(rng, ks, dtype, -1, 1)
    v, vv = make_tensor(rng, vs, dtype, -1, 1, "strided")
    kwargs = dict(kwargs)
    mask_kind = kwargs.pop("mask", None)
    mask = mask_np = None
    length, source = qs[-2], ks[-2]
    if mask_kind == "bool":
        mask_np = rng.random(qs[:-1] + (source,)) < 0.7
        mask_np[..., 0] = True  # keep every row partly visible
        mask = tk.tensor(mask_np)
    elif mask_kind == "bool-broadcast":
        mask_np = np.tril(np.ones((length, source), bool), k=1)
        mask = tk.tensor(mask_np)
    elif mask_kind == "float":
        mask, mask_np = make_tensor(rng, (length, source), dtype, -2, 0)
    expected = _attention(qv, kv, vv, mask_np, kwargs.get("is_causal", False), kwargs.get("scale"),
                          kwargs.get("enable_gqa", False))
    out = eager_and_jit(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=mask, **kwargs), q, k, v)
    assert out.dtype is dtype and out.shape == expected.shape
    assert_close(out, expected, dtype, factor=_factor(dtype) * (2 if dtype.bits == 16 else 1))


def test_attention_errors():
    with pytest.raises(tk.ShapeError, match=r"query \[2, 4\], key \[3, 5\] and value \[3, 4\] do not fit"):
        F.scaled_dot_product_attention(tk.zeros(2, 4), tk.zeros(3, 5), tk.zeros(3, 4))
    with pytest.raises(ValueError, match="dropout_p"):
        F.scaled_dot_product_attention(tk.zeros(2, 4), tk.zeros(2, 4), tk.zeros(2, 4), dropout_p=0.1)


# ---- losses ------------------------------------------------------------------------------------------

def _cross_entropy(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """PyTorch's cross_entropy (docs + LossNLL.cpp): logits (N, C, ...) or (C,), class indices or probabilities."""
    class_axis = 1 if x.ndim >= 2 else 0
    n_classes = x.shape[class_axis]
    logp = _log_softmax(x, class_axis)
    w = np.ones(n_classes) if weight is None else weight
    wshape = [1] * x.ndim
    wshape[class_axis] = n_classes
    wb = w.reshape(wshape)
    if target.dtype.kind == "f":  # probabilities
        probs = target * (1 - label_smoothing) + label_smoothing / n_classes
        loss = -(probs * logp * wb).sum(axis=class_axis)
        if reduction == "none":
            return loss
        return loss.sum() if reduction == "sum" else loss.sum() / (x.size / n_classes)
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(logp, np.expand_dims(safe, class_axis), class_axis).squeeze(class_axis)
    w_target = np.where(valid, w[safe], 0.0)
    nll = -picked * w_target
    smooth = np.where(valid, -(logp * wb).sum(axis=class_axis), 0.0)
    loss = (1 - label_smoothing) * nll + label_smoothing / n_classes * smooth
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w_target.sum()


CE_CASES = [
    # (logits shape, kwargs)
    ((4, 5), {}),
    ((4, 5), {"reduction": "sum"}),
    ((4, 5), {"reduction": "none"}),
    ((4, 5), {"weight": True}),
    ((4, 5), {"weight": True, "reduction": "none"}),
    ((6, 3), {"ignore_index": 1}),
    ((6, 3), {"ignore_index": -100, "ignored": True}),
    ((6, 3), {"ignore_index": 2, "weight": True}),
    ((4, 5), {"label_smoothing": 0.1}),
    ((4, 5), {"label_smoothing": 0.2, "weight": True}),
    ((4, 5), {"label_smoothing": 0.2, "weight": True, "reduction": "sum"}),
    ((6, 4), {"label_smoothing": 0.3, "ignore_index": 0, "weight": True}),
    ((6, 4), {"label_smoothing": 0.3, "ignore_index": 0, "reduction": "none"}),
    ((2, 4, 3, 2), {}),
    ((2, 4, 3, 2), {"weight": True, "ignore_index": 1, "label_smoothing": 0.1}),
    ((5,), {}),
    ((5,), {"label_smoothing": 0.25, "weight": True}),
    ((4, 5), {"probs": True}),
    ((4, 5), {"probs": True, "weight": True, "reduction": "sum"}),
    ((4, 5), {"probs": True, "label_smoothing": 0.1, "reduction": "none"}),
    ((2, 3, 4), {"probs": True, "weight": True, "label_smoothing": 0.2}),
    ((5,), {"probs": True}),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", CE_CASES, ids=lambda c: f"{c[0]}-{sorted(c[1].items())}")
def test_cross_entropy(case, dtype, rng):
    shape, kwargs = case
    kwargs = dict(kwargs)
    probs, use_weight, ignored = kwargs.pop("probs", False), kwargs.pop("weight", False), kwargs.pop("ignored", False)
    x, xv = make_tensor(rng, shape, dtype, -3, 3, "transpose")
    class_axis = 1 if len(shape) >= 2 else 0
    n_classes = shape[class_axis]
    target_shape = shape[:class_axis] + shape[class_axis + 1:]
    if probs:
        raw = rng.random(shape)
        tv = raw / raw.sum(axis=class_axis, keepdims=True)
        target, tv = tk.tensor(tv, dtype=dtype), stored(tv, dtype)
    else:
        tv = rng.integers(0, n_classes, size=target_shape)
        if ignored and tv.size:
            tv.reshape(-1)[::2] = -100
        target = tk.tensor(tv)
    weight = wv = None
    if use_weight:
        weight, wv = make_tensor(rng, (n_classes,), dtype, 0.2, 2.0)
    expected = _cross_entropy(xv, tv, wv, **kwargs)
    out = eager_and_jit(lambda a, b: F.cross_entropy(a, b, weight, **kwargs), x, target)
    assert out.dtype is dtype
    assert_close(out, expected, dtype, factor=_factor(dtype) * (2 if dtype.bits == 16 else 1))


def test_cross_entropy_int32_targets_and_int_logits():
    logits = np.array([[1, 2, 3], [3, 0, 0]])
    target = np.array([2, 0], dtype=np.int32)
    out = F.cross_entropy(tk.tensor(logits), tk.tensor(target))
    assert out.dtype is tk.float32
    assert_close(out, _cross_entropy(logits.astype(float), target), tk.float32)


def test_cross_entropy_errors():
    with pytest.raises(IndexError, match="target 5 is out of range for 3 classes"):
        F.cross_entropy(tk.zeros(2, 3), tk.tensor([0, 5]))
    with pytest.raises(tk.ShapeError, match=r"target shape \[3\] does not match input \[2, 3\]"):
        F.cross_entropy(tk.zeros(2, 3), tk.tensor([0, 1, 2]))
    with pytest.raises(tk.ShapeError, match="probability target shape"):
        F.cross_entropy(tk.zeros(2, 3), tk.zeros(2, 4))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(tk.zeros(2, 3), tk.tensor([0, 1]), reduction="avg")


def test_cross_entropy_all_ignored_is_nan():
    out = F.cross_entropy(tk.zeros(2, 3), tk.tensor([-100, -100]))
    assert np.isnan(out.item())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction, rng):
    logp = _log_softmax(rng.normal(size=(5, 4)), 1)
    target = np.array([0, 3, -100, 1, 3])
    weight = np.array([0.5, 1.0, 2.0, 1.5])
    out = F.nll_loss(tk.tensor(logp), tk.tensor(target), tk.tensor(weight), reduction=reduction)
    valid = target != -100
    safe = np.where(valid, target, 0)
    losses = np.where(valid, -logp[np.arange(5), safe] * weight[safe], 0.0)
    expected = {"none": losses, "sum": losses.sum(), "mean": losses.sum() / np.where(valid, weight[safe], 0).sum()}
    assert_close(out, expected[reduction], tk.float64)
    with pytest.raises(tk.DTypeError, match="integers"):
        F.nll_loss(tk.tensor(logp), tk.tensor(target.astype(float)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_l1(reduction, dtype, rng):
    a, av = make_tensor(rng, (3, 4), dtype)
    b, bv = make_tensor(rng, (4,), dtype)
    for fn, ref in ((F.mse_loss, (av - bv) ** 2), (F.l1_loss, np.abs(av - bv))):
        expected = {"none": ref, "sum": ref.sum(), "mean": ref.mean()}[reduction]
        assert_close(fn(a, b, reduction=reduction), expected, dtype, factor=_factor(dtype))


# ---- pooling --------------------------------------------------------------------------------------

def _pool_out(size, k, s, p, d, ceil_mode):
    """Output length (PyTorch's pooling_output_shape)."""
    span = size + 2 * p - d * (k - 1) - 1
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + p:
        n -= 1
    return n


def _max_pool2d(x, kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's max_pool2d by loops: max over in-bounds window cells, flat h*W+w index of the first max."""
    n, c, h, w = x.shape
    oh = _pool_out(h, kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
    ow = _pool_out(w, kernel[1], stride[1], padding[1], dilation[1], ceil_mode)
    values = np.full((n, c, oh, ow), -np.inf)
    indices = np.full((n, c, oh, ow), -1, dtype=np.int64)
    for b in range(n):
        for ch in range(c):
            for i in range(oh):
                for j in range(ow):
                    for u in range(kernel[0]):
                        for v in range(kernel[1]):
                            r = i * stride[0] - padding[0] + u * dilation[0]
                            q = j * stride[1] - padding[1] + v * dilation[1]
                            if 0 <= r < h and 0 <= q < w and x[b, ch, r, q] > values[b, ch, i, j]:
                                values[b, ch, i, j] = x[b, ch, r, q]
                                indices[b, ch, i, j] = r * w + q
    return values, indices


def _avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
    """PyTorch's avg_pool2d CPU kernel by loops."""
    n, c, h, w = x.shape
    oh = _pool_out(h, kernel[0], stride[0], padding[0], 1, ceil_mode)
    ow = _pool_out(w, kernel[1], stride[1], padding[1], 1, ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * stride[0] - padding[0], j * stride[1] - padding[1]
            he, we = min(hs + kernel[0], h + padding[0]), min(ws + kernel[1], w + padding[1])
            pool_size = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            total = x[:, :, hs:he, ws:we].sum(axis=(2, 3))
            if divisor_override:
                divisor = divisor_override
            elif count_include_pad:
                divisor = pool_size
            else:
                divisor = (he - hs) * (we - ws)
            out[:, :, i, j] = total / divisor
    return out


POOL_CASES = [
    # (input shape, kernel, stride, padding, dilation, ceil_mode)
    ((1, 1, 4, 4), 2, None, 0, 1, False),
    ((2, 3, 7, 6), 3, 2, 1, 1, False),
    ((2, 3, 7, 6), 3, 2, 1, 1, True),
    ((1, 2, 5, 5), 2, 3, 0, 1, True),
    ((1, 2, 6, 5), 2, 2, 0, 1, True),
    ((1, 1, 8, 7), (3, 2), (2, 1), (1, 0), 1, False),
    ((1, 1, 8, 7), (3, 2), (2, 3), (1, 1), 1, True),
    ((1, 2, 9, 9), 3, 2, 1, 2, False),
    ((1, 2, 9, 8), 3, 2, 1, (2, 1), True),
    ((2, 5, 5), 2, 1, 1, 1, False),                 # unbatched
    ((1, 1, 3, 3), 3, 1, 0, 1, False),
    ((1, 1, 2, 2), 1, 1, 0, 1, False),
]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool2d(case, dtype, rng):
    shape, kernel, stride, padding, dilation, ceil_mode = case
    x, v = make_tensor(rng, shape, dtype, -3, 3, "transpose")
    v4 = v if len(shape) == 4 else v[None]
    values, indices = _max_pool2d(v4, _pair(kernel), _pair(stride if stride is not None else kernel),
                                  _pair(padding), _pair(dilation), ceil_mode)
    if len(shape) == 3:
        values, indices = values[0], indices[0]
    out = eager_and_jit(lambda t: F.max_pool2d(t, kernel, stride, padding, dilation, ceil_mode), x)
    assert_close(out, values, dtype)
    out_values, out_indices = eager_and_jit(
        lambda t: F.max_pool2d(t, kernel, stride, padding, dilation, ceil_mode, return_indices=True), x)
    assert_close(out_values, values, dtype)
    assert_close(out_indices, indices, tk.int64)


def test_max_pool2d_indices_take_first_max_on_ties():
    x = tk.ones(1, 1, 4, 4)
    _, idx = F.max_pool2d(x, 2, return_indices=True)
    assert idx.numpy().reshape(-1).tolist() == [0, 2, 8, 10]


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[4] == 1], ids=str)
def test_avg_pool2d(case, dtype, count_include_pad, rng):
    shape, kernel, stride, padding, _, ceil_mode = case
    x, v = make_tensor(rng, shape, dtype, -3, 3, "strided")
    v4 = v if len(shape) == 4 else v[None]
    expected = _avg_pool2d(v4, _pair(kernel), _pair(stride if stride is not None else kernel), _pair(padding),
                           ceil_mode, count_include_pad)
    expected = expected if len(shape) == 4 else expected[0]
    out = eager_and_jit(lambda t: F.avg_pool2d(t, kernel, stride, padding, ceil_mode, count_include_pad), x)
    assert_close(out, expected, dtype, factor=_factor(dtype))


def test_avg_pool2d_divisor_override_and_int_input(rng):
    v = rng.integers(0, 10, size=(1, 2, 5, 5))
    out = F.avg_pool2d(tk.tensor(v), 2, 2, 1, divisor_override=3)
    assert out.dtype is tk.float32
    assert_close(out, _avg_pool2d(v.astype(float), (2, 2), (2, 2), (1, 1), False, True, divisor_override=3),
                 tk.float32)


def test_adaptive_avg_pool2d_none_keeps_a_dimension(rng):
    v = rng.normal(size=(1, 2, 5, 6))
    assert_close(F.adaptive_avg_pool2d(tk.tensor(v), (None, 4)), _adaptive_avg_pool2d(v, (5, 4)), tk.float64)
    assert_close(F.adaptive_avg_pool2d(tk.tensor(v), [3, None]), _adaptive_avg_pool2d(v, (3, 6)), tk.float64)


def test_pool_errors():
    with pytest.raises(tk.ShapeError, match="stride and dilation must be positive"):
        F.avg_pool2d(tk.zeros(1, 1, 4, 4), 2, 0)
    with pytest.raises(tk.ShapeError, match="must be positive"):
        F.max_pool2d(tk.zeros(1, 1, 4, 4), 2, dilation=0)
    with pytest.raises(tk.ShapeError, match="padding 2 must be at most half of kernel size 3"):
        F.max_pool2d(tk.zeros(1, 1, 5, 5), 3, padding=2)
    with pytest.raises(tk.ShapeError, match="does not fit"):
        F.avg_pool2d(tk.zeros(1, 1, 2, 2), 3)
    with pytest.raises(tk.ShapeError, match="3-d or 4-d"):
        F.max_pool2d(tk.zeros(4, 4), 2)


def _adaptive_avg_pool2d(x, out_hw):
    """PyTorch's adaptive_avg_pool2d: window i covers [floor(i*H/oh), ceil((i+1)*H/oh))."""
    h, w = x.shape[-2:]
    oh, ow = out_hw
    out = np.zeros(x.shape[:-2] + (oh, ow))
    for i in range(oh):
        hs, he = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            ws, we = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[..., i, j] = x[..., hs:he, ws:we].mean(axis=(-2, -1))
    return out


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape, out_size", [((2, 3, 5, 7), (3, 4)), ((1, 2, 6, 6), (3, 2)), ((1, 1, 4, 4), 1),
                                             ((2, 4, 4), (2, 2)), ((1, 1, 3, 5), (5, 7)), ((1, 2, 7, 3), (2, 3)),
                                             ((1, 1, 10, 10), 3), ((1, 1, 6, 5), (4, 5))])
def test_adaptive_avg_pool2d(shape, out_size, dtype, rng):
    x, v = make_tensor(rng, shape, dtype, -3, 3, "transpose")
    expected = _adaptive_avg_pool2d(v, _pair(out_size))
    out = eager_and_jit(lambda t: F.adaptive_avg_pool2d(t, out_size), x)
    assert out.dtype is dtype
    assert_close(out, expected, dtype, factor=_factor(dtype) * (2 if dtype.bits == 16 else 1))


# ---- lookup and normalization helpers -------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
def test_embedding(dtype, rng):
    table, tv = make_tensor(rng, (7, 3), dtype)
    for index_shape in [(), (4,), (2, 5), (0,)]:
        index = rng.integers(0, 7, size=index_shape)
        assert_close(eager_and_jit(lambda t, i: F.embedding(i, t), table, tk.tensor(index)), tv[index], dtype)
    with pytest.raises(IndexError):
        F.embedding(tk.tensor([7]), table)
    with pytest.raises(tk.DTypeError):
        F.embedding(tk.tensor([1.0]), table)


def test_one_hot():
    out = F.one_hot(tk.tensor([0, 2, 1]))
    assert out.dtype is tk.int64 and out.tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    assert F.one_hot(tk.tensor([[1]]), 4).tolist() == [[[0, 1, 0, 0]]]


@pytest.mark.parametrize("p, dim", [(2.0, 1), (1.0, 0), (3.0, -1)])
def test_normalize(p, dim, rng):
    v = rng.normal(size=(3, 4))
    v[0] = 0.0  # the eps clamp keeps an all-zero row at zero
    norm = (np.abs(v) ** p).sum(axis=dim, keepdims=True) ** (1 / p)
    assert_close(F.normalize(tk.tensor(v), p, dim), v / np.maximum(norm, 1e-12), tk.float64)
