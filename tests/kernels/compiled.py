"""Helpers for backend tests: compile a function with tk.jit and compare with the reference interpreter."""
from __future__ import annotations

import numpy as np

import tensorkiln as tk
from tensorkiln import dtypes as dt
from tensorkiln.ir.graph import interpret

# (rtol, atol) of compiled code vs the numpy reference: C's libm and a different
# summation order differ from numpy by a few ulps; 16-bit types round once more.
BACKEND_TOLERANCE = {
    "float64": (1e-9, 1e-10), "float32": (2e-5, 2e-5), "float16": (4e-3, 4e-3),
    "bfloat16": (3e-2, 3e-2), "uint8": (0, 0), "int8": (0, 0), "int16": (0, 0), "int32": (0, 0), "int64": (0, 0),
    "uint16": (0, 0), "uint32": (0, 0), "uint64": (0, 0), "bool": (0, 0),
}


def values_of(result) -> list:
    """Flatten a result (tensor, tuple, list) into a list of tensors."""
    if isinstance(result, (tuple, list)):
        out = []
        for r in result:
            out += values_of(r)
        return out
    return [result]


def check_compiled(fn, *args, debug: bool | None = None, factor: float = 1.0, **kwargs):
    """jit `fn`, check it compiled to C, and compare every output with the reference interpreter."""
    compiled = tk.jit(fn, debug=debug)
    result = compiled(*args, **kwargs)
    report = compiled.report(*args, **kwargs)
    assert report.backend == "c", report.fallback_reason
    graph = compiled.graph(*args, **kwargs)
    inputs = [a._value if isinstance(a, tk.Tensor) else dt.to_storage(a, dt.from_numpy_dtype(a.dtype))
              for a in _leaves(args) + _leaves(list(kwargs.values()))]
    expected = interpret(graph, *inputs)
    got = values_of(result)
    assert len(got) == len(expected)
    for g, e, node in zip(got, expected, graph.outputs):
        name = node.dtype.name
        rtol, atol = BACKEND_TOLERANCE[name]
        g_values = g.numpy()
        e_values = dt.to_compute(e, node.dtype)
        assert g_values.shape == e_values.shape
        if rtol == 0:
            np.testing.assert_array_equal(g_values, e_values)
        else:
            scale = max(1.0, float(np.max(np.abs(e_values[np.isfinite(e_values)]), initial=0.0)))
            np.testing.assert_allclose(g_values, e_values, rtol=rtol * factor, atol=atol * factor * scale,
                                       equal_nan=True)
    return compiled


def _leaves(values) -> list:
    out = []
    for v in values:
        if isinstance(v, (tuple, list)):
            out += _leaves(v)
        elif isinstance(v, dict):
            out += _leaves(list(v.values()))
        elif isinstance(v, (tk.Tensor, np.ndarray)):
            out.append(v)
    return out
