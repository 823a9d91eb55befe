"""The C fast path of warm calls (runtime/fastcall.c): used when the arguments pass as they are, and
never different in effect from the Python path it stands in for."""
from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.runtime import fastcall
from tensorkiln.runtime.c_compiler import compile_c

extension = fastcall.extension()
pytestmark = pytest.mark.skipif(extension is None, reason="the fast-call extension cannot be built here")


def test_warm_calls_go_through_the_c_caller_and_agree():
    f = tk.jit(lambda x, y: (x * y + 1.0, (x - y).sum()))
    rng = np.random.default_rng(0)
    x, y = rng.random((5, 7), np.float32), rng.random((5, 7), np.float32)
    f(x, y)
    f(x, y)
    assert f._native is not None
    for _ in range(3):
        product, total = f(x, y)
        np.testing.assert_allclose(product.numpy(), x * y + 1.0, rtol=1e-6)
        np.testing.assert_allclose(total.numpy(), (x - y).sum(), rtol=1e-5)


def test_arguments_the_caller_does_not_take_go_the_python_way():
    f = tk.jit(lambda x: x * 3.0)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    f(x)
    f(x)
    strided = np.arange(24, dtype=np.float32).reshape(3, 8)[:, ::2]
    np.testing.assert_array_equal(f(strided).numpy(), strided * 3.0)  # converted
    np.testing.assert_array_equal(f(tk.tensor(x)).numpy(), x * 3.0)  # an eager tensor is unwrapped
    w = tk.tensor(x, requires_grad=True)  # requires grad: the Python path's signature, not the caller's
    np.testing.assert_array_equal(f(w).numpy(), x * 3.0)
    np.testing.assert_array_equal(f(x.astype(np.float64)).numpy(), x * 3.0)  # another dtype: its own program


def test_a_parameter_changed_after_warm_up_is_seen():
    layer = tk.nn.Linear(4, 3)
    f = tk.jit(layer)
    x = np.ones((2, 4), np.float32)
    with tk.no_grad():
        f(x)
        before = f(x).numpy()
        layer.weight._value = layer.weight._value * 2.0  # an eager update replaces the array
        after = f(x).numpy()
    bias = layer.bias.numpy()
    np.testing.assert_allclose(after - bias, 2.0 * (before - bias), rtol=1e-5)


def test_a_failed_status_raises_and_releases_the_lock():
    library = compile_c("int tk_entry(void *const *args, void *arena) { (void)args; (void)arena; return 2; }")
    entry = ctypes.cast(ctypes.CDLL(library.path).tk_entry, ctypes.c_void_p).value
    lock = threading.Lock()

    class Failed(Exception):
        pass

    def raise_failure(status):
        raise Failed(f"status {status}")

    dtype = np.dtype(np.float32)
    caller = extension.Caller(entry, 0, (dtype,), ((3,),), (dtype,), ((3,),), (), lock, raise_failure, tk.Tensor)
    with pytest.raises(Failed, match="status 2"):
        caller(np.zeros(3, np.float32))
    assert not lock.locked()
    assert caller(np.zeros(4, np.float32)) is None  # another shape: not for this caller
    with lock:  # another thread is calling: the caller steps aside instead of waiting
        assert caller(np.zeros(3, np.float32)) is None
    caller.invalidate()
    assert caller(np.zeros(3, np.float32)) is None


def test_kept_results_are_never_overwritten_by_later_calls():
    f = tk.jit(lambda x: x + 1.0)
    x = np.zeros(1000, np.float32)
    results = [f(x + k) for k in range(5)]
    for k, r in enumerate(results):
        np.testing.assert_array_equal(r.numpy(), np.full(1000, k + 1.0, np.float32))


def test_it_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("TENSORKILN_NO_FASTCALL", "1")
    assert fastcall.extension.__wrapped__() is None
