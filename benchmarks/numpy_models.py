"""The demo models written in plain numpy: the baseline `compiled_vs_numpy.py` calls "numpy".

Each function takes a DemoModel's parameters (tensorkiln/tools/demo_models.py)
and its input as numpy arrays and computes the same math with numpy's own
vectorized operations, as a numpy user would write it: matrix products through
numpy's BLAS, convolutions as a sliding-window tensordot, no tensorkiln code on
the timed path.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.special import erf  # numpy has no erf; exact GELU needs it


def _array(t) -> np.ndarray:
    return t.numpy()


def numpy_model(model):
    """A plain-numpy function computing `model` (a DemoModel) on numpy inputs."""
    builders = {"mlp": _mlp, "cnn": _cnn, "transformer": _transformer}
    return builders[model.name](model.params)


def _mlp(params):
    layers = [(_array(w).T.copy(), _array(b)) for w, b in params["layers"]]

    def forward(x):
        for k, (wt, b) in enumerate(layers):
            x = x @ wt + b
            if k < len(layers) - 1:
                x = np.maximum(x, 0)
        return x
    return forward


def _conv3x3(x, w, b):
    """3x3 convolution with padding 1: windows of the padded input against the weights."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(padded, (3, 3), axis=(2, 3))  # (N, C, H, W, 3, 3)
    out = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))  # (N, H, W, O)
    return out.transpose(0, 3, 1, 2) + b[:, None, None]


def _cnn(params):
    blocks = [{k: _array(v) for k, v in block.items()} for block in params["blocks"]]
    fc_wt, fc_b = _array(params["fc_w"]).T.copy(), _array(params["fc_b"])

    def forward(x):
        for p in blocks:
            x = _conv3x3(x, p["w"], p["b"])
            scale = p["gamma"] / np.sqrt(p["var"] + 1e-5)
            x = (x - p["mean"][:, None, None]) * scale[:, None, None] + p["beta"][:, None, None]
            x = np.maximum(x, 0)
            n, c, h, w = x.shape
            x = x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
        return x.reshape(x.shape[0], -1) @ fc_wt + fc_b
    return forward


def _layer_norm(x, weight, bias):
    mean = x.mean(-1, keepdims=True)
    centered = x - mean
    return centered / np.sqrt((centered * centered).mean(-1, keepdims=True) + 1e-5) * weight + bias


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _transformer(params):
    p = {k: _array(v) for k, v in params.items() if k != "heads"}
    heads = params["heads"]

    def forward(x):
        b, s, dim = x.shape
        hd = dim // heads
        h = _layer_norm(x, p["ln1_w"], p["ln1_b"])
        qkv = (h @ p["qkv_w"].T + p["qkv_b"]).reshape(b, s, 3, heads, hd).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv
        attn = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)) @ v
        x = x + attn.transpose(0, 2, 1, 3).reshape(b, s, dim) @ p["out_w"].T + p["out_b"]
        h = _layer_norm(x, p["ln2_w"], p["ln2_b"])
        u = h @ p["fc1_w"].T + p["fc1_b"]
        u = 0.5 * u * (1.0 + erf(u / np.sqrt(2.0)))
        return x + u @ p["fc2_w"].T + p["fc2_b"]
    return forward
