"""A warmed compiled call (tk.jit's fast path) still handles every changed argument as a cold one does."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.errors import DTypeError, ShapeError


def _warm(f, *args, calls: int = 3):
    for _ in range(calls):
        f(*args)


def test_a_non_contiguous_view_after_warm_up_is_converted():
    f = tk.jit(lambda x: x * 2 + 1)
    x = np.arange(16, dtype=np.float32)
    _warm(f, x)
    view = np.arange(32, dtype=np.float32)[::2]  # the same shape and dtype, strided
    np.testing.assert_array_equal(f(view).numpy(), view * 2 + 1)
    np.testing.assert_array_equal(f(x).numpy(), x * 2 + 1)


def test_a_new_shape_or_dtype_after_warm_up_compiles_its_own_signature():
    f = tk.jit(lambda x: x * 2 + 1)
    _warm(f, np.ones(16, np.float32))
    y = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(f(y).numpy(), y * 2 + 1)
    z = np.arange(16, dtype=np.float64)
    result = f(z)
    assert result.dtype == tk.float64
    np.testing.assert_array_equal(result.numpy(), z * 2 + 1)
    assert f.cache_size() == 3


def test_an_array_whose_shape_changes_in_place_is_rechecked():
    f = tk.jit(lambda x: x + 1)
    x = np.zeros(16, np.float32)
    _warm(f, x)
    x.shape = (4, 4)  # the same object, a new shape: a new signature
    np.testing.assert_array_equal(f(x).numpy(), np.ones((4, 4), np.float32))


def test_a_read_only_donated_array_after_warm_up_is_left_alone():
    f = tk.jit(lambda c: c * 2, donate_argnums=0)
    cache = np.ones(8, np.float32)
    _warm(f, cache, calls=1)
    assert np.shares_memory(f(cache).numpy(), cache)  # written in place while writable
    frozen = np.full(8, 3, np.float32)
    frozen.flags.writeable = False
    result = f(frozen)
    assert not np.shares_memory(result.numpy(), frozen)
    np.testing.assert_array_equal(frozen, np.full(8, 3, np.float32))
    np.testing.assert_array_equal(result.numpy(), np.full(8, 6, np.float32))


def test_an_index_out_of_range_after_warm_up_raises():
    table = tk.tensor(np.arange(10, dtype=np.float32))
    f = tk.jit(lambda i: table[i])
    _warm(f, np.array([1, 2], np.int64))
    with pytest.raises(IndexError):
        f(np.array([1, 10], np.int64))
    np.testing.assert_array_equal(f(np.array([3, -1], np.int64)).numpy(), [3, 9])


def test_a_held_result_is_not_overwritten_by_the_next_warm_call():
    f = tk.jit(lambda x: x * 2 + 1)
    x = np.arange(16, dtype=np.float32)
    _warm(f, x)
    first = f(x)
    second = f(x + 1)
    np.testing.assert_array_equal(first.numpy(), x * 2 + 1)
    np.testing.assert_array_equal(second.numpy(), (x + 1) * 2 + 1)


def test_the_module_still_rejects_wrong_arrays_after_warm_up():
    f = tk.jit(lambda x: x * 2 + 1)
    x = np.arange(16, dtype=np.float32)
    _warm(f, x)
    module = next(iter(f._cache.values())).compiled.module
    out = np.empty(16, np.float32)
    module(x, out)
    with pytest.raises(DTypeError):
        module(x.astype(np.float64), out)
    with pytest.raises(ShapeError):
        module(x[:8].copy(), out)
    with pytest.raises(ValueError):
        module(np.arange(32, dtype=np.float32)[::2], out)
    with pytest.raises(ValueError):
        module(x, x)  # the output overlaps the input
    frozen = np.empty(16, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError):
        module(x, frozen)


def test_warm_calls_from_several_threads_each_get_their_own_result():
    f = tk.jit(lambda x: x * 2 + 1)
    _warm(f, np.zeros(64, np.float32))
    errors = []

    def work(seed: int) -> None:
        x = np.full(64, seed, np.float32)
        for _ in range(300):
            result = f(x).numpy()
            if not np.array_equal(result, x * 2 + 1):
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_warm_calls_return_lists_tuples_and_named_tuples_as_traced():
    import collections
    Pair = collections.namedtuple("Pair", "total product")
    functions = {list: tk.jit(lambda a, b: [a + b, a * b]), tuple: tk.jit(lambda a, b: (a + b, a * b)),
                 Pair: tk.jit(lambda a, b: Pair(a + b, a * b)),
                 "swapped": tk.jit(lambda a, b: (a * b, a + b)), "nested": tk.jit(lambda a, b: (a + b, [a * b]))}
    rng = np.random.default_rng(3)
    for step in range(4):  # the later calls run through the C caller
        a, b = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
        for kind, f in functions.items():
            result = f(a, b)
            if kind == "swapped":
                np.testing.assert_allclose(result[0].numpy(), a * b)
                np.testing.assert_allclose(result[1].numpy(), a + b)
            elif kind == "nested":
                assert type(result) is tuple and type(result[1]) is list
                np.testing.assert_allclose(result[1][0].numpy(), a * b, rtol=1e-6)
            else:
                assert type(result) is kind
                np.testing.assert_allclose(result[0].numpy(), a + b, rtol=1e-6)
                np.testing.assert_allclose(result[1].numpy(), a * b, rtol=1e-6)


def test_nested_lists_and_tuples_of_arrays_take_the_fast_path(monkeypatch):
    """A decode step's caches (a list of tuples of arrays): warm calls skip the full lookup, and a
    changed nesting (tuple for list, another length, another shape inside) is a signature of its own."""
    f = tk.jit(lambda xs, y: [a * b + y for a, b in xs])
    a, b, y = (np.arange(6, dtype=np.float32).reshape(2, 3) + k for k in range(3))
    _warm(f, [(a, b), (b, a)], y)
    full_lookup = f._lookup
    monkeypatch.setattr(f, "_lookup", lambda *args, **kwargs: pytest.fail("a warm call took the full lookup"))
    got = f([(b, b), (a, a)], y)
    np.testing.assert_array_equal(got[0].numpy(), b * b + y)
    np.testing.assert_array_equal(got[1].numpy(), a * a + y)
    monkeypatch.setattr(f, "_lookup", full_lookup)
    for args in ([[a, b], (b, a)], [(a, b)], [(a, b), (b, a), (a, a)], [(a, b), (b, a[:1])]):
        want = [u * v + y for u, v in args]
        for g, w in zip(f(args, y), want):
            np.testing.assert_array_equal(g.numpy(), w)
    assert f.cache_size() == 5


def test_a_non_tensor_inside_a_list_leaves_the_fast_path():
    f = tk.jit(lambda xs: xs[0] * xs[1])
    x = np.ones(4, np.float32)
    _warm(f, [x, 2.0])
    np.testing.assert_array_equal(f([x, 3.0]).numpy(), x * 3.0)  # a static value: its own trace
