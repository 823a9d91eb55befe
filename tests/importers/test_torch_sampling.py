"""PyTorch's grid_sampler_2d and affine_grid_generator lowered to tk.nn.functional.grid_sample /
affine_grid, against eager PyTorch for every mode and padding."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tensorkiln.nn.functional as F  # noqa: E402


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_matches_pytorch(mode, padding):
    torch.manual_seed(0)
    x, grid = torch.randn(2, 3, 7, 9), torch.rand(2, 5, 4, 2) * 2.4 - 1.2  # points outside too
    for align_corners in (False, True):
        def sample(a, g):
            return torch.nn.functional.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=align_corners)
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(sample, backend="tensorkiln")(x, grid), sample(x, grid),
                                   rtol=1e-4, atol=1e-5)


def test_affine_grid_matches_pytorch_and_feeds_grid_sample():
    torch.manual_seed(1)
    theta, x = torch.randn(2, 2, 3) * 0.5, torch.randn(2, 3, 6, 5)

    def warp(t, a):
        grid = torch.nn.functional.affine_grid(t, (2, 3, 4, 6), align_corners=False)
        return torch.nn.functional.grid_sample(a, grid, align_corners=False)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(warp, backend="tensorkiln")(theta, x), warp(theta, x), rtol=1e-4,
                               atol=1e-5)


def test_bad_grids_name_the_shapes():
    import tensorkiln as tk
    with pytest.raises(tk.ShapeError, match=r"grid_sample: input of shape \[1, 2, 4, 4\] needs a grid"):
        F.grid_sample(tk.ones(1, 2, 4, 4), tk.ones(1, 3, 3, 3))
    with pytest.raises(ValueError, match="padding_mode 'wrap'"):
        F.grid_sample(tk.ones(1, 2, 4, 4), tk.ones(1, 3, 3, 2), padding_mode="wrap")
