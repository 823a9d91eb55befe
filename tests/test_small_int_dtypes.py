"""uint8 and int16 end to end: promotion as PyTorch, numpy's wrap-around semantics in every mode, importers.

The same functions run eagerly, traced through the reference interpreter
(tk.jit with backend="interpreter", opt_level=0) and compiled to C (tk.jit,
release and debug builds), and each result is compared exactly with numpy on
values spread over the type's whole range. Where numpy and PyTorch differ
(float -> uint8 of out-of-range values) the expected values are tensorkiln's
documented rule (docs/dtypes.md): truncate toward zero and saturate.
"""
from __future__ import annotations

import subprocess
import warnings

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import dtypes as dt

from kernels.disassembly import needs_vector_disassembly
from helpers import ALL_DTYPES

MODES = ["eager", "interpreter", "c", "c-debug"]


def run_in_mode(fn, mode: str, *arrays: np.ndarray):
    """`fn` applied to `arrays` in one execution mode; results as a list of (dtype, numpy array)."""
    if mode == "eager":
        out = fn(*(tk.tensor(a) for a in arrays))
    else:
        backend = "interpreter" if mode == "interpreter" else "c"
        compiled = tk.jit(fn, backend=backend, opt_level=0 if mode == "interpreter" else 2,
                          debug=mode == "c-debug")
        out = compiled(*arrays)
        if backend == "c":
            assert compiled.report(*arrays).backend == "c"
    return [(t.dtype, t.numpy()) for t in out]


def check_against(expected: list, got: list) -> None:
    """Every output has the expected dtype and exactly the expected values."""
    assert len(got) == len(expected)
    for n, ((want_dtype, want), (got_dtype, values)) in enumerate(zip(expected, got)):
        assert got_dtype is want_dtype, f"output {n}: dtype {got_dtype} != {want_dtype}"
        np.testing.assert_array_equal(values, want, err_msg=f"output {n}")


