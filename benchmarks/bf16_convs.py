"""bf16 convolutions (vdpbf16ps) against float32, layer by layer: ResNet-18's blocks and MobileNetV2's.

    python benchmarks/bf16_convs.py [--threads 2] [--json out.json]

Each case is one block of the model at batch 1 (random weights), compiled by
tk.jit with precision="fp32" and "bf16" and with the alternatives the bf16
rule decided against, then timed in turns (tensorkiln.tools.timing.interleaved_medians,
medians):

- ResNet-18's basic blocks (two 3x3 convolutions, bias, ReLU, residual):
  "bf16" sends the 3x3 stride-1 layers that float32 runs as Winograd to the
  same float32 Winograd (on rounded operands), the others to the blocked
  bf16 kernel (conv_nchwc_bf16.py); "bf16, direct" runs every layer on the
  blocked bf16 kernel (passes/layout.py's `BF16_DIRECT_OVER_WINOGRAD` set).
- ResNet-18's stem (7x7 stride-2 convolution of the RGB image, bias, ReLU):
  "bf16" runs it on pairs of neighbouring taps (conv_shallow_bf16.py);
  "bf16, fp32 shallow kernel" on the float32 shallow kernel with the rounded
  operands (passes/shallow_bf16_weights.py's `BF16_SHALLOW` unset).
- MobileNetV2's inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1
  project): "bf16" stores the depthwise layer's input as the target asks
  (bf16_readers.py's `bf16_depthwise_input`: bfloat16 with AVX512-BF16, the
  depthwise kernel widening its input rows as it copies them; float32
  holding rounded values without); "bf16, bf16 depthwise input" and
  "bf16, fp32 depthwise input" force one or the other
  (`BF16_DEPTHWISE_INPUT` True or False); "bf16, pairs kernel" runs the 1x1 layers on the blocked bf16 kernel
  even where the CPU has no AVX512-BF16 (passes/conv_bf16_weights.py's `PAIRS_WITHOUT_BF16_DOT` set;
  there "bf16" keeps the float32 blocked kernel on the rounded operands, and the pairs kernel widens).

Every variant is compiled into a fresh cache directory (a variant's optimized
graph may equal another's). Figures: ms per call, GFLOP/s (2 per
multiply-add) and the share of the peak: the float32 FMA peak measured in the
same run (benchmarks/kernels.py), twice that for bf16 (vdpbf16ps does two
multiply-adds per lane where an FMA does one, at the same rate on Zen 4).
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorkiln as tk  # noqa: E402
import tensorkiln.nn.functional as F  # noqa: E402
from tensorkiln.kernels import bf16_readers  # noqa: E402
from tensorkiln.passes import conv_bf16_weights, layout, shallow_bf16_weights  # noqa: E402
from tensorkiln.tools.timing import interleaved_medians  # noqa: E402
from common import benchmark_arguments, finish  # noqa: E402

RNG = np.random.default_rng(0)
RESNET_BLOCKS = [(64, 56), (128, 28), (256, 14), (512, 7)]  # (channels, image size) of each stage
MOBILENET_BLOCKS = [(24, 56), (32, 28), (96, 14), (160, 7)]  # (channels, image size), expansion 6


def _weight(*shape: int) -> tk.Tensor:
    fan_in = int(np.prod(shape[1:]))
    return tk.tensor((RNG.standard_normal(shape) * np.sqrt(1.5 / fan_in)).astype(np.float32))


def resnet_block(c: int, size: int):
    """(function, input, multiply-adds) of a basic block: conv-ReLU-conv + residual, ReLU."""
    w1, w2, b1, b2 = _weight(c, c, 3, 3), _weight(c, c, 3, 3), _weight(c), _weight(c)

    def block(x):
        y = F.conv2d(F.conv2d(x, w1, b1, padding=1).relu(), w2, b2, padding=1)
        return (x + y).relu()

    return block, RNG.standard_normal((1, c, size, size)).astype(np.float32), 2 * c * c * 9 * size * size


def resnet_stem():
    """(function, input, multiply-adds) of ResNet-18's stem convolution with bias and ReLU, 224x224."""
    w, b = _weight(64, 3, 7, 7), _weight(64)

    def stem(x):
        return F.conv2d(x, w, b, stride=2, padding=3).relu()

    return stem, RNG.standard_normal((1, 3, 224, 224)).astype(np.float32), 64 * 3 * 49 * 112 * 112


