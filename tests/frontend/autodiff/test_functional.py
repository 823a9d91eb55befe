"""tk.vjp: the vector-Jacobian product, eager and inside tk.jit."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk


def test_vjp_is_the_gradient_of_the_cotangent_weighted_sum():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    c = rng.standard_normal((3, 2)).astype(np.float32)
    out, pullback = tk.vjp(lambda x, y: (x @ y).tanh(), tk.tensor(a), tk.tensor(b))
    np.testing.assert_allclose(out.numpy(), np.tanh(a @ b), rtol=1e-5)
    ga, gb = pullback(c)
    expected = tk.grad(lambda x, y: ((x @ y).tanh() * tk.tensor(c)).sum(), argnums=(0, 1))(tk.tensor(a), tk.tensor(b))
    np.testing.assert_allclose(ga.numpy(), expected[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gb.numpy(), expected[1].numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cotangent has shape"):
        pullback(np.ones((2, 3), np.float32))
    jitted = tk.jit(lambda x, y, g: tk.vjp(lambda p: (p * y).sin(), x)[1](g)[0])
    np.testing.assert_allclose(jitted(a, a, a).numpy(), np.cos(a * a) * a * a, rtol=1e-5, atol=1e-6)
