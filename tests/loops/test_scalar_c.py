"""loops/scalar_c.py: one scalar Python algorithm run by numpy and translated to C give the same values."""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from tensorkiln.loops.scalar_c import fabs, isnan, polevl, scalar_function, sqrt

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

COEFFICIENTS = (0.5, -1.25, 3.0)


@scalar_function
def _helper(x):
    """A callee."""
    return sqrt(fabs(x)) + 1.0


@scalar_function
def _everything(x, n):
    """Each construct of the subset once: tables, loops both ways, while, break, continue, elif, a callee."""
    if isnan(x):
        return x
    total = polevl(x, COEFFICIENTS)
    for k in range(0, int(n)):
        if k == 2:
            continue
        total += k * COEFFICIENTS[k - 3 * int(k / 3.0)]
    for k in range(3, 0, -1):
        total -= COEFFICIENTS[k - 1]
    steps = 0.0
    while total > 100.0:
        total = total / 3.0
        steps += 1.0
        if steps > 50.0:
            break
    if x < -1.0:
        total = -total
    elif x < 1.0:
        total = total * 2.0
    else:
        total = _helper(total) + steps
    return total if n >= 0.0 else -1.0 - total


def _compiled(function, tmp_path):
    source = "#include <math.h>\n#include <stdint.h>\n" + "\n\n".join(function.c_pieces()) + (
        f"\ndouble exported(double x, double n) {{ return {function.c_name}(x, n); }}\n"
        f"float exported_f(float x, float n) {{ return {function.c_name}f(x, n); }}\n")
    (tmp_path / "f.c").write_text(source)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(tmp_path / "f.so"), str(tmp_path / "f.c"), "-lm"],
                   check=True)
    library = ctypes.CDLL(str(tmp_path / "f.so"))
    library.exported.restype, library.exported.argtypes = ctypes.c_double, [ctypes.c_double] * 2
    library.exported_f.restype, library.exported_f.argtypes = ctypes.c_float, [ctypes.c_float] * 2
    return library


def test_the_translation_computes_what_numpy_computes(tmp_path, rng):
    library = _compiled(_everything, tmp_path)
    xs = np.concatenate([rng.uniform(-50, 50, 40), [0.0, -1.0, 1.0, np.nan, np.inf]])
    ns = np.concatenate([rng.integers(-2, 9, 40), [0, 3, 5, 1, 2]]).astype(np.float64)
    expected = _everything.reference(xs, ns)
    got = np.array([library.exported(x, n) for x, n in zip(xs, ns)])
    np.testing.assert_allclose(got, expected, rtol=1e-14, equal_nan=True)
    got32 = np.array([library.exported_f(x, n) for x, n in zip(xs, ns)], dtype=np.float32)
    np.testing.assert_allclose(got32, _everything.reference(xs.astype(np.float32), ns.astype(np.float32)),
                               rtol=1e-6, equal_nan=True)


def test_code_outside_the_subset_is_refused():
    @scalar_function
    def uses_a_list(x):
        """Not a scalar algorithm."""
        values = [x, x]
        return values[0]

    with pytest.raises(SyntaxError, match="uses_a_list: .* outside the scalar subset"):
        uses_a_list.c_pieces()
