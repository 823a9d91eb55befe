"""linear and the convolutions (2-D, 3-D, transposed) as compositions of primitive ops."""
from __future__ import annotations

from ...errors import ShapeError, at_user_line
from ...frontend.functions import matmul
from ...frontend.tensor import Tensor, apply, as_tensor
from ...frontend.trace import composite
from .arguments import _pair
from .padding import pad


@composite("linear")
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """input @ weight.T + bias, weight of shape (out_features, in_features)."""
    out = matmul(input, as_tensor(weight).transpose(-1, -2) if as_tensor(weight).ndim == 2 else weight)
    return out + bias if bias is not None else out


def _conv_padding(padding, kernel: tuple[int, int], stride, dilation) -> tuple[int, int, int, int]:
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0, 0, 0
        if padding == "same":
            if stride != (1, 1):
                raise ShapeError(at_user_line("conv2d: padding='same' needs stride 1"))
            pads = []
            for k, d in zip(kernel, dilation):
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]
            return pads[0], pads[1], pads[2], pads[3]
        raise ValueError(f"conv2d: padding must be 'valid', 'same', an int or a pair, got {padding!r}")
    ph, pw = _pair(padding, "padding")
    return ph, ph, pw, pw


@composite("conv2d")
def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation) of an (N, C, H, W) input, as torch.nn.functional.conv2d."""
    x, w = as_tensor(input), as_tensor(weight)
    unbatched = x.ndim == 3
    if unbatched:
        x = x.unsqueeze(0)
    if x.dtype != w.dtype and x.dtype.is_floating and w.dtype.is_floating:
        w = w.to(x.dtype)
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    if w.ndim != 4:
        raise ShapeError(at_user_line(f"conv2d: weight must be (out, in/groups, kh, kw), got {list(w.shape)}"))
    pads = _conv_padding(padding, tuple(w.shape[2:]), stride, dilation)
    out = apply("conv2d", [x, w], stride=stride, padding=pads, dilation=dilation, groups=int(groups))
    if bias is not None:
        b = as_tensor(bias)
        b = b.to(x.dtype) if b.dtype.is_floating and x.dtype.is_floating else b  # as the weight: keep x's dtype
        out = out + b.reshape(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """3-D convolution of an (N, C, D, H, W) input, as torch.nn.functional.conv3d; `padding` may also
    be three (begin, end) pairs. Computed as KD 2-d convolutions, one per kernel depth tap, each over
    the depth positions it reads folded into the batch, and summed."""
    x, w = as_tensor(input), as_tensor(weight)
    if x.dtype != w.dtype and x.dtype.is_floating and w.dtype.is_floating:
        w = w.to(x.dtype)
    triple = (lambda v, name: (v,) * 3 if isinstance(v, int) else tuple(v) * (3 // len(v)))
    stride, dilation = triple(stride, "stride"), triple(dilation, "dilation")
    pads = [tuple(p) if isinstance(p, (tuple, list)) else (p, p) for p in triple(padding, "padding")]
    if x.ndim != 5 or w.ndim != 5:
        raise ShapeError(at_user_line(f"conv3d: expects an (N, C, D, H, W) input and an (out, in/groups, kd, kh, "
                                      f"kw) weight, got {list(x.shape)} and {list(w.shape)}"))
    (dlo, dhi), (sd, dd) = pads[0], (stride[0], dilation[0])
    if dlo or dhi:
        x = apply("pad", [x], pads=((0, 0), (0, 0), (dlo, dhi), (0, 0), (0, 0)), value=0.0)
    n, c, depth = x.shape[:3]
    out_depth = (depth - dd * (w.shape[2] - 1) - 1) // sd + 1
    if out_depth < 1:
        raise ShapeError(at_user_line(f"conv3d: input depth {depth - dlo - dhi} (padded {depth}) is smaller than "
                                      f"the kernel's {dd * (w.shape[2] - 1) + 1}"))
    (pt, pb), (pl, pr) = pads[1:]
    total = None
    for tap in range(w.shape[2]):
        start = tap * dd
        planes = x[:, :, start:start + (out_depth - 1) * sd + 1:sd]  # (N, C, out_depth, H, W)
        planes = planes.permute(0, 2, 1, 3, 4).reshape((n * out_depth, c) + tuple(x.shape[3:]))
        term = apply("conv2d", [planes, w[:, :, tap]], stride=stride[1:], padding=(pt, pb, pl, pr),
                     dilation=dilation[1:], groups=int(groups))
        total = term if total is None else total + term
    out = total.reshape((n, out_depth) + tuple(total.shape[1:])).permute(0, 2, 1, 3, 4)
    if bias is not None:
        out = out + as_tensor(bias).to(out.dtype).reshape(1, -1, 1, 1, 1)
    return out


def conv_transpose(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                   output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed convolution over the 1, 2 or 3 spatial axes of an (N, C, *spatial) input, as
    torch.nn.functional.conv_transpose1d/2d/3d (weight (C, out/groups, *kernel)); `padding` may also
    be one (begin, end) pair per axis. Computed as a stride-1 convolution of the zero-stuffed input
    (stride - 1 zeros between elements), padded by dilation * (kernel - 1) - padding (negative: crop),
    with the spatially flipped weight whose in/out channels are swapped per group."""
    x, w = as_tensor(input), as_tensor(weight)
    n = x.ndim - 2
    if n not in (1, 2, 3) or w.ndim != x.ndim:
        raise ShapeError(at_user_line(f"conv_transpose: expects an (N, C, *spatial) input over 1-3 axes and a "
                                      f"(C, out/groups, *kernel) weight, got {list(x.shape)} and {list(w.shape)}"))
    per_axis = (lambda v: (v,) * n if isinstance(v, int) else tuple(v) * (n // len(v)))
    stride, dilation, output_padding = per_axis(stride), per_axis(dilation), per_axis(output_padding)
    pads = [tuple(p) if isinstance(p, (tuple, list)) else (p, p) for p in per_axis(padding)]
    size = tuple(x.shape[2:])
    if any(s > 1 for s in stride):  # insert stride - 1 zeros between input elements along each axis
        lead = tuple(x.shape[:2])
        x = x.reshape(lead + tuple(d for extent in size for d in (extent, 1)))
        x = apply("pad", [x], pads=((0, 0), (0, 0)) + tuple(p for s in stride for p in ((0, 0), (0, s - 1))),
                  value=0.0)
        x = x.reshape(lead + tuple(e * s for e, s in zip(size, stride)))
        x = x[(slice(None), slice(None)) + tuple(slice(0, (e - 1) * s + 1) for e, s in zip(size, stride))]
    edges = []  # F.pad lists the last axis first
    for axis in reversed(range(n)):
        reach = dilation[axis] * (w.shape[2 + axis] - 1)
        edges += [reach - pads[axis][0], reach - pads[axis][1] + output_padding[axis]]
    x = pad(x, edges)
    cin, cout_g = w.shape[:2]
    wt = w.reshape((groups, cin // groups, cout_g) + tuple(w.shape[2:])).transpose(1, 2)
    wt = wt.reshape((groups * cout_g, cin // groups) + tuple(w.shape[2:])).flip(tuple(range(2, 2 + n)))
    if n == 1:
        out = conv2d(x.unsqueeze(2), wt.unsqueeze(2), None, 1, 0, (1,) + dilation, groups).squeeze(2)
    elif n == 2:
        out = conv2d(x, wt, None, 1, 0, dilation, groups)
    else:
        out = conv3d(x, wt, None, 1, 0, dilation, groups)
    if bias is not None:
        out = out + as_tensor(bias).to(out.dtype).reshape((1, -1) + (1,) * n)
    return out
