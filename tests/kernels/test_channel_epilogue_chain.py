"""The epilogue helper's C leaves out only work that cannot change the stored value (channel_epilogue._c_chain);
tests/kernels/test_channel_epilogue.py checks the helpers' values bit for bit against the reference."""
from __future__ import annotations

from tensorkiln.kernels.templates.channel_epilogue import ChannelStep, _c_chain

_REQUANTIZE = (ChannelStep("mul", channel=0), ChannelStep("add", channel=1), ChannelStep("div", scalar=0.02),
               ChannelStep("round"), ChannelStep("add", scalar=-3.0))


def _chain(low: float, high: float, then_uint8: bool) -> tuple[ChannelStep, ...]:
    clamp = (ChannelStep("maximum", scalar=low), ChannelStep("minimum", scalar=high), ChannelStep("saturate", dtype="int8"))
    wrap = (ChannelStep("wrap", dtype="uint8"), ChannelStep("add", scalar=128, dtype="uint8")) if then_uint8 else ()
    return _REQUANTIZE + clamp + wrap


def test_a_clamp_within_the_range_makes_the_saturating_cast_a_conversion():
    text = "\n".join(_c_chain(_chain(-128.0, 127.0, False), "int8"))
    assert "_CMP_ORD_Q" not in text and text.count("_mm512_max_ps") == 1 and "cvttps" in text


def test_a_clamp_wider_than_the_range_keeps_the_saturation():
    for low, high in ((-200.0, 127.0), (-128.0, 300.0), (float("-inf"), 127.0)):
        text = "\n".join(_c_chain(_chain(low, high, False), "int8"))
        assert "_CMP_ORD_Q" in text and text.count("_mm512_max_ps") == 2, (low, high)


def test_int8_to_uint8_plus_128_is_one_add_before_the_store():
    text = "\n".join(_c_chain(_chain(-128.0, 127.0, True), "uint8"))
    assert text.count("_mm512_and_si512") == 0 and text.count("_mm512_add_epi32") == 1
    # read on as float32 (a dequantized output), the wrap after the add stays
    widened = _chain(-128.0, 127.0, True) + (ChannelStep("widen"),)
    assert "\n".join(_c_chain(widened, "float32")).count("_mm512_and_si512") == 1
