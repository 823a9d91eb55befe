"""The epilogue helper's C leaves out only work that cannot change the stored value (channel_epilogue._c_chain);
tests/kernels/test_channel_epilogue.py checks the helpers' values bit for bit against the reference."""
from __future__ import annotations

import pytest

from tensorkiln.kernels.templates.channel_epilogue import AVX512, ChannelStep, _c_chain

_REQUANTIZE = (ChannelStep("mul", channel=0), ChannelStep("add", channel=1), ChannelStep("div", scalar=0.02),
               ChannelStep("round"), ChannelStep("add", scalar=-3.0))


def _chain(low: float, high: float, then_uint8: bool) -> tuple[ChannelStep, ...]:
    clamp = (ChannelStep("maximum", scalar=low), ChannelStep("minimum", scalar=high), ChannelStep("saturate", dtype="int8"))
    wrap = (ChannelStep("wrap", dtype="uint8"), ChannelStep("add", scalar=128, dtype="uint8")) if then_uint8 else ()
    return _REQUANTIZE + clamp + wrap


def test_a_clamp_within_the_range_makes_the_saturating_cast_a_conversion():
    text = "\n".join(_c_chain(_chain(-128.0, 127.0, False), "int8", AVX512, " + c"))
    assert "_CMP_ORD_Q" not in text and text.count("_mm512_max_ps") == 1 and "cvttps" in text


def test_a_clamp_wider_than_the_range_keeps_the_saturation():
    for low, high in ((-200.0, 127.0), (-128.0, 300.0), (float("-inf"), 127.0)):
        text = "\n".join(_c_chain(_chain(low, high, False), "int8", AVX512, " + c"))
        assert "_CMP_ORD_Q" in text and text.count("_mm512_max_ps") == 2, (low, high)


def test_int8_to_uint8_plus_128_is_one_add_before_the_store():
    text = "\n".join(_c_chain(_chain(-128.0, 127.0, True), "uint8", AVX512, " + c"))
    assert text.count("_mm512_and_si512") == 0 and text.count("_mm512_add_epi32") == 1
    # read on as float32 (a dequantized output), the wrap after the add stays
    widened = _chain(-128.0, 127.0, True) + (ChannelStep("widen"),)
    assert "\n".join(_c_chain(widened, "float32", AVX512, " + c")).count("_mm512_and_si512") == 1


def _helper(steps: tuple[ChannelStep, ...], width: str):
    """The compiled helper (`width`: "avx512" or "avx2") of an int8-storing chain of scalar steps, as a numpy
    function of int32 sums (rows of 64 channels: on AVX2, two 32-channel stores a row)."""
    import ctypes

    import numpy as np

    from tensorkiln.kernels.target import cpu_target
    from tensorkiln.kernels.templates.channel_epilogue import ChannelEpilogue, channel_epilogue_source
    from tensorkiln.kernels.templates.channel_epilogue_avx2 import avx2_source
    from tensorkiln.runtime.c_compiler import compile_c
    if cpu_target().vector_bytes < (64 if width == "avx512" else 32):
        pytest.skip(f"this CPU has no {width} vectors")
    epilogue = ChannelEpilogue(steps, "int8", ())
    text = channel_epilogue_source(epilogue) if width == "avx512" else avx2_source(epilogue)
    source = "#include <stdint.h>\n" + text.replace("static void", "void")
    function = getattr(ctypes.CDLL(compile_c(source, extra_flags=("-march=native",)).path), epilogue.function)

    def run(sums: np.ndarray) -> np.ndarray:
        rows = sums.reshape(-1, 64).astype(np.int32)
        out = np.zeros(rows.shape, np.int8)
        comp = np.zeros(64, np.int32)
        pointer = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        function(pointer(rows), ctypes.c_int64(64), pointer(comp), pointer(out), ctypes.c_int64(64),
                 ctypes.c_int64(rows.shape[0]), ctypes.c_int64(64))
        return out.reshape(sums.shape)
    return run


