"""The core ATen lowerings added beside lowering.py, compiled to C, against eager PyTorch.

Each family compiles once (one graph returning every case's result) over random
shapes with size-1 and odd dimensions, non-contiguous inputs (transposed views)
and integer dtypes where the op takes them. Tolerance: float32 rtol 1e-5,
atol 1e-5 (sums in another order); integers, indices and gathered values exactly.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorkiln as tk  # noqa: E402
from tensorkiln.importers.torch import STATS  # noqa: E402

F = torch.nn.functional


def _compare(fn, inputs, exact=False):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="tensorkiln", dynamic=False)
    with torch.no_grad():
        expected = fn(*inputs)
        before = STATS["tensorkiln_calls"]
        actual = compiled(*inputs)
        assert STATS["tensorkiln_calls"] > before, "the graph did not run in tensorkiln"
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape and a.dtype == e.dtype, f"result {i}: {a.shape} {a.dtype} vs {e.shape} {e.dtype}"
        tolerance = {"rtol": 0, "atol": 0} if exact or not e.dtype.is_floating_point else {"rtol": 1e-5, "atol": 1e-5}
        torch.testing.assert_close(a, e, equal_nan=True, msg=lambda m: f"result {i}: {m}", **tolerance)


def _shape(rng, rank, low=1, high=7):
    return tuple(int(s) for s in rng.integers(low, high, size=rank))


def test_elementwise_math(rng):
    shape = _shape(rng, 3)
    x = torch.randn(shape)
    y = torch.randn(shape[-1:]) + 0.1
    ints = torch.randint(-9, 10, shape)
    divisors = torch.randint(1, 4, shape[-1:]) * (torch.randint(0, 2, shape[-1:]) * 2 - 1)
    special = torch.tensor([1.0, float("inf"), -float("inf"), float("nan"), -0.0])

    def fn(x, y, ints, divisors, special):
        return (torch.atan2(x, y), torch.atan2(x.t() if x.dim() == 2 else x.transpose(0, 2), x.transpose(0, 2)),
                torch.fmod(x, y), torch.fmod(ints, divisors), torch.fmod(x, 0.7), torch.asinh(x),
                torch.acosh(x.abs() + 1), torch.atanh(x.clamp(-0.9, 0.9)), torch.isinf(special),
                torch.isinf(ints), torch.fmod(special, 2.0),
                torch.fmax(special, special.flip(0)), torch.fmin(x, y), torch.copysign(x, y),
                torch.copysign(special, special.flip(0)), torch.copysign(ints, -1.0),
                torch.addmv(x[0, 0], x[0].t(), x[0, :, 0], beta=0.5, alpha=2.0),
                torch.addbmm(y, x.transpose(1, 2), x))
    _compare(fn, (x, y, ints, divisors, special))


def test_cumsum_sort_topk(rng):
    shape = _shape(rng, 3)
    x = torch.randn(shape)
    ties = torch.randint(0, 3, shape).float()
    ties[..., 0] = float("nan")
    ints = torch.randint(-5, 5, shape, dtype=torch.int32)
    k = int(rng.integers(1, shape[1] + 1))

    def fn(x, ties, ints):
        return (torch.cumsum(x, 1), torch.cumsum(x.transpose(0, 2), -1), torch.cumsum(ints, 0),
                torch.cumsum(x, 2, dtype=torch.float64), torch.cumsum(ints > 0, -1),
                *torch.sort(x, 1), *torch.sort(x.transpose(1, 2), -1, descending=True),
                *torch.sort(ties, dim=-1, stable=True), *torch.sort(ties, dim=0, descending=True, stable=True),
                *torch.sort(ints, dim=2, stable=True),
                *torch.topk(x, k, 1), *torch.topk(x, 1, -1, largest=False),
                torch.cumprod(x, 1), torch.cumprod(ints, -1), *torch.cummax(ties, -1), *torch.cummin(ties, 1),
                *torch.cummax(ints, 0), *torch.cummin(x.transpose(0, 2), 2))
    _compare(fn, (x, ties, ints))


def test_indexing_reads(rng):
    x = torch.randn(_shape(rng, 4, 2, 6))
    a, b = x.shape[0], x.shape[2]
    i = torch.randint(-a, a, (3,))
    j = torch.randint(0, b, (2, 1))
    m = torch.randint(0, x.shape[1], (3,))
    base = torch.randn(5, 6)

    def fn(x, i, j, m, base):
        return (x[i, :, j], x[:, m, j], x[i, m], x[..., j, 0], x[i, m, j, 0],
                torch.diagonal(x, 0, 1, 2) * 1, torch.diagonal(x, 1, 3, 0) * 1, torch.diagonal(x, -1, 2, 1) * 1,
                torch.diagonal(x, 9, 0, 1) * 1,
                torch.as_strided(base, (4, 3), (2, 7), 1) * 1, torch.as_strided(base, (2, 2, 3), (0, 6, 1)) * 1)
    _compare(fn, (x, i, j, m, base), exact=True)


def test_scatters(rng):
    shape = _shape(rng, 3, 2, 6)
    x = torch.randn(shape)
    index = torch.randint(0, shape[1], (shape[0], shape[1] + 2, max(shape[2] - 1, 1)))
    src = torch.randn(shape[0], shape[1] + 2, shape[2])
    ints = torch.randint(-9, 9, shape)
    int_src = torch.randint(-9, 9, src.shape)

    def fn(x, index, src, ints, int_src):
        out = [x.scatter(1, index, src), x.scatter(1, index, 2.5), x.scatter_add(1, index, src),
               ints.scatter_add(1, index, int_src)]
        for reduce in ("sum", "prod", "mean", "amax", "amin"):
            for include_self in (True, False):
                out.append(x.scatter_reduce(1, index, src, reduce, include_self=include_self))
        out.append(ints.scatter_reduce(1, index, int_src, "mean"))
        return tuple(out)
    # duplicate indices: the last writer wins in PyTorch's CPU kernel and here
    _compare(fn, (x, index, src, ints, int_src))


def test_index_put_and_slice_writes(rng):
    shape = _shape(rng, 3, 2, 6)
    x = torch.randn(shape)
    i = torch.randint(-shape[0], shape[0], (4,))
    j = torch.randint(0, shape[2], (4,))
    v = torch.randn(4, shape[1])
    mask = torch.rand(shape) > 0.5
    source = torch.randn(x.numel())
    row = torch.randn(shape[0], shape[2])
    band = torch.randn(shape[0], shape[1], len(range(0, shape[2], 2)))

    def fn(x, i, j, v, mask, source, row, band):
        put = torch.ops.aten.index_put
        return (put(x, [i], v.sum(1, keepdim=True).expand(4, shape[1]).unsqueeze(-1).expand(4, shape[1], shape[2])),
                put(x, [i, None, j], v), put(x, [i, None, j], v, True), put(x, [None, None, j], torch.tensor(3.0)),
                put(x, [mask], torch.tensor(-1.0)), put(x, [mask], torch.tensor(0.5), True),
                x.masked_scatter(mask, source), x.masked_scatter(mask[0], source),
                torch.select_scatter(x, row, 1, -1), torch.slice_scatter(x, band, 2, 0, None, 2),
                torch.slice_scatter(x, x[1:2], 0, 1, 2),
                torch.diagonal_scatter(x, torch.diagonal(x, 1, 1, 2) * 2, 1, 1, 2),
                torch.diagonal_scatter(x, torch.diagonal(x, -1, 2, 0) - 1, -1, 2, 0))
    _compare(fn, (x, i, j, v, mask, source, row, band))


def test_resampling_and_padding(rng):
    n, c, h, w = _shape(rng, 4, 1, 6)
    x = torch.randn(n, c, h + 1, w + 2)
    volume = torch.randn(1, c, 3, h, w)
    line = torch.randn(n, c, w + 1)

    def fn(x, volume, line):
        return (F.interpolate(x, size=(2 * h + 1, w + 3), mode="nearest"),
                F.interpolate(x, scale_factor=2, mode="nearest"), F.interpolate(x, scale_factor=0.75, mode="nearest"),
                F.interpolate(x, size=(h + 4, 2 * w + 1), mode="bilinear"),
                F.interpolate(x, scale_factor=1.7, mode="bilinear", align_corners=True),
                F.interpolate(x.transpose(2, 3), scale_factor=0.6, mode="bilinear"),
                F.interpolate(volume, size=(4, h + 1, 3), mode="trilinear"),
                F.interpolate(line, scale_factor=2.5, mode="linear"),
                F.interpolate(volume, scale_factor=(1.5, 2, 1), mode="nearest"),
                F.pad(x, (1, 0, 1, 0), mode="reflect"), F.pad(x, (2, 1, 0, 3), mode="replicate"),
                F.pad(line, (1, line.shape[-1] - 1), mode="reflect"), F.pad(volume, (1, 2, 0, 1, 2, 0), mode="replicate"))
    _compare(fn, (x, volume, line))


def test_normalization_pooling_distances_bags(rng):
    n, groups = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    channels = groups * int(rng.integers(1, 3))
    x = torch.randn(n, channels, *_shape(rng, 2, 1, 6))
    weight, bias = torch.randn(channels), torch.randn(channels)
    volume = torch.randn(n, 2, *_shape(rng, 3, 3, 8))
    points, others = torch.randn(2, 5, 3), torch.randn(2, 7, 3)
    table = torch.randn(11, 4)
    words = torch.randint(0, 11, (9,))
    offsets = torch.tensor([0, 2, 2, 6])

    def fn(x, weight, bias, volume, points, others, table, words, offsets):
        return (F.group_norm(x, groups, weight, bias), F.group_norm(x, groups),
                F.avg_pool3d(volume, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                F.avg_pool3d(volume, (2, 3, 1), (1, 2, 1)), F.avg_pool3d(volume, 2, divisor_override=3),
                *F.max_pool3d(volume, (3, 2, 2), (2, 1, 2), 1, return_indices=True),
                *F.max_pool3d(volume, 2, 1, 0, dilation=2, ceil_mode=True, return_indices=True),
                F.adaptive_avg_pool3d(volume, (2, 3, 1)),
                torch.cdist(points, others), torch.cdist(points, others, p=1), torch.cdist(points, others, p=0),
                torch.cdist(points, others, p=float("inf")), torch.cdist(points, others, p=3.0),
                torch.pdist(others[0]), torch.pdist(others[1], p=1),
                F.embedding_bag(words, table, offsets, mode="sum"), F.embedding_bag(words, table, offsets, mode="mean"),
                F.embedding_bag(words, table, offsets, mode="max"),
                F.embedding_bag(words, table, offsets[:3], mode="sum", include_last_offset=True),
                F.embedding_bag(words, table, offsets, mode="sum", per_sample_weights=torch.ones(9) * 0.5),
                F.embedding_bag(words, table, offsets, mode="mean", padding_idx=int(words[0])),
                F.embedding_bag(words.reshape(3, 3), table, mode="sum"))
    _compare(fn, (x, weight, bias, volume, points, others, table, words, offsets))


def test_from_torch_imports_a_model_using_the_new_ops():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.GroupNorm(2, 4)

        def forward(self, x, ids):
            positions = torch.cumsum(ids.ne(1).int(), dim=1) * ids.ne(1)  # RoBERTa's position ids
            y = F.interpolate(self.norm(x), scale_factor=2, mode="bilinear")
            y = F.pad(y, (1, 1, 1, 1), mode="reflect")
            values, order = torch.sort(y.flatten(2), dim=-1, stable=True)  # reflection makes ties
            return values[:, :, -3:], order[:, :, :2], positions, torch.atan2(y, y + 1).fmod(0.5)

    model = Model().eval()
    x, ids = torch.randn(2, 4, 3, 5), torch.tensor([[0, 5, 6, 1, 1], [0, 2, 1, 3, 1]])
    program = tk.from_torch(model, (x, ids))
    with torch.no_grad():
        expected = model(x, ids)
    for actual, wanted in zip(program(x, ids), expected):
        np.testing.assert_allclose(actual.numpy(), wanted.numpy(), rtol=1e-5, atol=1e-5)


def test_refused_variants_name_their_reason():
    def fn(x, mask):
        return x[mask]
    torch._dynamo.reset()
    graph = torch.fx.experimental.proxy_tensor.make_fx(fn)(torch.randn(4), torch.rand(4) > 0.5).graph
    from tensorkiln.importers.torch import check_supported
    with pytest.raises(tk.UnsupportedOpError, match="boolean mask indexing"):
        check_supported(graph)


def test_bool_products_zero_d_index_select_and_zero_d_bfloat16():
    flags = torch.rand(6) > 0.5

    def fn(flags, scalar):
        return (flags * flags.flip(0), torch.index_select(scalar, 0, torch.tensor([0])),
                (scalar * 2).to(torch.bfloat16))
    _compare(fn, (flags, torch.tensor(1.5)))


def test_order_statistics_and_sorted_lookups(rng):
    shape = _shape(rng, 3, low=2)
    x = torch.randn(shape)
    with_nan = x.clone()
    with_nan[0, ..., 0] = float("nan")
    sequence = torch.sort(torch.randn(shape[-1] + 3)).values
    rows = torch.sort(torch.randn(shape[0], 5), dim=-1).values
    values = torch.randn(shape[0], 4)
    scrambled = torch.randn(7)
    sorter = torch.argsort(scrambled)

    def fn(x, with_nan, sequence, rows, values, scrambled, sorter):
        k = min(2, x.shape[1])
        return (*torch.kthvalue(x, k, dim=1), *torch.kthvalue(x, 1, dim=-1, keepdim=True),
                torch.median(x), *torch.median(x, dim=0), *torch.median(with_nan, dim=-1),
                torch.nanmedian(with_nan), *torch.nanmedian(with_nan, dim=-1, keepdim=True),
                torch.searchsorted(sequence, x), torch.searchsorted(sequence, x, right=True),
                torch.searchsorted(rows, values, out_int32=True), torch.searchsorted(scrambled, x, sorter=sorter),
                torch.bucketize(x, sequence), torch.bucketize(x, sequence, right=True))
    _compare(fn, (x, with_nan, sequence, rows, values, scrambled, sorter))


def test_moments_rounding_and_libm_functions(rng):
    shape = _shape(rng, 3)
    x = torch.randn(shape) * 40
    positive = torch.rand(shape) * 5 + 0.1
    exponents = torch.randint(-4, 5, shape)

    def fn(x, positive, exponents):
        return (*torch.var_mean(x, dim=1), *torch.std_mean(x, dim=(0, 2), keepdim=True, correction=0),
                torch.round(x, decimals=2), torch.round(x, decimals=-1), torch.special.erfc(x / 40),
                torch.exp2(x / 10), torch.lgamma(positive), torch.hypot(x, positive),
                torch.nextafter(x, positive), torch.ldexp(x, exponents))
    _compare(fn, (x, positive, exponents))


def test_index_reduce(rng):
    x = torch.randn(5, 3, 4)
    source = torch.randn(5, 6, 4)
    index = torch.tensor([0, 2, 2, 1, 0, 2])

    def fn(x, source, index):
        return tuple(x.index_reduce(1, index, source, reduce, include_self=include)
                     for reduce in ("prod", "mean", "amax", "amin") for include in (True, False))
    _compare(fn, (x, source, index))
