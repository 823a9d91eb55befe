"""`tensorkiln tune`: its argument checks, progress line and convergence plot (the search itself: test_tune_api)."""
from __future__ import annotations

import pytest

from tensorkiln.tools.cli import main
from tensorkiln.tools.tune_cli import convergence_plot, progress_bar
from tensorkiln.tune.api import KernelTuning, TuneResult
from tensorkiln.tune.measure import Measurement
from tensorkiln.tune.tuner import Trial, WorkloadResult


def synthetic_result() -> TuneResult:
    config = {"mr": 8}
    trials = [Trial(config, Measurement(True, 1.0, 1.0, 1.0), 0.1, is_default=True),
              Trial(config, Measurement(False, error="crashed"), 0.2),
              Trial(config, Measurement(True, 0.8, 1.0, 0.8), 0.3)]
    result = WorkloadResult("gemm:dtype=float32:m=8:n=8:k=8:panels=0", 1.0, 0.8, config, config, trials, True)
    return TuneResult([KernelTuning("k0_matmul", result.workload, result)], 1.0)


def test_an_unknown_model_is_named(capsys):
    assert main(["tune", "nonesuch"]) == 2
    assert "neither an .onnx file nor a zoo model (resnet18, mobilenetv2, bert, mlp)" in capsys.readouterr().err


def test_convergence_and_plot(tmp_path):
    result = synthetic_result()
    assert result.kernels[0].result.convergence() == [(1, 1.0), (2, 1.0), (3, 0.8)]
    pytest.importorskip("matplotlib")
    path = tmp_path / "plot.png"
    assert convergence_plot(result, str(path)) == f"convergence plot: {path}"
    assert path.read_bytes()[:4] == b"\x89PNG"
    nothing = tmp_path / "nothing.png"
    assert convergence_plot(TuneResult([], 0.0), str(nothing)) == "no convergence plot: no kernel was searched"
    assert not nothing.exists()  # no empty figure for a model with nothing to tune


def test_progress_line(capsys):
    result = synthetic_result()
    report = progress_bar(6)
    for trial in result.kernels[0].result.trials:
        report("k0_matmul", result.kernels[0].workload, result.kernels[0].result, trial)
    err = capsys.readouterr().err
    assert "3 trials" in err and "(failed: crashed)" in err and "best 0.800x of default" in err


def test_a_zoo_model_is_tuned_as_deployed():
    """Eval mode without gradients: the weights are constants, so the GEMMs read them in panels laid out
    at compile time (panels=1), the kernels `tensorkiln bench` times, not a training step's forward."""
    from tensorkiln.tools.tune_cli import zoo_model
    from tensorkiln.tune import kernel_workloads
    make, inputs = zoo_model("mlp", 64)
    workloads = [key for _, key in kernel_workloads(make(), *inputs) if key.startswith("gemm:")]
    assert workloads and all(key.endswith(":panels=1") for key in workloads), workloads


def test_two_builds_of_one_model_are_the_same_program():
    """What the final latency line calls 'the same C': two builds alike apart from where they were traced."""
    import numpy as np

    import tensorkiln as tk
    from tensorkiln.tools.tune_cli import same_program
    x = np.ones((4, 8), np.float32)
    first, second = tk.jit(lambda a: a * 2.0 + 1.0), tk.jit(lambda a: a * 2.0 + 1.0)
    other = tk.jit(lambda a: a * 3.0 - 1.0)
    for f in (first, second, other):
        f(x)
    assert same_program(first, second, (x,))
    assert not same_program(first, other, (x,))
