"""CompiledModule: argument checks before the native call, one foreign call per call, constants."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.driver.build import build
from tensorkiln.errors import DTypeError, ShapeError, TensorKilnError
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Load, Var
from tensorkiln.loops.ir import For, Kernel, Store
from tensorkiln.loops.program import Program
from tensorkiln.runtime.module import ArenaAllocationError, CompiledModule
from tensorkiln.runtime.signature import ArgSpec, Signature

i, j = Var("i"), Var("j")
x = Buffer("x", "float32", (4, 8))
b = Buffer("b", "bfloat16", (8,))
w = Buffer("w", "float32", (8,))
y = Buffer("y", "float32", (4, 8))
t = Buffer("t", "float32", (4, 8))


def affine_program() -> Program:
    """t = x * w (constant), then y = t + b: two kernels, an arena temp, a constant, a bfloat16 input."""
    k1 = Kernel("scale", (t, x, w), For(i, 4, For(j, 8, Store(t, i * 8 + j, Load(x, i * 8 + j) * Load(w, j)),
                                                   "vectorized"), "parallel"))
    k2 = Kernel("shift", (y, t, b), For(i, 32, Store(y, i, Load(t, i) + Load(b, i % 8))))
    return Program("affine", (k1, k2), inputs=(x, b), outputs=(y,), constants=(w,), temps=(t,))


def bf16(values: np.ndarray) -> np.ndarray:
    """float32 values that are exact in bfloat16, as raw bits."""
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


@pytest.fixture(scope="module")
def weights():
    return np.linspace(-1, 1, 8).astype(np.float32)


@pytest.fixture(scope="module")
def module(weights):
    return build(affine_program(), {"w": weights})


@pytest.fixture
def counted(module):
    """The module, with its foreign entry wrapped to count calls."""
    real = module._entry
    calls = []

    def entry(*args):
        calls.append(args)
        return real(*args)

    module._entry = entry
    yield module, calls
    module._entry = real


def arrays():
    xv = np.arange(32, dtype=np.float32).reshape(4, 8)
    bv = bf16(np.array([0.5, -1, 2, 0, 4, 1.5, -3, 8], dtype=np.float32))
    return xv, bv, np.empty((4, 8), np.float32)


def expected(xv, bv, weights):
    return xv * weights + (bv.astype(np.uint32) << 16).view(np.float32)


def test_one_foreign_call_per_invocation(counted, weights):
    module, calls = counted
    xv, bv, out = arrays()
    module(xv, bv, out)
    np.testing.assert_array_equal(out, expected(xv, bv, weights))
    module(xv, bv, out)  # same arrays again: the pointer array is reused
    module(xv.copy(), bv.copy(), np.empty_like(out))
    (fresh,) = module.run(xv, bv)
    np.testing.assert_array_equal(fresh, expected(xv, bv, weights))
    assert len(calls) == 4


@pytest.mark.parametrize("mutate, error, match", [
    (lambda a: (a[0].astype(np.float64), a[1], a[2]), DTypeError, "input x: expected dtype float32"),
    (lambda a: (a[0], a[1], a[2].reshape(8, 4)), ShapeError, r"output y: expected shape \(4, 8\)"),
    (lambda a: (np.asfortranarray(a[0]), a[1], a[2]), ValueError, "C-contiguous"),
    (lambda a: (a[0], a[1], np.broadcast_to(np.float32(0), (4, 8))), ValueError, "contiguous|read-only"),
    (lambda a: (a[0].tolist(), a[1], a[2]), TypeError, "expected a numpy array"),
    (lambda a: (a[0], a[1]), TypeError, r"expected 3 arrays \(x, b, y\)"),
    (lambda a: (a[0], a[1], a[0]), ValueError, "overlaps x"),
])
def test_bad_arguments_are_rejected_before_the_native_call(counted, mutate, error, match):
    module, calls = counted
    with pytest.raises(error, match=match):
        module(*mutate(arrays()))
    assert calls == []


def test_read_only_output_is_rejected(counted):
    module, calls = counted
    xv, bv, out = arrays()
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        module(xv, bv, out)
    assert calls == []


def test_in_place_changes_to_a_known_array_are_still_caught(counted):
    module, calls = counted
    xv, bv, out = arrays()
    module(xv, bv, out)
    xv.shape = (8, 4)  # same object, new shape
    with pytest.raises(ShapeError):
        module(xv, bv, out)
    assert len(calls) == 1


def test_constants_are_bound_once_by_reference(module, weights):
    assert module._constants["w"] is weights
    assert module._pointers[3] == weights.ctypes.data


def test_constants_must_match_the_signature(module, weights):
    with pytest.raises(TensorKilnError, match="missing"):
        CompiledModule(module.library_path, module.signature, {})
    with pytest.raises(DTypeError):
        CompiledModule(module.library_path, module.signature, {"w": weights.astype(np.float64)})


def test_library_for_another_signature_is_refused(module):
    other = Signature(inputs=(ArgSpec("x", "float32", (4, 8), "input"),), outputs=())
    with pytest.raises(TensorKilnError, match="built for another signature"):
        CompiledModule(module.library_path, other)


def test_report_fields(module):
    assert module.source_path and module.source_path.endswith("module.c")
    assert module.signature.arena_bytes == 128
    assert "x: float32[4, 8]" in repr(module)


def _failing_zeros(monkeypatch):
    """Make every byte-array allocation fail as numpy does when memory runs out."""
    real_zeros = np.zeros

    def zeros(shape, dtype=float, *args, **kwargs):
        if np.dtype(dtype) == np.uint8:
            raise MemoryError(f"Unable to allocate {shape} bytes for an array with shape ({shape},)")
        return real_zeros(shape, dtype, *args, **kwargs)
    monkeypatch.setattr(np, "zeros", zeros)


def test_arena_allocation_failure_names_the_module_and_its_size(weights, monkeypatch):
    """A failed arena allocation is a TensorKilnError and a MemoryError saying what needed how much."""
    module = build(affine_program(), {"w": weights})
    _failing_zeros(monkeypatch)
    with pytest.raises(ArenaAllocationError) as info:
        CompiledModule(module.library_path, module.signature, {"w": weights}, name="graph 'affine'")
    assert isinstance(info.value, MemoryError) and isinstance(info.value, TensorKilnError)
    assert "graph 'affine'" in str(info.value) and f"{module.signature.arena_bytes:,} bytes" in str(info.value)


def test_jit_reports_an_arena_allocation_failure_with_the_function_name(monkeypatch):
    """Through tk.jit, fresh build or cache hit alike: the error names the traced function and the bytes."""
    def two_stage_softmax(a):
        return ((a @ a) @ a).softmax(-1)  # a @ a lives in the arena
    a = np.ones((16, 16), np.float32)
    arena = tk.jit(two_stage_softmax).report(a).arena_bytes
    assert arena > 0
    _failing_zeros(monkeypatch)
    with pytest.raises(MemoryError, match=rf"two_stage_softmax.*{arena:,} bytes"):
        tk.jit(two_stage_softmax)(a)
