"""narrow_copy, Tensor.unfold, dist, adaptive max pooling (1-d, 2-d, 3-d, with indices) and empty_permuted
through the torch backend against eager PyTorch, over random shapes with size-1 and odd sizes."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensorkiln.importers.torch.backend import BackendOptions, TensorKilnGraph  # noqa: E402

aten = torch.ops.aten
F = torch.nn.functional


@pytest.mark.parametrize("seed", [0, 1])
def test_misc_lowerings_match_eager(seed):
    rng = np.random.default_rng(seed)
    n, c, length = (int(v) for v in rng.integers(1, 5, size=3))
    length += 5  # at least 6 positions: every window and output size below fits
    pool_out = (int(rng.integers(1, 4)), int(rng.integers(1, length + 1)))
    out3 = tuple(int(v) for v in rng.integers(1, 4, size=3))
    window, step = int(rng.integers(1, 4)), int(rng.integers(1, 3))

    def cases(x, y, v):
        return (aten.narrow_copy(x, 2, 1, 3), x.unfold(2, window, step), x.unfold(0, 1, 1),
                torch.dist(x, y), torch.dist(x, y, 3.5), torch.dist(x, y, 1), torch.dist(x, y, float("inf")),
                torch.dist(x, y, 0),
                F.adaptive_max_pool2d(x, pool_out, return_indices=True),
                F.adaptive_max_pool1d(x, pool_out[1], return_indices=True),
                F.adaptive_max_pool3d(v, out3, return_indices=True),
                F.binary_cross_entropy_with_logits(x, y.sigmoid()))  # its decomposition: empty_permuted

    x, y = torch.randn(n, c, length), torch.randn(n, c, length)
    v = torch.randn(c, 3, 4, 5)  # unbatched 3-d pooling input
    with torch.no_grad():
        expected = cases(x, y, v)
        actual = TensorKilnGraph(cases, [x, y, v], BackendOptions())(x, y, v)
    for i, (a, e) in enumerate(zip(torch.utils._pytree.tree_leaves(actual), torch.utils._pytree.tree_leaves(expected))):
        assert a.shape == e.shape and a.dtype == e.dtype, i
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5, msg=lambda m: f"result {i}: {m}")


@pytest.mark.parametrize("seed", [0, 1])
def test_put_resize_and_private_in_place_updates_match_eager(seed):
    rng = np.random.default_rng(seed)
    rows, cols = (int(v) for v in rng.integers(1, 6, size=2))
    count = int(rng.integers(1, rows * cols + 1))
    index = torch.from_numpy(rng.permutation(rows * cols)[:count] - rows * cols * int(rng.integers(0, 2)))
    repeated = torch.from_numpy(rng.integers(-rows * cols, rows * cols, size=count + 2))

    def cases(x, source, target):
        return (x.put(index, source), x.put(repeated, torch.ones(count + 2), accumulate=True),
                x.put(torch.zeros(0, dtype=torch.int64), torch.zeros(0)),          # nothing written
                (x * 2).resize_as_(target), aten.resize(x + 1, [rows * cols - 1]),  # fewer elements: the first
                F.hinge_embedding_loss(x, torch.sign(target).reshape(rows, cols)),
                F.cosine_embedding_loss(x, x.flip(0), torch.sign(target[:rows]) + (target[:rows] == 0)))

    x, source, target = torch.randn(rows, cols), torch.randn(count), torch.randn(rows * cols)
    with torch.no_grad():
        expected = cases(x, source, target)
        actual = TensorKilnGraph(cases, [x, source, target], BackendOptions())(x, source, target)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)


def test_resize_refuses_what_it_cannot_reproduce():
    from tensorkiln.errors import UnsupportedOpError
    x = torch.randn(3, 4)
    with pytest.raises(UnsupportedOpError, match="more elements than the tensor has"):
        TensorKilnGraph(lambda a: aten.resize(a + 1, [20]), [x], BackendOptions())(x)
    with pytest.raises(UnsupportedOpError, match="not contiguous"):
        TensorKilnGraph(lambda a: aten.resize(a.t(), [4, 3]), [x], BackendOptions())(x)
