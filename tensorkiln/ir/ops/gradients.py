"""Gradient rules (vector-Jacobian products) of the primitive ops.

A rule has the signature `vjp(grad, inputs, output, attrs, needs, build)` and
returns one gradient per input (None: no gradient, e.g. for an index operand
or an input with `needs[i]` false). `build` is the front-end's `Build`: the
rules make new values only with `build.apply`, `build.constant` and
`build.zeros` and the tensors' own methods, so the same rule runs eagerly,
builds backward graphs inside tk.jit, and can itself be differentiated
(higher order: the rules use the forward tensors, which are on the tape).
`GRADIENTS` maps an op's name to its rule; the autodiff tape looks it up.

Conventions (as PyTorch): abs and relu have subgradient 0 at 0; sign, floor,
ceil, round and floor_div have gradient 0; max/min reductions split the
gradient evenly among tied maxima (minima), and maximum/minimum give half to
each operand on a tie; comparisons, argmax/argmin and boolean ops carry no
gradient. Broadcast operands get the gradient summed back to their shape.

Composite ops (softmax, layer_norm, attention, losses, pooling) need no rules:
they are compositions of these primitives.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ... import dtypes as dt
from .registry import get_op
from .winograd_math import weight_transform_inverse


class Build(Protocol):
    """What a gradient rule builds new tensors with; the front-end (the autodiff tape's caller) supplies it."""

    def apply(self, op: str, inputs: Sequence[Any], **attrs: Any) -> Any:
        """Primitive `op` on `inputs` (recorded on the tape like any operation)."""

    def constant(self, array, dtype=None) -> Any:
        """A constant tensor holding `array` (a scalar or numpy array), in `dtype` when given."""

    def zeros(self, shape, dtype) -> Any:
        """A tensor of zeros."""


# rule(grad, inputs, output, attrs, needs, build) -> one gradient (or None) per input
Rule = Callable[..., tuple]

GRADIENTS: dict[str, Rule] = {}


def register_gradient(op_name: str):
    """Decorator: make the function the gradient rule (vjp) of primitive `op_name`."""
    get_op(op_name)  # a registered op

    def decorate(rule):
        GRADIENTS[op_name] = rule
        return rule
    return decorate


# ---- helpers --------------------------------------------------------------------------------

def sum_to(build, g, shape):
    """Sum a broadcast gradient back to `shape`."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    if axes:
        g = build.apply("reduce_sum", [g], axes=axes, keepdims=True)
    return g.reshape(shape)


def _mask(build, condition, g):
    """g where condition, else 0."""
    return build.apply("where", [condition, g, build.constant(0, g.dtype)])


def _slice_axis(build, x, axis, start, stop, step=1):
    starts = [0] * x.ndim
    stops = list(x.shape)
    steps = [1] * x.ndim
    starts[axis], stops[axis], steps[axis] = start, stop, step
    return build.apply("slice", [x], starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))


def _pad_axis(build, x, axis, before, after):
    if not before and not after:
        return x
    pads = [(0, 0)] * x.ndim
    pads[axis] = (before, after)
    return build.apply("pad", [x], pads=tuple(pads), value=0.0)


def place(build, g, axis, start, step, size):
    """A tensor of `size` along `axis` holding g's elements at start, start+step, ... and zeros elsewhere."""
    length = g.shape[axis]
    if length == 0:
        shape = list(g.shape)
        shape[axis] = size
        return build.zeros(shape, g.dtype)
    if step > 1:  # interleave step-1 zeros after each element
        shape = tuple(g.shape)
        g = g.reshape(shape[:axis + 1] + (1,) + shape[axis + 1:])
        g = _pad_axis(build, g, axis + 1, 0, step - 1)
        g = g.reshape(shape[:axis] + (length * step,) + shape[axis + 1:])
        span = (length - 1) * step + 1
        g = _slice_axis(build, g, axis, 0, span)
    else:
        span = length
    return _pad_axis(build, g, axis, start, size - start - span)


def _keep_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _kept(t, in_shape, axes, keepdims):
    """A reduction's result (or its gradient) reshaped to keep the reduced axes as size 1."""
    return t if keepdims else t.reshape(_keep_shape(in_shape, axes))


def _register_all(names, rule):
    for name in names:
        register_gradient(name)(rule)


# ---- elementwise: unary -------------------------------------------------------------------

@register_gradient("neg")
def _neg(g, inputs, out, attrs, needs, build):
    return (-g,)


@register_gradient("abs")
def _abs(g, inputs, out, attrs, needs, build):
    return (g * inputs[0].sign(),)  # sign(0) = 0: subgradient 0 at 0


@register_gradient("relu")
def _relu(g, inputs, out, attrs, needs, build):
    return (_mask(build, inputs[0] > 0, g),)  # subgradient 0 at 0


@register_gradient("exp")
def _exp(g, inputs, out, attrs, needs, build):
    return (g * out,)


@register_gradient("log")
def _log(g, inputs, out, attrs, needs, build):
    return (g / inputs[0],)


@register_gradient("sqrt")
def _sqrt(g, inputs, out, attrs, needs, build):
    return (g / (out * 2.0),)


@register_gradient("rsqrt")
def _rsqrt(g, inputs, out, attrs, needs, build):
    return (g * (out * out * out) * -0.5,)


@register_gradient("reciprocal")
def _reciprocal(g, inputs, out, attrs, needs, build):
    return (-g * out * out,)


@register_gradient("sin")
def _sin(g, inputs, out, attrs, needs, build):
    return (g * inputs[0].cos(),)


@register_gradient("cos")
def _cos(g, inputs, out, attrs, needs, build):
    return (-g * inputs[0].sin(),)


@register_gradient("tanh")
def _tanh(g, inputs, out, attrs, needs, build):
    return (g * (1.0 - out * out),)


@register_gradient("erf")
def _erf(g, inputs, out, attrs, needs, build):
    x = inputs[0]
    return (g * (-(x * x)).exp() * (2.0 / math.sqrt(math.pi)),)


@register_gradient("sigmoid")
def _sigmoid(g, inputs, out, attrs, needs, build):
    return (g * out * (1.0 - out),)


def _zero_unary(g, inputs, out, attrs, needs, build):
    return (None,)


def _zero_binary(g, inputs, out, attrs, needs, build):
    return (None, None)


_register_all(("sign", "floor", "ceil", "round"), _zero_unary)  # piecewise constant: gradient 0
register_gradient("floor_div")(_zero_binary)


@register_gradient("cast")
def _cast(g, inputs, out, attrs, needs, build):
    x = inputs[0]
    return (g.to(x.dtype) if x.dtype.is_floating else None,)


# ---- elementwise: binary and where ---------------------------------------------------------

@register_gradient("add")
def _add(g, inputs, out, attrs, needs, build):
    a, b = inputs
    return (sum_to(build, g, a.shape) if needs[0] else None, sum_to(build, g, b.shape) if needs[1] else None)


@register_gradient("sub")
def _sub(g, inputs, out, attrs, needs, build):
    a, b = inputs
    return (sum_to(build, g, a.shape) if needs[0] else None, sum_to(build, -g, b.shape) if needs[1] else None)


@register_gradient("mul")
def _mul(g, inputs, out, attrs, needs, build):
    a, b = inputs
    return (sum_to(build, g * b, a.shape) if needs[0] else None, sum_to(build, g * a, b.shape) if needs[1] else None)


@register_gradient("div")
def _div(g, inputs, out, attrs, needs, build):
    a, b = inputs
    return (sum_to(build, g / b, a.shape) if needs[0] else None,
            sum_to(build, -g * a / (b * b), b.shape) if needs[1] else None)


@register_gradient("pow")
def _pow(g, inputs, out, attrs, needs, build):
    a, b = inputs
    ga = gb = None
    if needs[0]:  # b * a^(b-1), and 0 where b == 0 (no 0 * inf)
        ga = sum_to(build, _mask(build, b != 0, g * b * a ** (b - 1.0)), a.shape)
    if needs[1]:  # a^b log a, and 0 where a == 0 and b >= 0 (PyTorch's convention)
        gb = sum_to(build, _mask(build, ~((a == 0) & (b >= 0)), g * out * a.log()), b.shape)
    return ga, gb


@register_gradient("mod")
def _mod(g, inputs, out, attrs, needs, build):
    a, b = inputs
    return (sum_to(build, g, a.shape) if needs[0] else None,
            sum_to(build, -g * build.apply("floor_div", [a, b]), b.shape) if needs[1] else None)


def _extremum(first_wins: str):
    def rule(g, inputs, out, attrs, needs, build):
        a, b = inputs
        half = (a == b).to(g.dtype) * 0.5  # a tie gives half to each operand
        win_a = (a > b) if first_wins == "gt" else (a < b)
        ga = sum_to(build, g * (win_a.to(g.dtype) + half), a.shape) if needs[0] else None
        gb = sum_to(build, g * ((~win_a & (a != b)).to(g.dtype) + half), b.shape) if needs[1] else None
        return ga, gb
    return rule


register_gradient("maximum")(_extremum("gt"))
register_gradient("minimum")(_extremum("lt"))


@register_gradient("where")
def _where(g, inputs, out, attrs, needs, build):
    c, a, b = inputs
    zero = build.constant(0, g.dtype)
    return (None,
            sum_to(build, build.apply("where", [c, g, zero]), a.shape) if needs[1] else None,
            sum_to(build, build.apply("where", [c, zero, g]), b.shape) if needs[2] else None)


# ---- reductions --------------------------------------------------------------------------

@register_gradient("reduce_sum")
def _reduce_sum(g, inputs, out, attrs, needs, build):
    x = inputs[0]
    return (_kept(g, x.shape, attrs["axes"], attrs["keepdims"]).expand(x.shape),)


def _reduce_extremum(reached: str):
    """The rule of reduce_max (reached="ge") or reduce_min ("le"): ties split evenly, each of
    k equal extremes gets g / k."""
    def rule(g, inputs, out, attrs, needs, build):
        x = inputs[0]
        axes, keep = attrs["axes"], attrs["keepdims"]
        extreme = _kept(out, x.shape, axes, keep)
        count = build.apply("reduce_sum", [(x == extreme).to(g.dtype)], axes=axes, keepdims=True)
        share = _kept(g, x.shape, axes, keep) / count  # at the reduced shape: one division per extreme
        # x >= max (x <= min) holds exactly where x == the extreme. Spelt differently from the
        # count's mask, the two are not merged into one stored mask: each fuses into its reader
        # (max-pool backward is then a small count reduction and one elementwise kernel).
        return (_mask(build, build.apply(reached, [x, extreme]), share),)
    return rule


register_gradient("reduce_max")(_reduce_extremum("ge"))
register_gradient("reduce_min")(_reduce_extremum("le"))


@register_gradient("reduce_prod")
def _reduce_prod(g, inputs, out, attrs, needs, build):
    """d prod / d x_i = product of the others; exact with zeros (no division by a zero)."""
    x = inputs[0]
    axes, keep = attrs["axes"], attrs["keepdims"]
    is_zero = x == 0
    zero, one = build.constant(0, x.dtype), build.constant(1, x.dtype)
    safe = build.apply("where", [is_zero, one, x])
    zeros = build.apply("reduce_sum", [is_zero.to(x.dtype)], axes=axes, keepdims=True)
    others_nonzero = build.apply("reduce_prod", [safe], axes=axes, keepdims=True)
    out_k = _kept(out, x.shape, axes, keep)
    local = build.apply("where", [zeros == 0, out_k / safe,
                                  build.apply("where", [(zeros == 1) & is_zero, others_nonzero, zero])])
    return (_kept(g, x.shape, axes, keep) * local,)


# ---- movement ----------------------------------------------------------------------------

@register_gradient("reshape")
def _reshape(g, inputs, out, attrs, needs, build):
    return (g.reshape(inputs[0].shape),)


@register_gradient("permute")
def _permute(g, inputs, out, attrs, needs, build):
    perm = attrs["perm"]
    inverse = tuple(int(i) for i in np.argsort(perm))
    return (build.apply("permute", [g], perm=inverse),)


@register_gradient("expand")
def _expand(g, inputs, out, attrs, needs, build):
    return (sum_to(build, g, inputs[0].shape),)


@register_gradient("slice")
def _slice(g, inputs, out, attrs, needs, build):
    """Scatter back: zeros except at the selected positions (negative steps: flip, then place)."""
    x = inputs[0]
    for axis, (start, stop, step) in enumerate(zip(attrs["starts"], attrs["stops"], attrs["steps"])):
        n, length = x.shape[axis], g.shape[axis]
        if (start, stop, step) == (0, n, 1):
            continue
        if step < 0 and length:
            g = _slice_axis(build, g, axis, length - 1, -1, -1)  # reverse
            start, step = start + (length - 1) * step, -step
        g = place(build, g, axis, start if length else 0, step, n)
    return (g,)


@register_gradient("pad")
def _pad(g, inputs, out, attrs, needs, build):
    x = inputs[0]
    for axis, (lo, hi) in enumerate(attrs["pads"]):
        if lo or hi:
            g = _slice_axis(build, g, axis, lo, lo + x.shape[axis])
    return (g,)


@register_gradient("concat")
def _concat(g, inputs, out, attrs, needs, build):
    axis, offset, grads = attrs["axis"], 0, []
    for t, need in zip(inputs, needs):
        size = t.shape[axis]
        grads.append(_slice_axis(build, g, axis, offset, offset + size) if need else None)
        offset += size
    return tuple(grads)


def _one_hot(build, index, n, dtype):
    """(index.shape + (n,)) of dtype: 1 where the (wrapped) index equals the position."""
    idx = index.to(dt.int64) % n  # negative indices count from the end
    return (idx.unsqueeze(-1) == build.constant(np.arange(n, dtype=np.int64))).to(dtype)


@register_gradient("take")
def _take(g, inputs, out, attrs, needs, build):
    """Scatter-add of g into the taken rows, as a one-hot matmul (no scatter primitive needed)."""
    data, index = inputs
    axis, shape = attrs["axis"], tuple(data.shape)
    n, k = shape[axis], index.numel()
    if k == 0:
        return build.zeros(shape, g.dtype), None
    pre = int(np.prod(shape[:axis], dtype=np.int64))
    post = int(np.prod(shape[axis + 1:], dtype=np.int64))
    onehot = _one_hot(build, index.reshape(-1), n, g.dtype)  # (k, n)
    g3 = build.apply("permute", [g.reshape(pre, k, post)], perm=(0, 2, 1))  # (pre, post, k)
    scattered = build.apply("matmul", [g3, onehot])  # (pre, post, n)
    return build.apply("permute", [scattered], perm=(0, 2, 1)).reshape(shape), None


@register_gradient("gather")
def _gather(g, inputs, out, attrs, needs, build):
    """Scatter-add along `axis` through a one-hot comparison, then zero-pad to the input's shape."""
    data, index = inputs
    axis, ndim = attrs["axis"], data.ndim
    n = data.shape[axis]
    if index.numel() == 0:
        return build.zeros(data.shape, g.dtype), None
    contributions = build.apply("reduce_sum", [g.unsqueeze(-1) * _one_hot(build, index, n, g.dtype)], axes=(axis,),
                           keepdims=False)
    perm = tuple(range(axis)) + (ndim - 1,) + tuple(range(axis, ndim - 1))
    result = build.apply("permute", [contributions], perm=perm) if perm != tuple(range(ndim)) else contributions
    for d in range(ndim):
        if d != axis:
            result = _pad_axis(build, result, d, 0, data.shape[d] - result.shape[d])
    return result, None


@register_gradient("window")
def _window(g, inputs, out, attrs, needs, build):
    """Each window element goes back to its input position; overlapping windows add up."""
    x = inputs[0]
    kernel, stride, dilation = attrs["kernel"], attrs["stride"], attrs["dilation"]
    n = len(kernel)
    lead = x.ndim - n
    sizes = tuple(x.shape[lead:])
    outs = tuple(g.shape[lead:lead + n])
    if all(s == k for s, k in zip(stride, kernel)) and all(d == 1 for d in dilation):
        # Non-overlapping windows (pooling): interleave (out, kernel) pairs and pad the remainder.
        perm = tuple(range(lead)) + tuple(itertools.chain.from_iterable((lead + i, lead + n + i) for i in range(n)))
        tiled = build.apply("permute", [g], perm=perm).reshape(
            tuple(x.shape[:lead]) + tuple(o * k for o, k in zip(outs, kernel)))
        for i in range(n):
            tiled = _pad_axis(build, tiled, lead + i, 0, sizes[i] - outs[i] * kernel[i])
        return (tiled,)
    total = None
    for offsets in itertools.product(*(range(k) for k in kernel)):
        starts = (0,) * (lead + n) + offsets
        stops = tuple(g.shape[:lead + n]) + tuple(o + 1 for o in offsets)
        part = build.apply("slice", [g], starts=starts, stops=stops, steps=(1,) * g.ndim)
        part = part.reshape(tuple(g.shape[:lead + n]))
        for i in range(n):
            part = place(build, part, lead + i, offsets[i] * dilation[i], stride[i], sizes[i])
        total = part if total is None else total + part
    return (total,)


# ---- contractions ------------------------------------------------------------------------

@register_gradient("matmul")
def _matmul(g, inputs, out, attrs, needs, build):
    a, b = inputs
    ga = sum_to(build, build.apply("matmul", [g, b.transpose(-1, -2)]), a.shape) if needs[0] else None
    gb = sum_to(build, build.apply("matmul", [a.transpose(-1, -2), g]), b.shape) if needs[1] else None
    return ga, gb


@register_gradient("matmul_packed")
def _matmul_packed(g, inputs, out, attrs, needs, build):
    """matmul's rule on the K x N matrix the panels hold; B's gradient is packed like B."""
    a, panels = inputs
    count, k, nr = panels.shape
    n = attrs["n"]
    b = _slice_axis(build, build.apply("permute", [panels], perm=(1, 0, 2)).reshape(k, count * nr), 1, 0, n)
    ga, gb = _matmul(g, (a, b), out, {}, needs, build)
    if gb is not None:
        gb = build.apply("permute", [_pad_axis(build, gb, 1, 0, count * nr - n).reshape(k, count, nr)],
                         perm=(1, 0, 2))
    return ga, gb


@register_gradient("conv2d")
def _conv2d(g, inputs, out, attrs, needs, build):
    """Input: a transposed convolution (stride-dilated gradient, flipped and transposed weight);
    weight: windows of the padded input contracted with the gradient, per group."""
    x, w = inputs
    (sh, sw), (pt, pb, pl, pr) = attrs["stride"], attrs["padding"]
    (dh, dw), groups = attrs["dilation"], attrs["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = g.shape[2], g.shape[3]
    hp, wp = h + pt + pb, wd + pl + pr
    gx = gw = None
    if needs[0]:
        gd = place(build, g, 2, 0, sh, (oh - 1) * sh + 1) if sh > 1 else g
        gd = place(build, gd, 3, 0, sw, (ow - 1) * sw + 1) if sw > 1 else gd
        ph, pw = dh * (kh - 1), dw * (kw - 1)
        wt = build.apply("permute", [w.reshape(groups, og, cg, kh, kw)], perm=(0, 2, 1, 3, 4))
        wt = wt.reshape(groups * cg, og, kh, kw)
        wt = build.apply("slice", [wt], starts=(0, 0, kh - 1, kw - 1), stops=(groups * cg, og, -1, -1),
                    steps=(1, 1, -1, -1))  # flip the kernel
        # The full correlation pads gd by (ph, pw) and crops the forward padding off the result;
        # where that crop only removes padding, the convolution's own (smaller) padding does both at
        # once, so no padded copy of the gradient and no slice remain for the backend.
        crop = (ph - pt, h + ph - gd.shape[2] - (ph - pt), pw - pl, wd + pw - gd.shape[3] - (pw - pl))
        if min(crop) >= 0:
            gx = build.apply("conv2d", [gd, wt], stride=(1, 1), padding=crop, dilation=(dh, dw), groups=groups)
        else:
            gd = build.apply("pad", [gd], pads=((0, 0), (0, 0), (ph, hp - gd.shape[2]), (pw, wp - gd.shape[3])),
                        value=0.0)
            gx = build.apply("conv2d", [gd, wt], stride=(1, 1), padding=(0, 0, 0, 0), dilation=(dh, dw), groups=groups)
            if pt or pb or pl or pr:
                gx = build.apply("slice", [gx], starts=(0, 0, pt, pl), stops=(n, c, pt + h, pl + wd), steps=(1, 1, 1, 1))
    if needs[1]:
        xp = x
        if pt or pb or pl or pr:
            xp = build.apply("pad", [x], pads=((0, 0), (0, 0), (pt, pb), (pl, pr)), value=0.0)
        win = build.apply("window", [xp], kernel=(kh, kw), stride=(sh, sw), dilation=(dh, dw))  # (N,C,OH,OW,kh,kw)
        p, k = oh * ow, kh * kw
        # Transposed product (cg*k, n*p) @ (n*p, og): the windows, a gather with divisions by the
        # kernel size, are the left operand, which the GEMM packs a few rows at a time with scalar
        # loads; as the right operand they were packed by vector gathers, three times slower.
        a = build.apply("permute", [win.reshape(n, groups, cg, p, k)], perm=(1, 2, 4, 0, 3)).reshape(
            groups, cg * k, n * p)
        b = build.apply("permute", [g.reshape(n, groups, og, p)], perm=(1, 0, 3, 2)).reshape(groups, n * p, og)
        gwt = build.apply("matmul", [a, b]).reshape(groups, cg, kh, kw, og)
        gw = build.apply("permute", [gwt], perm=(0, 4, 1, 2, 3)).reshape(o, cg, kh, kw)
    return gx, gw


def _winograd_inverse(build, m: int, dtype):
    """pinv(G) (3 x n) of F(m x m, 3 x 3): w = pinv(G) U pinv(G)^T recovers the 3x3 weights."""
    return build.constant(weight_transform_inverse(m).astype(np.float32), dtype)


@register_gradient("conv2d_winograd")
def _conv2d_winograd(g, inputs, out, attrs, needs, build):
    """conv2d's rule on the weights U encodes (w = P U P^T, P = pinv(G)); U's gradient is P^T gw P.

    U comes in panels (e, ceil(K/MR), c, MR): unpacked to (e, c, K) first, and
    its gradient packed back the same way (zero in the lanes past K).
    """
    x, panels = inputs
    m, k = attrs["m"], attrs["out_channels"]
    e, count, c, mr = panels.shape
    n = m + 2
    p = _winograd_inverse(build, m, panels.dtype)
    u = build.apply("permute", [panels], perm=(0, 2, 1, 3)).reshape(e, c, count * mr)
    u = _slice_axis(build, u, 2, 0, k) if count * mr != k else u
    u4 = build.apply("permute", [u.reshape(n, n, c, k)], perm=(2, 3, 0, 1))  # [c, k, i, j]
    w = build.apply("permute", [p @ u4 @ p.transpose(0, 1)], perm=(1, 0, 2, 3))  # [k, c, r, s]
    conv_attrs = {"groups": 1, "stride": (1, 1), "padding": attrs["padding"], "dilation": (1, 1)}
    gx, gw = _conv2d(g, (x, w), None, conv_attrs, needs, build)
    gu = None
    if gw is not None:
        gw4 = build.apply("permute", [gw], perm=(1, 0, 2, 3))  # [c, k, r, s]
        gu = build.apply("permute", [p.transpose(0, 1) @ gw4 @ p], perm=(2, 3, 0, 1)).reshape(e, c, k)
        gu = _pad_axis(build, gu, 2, 0, count * mr - k).reshape(e, c, count, mr)
        gu = build.apply("permute", [gu], perm=(0, 2, 1, 3))
    return gx, gu


@register_gradient("conv2d_nchwc")
def _conv2d_nchwc(g, inputs, out, attrs, needs, build):
    """conv2d's rule on the unblocked operands, the gradients blocked again like the operands."""
    x, w = inputs
    kblocks, cblocks, kh, kw, cb, kb = w.shape
    groups = attrs.get("groups", 1)
    if x.ndim == 5:
        n, xblocks, h, wd, xb = x.shape
        x_plain = x.permute(0, 1, 4, 2, 3).reshape(n, xblocks * xb, h, wd)
    else:
        x_plain = x
    w_plain = w.permute(0, 5, 1, 4, 2, 3).reshape(kblocks * kb, cblocks * cb, kh, kw)
    g_plain = g if g.ndim == 4 else g.permute(0, 1, 4, 2, 3).reshape(g.shape[0], kblocks * kb, g.shape[2], g.shape[3])
    conv_attrs = {"groups": groups, "stride": attrs["stride"], "padding": attrs["padding"],
                  "dilation": attrs["dilation"]}
    gx, gw = _conv2d(g_plain, (x_plain, w_plain), None, conv_attrs, needs, build)
    if gx is not None and x.ndim == 5:
        gx = gx.reshape(x.shape[0], xblocks, xb, x.shape[2], x.shape[3]).permute(0, 1, 3, 4, 2)
    if gw is not None:
        gw = gw.reshape(kblocks, kb, cblocks, cb, kh, kw).permute(0, 2, 4, 5, 3, 1)
    return gx, gw
