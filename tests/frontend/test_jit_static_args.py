"""Non-tensor arguments of a tk.jit function are part of its signature by value, never by identity."""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.frontend.jit import RecompileWarning

pytestmark = pytest.mark.usefixtures("reference_backend")


@dataclasses.dataclass(frozen=True)
class FrozenConfig:
    scale: float


@dataclasses.dataclass
class MutableConfig:  # eq=True makes it unhashable
    scale: float


class PlainConfig:  # hashable, but only by identity
    def __init__(self, scale):
        self.scale = scale


def scaled(x, cfg):
    return x * cfg.scale


def test_fresh_value_objects_never_run_a_stale_trace():
    f = tk.jit(scaled)
    x = np.ones(3, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecompileWarning)
        for i in range(200):  # each config is freed after its call: an id-keyed cache would reuse traces
            np.testing.assert_array_equal(f(x, FrozenConfig(float(i % 50))).numpy(), np.full(3, i % 50))


def test_equal_values_share_one_trace():
    f = tk.jit(scaled)
    x = np.ones(3, np.float32)
    f(x, FrozenConfig(2.0))
    f(x, FrozenConfig(2.0))
    assert f.cache_size() == 1


@pytest.mark.parametrize("config", [MutableConfig(2.0), PlainConfig(2.0), [MutableConfig(2.0)],
                                    {"cfg": PlainConfig(2.0)}], ids=["unhashable", "identity", "in list", "in dict"])
def test_values_comparable_only_by_identity_are_refused(config):
    f = tk.jit(lambda x, cfg: x * 2.0)
    with pytest.raises(TypeError, match=r"argument 'cfg'.*hashable by value.*Pass it as a tensor"):
        f(np.ones(3, np.float32), config)


def test_a_mutated_object_cannot_return_the_old_value():
    f = tk.jit(scaled)
    cfg = PlainConfig(2.0)
    with pytest.raises(TypeError, match="PlainConfig"):
        f(np.ones(3, np.float32), cfg)


def test_functions_are_static_arguments_by_identity():
    f = tk.jit(lambda x, fn: fn(x))
    x = tk.tensor(np.array([-1.0, 2.0], np.float32))
    np.testing.assert_array_equal(f(x, tk.relu).numpy(), [0.0, 2.0])
    np.testing.assert_array_equal(f(x, tk.abs).numpy(), [1.0, 2.0])
    assert f.cache_size() == 2


def test_static_values_changing_on_every_call_warn_past_the_limit():
    f = tk.jit(scaled, recompile_limit=3)
    x = np.ones(2, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileWarning)
        for i in range(3):
            f(x, FrozenConfig(float(i)))
        f(x, FrozenConfig(0.0))  # seen before: no compile, no warning
    with pytest.warns(RecompileWarning, match=r"4th program.*non-tensor argument has a new value.*as tensors"):
        f(x, FrozenConfig(3.0))


def test_keyword_values_are_named_in_the_error():
    f = tk.jit(lambda x, **kw: x)
    with pytest.raises(TypeError, match=r"keyword\['opts'\]"):
        f(np.ones(1, np.float32), opts=PlainConfig(1.0))
