"""f.profile(): per-kernel times from a timing build of the same program."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.errors import TensorKilnError
from tensorkiln.driver.profile import KernelProfile


def test_profile_lists_every_kernel_with_its_time():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((64, 256), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)
    f = tk.jit(lambda x, w: (x @ w).relu().softmax(-1))
    expected = f(x, w).numpy()
    profile = f.profile(x, w, repeat=3)
    assert isinstance(profile, KernelProfile) and profile.repeat == 3
    names = [k.name for k in f.report(x, w).kernels]
    assert [k.name for k in profile.kernels] == names
    assert all(k.seconds > 0 for k in profile.kernels)
    assert profile.total_seconds == pytest.approx(sum(k.seconds for k in profile.kernels))
    assert any("matmul" in k.ops for k in profile.kernels)
    text = str(profile)
    assert names[0][:28] in text and "ms" in text
    np.testing.assert_array_equal(f(x, w).numpy(), expected)  # the function's own library is untouched


def test_profile_of_a_training_step_leaves_parameters_alone():
    lin = tk.nn.Linear(8, 4)
    opt = tk.optim.SGD(lin.parameters(), lr=0.5)
    x, y = np.ones((16, 8), np.float32), np.zeros(16, np.int64)

    @tk.jit
    def step(x, y):
        loss = F.cross_entropy(lin(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step(x, y)
    before = lin.weight.numpy().copy()
    profile = step.profile(x, y, repeat=2)
    assert len(profile.kernels) >= 2
    np.testing.assert_array_equal(lin.weight.numpy(), before)


def test_profile_needs_compiled_code():
    f = tk.jit(lambda x: x + 1, backend="interpreter")
    with pytest.raises(TensorKilnError, match="reference interpreter"):
        f.profile(np.ones(3, np.float32))


def test_profile_table_prints_long_names_and_precisions_whole():
    """The table's columns widen to their longest entry: a precision is never cut short."""
    from tensorkiln.driver.profile import KernelTime
    long_name = "k12_matmul_add_gelu_mul_add_reshape_permute"
    profile = KernelProfile([KernelTime(long_name, "contraction", ["matmul"], 2e-3, "bf16 operands (fp32 kernel)"),
                             KernelTime("k0_add", "injective", ["add"], 1e-3, "fp32", tuned=True)], repeat=4)
    lines = str(profile).splitlines()
    assert "bf16 operands (fp32 kernel)" in lines[2] and long_name in lines[2]
    assert lines[3].endswith("[tuned]")
    # the columns line up: each row's time starts where the header's "ms" column does
    assert lines[1].index("ms") + 2 == lines[2].index("2.000") + 5 == lines[3].index("1.000") + 5
