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
