"""The registers a fused epilogue holds (kernels/templates/epilogue_registers.py) and the blocked
stem tile that leaves them free: no accumulator spilled, sums those of the reference."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.frontend.tensor import apply
from tensorkiln.kernels.target import cpu_target
from tensorkiln.kernels.templates.conv_nchwc import NchwcTile, nchwc_tile, tile_leaves
from tensorkiln.kernels.templates.epilogue_registers import epilogue_registers
from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer

from .disassembly import hottest_block, needs_vector_disassembly
from .test_conv_nchwc import block_input, unblock
from tensorkiln.ir.ops.contraction import _conv2d_reference

RNG = np.random.default_rng(7)
F32 = lambda value: E.Const(value, "float32")  # noqa: E731


def test_counts_distinct_floating_constants():
    bias = Buffer("bias", "float32", (4, 8))
    biased = lambda index, acc: acc + E.Load(bias, index[1] * 8 + index[4])  # noqa: E731
    assert epilogue_registers(biased, 5, "float32") == 0  # a load, not a register for the kernel
    relu = lambda index, acc: E.maximum(biased(index, acc), F32(0.0))  # noqa: E731
    assert epilogue_registers(relu, 5, "float32") == 1
    relu6 = lambda index, acc: E.minimum(relu(index, acc), F32(6.0))  # noqa: E731
    assert epilogue_registers(relu6, 5, "float32") == 2
    twice = lambda index, acc: E.maximum(relu(index, acc), F32(0.0)) * F32(6.0)  # noqa: E731
    assert epilogue_registers(twice, 5, "float32") == 2  # 0 twice is one register
    shifted = lambda index, acc: acc + E.cast(index[0] + 1, "float32")  # noqa: E731
    assert epilogue_registers(shifted, 5, "float32") == 0  # integer constants live in scalar registers


@pytest.mark.parametrize("kblocks", [1, 2, 4, 6])
@pytest.mark.parametrize("ow", [1, 7, 56, 112, 113])
@pytest.mark.parametrize("reserved", [0, 1, 2, 3])
def test_rule_with_spare_registers_leaves_them(kblocks, ow, reserved):
    lanes = cpu_target().vector_bytes // 4
    tile = nchwc_tile(kblocks, lanes, ow, "float32", tasks_per_block=ow, spare=1 + reserved)
    assert tile_leaves(tile, lanes, "float32", reserved) and 1 <= tile.pixels <= ow


def test_tile_leaves_counts_accumulators_weights_and_broadcast():
    registers, lanes = cpu_target().vector_registers, cpu_target().vector_bytes // 4
    assert tile_leaves(NchwcTile(registers - 3, 1), lanes, "float32", 1)  # T + 1 weight + 1 broadcast + 1
    assert not tile_leaves(NchwcTile(registers - 2, 1), lanes, "float32", 1)


def stem(x: np.ndarray, wt: np.ndarray, stride: int, debug: bool = False):
    """A compiled blocked RGB-stem convolution (NCHW input, blocked output, padding 1) with bias and ReLU6."""
    k, lanes = wt.shape[0], cpu_target().vector_bytes // 4
    kp = -(-k // lanes) * lanes
    wpad = np.zeros((kp,) + wt.shape[1:], np.float32)
    wpad[:k] = wt
    c, kh, kw = wt.shape[1:]
    wb = tk.tensor(np.ascontiguousarray(wpad.reshape(kp // lanes, lanes, c, kh, kw, 1).transpose(0, 2, 3, 4, 5, 1)))
    bias_values = np.linspace(-1, 1, kp, dtype=np.float32)
    bias = tk.tensor(block_input(bias_values.reshape(1, kp, 1, 1), lanes))
    conv = dict(stride=(stride, stride), padding=(1, 1, 1, 1), dilation=(1, 1))
    f = tk.jit(lambda x: (apply("conv2d_nchwc", [x, wb], out_layout="nchwc", **conv) + bias).clip(0.0, 6.0),
               debug=debug)
    return f, bias_values[:k]


@pytest.mark.parametrize("c,k,h,w,kernel,stride", [(3, 32, 17, 29, 3, 2), (3, 13, 9, 37, 3, 1), (1, 8, 5, 7, 3, 2),
                                                   (3, 24, 12, 45, 3, 2), (2, 40, 7, 9, 3, 1)])
def test_relu6_stem_matches_reference(c, k, h, w, kernel, stride):
    """Few input channels, odd output channel counts (padded to the block) and rows with a tail tile,
    every access bounds-checked."""
    x = RNG.standard_normal((1, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((k, c, kernel, kernel)).astype(np.float32)
    f, bias = stem(x, wt, stride, debug=True)
    got = unblock(f(x).numpy(), k)
    attrs = {"groups": 1, "stride": (stride, stride), "padding": (1,) * 4, "dilation": (1, 1)}
    want = _conv2d_reference([x.astype(np.float64), wt.astype(np.float64)], attrs, None) + bias.reshape(1, k, 1, 1)
    np.testing.assert_allclose(got, np.clip(want, 0, 6), rtol=1e-4, atol=1e-4)


@needs_vector_disassembly
def test_relu6_stem_keeps_its_accumulators_in_registers():
    """MobileNetV2's stem (3 -> 32 channels, 3x3, stride 2) with its ReLU6: no accumulator spilled to
    the stack in the reduction (on 16 registers the 6 x 2 tile stored and reloaded five at every step)."""
    x = RNG.standard_normal((1, 3, 64, 224)).astype(np.float32)
    f, _ = stem(x, RNG.standard_normal((32, 3, 3, 3)).astype(np.float32), 2)
    f(x)
    hot = hottest_block(f.report(x).library_path or "", "vfmadd231ps")
    assert sum("vfmadd231ps" in line for line in hot) >= 4
    assert not any("(%rsp)" in line for line in hot), "accumulators spilled to the stack"