def mobilenet_block(c: int, size: int, expand: int = 6):
    """(function, input, multiply-adds) of an inverted residual block with ReLU6."""
    e = c * expand
    w1, wd, w2 = _weight(e, c, 1, 1), _weight(e, 1, 3, 3), _weight(c, e, 1, 1)

    def block(x):
        y = F.conv2d(x, w1).clip(0.0, 6.0)
        y = F.conv2d(y, wd, padding=1, groups=e).clip(0.0, 6.0)
        return F.conv2d(y, w2) + x

    return block, RNG.standard_normal((1, c, size, size)).astype(np.float32), (2 * c * e + 9 * e) * size * size


def compiled(fn, x, precision: str, direct: bool = False, bf16_depthwise_input: bool | None = None,
             bf16_shallow: bool = True, pairs: bool = False):
    """tk.jit(fn) compiled now, in a fresh cache, with one bf16 decision replaced where asked."""
    saved = (layout.BF16_DIRECT_OVER_WINOGRAD, bf16_readers.BF16_DEPTHWISE_INPUT, shallow_bf16_weights.BF16_SHALLOW,
             conv_bf16_weights.PAIRS_WITHOUT_BF16_DOT)
    os.environ["TENSORKILN_CACHE"] = tempfile.mkdtemp(prefix="tk-bf16-convs-")
    try:
        layout.BF16_DIRECT_OVER_WINOGRAD = direct or saved[0]
        bf16_readers.BF16_DEPTHWISE_INPUT = bf16_depthwise_input
        shallow_bf16_weights.BF16_SHALLOW = bf16_shallow
        conv_bf16_weights.PAIRS_WITHOUT_BF16_DOT = pairs or saved[3]
        f = tk.jit(fn, precision=precision)
        f(x)
        return f
    finally:
        (layout.BF16_DIRECT_OVER_WINOGRAD, bf16_readers.BF16_DEPTHWISE_INPUT, shallow_bf16_weights.BF16_SHALLOW,
         conv_bf16_weights.PAIRS_WITHOUT_BF16_DOT) = saved


def main() -> int:
    args = benchmark_arguments(__doc__).parse_args()  # sets OMP_NUM_THREADS before OpenMP loads
    from kernels import measure_limits  # benchmarks/kernels.py: the float32 FMA peak of this machine
    peak = measure_limits(3)["peak_gflops"]
    print(f"bf16 convolutions, batch 1, {args.threads} threads; peak measured: fp32 FMA {peak:.0f} GFLOP/s, "
          f"bf16 (vdpbf16ps) {2 * peak:.0f}; ms per call, medians of turns")
    cases = [("resnet18", c, s, resnet_block(c, s), {"bf16, direct": dict(direct=True)})
             for c, s in RESNET_BLOCKS]
    cases.insert(0, ("resnet18", 3, 224, resnet_stem(), {"bf16, fp32 shallow kernel": dict(bf16_shallow=False)}))
    cases += [("mobilenetv2", c, s, mobilenet_block(c, s), {"bf16, bf16 depthwise input": dict(bf16_depthwise_input=True),
                                                             "bf16, fp32 depthwise input": dict(bf16_depthwise_input=False),
                                                             "bf16, pairs kernel": dict(pairs=True)})
              for c, s in MOBILENET_BLOCKS]
    results = []
    print(f"{'block':22} {'variant':26} {'ms':>8} {'GFLOP/s':>8} {'% peak':>7} {'vs fp32':>8} {'rel err':>8}")
    for model, c, size, (fn, x, macs), alternatives in cases:
        variants = {"fp32": compiled(fn, x, "fp32"), "bf16": compiled(fn, x, "bf16")}
        variants.update({name: compiled(fn, x, "bf16", **how) for name, how in alternatives.items()})
        fp32_out = variants["fp32"](x).numpy()
        seconds = interleaved_medians({name: (lambda f=f: f(x)) for name, f in variants.items()}, repeat=20, rounds=7)
        for name, f in variants.items():
            error = float(np.linalg.norm(f(x).numpy() - fp32_out) / np.linalg.norm(fp32_out))
            gflops = 2 * macs / seconds[name] / 1e9
            share = 100 * gflops / (peak if name == "fp32" else 2 * peak)
            print(f"{f'{model} {c}x{size}x{size}':22} {name:26} {seconds[name] * 1e3:8.3f} {gflops:8.1f} "
                  f"{share:6.1f}% {seconds['fp32'] / seconds[name]:7.2f}x {error:8.1e}")
            results.append({"model": model, "channels": c, "size": size, "variant": name,
                            "seconds": seconds[name], "gflops": gflops, "peak_share": share, "relative_error": error})
    return finish(args, results, all(r["relative_error"] < 2e-2 for r in results), peak_fp32_gflops=peak)


if __name__ == "__main__":
    sys.exit(main())