def full_range(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    """Random values over the whole range of an integer numpy dtype, both ends included."""
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    values.reshape(-1)[:3] = [info.min, info.max, 0]
    return values


# ---- promotion ---------------------------------------------------------------------------------

def _torch_dtypes():
    """torch and the dtype maps of the torch importer (the test skips without torch)."""
    torch = pytest.importorskip("torch")
    from tensorkiln.importers.torch.convert import tk_dtype, torch_dtype
    return torch, tk_dtype, torch_dtype


@pytest.mark.parametrize("a", ALL_DTYPES, ids=lambda d: d.name)
def test_promotion_matches_torch_for_every_pair(a):
    torch, tk_dtype, torch_dtype = _torch_dtypes()
    for b in ALL_DTYPES:
        want = tk_dtype(torch.promote_types(torch_dtype(a), torch_dtype(b)))
        assert tk.promote_types(a, b) is want, f"{a} with {b}"


@pytest.mark.parametrize("a", ALL_DTYPES, ids=lambda d: d.name)
def test_weak_scalars_match_torch(a):
    torch, tk_dtype, torch_dtype = _torch_dtypes()
    for scalar in (True, 3, -1, 1000, 0.5):
        want = tk_dtype(torch.result_type(torch.zeros(2, dtype=torch_dtype(a)), scalar))
        assert dt.result_type([a], [dt.scalar_category(scalar)]) is want, f"{a} with {scalar!r}"


def test_promotion_examples():
    assert tk.promote_types(tk.uint8, tk.int8) is tk.int16
    assert tk.promote_types(tk.uint8, tk.int16) is tk.int16
    assert tk.promote_types(tk.int16, tk.int32) is tk.int32
    assert tk.promote_types(tk.bool, tk.uint8) is tk.uint8
    assert tk.promote_types(tk.uint8, tk.float16) is tk.float16
    assert (tk.tensor(np.array([250], np.uint8)) + 3).dtype is tk.uint8
    assert (tk.tensor(np.array([1], np.uint8)) + tk.tensor(np.array([-1], np.int8))).tolist() == [0]


# ---- semantics against numpy, in every mode -------------------------------------------------------

def uint8_ops(a, b):
    """Arithmetic, division, comparisons, min/max, abs/neg, bitwise ops, casts and reductions of uint8."""
    return (a + b, a - b, a * b, a // b, a % b, -a, a.abs(), a < b, a <= b, a == b, a > b,
            tk.maximum(a, b), tk.minimum(a, b), a & b, a | b, a ^ b, a ^ -1, a + 100, a - 1, a * 3, a // 7,
            a % 7, a.to(tk.float32) / 255, a.to(tk.int8), a.to(tk.int16), a.to(tk.int64) - 128,
            a.sum(), a.sum(1), a.amax(1), a.amin(0), a.prod(1), a.relu(), a.sign(), a.to(tk.bool))


def uint8_expected(a: np.ndarray, b: np.ndarray) -> list:
    """What numpy (and PyTorch, for the sums' int64) computes for uint8_ops."""
    u8, i64 = tk.uint8, tk.int64
    with np.errstate(all="ignore"):
        return [(u8, a + b), (u8, a - b), (u8, a * b), (u8, a // b), (u8, a % b), (u8, -a), (u8, a),
                (tk.bool, a < b), (tk.bool, a <= b), (tk.bool, a == b), (tk.bool, a > b),
                (u8, np.maximum(a, b)), (u8, np.minimum(a, b)), (u8, a & b), (u8, a | b), (u8, a ^ b),
                (u8, ~a), (u8, a + np.uint8(100)), (u8, a - np.uint8(1)), (u8, a * np.uint8(3)),
                (u8, a // np.uint8(7)), (u8, a % np.uint8(7)),
                (tk.float32, a.astype(np.float32) / np.float32(255)), (tk.int8, a.astype(np.int8)),
                (tk.int16, a.astype(np.int16)), (i64, a.astype(np.int64) - 128),
                (i64, a.astype(np.int64).sum()), (i64, a.astype(np.int64).sum(1)), (u8, a.max(1)),
                (u8, a.min(0)), (i64, a.astype(np.int64).prod(1)), (u8, a), (u8, np.sign(a)),
                (tk.bool, a != 0)]


def int16_ops(a, b):
    """The signed 16-bit counterpart: floor division and modulo take the divisor's sign."""
    return (a + b, a - b, a * b, a // b, a % b, -a, a.abs(), a < b, a == b, tk.maximum(a, b),
            tk.minimum(a, b), a & b, a | b, a ^ b, a + 30000, a // -1, a % -7, a.to(tk.float32),
            a.to(tk.uint8), a.to(tk.int8), a.to(tk.int32) * 2, a.sum(), a.amax(1), a.amin(1), a.relu())


def int16_expected(a: np.ndarray, b: np.ndarray) -> list:
    i16 = tk.int16
    with np.errstate(all="ignore"):
        return [(i16, a + b), (i16, a - b), (i16, a * b), (i16, a // b), (i16, a % b), (i16, -a), (i16, np.abs(a)),
                (tk.bool, a < b), (tk.bool, a == b), (i16, np.maximum(a, b)), (i16, np.minimum(a, b)),
                (i16, a & b), (i16, a | b), (i16, a ^ b), (i16, a + np.int16(30000)), (i16, a // np.int16(-1)),
                (i16, a % np.int16(-7)), (tk.float32, a.astype(np.float32)), (tk.uint8, a.astype(np.uint8)),
                (tk.int8, a.astype(np.int8)), (tk.int32, a.astype(np.int32) * 2),
                (tk.int64, a.astype(np.int64).sum()), (i16, a.max(1)), (i16, a.min(1)), (i16, np.maximum(a, 0))]


def _nonzero(values: np.ndarray) -> np.ndarray:
    """Divisors: integer division by zero raises in eager mode (and gives 0 in C), so keep them off it."""
    return np.where(values == 0, values.dtype.type(1), values)


@pytest.mark.parametrize("mode", MODES)
def test_uint8_semantics(mode, rng):
    a = full_range(rng, np.uint8, (5, 67))  # 67: vectorized loops get a remainder
    b = _nonzero(full_range(rng, np.uint8, (67,)))
    check_against(uint8_expected(a, b[None, :]), run_in_mode(uint8_ops, mode, a, b))


@pytest.mark.parametrize("mode", MODES)
def test_int16_semantics(mode, rng):
    a = full_range(rng, np.int16, (4, 37))
    b = _nonzero(full_range(rng, np.int16, (37,)))
    b[3:6] = [-1, 1, -32768]  # -32768 // -1 wraps back to -32768, as in numpy
    a[0, 3] = -32768
    check_against(int16_expected(a, b[None, :]), run_in_mode(int16_ops, mode, a, b))


def test_uint8_wraparound_examples():
    x = tk.tensor(np.array([200, 0, 255], np.uint8))
    assert (x + tk.tensor(np.array([100, 1, 1], np.uint8))).tolist() == [44, 1, 0]
    assert (x - 1).tolist() == [199, 255, 254]
    assert (-x).tolist() == [56, 0, 1]
    assert (x * 2).tolist() == [144, 0, 254]
    assert x.sum().item() == 455 and x.sum().dtype is tk.int64


FLOATS = np.array([-300.0, -1.5, -0.5, -0.0, 0.5, 1.9, 127.5, 254.99, 255.0, 255.5, 256.0, 1e10,
                   np.inf, -np.inf, np.nan], np.float32)


def float_casts(x):
    return x.to(tk.uint8), x.to(tk.int16), x.to(tk.float64).to(tk.uint8), x.to(tk.float16).to(tk.int16)


@pytest.mark.parametrize("mode", MODES)
def test_float_to_small_int_casts_truncate_and_saturate(mode):
    # numpy (and PyTorch) leave out-of-range conversions undefined (x86 gives wrapped garbage); tensorkiln
    # truncates toward zero, saturates at the type's range and maps NaN to 0, in every mode.
    def saturated(values, dtype):
        info = np.iinfo(dtype)
        return np.clip(np.nan_to_num(np.trunc(values.astype(np.float64)), nan=0.0), info.min, info.max).astype(dtype)

    with np.errstate(over="ignore"):  # 1e10 is infinity in float16
        halves = FLOATS.astype(np.float16).astype(np.float32)
        got = run_in_mode(float_casts, mode, FLOATS)
    expected = [(tk.uint8, saturated(FLOATS, np.uint8)), (tk.int16, saturated(FLOATS, np.int16)),
                (tk.uint8, saturated(FLOATS, np.uint8)), (tk.int16, saturated(halves, np.int16))]
    check_against(expected, got)
    inside = FLOATS[(FLOATS > -1) & (FLOATS < 255)]  # in range, the rule is numpy's astype
    np.testing.assert_array_equal(saturated(inside, np.uint8), inside.astype(np.uint8))


def test_small_ints_vectorize_in_compiled_code(rng):
    """uint8 loops stay `omp simd` loops, and the casts back to uint8_t are in the source."""
    a = full_range(rng, np.uint8, (1024,))
    fn = tk.jit(lambda a: (a + 7) * 3)
    report = fn.report(a)
    source = open(report.source_path).read()
    assert "#pragma omp simd" in source and "(uint8_t)(" in source
    np.testing.assert_array_equal(fn(a).numpy(), (a + np.uint8(7)) * np.uint8(3))


@needs_vector_disassembly
def test_uint8_addition_is_byte_vector_code(rng):
    """The casts back to uint8_t do not stop GCC: the sum is computed 16+ bytes at a time (paddb)."""
    a, b = full_range(rng, np.uint8, (4099,)), full_range(rng, np.uint8, (4099,))
    fn = tk.jit(lambda a, b: a + b - 1)
    np.testing.assert_array_equal(fn(a, b).numpy(), a + b - np.uint8(1))
    code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", fn.report(a, b).library_path],
                          capture_output=True, text=True).stdout
    assert "paddb" in code or "psubb" in code


def test_cast_chains_through_small_ints_are_merged_only_when_exact(rng):
    """cast(cast(x)) drops the middle cast only when it holds every value: int8 -> uint8 -> int32 must
    stay (it maps -1 to 255), uint8 -> int16 -> int32 and uint8 -> bfloat16 -> float32 may go."""
    from tensorkiln.passes.rules import widening
    assert not widening(tk.int8, tk.uint8) and not widening(tk.uint8, tk.int8)
    assert widening(tk.uint8, tk.int16) and widening(tk.int8, tk.int16) and not widening(tk.int16, tk.uint8)
    assert widening(tk.uint8, tk.bfloat16) and not widening(tk.int16, tk.float16)

    def chains(s, u):
        return (s.to(tk.uint8).to(tk.int32), u.to(tk.int16).to(tk.int32), u.to(tk.bfloat16).to(tk.float32),
                s.to(tk.int16).to(tk.uint8).to(tk.int64), u.to(tk.int8).to(tk.int16))

    s, u = full_range(rng, np.int8, (50,)), full_range(rng, np.uint8, (50,))
    expected = [(tk.int32, s.astype(np.uint8).astype(np.int32)), (tk.int32, u.astype(np.int32)),
                (tk.float32, u.astype(np.float32)), (tk.int64, s.astype(np.uint8).astype(np.int64)),
                (tk.int16, u.astype(np.int8).astype(np.int16))]
    for mode in MODES[1:]:
        check_against(expected, run_in_mode(chains, mode, s, u))
    check_against(expected, [(t.dtype, t.numpy()) for t in tk.jit(chains, backend="interpreter")(s, u)])


# ---- importers ----------------------------------------------------------------------------------

def _tensor_proto():
    """onnx's TensorProto (the test skips without the onnx package)."""
    return pytest.importorskip("onnx").TensorProto


def _onnx_one_node(op: str, inputs: list, attrs: dict, out_type: int):
    """A one-node model over (name, element type) inputs of shape [2, 3]."""
    from onnx import helper
    node = helper.make_node(op, [name for name, _ in inputs], ["y"], **attrs)
    graph = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info(n, t, [2, 3]) for n, t in inputs],
                              [helper.make_tensor_value_info("y", out_type, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["interpreter", "c"])
def test_onnx_cast_uint8_to_float(backend, rng):
    proto = _tensor_proto()
    model = _onnx_one_node("Cast", [("x", proto.UINT8)], {"to": proto.FLOAT}, proto.FLOAT)
    x = full_range(rng, np.uint8, (2, 3))
    (y,) = tk.onnx.load(model, backend=backend)(x)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, x.astype(np.float32))


@pytest.mark.parametrize("backend", ["interpreter", "c"])
@pytest.mark.parametrize("elem", ["UINT8", "INT16"])
def test_onnx_add_wraps(backend, elem, rng):
    kind = getattr(_tensor_proto(), elem)
    model = _onnx_one_node("Add", [("a", kind), ("b", kind)], {}, kind)
    np_type = np.uint8 if elem == "UINT8" else np.int16
    a, b = full_range(rng, np_type, (2, 3)), full_range(rng, np_type, (2, 3))
    (y,) = tk.onnx.load(model, backend=backend)(a, b)
    assert y.dtype == np_type
    np.testing.assert_array_equal(y, a + b)  # wraps, as numpy (ONNX's reference) does


def test_onnx_uint8_input_of_the_wrong_type_is_refused():
    proto = _tensor_proto()
    model = _onnx_one_node("Cast", [("x", proto.UINT8)], {"to": proto.FLOAT}, proto.FLOAT)
    with pytest.raises(tk.DTypeError, match="uint8"):
        tk.onnx.load(model, backend="interpreter")(np.zeros((2, 3), np.int32))


def _image_module():
    """torch and a module taking a uint8 image: image.float() / 255, plus integer work on the uint8 values."""
    torch = pytest.importorskip("torch")

    class Normalize(torch.nn.Module):
        def forward(self, image):
            scaled = image.float() / 255
            return scaled, image + 10, image // 3, image > 128, image.sum(), ~image, image.to(torch.int16) - 200

    return torch, Normalize().eval()


def _compare_torch(actual, expected) -> None:
    """Outputs (torch or tk tensors) equal PyTorch's eager outputs exactly, dtypes included."""
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        got_dtype = got.dtype.name if isinstance(got, tk.Tensor) else str(got.dtype).split(".")[-1]
        assert got_dtype == str(want.dtype).split(".")[-1] and tuple(got.shape) == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_from_torch_with_a_uint8_input():
    torch, module = _image_module()
    image = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8)
    program = tk.from_torch(module, (image,))
    _compare_torch(program(image), module(image))


def test_torch_compile_with_a_uint8_input():
    torch, module = _image_module()
    from tensorkiln.importers.torch import STATS, TorchFallbackWarning
    image = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8)
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="tensorkiln")
    before = STATS["tensorkiln_calls"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchFallbackWarning)  # running eager PyTorch instead would warn
        actual = compiled(image)
    assert STATS["tensorkiln_calls"] > before
    _compare_torch(actual, module(image))
