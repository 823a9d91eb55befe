"""The GEMM template's search space: the analytic blocking is a member, every point is legal and correct."""
from __future__ import annotations

import random

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.templates.gemm import analytic_gemm_blocking, gemm_blocking, gemm_workload
from tensorkiln.kernels.templates.spaces import space_of
from tensorkiln.kernels.tuned import config_of, tuning_log, using_configs

SHAPES = [(1024, 1024, 1024, False), (37, 45, 70, False), (5, 129, 64, False), (300, 17, 33, True),
          (64, 768, 3072, True), (1, 4096, 4096, False)]


@pytest.mark.parametrize("m,n,k,panels", SHAPES)
def test_space_holds_the_analytic_choice(m, n, k, panels):
    space = space_of(gemm_workload(m, n, k, "float32", panels))
    default = config_of(analytic_gemm_blocking(m, n, k, "float32", panels))
    assert space.default == default
    assert space.contains(default)
    assert all(default[name] in values for name, values in space.knobs.items())
    assert space.size > 1


@pytest.mark.parametrize("m,n,k,panels", SHAPES)
def test_samples_mutations_and_crossovers_are_legal(m, n, k, panels):
    space = space_of(gemm_workload(m, n, k, "float32", panels))
    rng = random.Random(m * n + k)
    points = [space.sample(rng) for _ in range(30)]
    points += [space.mutate(p, rng) for p in points[:10]] + [space.crossover(points[0], p, rng) for p in points[1:10]]
    assert all(space.contains(p) for p in points)
    assert len({space.key(p) for p in points}) > 5
    if k <= space.default["kc"]:  # one depth block stays one: no partial sums through the output
        assert all(p["kc"] >= k for p in points)
    if panels:  # a B laid out in panels keeps its tile
        assert {(p["mr"], p["nr"]) for p in points} == {(space.default["mr"], space.default["nr"])}


def test_an_illegal_record_is_not_used():
    key = gemm_workload(256, 256, 256, "float32")
    bad = {"mr": 16, "nr": 64, "kc": 256, "mc": 256, "nc": 256, "split": "auto"}  # 64 + 4 + 1 registers
    with using_configs({key: bad}), tuning_log() as log:
        assert gemm_blocking(256, 256, 256, "float32") == analytic_gemm_blocking(256, 256, 256, "float32")
    assert "not a legal configuration" in log[0].source


def _random_shape(rng):
    m, n, k = (int(x) for x in rng.integers(33, 200, 3))  # odd sizes: tails on every blocking
    return m, n, k  # above 32^3 multiply-adds: the BLIS GEMM


@pytest.mark.parametrize("panels", [False, True])
def test_tuned_configurations_change_the_kernel_and_stay_correct(rng, panels):
    for _ in range(3):
        m, n, k = _random_shape(rng)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        key = gemm_workload(m, n, k, "float32", panels)
        space = space_of(key)
        config = space.sample(random.Random(int(rng.integers(1 << 30))))
        if config == space.default:
            config = space.mutate(config, random.Random(1))
        weights = tk.tensor(b)
        fn = (lambda x: x @ weights) if panels else (lambda x, y: x @ y)
        args = (a,) if panels else (a, b)
        with using_configs({}):
            default = tk.jit(fn)
            default_ir = [kk.loop_ir for kk in default.report(*args).kernels]
        with using_configs({key: config}):
            tuned = tk.jit(fn)
            out = tuned(*args).numpy()
            report = tuned.report(*args)
        assert [kk.loop_ir for kk in report.kernels] != default_ir, (key, config)
        assert any(use.startswith(f"{key} tuned:") for kk in report.kernels for use in kk.tuning)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_unroll_prefetch_and_split_k_candidates_are_correct(rng):
    """The micro-kernel's depth unroll, B's prefetch distance and the depth cut, on random tall-K shapes."""
    for unroll, prefetch, chunks in ((2, 4, 2), (4, 16, 3), (8, 32, 8), (4, 0, 1)):
        m, n = (int(x) for x in rng.integers(33, 90, 2))  # above 32^3 multiply-adds: the BLIS GEMM
        k = int(rng.integers(100, 700))  # tails past every unroll and chunk
        key = gemm_workload(m, n, k, "float32")
        space = space_of(key)
        config = {**space.default, "ku": unroll, "pf": prefetch, "ksplit": chunks}
        assert space.legal(config), config
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        with using_configs({key: config}):
            fn = tk.jit(lambda x, y: x @ y)
            out = fn(a, b).numpy()
            uses = [use for kernel in fn.report(a, b).kernels for use in kernel.tuning]
        assert any(use.startswith(f"{key} tuned:") and f"ku={unroll}" in use for use in uses), (key, config, uses)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-5 * k)


def test_new_knobs_are_quiet_at_their_neutral_values():
    key = gemm_workload(64, 64, 512, "float32")
    with using_configs({}), tuning_log() as log:
        gemm_blocking(64, 64, 512, "float32")
    assert "ku=" not in log[0].comment_line() and "split=auto" in log[0].comment_line()
    space = space_of(key)
    assert {"ku", "pf", "ksplit"} <= set(space.knobs) and 8 in space.knobs["ksplit"]  # K >= max(M, N): tall


def test_a_linear_layers_transposed_weight_is_a_workload_of_its_own(rng):
    """x @ w.T with w an input [N, K] packs B by a gather: its key says bt=1, its benchmark times that very
    kernel, and a record for it is used there and nowhere else."""
    from tensorkiln.tune import kernel_workloads
    from tensorkiln.tune.workloads import benchmark_of
    m, n, k = (int(x) for x in rng.integers(33, 150, 3))
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    key = gemm_workload(m, n, k, "float32", b_transposed=True)
    assert key.endswith(":bt=1") and gemm_workload(m, n, k, "float32") + ":bt=1" == key
    assert gemm_workload(m, n, k, "float32", True, b_transposed=True).endswith("panels=1")  # panels: no pack
    assert [w_ for _, w_ in kernel_workloads(tk.jit(lambda x, y: x @ y.T), a, w)] == [key]
    assert [w_ for _, w_ in kernel_workloads(tk.jit(lambda x, y: x @ y), a, w.T.copy())] == [key[:-len(":bt=1")]]
    bench = benchmark_of(key)
    assert bench.inputs[1].shape == (n, k)
    default = space_of(key).default
    config = {**default, "mc": default["mr"], "nc": default["nr"]}  # small blocks: many packs of B's gather
    assert space_of(key).legal(config)
    with using_configs({key: config}):
        fn = bench.build(config)
        uses = [use for kernel in fn.report(*bench.inputs).kernels for use in kernel.tuning]
        assert any(use.startswith(f"{key} tuned:") for use in uses), uses
        assert np.max(np.abs(fn(*bench.inputs).numpy() - bench.reference)) <= bench.tolerance
