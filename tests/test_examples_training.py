"""The training examples run as tests: the straight-through estimator and digits training (small budget)."""
from __future__ import annotations

import importlib.util
import os

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_straight_through_example():
    assert _load("straight_through").main(steps=60) >= 0.95


def test_train_digits_example():
    pytest.importorskip("sklearn")
    digits = _load("train_digits")
    assert digits.main(epochs=12, models=("mlp",))["mlp"] >= 0.97
    assert digits.main(epochs=2, models=("cnn",))["cnn"] >= 0.85  # the full run (30 epochs) reaches > 0.97
