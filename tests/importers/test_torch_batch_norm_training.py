"""Training-mode batch norm through the torch backend against eager PyTorch: outputs, batch statistics and
the running statistics written back into the caller's tensors (random shapes with size-1 and odd sizes; instance norm's running statistics too)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensorkiln.importers.torch.backend import BackendOptions, TensorKilnGraph  # noqa: E402

aten = torch.ops.aten


def _every_form(x, w, b, rm, rv, rm2, rv2, rm3, rv3, rm4, rv4):
    return (torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-3),
            aten._native_batch_norm_legit_functional(x, w, b, rm2, rv2, True, 0.2, 1e-5),
            aten._batch_norm_with_update_functional(x, None, b, rm3, rv3, 0.1, 1e-4),
            aten.native_batch_norm(x, w, None, None, None, True, 0.1, 1e-5),
            torch.nn.functional.instance_norm(x, weight=w, bias=b, eps=1e-4),
            torch.nn.functional.instance_norm(x, rm4, rv4, w, b, use_input_stats=True, momentum=0.2, eps=1e-4))


@pytest.mark.parametrize("seed", [0, 1])
def test_training_batch_norm_matches_eager_and_updates_running_statistics(seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(3, 6))
    shape = tuple(int(s) for s in rng.integers(1, 6, size=rank))
    shape = shape[:2] + (shape[2] + 1,) + shape[3:]  # at least 2 values per instance: an unbiased variance
    channels = shape[1]
    x = torch.randn(shape) * 3 + 1
    w, b = torch.randn(channels), torch.randn(channels)
    stats = [t for _ in range(4) for t in (torch.randn(channels), torch.rand(channels) + 0.5)]
    eager_stats, compiled_stats = [t.clone() for t in stats], [t.clone() for t in stats]
    with torch.no_grad():
        expected = _every_form(x, w, b, *eager_stats)
        args = [x, w, b, *compiled_stats]
        actual = TensorKilnGraph(_every_form, args, BackendOptions())(*args)
    for a, e in zip(torch.utils._pytree.tree_leaves(actual), torch.utils._pytree.tree_leaves(expected)):
        assert a.shape == e.shape and a.dtype == e.dtype
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
    for a, e in zip(compiled_stats, eager_stats):  # written back after the call, as eager updates them
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
