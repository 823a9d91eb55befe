"""Movement ops (tensorkiln/ir/ops/movement.py and the Tensor/tk functions on top) against numpy.

Movement copies values, so results must be exactly equal for every dtype.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.frontend.tensor import apply

from helpers import ALL_DTYPES, assert_close, make_tensor, noncontiguous

DTYPES = list(ALL_DTYPES)


def _case(rng, shape, dtype, layout="transpose"):
    return make_tensor(rng, shape, dtype, -5, 5, layout)


def _exact(out, expected, dtype):
    assert_close(out, expected, dtype, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_reshape_and_view(dtype, rng):
    x, v = _case(rng, (2, 3, 4), dtype)
    for shape in [(24,), (4, 6), (2, -1), (-1, 4), (1, 2, 1, 12), (4, 3, 2), (-1,)]:
        _exact(x.reshape(shape), v.reshape(shape), dtype)
        _exact(x.reshape(*shape), v.reshape(shape), dtype)
        _exact(x.view(shape), v.reshape(shape), dtype)
    _exact(x.view_as(tk.zeros(6, 4)), v.reshape(6, 4), dtype)
    assert x.reshape(2, 3, 4) is x
    e, ev = _case(rng, (0, 3), dtype)
    _exact(e.reshape(3, 0), ev.reshape(3, 0), dtype)
    _exact(e.reshape(-1, 3), ev.reshape(-1, 3), dtype)
    s, sv = _case(rng, (), dtype)
    _exact(s.reshape(1, 1), sv.reshape(1, 1), dtype)
    _exact(s.reshape(-1), sv.reshape(-1), dtype)


def test_reshape_errors():
    x = tk.zeros(2, 3)
    with pytest.raises(tk.ShapeError, match=r"reshape: cannot reshape \[2, 3\] \(6 elements\) to \[4, -1\]"):
        x.reshape(4, -1)
    with pytest.raises(tk.ShapeError, match="only one dimension can be -1"):
        x.reshape(-1, -1)
    with pytest.raises(tk.ShapeError, match=r"cannot reshape 6 elements to \[7\]"):
        x.reshape(7)
    with pytest.raises(tk.ShapeError):
        tk.zeros(0, 3).reshape(0, -1)
    with pytest.raises(tk.ShapeError, match="negative size"):
        x.reshape(-2, -3)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_flatten(dtype, rng):
    x, v = _case(rng, (2, 3, 4, 5), dtype)
    _exact(x.flatten(), v.reshape(-1), dtype)
    _exact(x.flatten(1), v.reshape(2, -1), dtype)
    _exact(x.flatten(1, 2), v.reshape(2, 12, 5), dtype)
    _exact(x.flatten(-2), v.reshape(2, 3, 20), dtype)
    _exact(x.flatten(0, 0), v, dtype)
    assert tk.tensor(3).flatten().shape == (1,)
    with pytest.raises(tk.ShapeError, match="start_dim 2 comes after end_dim 1"):
        x.flatten(2, 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_permute_transpose(dtype, rng):
    x, v = _case(rng, (2, 3, 4), dtype, "strided")
    for perm in [(0, 1, 2), (2, 0, 1), (1, 0, 2), (-1, -2, -3)]:
        _exact(x.permute(perm), np.transpose(v, perm), dtype)
        _exact(x.permute(*perm), np.transpose(v, perm), dtype)
        _exact(tk.permute(x, perm), np.transpose(v, perm), dtype)
    _exact(x.transpose(0, 2), np.swapaxes(v, 0, 2), dtype)
    _exact(x.transpose(-1, 1), np.swapaxes(v, -1, 1), dtype)
    _exact(x.swapaxes(0, 1), np.swapaxes(v, 0, 1), dtype)
    _exact(x.transpose(), v.T, dtype)
    _exact(x.T, v.T, dtype)
    _exact(x.mT, np.swapaxes(v, -1, -2), dtype)
    m, mv = _case(rng, (3, 5), dtype)
    _exact(m.t(), mv.T, dtype)
    assert tk.zeros(4).t().shape == (4,)


def test_permute_errors():
    x = tk.zeros(2, 3, 4)
    with pytest.raises(tk.ShapeError, match="permute: 2 dims given for a tensor of rank 3"):
        x.permute(0, 1)
    with pytest.raises(tk.ShapeError, match="not a permutation"):
        x.permute(0, 1, 1)
    with pytest.raises(tk.AxisError):
        x.permute(0, 1, 3)
    with pytest.raises(tk.ShapeError, match="rank <= 2"):
        x.t()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_expand_broadcast_to(dtype, rng):
    x, v = _case(rng, (3, 1), dtype)
    _exact(x.expand(3, 4), np.broadcast_to(v, (3, 4)), dtype)
    _exact(x.expand(2, -1, 5), np.broadcast_to(v, (2, 3, 5)), dtype)
    _exact(x.expand((2, 3, 0)), np.broadcast_to(v, (2, 3, 0)), dtype)
    _exact(x.broadcast_to((4, 3, 2)), np.broadcast_to(v, (4, 3, 2)), dtype)
    _exact(x.expand_as(tk.zeros(3, 7)), np.broadcast_to(v, (3, 7)), dtype)
    assert x.expand(3, 1) is x
    s, sv = _case(rng, (), dtype)
    _exact(s.expand(2, 2), np.broadcast_to(sv, (2, 2)), dtype)


def test_expand_errors():
    x = tk.zeros(3, 2)
    with pytest.raises(tk.ShapeError, match=r"cannot expand \[3, 2\] to \[3, 3\]"):
        x.expand(3, 3)
    with pytest.raises(tk.ShapeError):
        x.expand(2)
    with pytest.raises(tk.ShapeError, match="negative size"):
        x.expand(-1, 3, 2)  # -1 is only allowed for existing dims


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_squeeze_unsqueeze(dtype, rng):
    x, v = _case(rng, (1, 3, 1, 2), dtype)
    _exact(x.squeeze(), v.squeeze(), dtype)
    _exact(x.squeeze(0), v.squeeze(0), dtype)
    _exact(x.squeeze(-2), v.squeeze(-2), dtype)
    _exact(x.squeeze(1), v, dtype)  # not size 1: unchanged, as PyTorch
    _exact(x.squeeze((0, 2)), v.squeeze((0, 2)), dtype)
    _exact(x.squeeze(axis=2), v.squeeze(2), dtype)
    for d in range(-5, 5):
        _exact(x.unsqueeze(d), np.expand_dims(v, d), dtype)
    with pytest.raises(tk.AxisError):
        x.unsqueeze(5)
    with pytest.raises(tk.AxisError):
        x.squeeze(4)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_flip_narrow_split_chunk_unbind(dtype, rng):
    x, v = _case(rng, (4, 5, 3), dtype)
    _exact(x.flip(0), v[::-1], dtype)
    _exact(x.flip((0, -1)), v[::-1, :, ::-1], dtype)
    _exact(tk.flip(x, [1, 2]), v[:, ::-1, ::-1], dtype)
    _exact(x.narrow(1, 1, 3), v[:, 1:4], dtype)
    _exact(x.narrow(-1, 0, 0), v[..., 0:0], dtype)
    _exact(x.narrow(1, -2, 2), v[:, 3:5], dtype)  # a negative start counts from the end (PyTorch)
    pieces = x.split(2, 1)
    assert [p.shape for p in pieces] == [(4, 2, 3), (4, 2, 3), (4, 1, 3)]
    for p, e in zip(pieces, np.split(v, [2, 4], axis=1)):
        _exact(p, e, dtype)
    pieces = x.split([1, 3, 1], dim=1)
    for p, e in zip(pieces, np.split(v, [1, 4], axis=1)):
        _exact(p, e, dtype)
    chunks = x.chunk(3, 1)  # ceil(5 / 3) = 2 per chunk
    assert [c.shape[1] for c in chunks] == [2, 2, 1]
    assert [c.shape[0] for c in tk.chunk(x, 4)] == [1, 1, 1, 1]
    assert [c.shape[2] for c in x.chunk(5, -1)] == [1, 1, 1]
    rows = x.unbind(1)
    assert len(rows) == 5
    for i, r in enumerate(rows):
        _exact(r, v[:, i], dtype)


def test_narrow_split_errors():
    x = tk.zeros(4, 5)
    with pytest.raises(IndexError, match="narrow"):
        x.narrow(1, 3, 3)
    with pytest.raises(IndexError, match="narrow"):
        x.narrow(0, -5, 1)
    with pytest.raises(tk.ShapeError, match=r"sizes \[2, 2\] do not add up to 5"):
        x.split([2, 2], 1)
    with pytest.raises(tk.ShapeError, match="positive"):
        x.split(0)
    with pytest.raises(tk.ShapeError, match="chunks must be positive"):
        x.chunk(0)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_repeat_matches_tile(dtype, rng):
    x, v = _case(rng, (2, 3), dtype)
    for reps in [(1, 1), (2, 1), (1, 3), (2, 2), (3, 1, 2), (2, 0)]:
        _exact(x.repeat(*reps), np.tile(v, reps), dtype)
        _exact(x.repeat(reps), np.tile(v, reps), dtype)
    with pytest.raises(tk.ShapeError):
        x.repeat(2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_cat_and_stack(dtype, rng):
    a, av = _case(rng, (2, 3), dtype)
    b, bv = _case(rng, (1, 3), dtype, "contiguous")
    c, cv = _case(rng, (0, 3), dtype)
    _exact(tk.cat([a, b, c]), np.concatenate([av, bv, cv]), dtype)
    _exact(tk.concat([a, a], dim=1), np.concatenate([av, av], axis=1), dtype)
    _exact(tk.concatenate([a, a], axis=-1), np.concatenate([av, av], axis=-1), dtype)
    _exact(tk.cat((a,)), av, dtype)
    _exact(tk.stack([a, a]), np.stack([av, av]), dtype)
    _exact(tk.stack([a, a, a], dim=2), np.stack([av, av, av], axis=2), dtype)
    _exact(tk.stack([a, a], axis=-1), np.stack([av, av], axis=-1), dtype)


def test_cat_promotes_and_accepts_arrays():
    out = tk.cat([tk.tensor([1], dtype=tk.int8), tk.tensor([0.5]), np.array([2.0])])
    assert out.dtype is tk.float64 and out.tolist() == [1.0, 0.5, 2.0]
    s = tk.stack([np.array([1, 2]), tk.tensor([3, 4])])
    assert s.dtype is tk.int64 and s.tolist() == [[1, 2], [3, 4]]


def test_cat_stack_errors():
    with pytest.raises(tk.ShapeError, match="at least one"):
        tk.cat([])
    with pytest.raises(tk.ShapeError, match="rank 2 and 1"):
        tk.cat([tk.zeros(2, 2), tk.zeros(2)])
    with pytest.raises(tk.ShapeError, match="zero-dimensional"):
        tk.cat([tk.tensor(1.0), tk.tensor(2.0)])
    with pytest.raises(tk.ShapeError, match=r"concat.*equal sizes.*f32\[2,2\], f32\[2,3\]"):
        tk.cat([tk.zeros(2, 2), tk.zeros(2, 3)])
    with pytest.raises(tk.ShapeError, match="equal shapes"):
        tk.stack([tk.zeros(2), tk.zeros(3)])
    with pytest.raises(tk.AxisError):
        tk.cat([tk.zeros(2), tk.zeros(2)], dim=1)


# ---- gather / index_select / take ----------------------------------------------------------------

def _torch_gather(data, dim, index):
    """torch.gather by its definition: out[i][j][k] = data[i][index[i][j][k]][k] (dim=1)."""
    out = np.empty(index.shape, dtype=data.dtype)
    for pos in np.ndindex(*index.shape):
        src = list(pos)
        src[dim] = index[pos]
        out[pos] = data[tuple(src)]
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_gather(dtype, rng):
    x, v = _case(rng, (3, 4, 5), dtype)
    for dim in range(3):
        for index_shape in [(3, 4, 5), (2, 4, 3), (1, 1, 1), (3, 4, 5)[:dim] + (7,) + (3, 4, 5)[dim + 1:]]:
            index = rng.integers(0, x.shape[dim], size=index_shape)
            _exact(x.gather(dim, tk.tensor(index)), _torch_gather(v, dim, index), dtype)
            _exact(x.gather(dim - 3, index), _torch_gather(v, dim, index), dtype)
    # negative indices count from the end
    index = -np.ones((3, 4, 5), dtype=np.int64)
    _exact(x.gather(2, index), _torch_gather(v, 2, index + 5), dtype)


def test_gather_errors():
    x = tk.zeros(3, 4)
    with pytest.raises(IndexError, match="gather: index 4 is out of range"):
        x.gather(1, tk.tensor([[4]]))
    with pytest.raises(tk.ShapeError, match="same rank"):
        x.gather(1, tk.tensor([1]))
    with pytest.raises(tk.ShapeError, match="exceeds input size"):
        x.gather(1, tk.zeros(4, 1, dtype=tk.int64))
    with pytest.raises(tk.DTypeError, match="indices must be integers"):
        x.gather(1, tk.zeros(3, 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_index_select(dtype, rng):
    x, v = _case(rng, (3, 4, 2), dtype)
    for dim in range(-3, 3):
        index = rng.integers(-x.shape[dim], x.shape[dim], size=5)
        _exact(x.index_select(dim, tk.tensor(index)), np.take(v, index, axis=dim), dtype)
    _exact(x.index_select(0, tk.tensor([], dtype=tk.int64)), v[:0], dtype)
    _exact(x.index_select(1, tk.tensor(2)), v[:, 2:3], dtype)
    with pytest.raises(IndexError, match="out of range"):
        x.index_select(0, [3])
    with pytest.raises(tk.ShapeError):
        x.index_select(0, tk.zeros(2, 2, dtype=tk.int64))


# ---- pad -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_pad_constant(dtype, rng):
    x, v = _case(rng, (2, 3, 4), dtype)
    for pads in [(1, 2), (0, 0, 2, 1), (1, 1, 1, 1, 1, 1), (0, 3, 0, 0), (2, 0)]:
        pairs = [(0, 0)] * 3
        for i in range(len(pads) // 2):
            pairs[2 - i] = (pads[2 * i], pads[2 * i + 1])
        _exact(F.pad(x, pads), np.pad(v, pairs), dtype)
        if not dtype.is_bool:
            _exact(F.pad(x, pads, value=3), np.pad(v, pairs, constant_values=3), dtype)
    # negative padding crops
    _exact(F.pad(x, (-1, 1, 0, -2)), np.pad(v[:, :1, 1:], [(0, 0), (0, 0), (0, 1)]), dtype)
    with pytest.raises(tk.ShapeError):
        F.pad(x, (1,))
    with pytest.raises(tk.ShapeError):
        F.pad(x, (1, 1) * 4)


@pytest.mark.parametrize("mode, np_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
@pytest.mark.parametrize("dtype", [tk.float32, tk.int64, tk.bfloat16], ids=lambda d: d.name)
def test_pad_modes(mode, np_mode, dtype, rng):
    x, v = _case(rng, (2, 4, 5), dtype)
    for pads in [(1, 2), (2, 1, 3, 0), (0, 0, 1, 1), (3, 3)]:
        pairs = [(0, 0)] * 3
        for i in range(len(pads) // 2):
            pairs[2 - i] = (pads[2 * i], pads[2 * i + 1])
        _exact(F.pad(x, pads, mode=mode), np.pad(v, pairs, mode=np_mode), dtype)
    with pytest.raises((tk.ShapeError, ValueError)):
        F.pad(x, (6, 6) if mode == "circular" else (5, 5), mode=mode if mode != "replicate" else "bogus")


def test_pad_primitive_rejects_negative():
    with pytest.raises(tk.ShapeError, match="non-negative"):
        apply("pad", [tk.zeros(2)], pads=((-1, 0),), value=0)


# ---- window (the primitive under pooling) ----------------------------------------------------------

@pytest.mark.parametrize("kernel, stride, dilation", [((2, 2), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 2)),
                                                      ((1, 1), (3, 3), (1, 1)), ((2,), (2,), (1,))])
def test_window(kernel, stride, dilation, rng):
    x, v = _case(rng, (2, 5, 7), tk.float32)
    out = apply("window", [x], kernel=kernel, stride=stride, dilation=dilation)
    n = len(kernel)
    expected = v
    for i in range(n):  # sliding_window_view with dilation via a larger window and a strided pick
        axis = v.ndim - n + i
        span = dilation[i] * (kernel[i] - 1) + 1
        expected = np.lib.stride_tricks.sliding_window_view(expected, span, axis=axis)
        expected = np.take(expected, np.arange(0, span, dilation[i]), axis=-1)
        expected = np.take(expected, np.arange(0, expected.shape[axis], stride[i]), axis=axis)
    _exact(out, expected, tk.float32)


def test_window_errors():
    with pytest.raises(tk.ShapeError, match="larger than the input"):
        apply("window", [tk.zeros(2, 2)], kernel=(3,), stride=(1,), dilation=(1,))
    with pytest.raises(tk.ShapeError, match="positive"):
        apply("window", [tk.zeros(4)], kernel=(2,), stride=(0,), dilation=(1,))


# ---- hypothesis: chains of movement ops against numpy -------------------------------------------------

@given(data=st.data(), shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4),
       dtype=st.sampled_from(ALL_DTYPES), steps=st.integers(1, 5))
def test_random_movement_chains(data, shape, dtype, steps):
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    x, v = make_tensor(rng, shape, dtype, -5, 5, data.draw(st.sampled_from(["contiguous", "transpose"])))
    for _ in range(steps):
        op = data.draw(st.sampled_from(["reshape", "permute", "flip", "expand", "slice", "unsqueeze", "squeeze"]))
        if op == "reshape":
            shape2 = data.draw(st.sampled_from(_factorizations(v.size)))
            x, v = x.reshape(shape2), v.reshape(shape2)
        elif op == "permute":
            perm = data.draw(st.permutations(range(v.ndim)))
            x, v = x.permute(tuple(perm)), np.transpose(v, perm)
        elif op == "flip" and v.ndim:
            d = data.draw(st.integers(0, v.ndim - 1))
            x, v = x.flip(d), np.flip(v, d)
        elif op == "expand":
            target = tuple(data.draw(st.integers(1, 3)) if s == 1 else s for s in v.shape)
            x, v = x.expand(target), np.broadcast_to(v, target)
        elif op == "slice" and v.ndim:
            d = data.draw(st.integers(0, v.ndim - 1))
            start = data.draw(st.integers(-5, 5) | st.none())
            stop = data.draw(st.integers(-5, 5) | st.none())
            step = data.draw(st.sampled_from([1, 2, -1, -2, 3]))
            key = (slice(None),) * d + (slice(start, stop, step),)
            x, v = x[key], v[key]
        elif op == "unsqueeze":
            d = data.draw(st.integers(-v.ndim - 1, v.ndim))
            x, v = x.unsqueeze(d), np.expand_dims(v, d)
        elif op == "squeeze":
            x, v = x.squeeze(), v.squeeze()
        _exact(x, v, dtype)


def _factorizations(n):
    shapes = [(n,), (1, n), (n, 1)]
    for a in range(2, n + 1):
        if n % a == 0:
            shapes.append((a, n // a))
    if n == 0:
        shapes += [(0, 3), (2, 0, 1)]
    return shapes


def test_noncontiguous_inputs_for_every_movement_path(rng):
    base = rng.normal(size=(4, 6)).astype(np.float32)
    for view in (noncontiguous(base, "transpose"), noncontiguous(base, "strided"), base[::-1, ::2], base.T):
        x = tk.tensor(view)
        _exact(x.reshape(-1), view.reshape(-1), tk.float32)
        _exact(x.T.reshape(view.shape[::-1]), view.T, tk.float32)
        _exact(x[1:, ::-1], view[1:, ::-1], tk.float32)
        _exact(tk.cat([x, x], 0), np.concatenate([view, view]), tk.float32)
        _exact(tk.from_numpy(view).flatten(), view.reshape(-1), tk.float32)
