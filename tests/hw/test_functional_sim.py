"""The cycle-level simulator computes A @ B exactly, in the closed form's cycles."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorkiln.hw.arch import ArrayConfig
from tensorkiln.hw.dataflow import plan_folds, sram_traffic
from tensorkiln.hw.errors import AccelConfigError
from tensorkiln.hw.functional_sim import run_gemm
from tensorkiln.hw.layer import Gemm, Layer
from tensorkiln.hw.model import simulate_layer


@given(m=st.integers(1, 9), k=st.integers(1, 9), n=st.integers(1, 9),
       rows=st.integers(1, 5), cols=st.integers(1, 5),
       dataflow=st.sampled_from(["ws", "os", "is"]), seed=st.integers(0, 2**32 - 1))
def test_array_computes_the_product_in_the_analytical_cycles(m, k, n, rows, cols, dataflow,
                                                              seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-9, 10, (m, k))
    b = rng.integers(-9, 10, (k, n))
    result = run_gemm(a, b, rows, cols, dataflow)
    np.testing.assert_array_equal(result.output, a @ b)

    plan = plan_folds(Gemm(m=m, n=n, k=k), rows, cols, dataflow)
    assert result.folds == plan.folds
    assert result.last_cycle == plan.compute_cycles
    traffic = sram_traffic(Gemm(m=m, n=n, k=k), plan)
    assert (result.ifmap_reads, result.filter_reads, result.ofmap_writes,
            result.ofmap_reads) == (traffic.ifmap_reads, traffic.filter_reads,
                                    traffic.ofmap_writes, traffic.ofmap_reads)


@pytest.mark.parametrize("dataflow", ["ws", "os", "is"])
def test_float_operands(dataflow, rng):
    a = rng.standard_normal((7, 5))
    b = rng.standard_normal((5, 6))
    result = run_gemm(a, b, 3, 4, dataflow)
    np.testing.assert_allclose(result.output, a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dataflow", ["ws", "os", "is"])
def test_convolution_through_im2col_on_the_array(dataflow, rng):
    # A 3x3, stride-2 convolution over a padded 9x9x2 input with 3 filters, mapped to
    # a GEMM the way the model maps it (rows: (filter row, filter col, channel)).
    layer = Layer("conv", 9, 9, 3, 3, 2, 3, 2, 2)
    x = rng.integers(-4, 5, (9, 9, 2))
    w = rng.integers(-4, 5, (3, 3, 2, 3))
    oh, ow = layer.ofmap_h, layer.ofmap_w
    im2col = np.array([x[i * 2:i * 2 + 3, j * 2:j * 2 + 3, :].reshape(-1)
                       for i in range(oh) for j in range(ow)])
    direct = np.array([np.einsum("ijc,ijcf->f", x[i * 2:i * 2 + 3, j * 2:j * 2 + 3], w)
                       for i in range(oh) for j in range(ow)])
    result = run_gemm(im2col, w.reshape(-1, 3), 4, 4, dataflow)
    np.testing.assert_array_equal(result.output, direct)
    model = simulate_layer(layer, ArrayConfig(rows=4, cols=4), dataflow)
    assert result.last_cycle == model.compute_cycles


def test_bad_shapes_are_refused():
    with pytest.raises(AccelConfigError, match="M x K"):
        run_gemm(np.ones((2, 3)), np.ones((4, 2)), 2, 2, "ws")
    with pytest.raises(AccelConfigError, match="dataflow"):
        run_gemm(np.ones((2, 3)), np.ones((3, 2)), 2, 2, "rs")