@pytest.mark.parametrize("width", ["avx512", "avx2"])
def test_division_by_a_scalar_rounds_exactly_at_the_halfway_points(width):
    """The multiply-and-correct division (_exact_division) against numpy's float32 division, on sums whose
    quotients land on and next to the halfway points that round() decides."""
    import numpy as np
    rng = np.random.default_rng(3)
    for case in range(12):
        divisor = np.float32(rng.uniform(1e-3, 0.3))
        # scale = divisor / 2 puts every odd sum's quotient within an ulp or two of a halfway point (the
        # product rounds first): a division off by one ulp rounds some of them the other way
        scale = divisor * np.float32(0.5) if case % 2 else np.float32(rng.uniform(1e-4, 1e-2))
        steps = (ChannelStep("mul", scalar=float(scale)), ChannelStep("div", scalar=float(divisor)),
                 ChannelStep("round"), ChannelStep("add", scalar=3.0), ChannelStep("maximum", scalar=-128.0),
                 ChannelStep("minimum", scalar=127.0), ChannelStep("saturate", dtype="int8"))
        assert "_mm512_div_ps" not in "\n".join(_c_chain(steps, "int8", AVX512, " + c"))
        halfway = (rng.integers(-140, 140, 1 << 16) + 0.5) * float(divisor) / float(scale)
        sums = np.concatenate([np.round(halfway) + d for d in (-1, 0, 1)] + [np.arange(-255, 256)] * 64 +
                              [rng.integers(-1 << 24, 1 << 24, 1 << 16)])
        sums = sums[: sums.size // 64 * 64].astype(np.int32)
        v = np.round(sums.astype(np.float32) * scale / divisor) + np.float32(3)
        want = np.clip(v, -128, 127).astype(np.int8)
        np.testing.assert_array_equal(_helper(steps, width)(sums), want, err_msg=width)


def _float64_chain(ratio: float, zero: float) -> tuple[ChannelStep, ...]:
    """QLinearConv's requantization: the sums in float64, times the scale ratio, plus the zero point,
    rounded, clamped, cast to int8 (then to uint8 plus 128, as an int8 layer hands on uint8)."""
    return (ChannelStep("sums_to_float64", dtype="float64"), ChannelStep("mul", scalar=ratio, dtype="float64"),
            ChannelStep("add", scalar=zero, dtype="float64"), ChannelStep("round", dtype="float64"),
            ChannelStep("maximum", scalar=-128.0, dtype="float64"),
            ChannelStep("minimum", scalar=127.0, dtype="float64"), ChannelStep("saturate", dtype="int8"))


@pytest.mark.parametrize("width", ["avx512", "avx2"])
def test_a_float64_chain_rounds_as_numpy_does_in_float64(width):
    """The float64 lanes (two vectors of doubles per vector of sums) give numpy's float64 values on sums
    whose products land on and next to the halfway points, where a float32 product would round wrongly."""
    import numpy as np
    rng = np.random.default_rng(4)
    for case in range(6):
        ratio = float(np.float32(rng.uniform(1e-4, 1e-2)))
        steps = _float64_chain(ratio, -3.0)
        assert "_ps(" not in "\n".join(_c_chain(steps, "int8", AVX512, " + c"))  # no float32 step
        halfway = (rng.integers(-140, 140, 1 << 14) + 0.5) / ratio
        sums = np.concatenate([np.round(halfway) + d for d in (-1, 0, 1)] + [np.arange(-4096, 4096)] +
                              [rng.integers(-1 << 30, 1 << 30, 1 << 14)])
        sums = sums[: sums.size // 64 * 64].astype(np.int32)
        want = np.clip(np.rint(sums.astype(np.float64) * ratio - 3.0), -128, 127).astype(np.int8)
        np.testing.assert_array_equal(_helper(steps, width)(sums), want, err_msg=width)


def test_the_avx512_float64_helper_compiles():
    """The 512-bit helper's float64 steps are valid C for AVX-512 (compiled, not run, on any x86 host)."""
    import platform

    from tensorkiln.kernels.templates.channel_epilogue import ChannelEpilogue, channel_epilogue_source
    from tensorkiln.runtime.c_compiler import compile_c
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("AVX-512 intrinsics are x86's")
    steps = _float64_chain(0.003, 5.0)[:-1] + (ChannelStep("narrow"), ChannelStep("mul", scalar=2.0))
    text = channel_epilogue_source(ChannelEpilogue(steps, "float32", ()))
    assert "_mm512_cvtpd_ps" in text and "_mm512_round" in text
    compile_c("#include <stdint.h>\n" + text.replace("static void", "void"),
              extra_flags=("-mavx512f", "-mavx512bw", "-mavx512vl", "-mfma"))
