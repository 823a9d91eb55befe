"""torch.compile graphs that write their inputs in place (a key/value cache, a step counter)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorkiln as tk  # noqa: E402
from tensorkiln.importers.torch import STATS  # noqa: E402


def _cache_step(cache: torch.Tensor, counter: torch.Tensor, position: torch.Tensor, update: torch.Tensor):
    """One decode step of a static cache: write the new rows, count the step, attend over the cache."""
    cache.index_copy_(2, position, update)
    counter.add_(1)
    scores = (update @ cache.transpose(-1, -2)).softmax(-1)
    return scores @ cache * counter


@pytest.mark.parametrize("shape,steps", [((1, 2, 7, 5), 3), ((2, 1, 9, 1), 4), ((1, 3, 17, 19), 2)])
def test_inputs_written_in_place_match_eager_after_every_call(shape, steps):
    rng = np.random.default_rng(sum(shape))
    cache = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
    counter = torch.zeros((), dtype=torch.int64)
    cache_ref, counter_ref = cache.clone(), counter.clone()
    torch._dynamo.reset()
    STATS.clear()
    compiled = torch.compile(_cache_step, backend="tensorkiln", dynamic=False)
    for step in range(steps):
        position = torch.tensor([step % shape[2]])
        update = torch.from_numpy(rng.standard_normal((shape[0], shape[1], 1, shape[3]), dtype=np.float32))
        want = _cache_step(cache_ref, counter_ref, position, update)
        with torch.no_grad():
            got = compiled(cache, counter, position, update)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(cache, cache_ref, rtol=0, atol=0)  # written once per call, not also when traced
        assert counter.item() == counter_ref.item() == step + 1
    assert STATS["compiles"] == 1 and STATS.get("eager_calls", 0) == 0, dict(STATS)


class _Accumulate(torch.nn.Module):
    def forward(self, total: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        total.add_(x)
        return total * 2


def test_from_torch_refuses_a_program_that_writes_its_inputs_and_names_them():
    with pytest.raises(tk.UnsupportedOpError, match="writes its input.*total.*in place"):
        tk.from_torch(_Accumulate(), (torch.zeros(3), torch.ones(3)))
