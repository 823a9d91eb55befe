"""Recompilation is visible and bounded: warnings past recompile_limit name what changed, cache_size()
counts the programs held, and cache_limit releases the least recently used ones."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.errors import TensorKilnError
from tensorkiln.frontend.recompiles import RecompileWarning, describe_change, ordinal


def _loaded_libraries() -> set[str]:
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps if line.rstrip().endswith(".so") and "/tensorkiln" in line}


def test_compiles_past_the_limit_warn_naming_argument_and_dimension():
    def scale(x, y):
        return x * 2 + y

    f = tk.jit(scale, recompile_limit=2, dynamic=False)  # one program per shape (no size symbols)
    y = np.ones(3, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileWarning)
        f(np.ones((1, 3), np.float32), y)
        f(np.ones((2, 3), np.float32), y)
    with pytest.warns(RecompileWarning, match=r"scale compiled its 3rd program \(recompile_limit=2\) because "
                                              r"argument 'x' dimension 0: 2 -> 5"):
        f(np.ones((5, 3), np.float32), y)
    with pytest.warns(RecompileWarning, match=r"4th program.*argument 'x' dtype float32 -> float64"):
        f(np.ones((5, 3), np.float64), y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileWarning)
        f(np.ones((2, 3), np.float32), y)  # held: no compile, no warning
    assert f.cache_size() == 4


def test_describe_change_names_every_kind_of_difference():
    old = ((((2, 3), "float32"), ((4,), "int64")), ((), ()), True, None)
    new = ((((2, 7), "float32"), ((4, 1), "int64")), ((1,), ()), False, None)
    text = describe_change(old, new, ["x", "idx"])
    assert "argument 'x' dimension 1: 3 -> 7" in text
    assert "argument 'idx' shape [4] -> [4, 1]" in text
    assert "non-tensor argument" in text and "gradient mode" in text
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 103)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "103rd"]


def test_cache_limit_releases_the_least_recently_used_program():
    f = tk.jit(lambda x: x * 3 - 1, cache_limit=2, recompile_limit=100, dynamic=False)
    arrays = {n: np.arange(n, dtype=np.float32) for n in (3, 4, 5)}
    f(arrays[3])
    f(arrays[4])
    f(arrays[3])  # now 4 is the least recently used
    old = f.report(arrays[4])  # a lookup uses it: 3 becomes the least recently used
    f(arrays[5])
    assert f.cache_size() == 2
    held = {entry.key[0][0][0] for entry in f._programs()}
    assert held == {(4,), (5,)}
    for n, x in arrays.items():  # an evicted signature compiles again (from the on-disk cache) and is right
        np.testing.assert_array_equal(f(x).numpy(), x * 3 - 1)
    assert f.cache_size() == 2
    assert old.library_path  # the report outlives the program


def test_libraries_held_stay_bounded_over_many_shapes():
    f = tk.jit(lambda x: (x + 1.5) * x, cache_limit=3, recompile_limit=1000, dynamic=False)
    before = _loaded_libraries()
    for n in range(1, 21):
        x = np.linspace(-1, 1, n, dtype=np.float32)
        np.testing.assert_allclose(f(x).numpy(), (x + 1.5) * x, rtol=1e-6)
    assert f.cache_size() == 3
    assert len(_loaded_libraries() - before) <= 3


def test_a_released_program_raises_instead_of_crashing():
    f = tk.jit(lambda x: x + 1, cache_limit=1, dynamic=False)
    x = np.ones(4, np.float32)
    f(x)
    compiled = f._programs()[0].compiled
    f(np.ones(5, np.float32))  # evicts the first
    with pytest.raises(TensorKilnError, match="released"):
        compiled([x])


@pytest.mark.parametrize("option, value", [("recompile_limit", 0), ("recompile_limit", True),
                                           ("cache_limit", 0), ("cache_limit", 2.5)])
def test_limits_are_checked(option, value):
    with pytest.raises(ValueError, match=option):
        tk.jit(lambda x: x, **{option: value})
