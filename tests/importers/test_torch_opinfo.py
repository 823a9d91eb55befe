"""PyTorch's OpInfo samples through tensorkiln's compiled torch path: a bounded, representative subset.

`make opinfo` runs every OpInfo (and Inductor on the same samples); this test
runs the first samples of a few OpInfos that cover the lowering families
(elementwise with broadcasting, scans and sorting, indexing and scattering,
resampling and padding, normalization), at OpInfo's tolerances. No sample may
give a wrong result, and each listed OpInfo must compile at least one sample.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal needs it

from tensorkiln.tools import opinfo_conformance as conformance  # noqa: E402

SUBSET = ["add", "atan2", "fmod", "cumsum", "sort", "topk", "scatter_add", "index_put", "diagonal",
          "nn.functional.interpolate.bilinear", "nn.functional.pad.reflect", "nn.functional.group_norm"]
SAMPLES_PER_OP = 1


@pytest.fixture(scope="module")
def report():
    return conformance.run(SUBSET, SAMPLES_PER_OP)


def test_no_sample_gives_a_wrong_result(report):
    failed = [f"{r.op} #{r.sample}: {r.detail}" for r in report.tensorkiln if r.outcome == "failed"]
    assert not failed, "\n".join(failed)


def test_every_op_of_the_subset_compiles(report):
    compiled = {r.op.split("[")[0] for r in report.tensorkiln if r.outcome == "passed"}
    assert set(SUBSET) <= compiled, f"no sample passed for {sorted(set(SUBSET) - compiled)}"


def test_a_wrong_result_is_reported_as_a_failure():
    x = torch.arange(4.0)
    outcome, detail = conformance.check_sample(lambda fn, tensors: fn(*tensors) + 1, torch.neg, [x], torch.neg(x))
    assert outcome == "failed" and "output 0" in detail


def test_inductor_passes_through_aten_fallback_kernels_are_counted_apart():
    """Inductor has no lowering for the FFT: its generated code calls ATen's kernel, and the report says so."""
    report = conformance.run(["fft.rfft", "add"], 1, inductor=True)
    details = {r.op.split("[")[0]: r for r in report.inductor}
    assert details["fft.rfft"].outcome == "passed" and details["fft.rfft"].detail.startswith(conformance.FALLBACK_NOTE)
    assert details["add"].outcome == "passed" and details["add"].detail == ""
    assert "1 passed through ATen kernels" in conformance.summary(report)


def test_refused_samples_rerun_with_the_backends_fallback():
    report = conformance.run(["fft.rfft", "add"], 1, fallback=True)
    strict = {r.op.split("[")[0]: r for r in report.tensorkiln}
    rerun = {r.op.split("[")[0]: r for r in report.tensorkiln_fallback}
    assert strict["fft.rfft"].outcome == "refused" and strict["add"].outcome == "passed"
    assert rerun["fft.rfft"].outcome == "passed" and "_fft_r2c" in rerun["fft.rfft"].detail
    assert rerun["add"].outcome == "passed" and rerun["add"].detail == ""
