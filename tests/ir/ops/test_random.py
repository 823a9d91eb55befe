"""The philox op: Philox4x32-10's known answers, compiled code against the numpy reference, statistics,
reproducibility, new numbers per call, thread-count independence, tk.rand/randn and dropout inside tk.jit."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.nn.functional as F
from tensorkiln.errors import DTypeError, ShapeError
from tensorkiln.frontend.random import philox
from tensorkiln.ir.ops.random import philox4x32

RNG = np.random.default_rng(11)
VARIANTS = [(d, t) for d in ("uniform", "normal") for t in (tk.float32, tk.float64)]


def test_philox4x32_10_gives_random123s_known_answers():
    cases = [  # (counter, key) -> words, from Random123's kat_vectors
        ([0, 0, 0, 0], (0, 0), [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
        ([0xFFFFFFFF] * 4, (0xFFFFFFFF, 0xFFFFFFFF), [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
        ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], (0xA4093822, 0x299F31D0),
         [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
    ]
    for counter, key, words in cases:
        assert [int(w) for w in philox4x32(counter, key)] == words


def _all_variants(shape):
    def draw(key, offset):
        return tuple(philox(key, offset, shape, dtype, distribution, stream=s)
                     for s, (distribution, dtype) in enumerate(VARIANTS))
    return tk.jit(draw)


@pytest.mark.parametrize("shape", [(1,), (17,), (3, 1, 5), (2, 33, 7), (0, 4), ()])
def test_compiled_numbers_are_the_references(shape):
    f = _all_variants(shape)
    for key, offset in [(0, 0), (int(RNG.integers(-2**63, 2**63 - 1)), 2**32 - 5),  # counter crosses a word
                        (int(RNG.integers(0, 2**31)), int(RNG.integers(-2**40, 2**40)))]:
        got = f(np.array(key, np.int64), np.array(offset, np.int64))
        for s, ((distribution, dtype), value) in enumerate(zip(VARIANTS, got)):
            expected = philox(key, offset, shape, dtype, distribution, stream=s).numpy()  # eager: the reference
            assert value.shape == shape and value.dtype == dtype
            if distribution == "uniform":  # integer arithmetic and one exact scaling: the same bits
                np.testing.assert_array_equal(value.numpy(), expected)
            else:  # libm's log and cos against numpy's: within a few ulp
                np.testing.assert_allclose(value.numpy(), expected, rtol=1e-6 if dtype == tk.float32 else 1e-12,
                                           atol=1e-6 if dtype == tk.float32 else 1e-12)
    assert f.compile_count == 1  # key and offset are inputs of the compiled code, not constants


def _ks_statistic(samples: np.ndarray, cdf) -> float:
    x = np.sort(samples.astype(np.float64))
    n = x.size
    f = cdf(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


_normal_cdf = np.vectorize(lambda v: 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))))


@pytest.mark.parametrize("dtype", [tk.float32, tk.float64])
def test_uniform_and_normal_statistics(dtype):
    # 2**16 numbers: the KS statistic's 1e-9 quantile is about 0.011, so 0.02 cannot fail by chance
    n = 2 ** 16
    f = tk.jit(lambda k, o: (philox(k, o, (n,), dtype, "uniform"), philox(k, o, (n,), dtype, "normal")))
    for key in (1, 12345):
        u, z = (t.numpy() for t in f(np.array(key), np.array(0)))
        assert u.min() >= 0 and u.max() < 1
        assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
        assert _ks_statistic(u, lambda x: x) < 0.02
        assert abs(z.mean()) < 0.03 and abs(z.var() - 1) < 0.05
        assert _ks_statistic(z[:4096], _normal_cdf) < 0.05  # 4096: erf per element in Python
        assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.03  # neighbours are not correlated


def test_rand_and_randn_in_compiled_code_draw_new_numbers_and_follow_manual_seed():
    @tk.jit
    def noisy(x):
        return x + tk.rand(4, 9), tk.randn(5, dtype=tk.float64)

    x = np.zeros((4, 9), np.float32)
    tk.manual_seed(5)
    first, second = [tuple(t.numpy() for t in noisy(x)) for _ in range(2)]
    assert not np.array_equal(first[0], second[0]) and not np.array_equal(first[1], second[1])
    tk.manual_seed(5)
    again = tuple(t.numpy() for t in noisy(x))
    np.testing.assert_array_equal(again[0], first[0])
    np.testing.assert_array_equal(again[1], first[1])
    tk.manual_seed(6)
    assert not np.array_equal(tuple(t.numpy() for t in noisy(x))[0], first[0])
    # the stream: key = the seed, offsets advancing by each draw's count
    np.testing.assert_array_equal(first[0], philox(5, 0, (4, 9)).numpy())
    np.testing.assert_array_equal(first[1], philox(5, 36, (5,), tk.float64, "normal").numpy())


def test_dropout_in_compiled_code_keeps_about_1_minus_p_and_differs_per_call():
    @tk.jit
    def drop(x):
        return F.dropout(x, 0.3, training=True)

    x = np.ones((64, 129), np.float32)
    a, b = drop(x).numpy(), drop(x).numpy()
    for y in (a, b):
        assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.7)}
        assert abs((y != 0).mean() - 0.7) < 0.03
    assert not np.array_equal(a, b)


_THREAD_SCRIPT = """
import numpy as np, tensorkiln as tk
from tensorkiln.frontend.random import philox
f = tk.jit(lambda k: (philox(k, 7, (96, 1001)), philox(k, 7, (96, 1001), tk.float64, "normal")))
u, z = f(np.array(99))
print(u.numpy().view(np.uint32).sum(dtype=np.uint64), z.numpy().view(np.uint64).sum(dtype=np.uint64))
"""


def test_numbers_do_not_depend_on_the_thread_count():
    outputs = []
    for threads in ("1", "3"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        done = subprocess.run([sys.executable, "-c", _THREAD_SCRIPT], env=env, capture_output=True, text=True,
                              timeout=300, check=True)
        outputs.append(done.stdout.strip())
    assert outputs[0] == outputs[1]
    u = philox(99, 7, (96, 1001)).numpy()
    assert outputs[0].split()[0] == str(u.view(np.uint32).sum(dtype=np.uint64))


def test_bad_operands_are_named():
    with pytest.raises(DTypeError, match="key must be a 0-d int64"):
        tk.frontend.tensor.apply("philox", [tk.tensor(np.zeros(2, np.int64)), tk.tensor(np.array(0))],
                                 shape=(3,), dtype=tk.float32, distribution="uniform", stream=0)
    with pytest.raises(DTypeError, match="float32 or float64"):
        philox(0, 0, (3,), tk.int32)
    with pytest.raises(ShapeError, match="non-negative"):
        philox(0, 0, (-1, 3))
