"""Shared test configuration: hypothesis profiles and a seeded random generator per test.

`helpers.py` (the tolerance table and `assert_close`) and `strategies.py`
(`random_programs()`) sit next to this file; pytest puts this directory on
sys.path, so tests in sub-folders import them as `helpers` and `strategies`.

Hypothesis profiles (choose with HYPOTHESIS_PROFILE=...): `default` keeps the
suite fast; `thorough` runs ten times more examples per property; `ci` is
`default` with a fixed seed.

Backend: the front-end tests check tracing, caching and graphs, so by default
they run tk.jit graphs with the reference interpreter (the `reference_backend`
fixture; each front-end test module opts in with `pytestmark`). Set
TK_TEST_BACKEND=c to run the same tests through the compiled C backend; then
eager and jit results are compared at the dtype tolerance instead of exactly.
"""
from __future__ import annotations

import os
import sys
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The suite never reads the user's tuning records: a tuned blocking would change the kernels it checks.
os.environ.setdefault("TENSORKILN_TUNING_RECORDS", os.path.join(
    os.environ.get("TMPDIR", "/tmp"), f"tensorkiln-test-records-{os.getpid()}.jsonl"))

# Where the CPU has AVX512-BF16 the suite runs the bf16 kernels on it whether or not it outpaces float32
# FMAs there (kernels/bf16_dot_rate.py decides that for users): they are what the tests check.
os.environ.setdefault("TENSORKILN_BF16_DOT", "1")

settings.register_profile("default", deadline=None, max_examples=40, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=400)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="module")
def reference_backend():
    """Make tk.jit fall back to the reference interpreter (its documented no-C-compiler path)."""
    if os.environ.get("TK_TEST_BACKEND", "interpreter") == "c":
        yield "c"
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("tensorkiln.runtime.c_compiler.find_c_compiler", lambda: None)
        yield "interpreter"


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A numpy Generator seeded from the test's id, so every test is reproducible on its own."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def no_bf16_dot(monkeypatch):
    """The host described as a CPU without AVX512-BF16 (TENSORKILN_NO_BF16_DOT=1; a fresh target before
    and after)."""
    from tensorkiln.kernels.target import cpu_target
    monkeypatch.setenv("TENSORKILN_NO_BF16_DOT", "1")
    cpu_target.cache_clear()
    yield
    monkeypatch.undo()
    cpu_target.cache_clear()


def pytest_collection_modifyitems(items):
    """Tests that ask for the reference backend expect its fallback warning: not an error for them
    (a marker set at collection, before pytest reads a test's warning filters)."""
    for item in items:
        if "reference_backend" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.filterwarnings("ignore::tensorkiln.driver.executable.FallbackWarning"))
