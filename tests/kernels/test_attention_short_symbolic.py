"""Fused attention at a run-time length on both sides of SHORT_QUERIES: one program whose kernel takes
the short blocking up to that many queries and whole blocks past it, equal to the reference."""
from __future__ import annotations

import numpy as np

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.kernels.templates.attention import SHORT_QUERIES


def test_attention_with_a_padding_mask_at_short_and_long_run_time_lengths():
    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, mask)

    f = tk.jit(attend, dynamic={"q": {0: "batch", 2: "s"}, "k": {0: "batch", 2: "s"}, "v": {0: "batch", 2: "s"},
                                "mask": {0: "batch", 3: "s"}})
    rng = np.random.default_rng(0)
    for batch, s in [(2, 9), (3, SHORT_QUERIES), (2, SHORT_QUERIES + 1), (2, 2), (3, 70)]:
        q, k, v = (rng.standard_normal((batch, 3, s, 24)).astype(np.float32) for _ in range(3))
        mask = rng.random((batch, 1, 1, s)) > 0.3
        mask[..., 0] = True  # every row sees a key
        scores = np.where(mask, q @ k.transpose(0, 1, 3, 2) / np.sqrt(24), -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        expected = (weights / weights.sum(-1, keepdims=True)) @ v
        np.testing.assert_allclose(f(q, k, v, mask).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert f.compile_count == 1
    assert [k.kind for k in f.report(q, k, v, mask).kernels] == ["attention"]
