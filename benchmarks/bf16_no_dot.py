"""bf16 on a CPU without AVX512-BF16: precision="bf16" against tensorkiln's fp32 and OpenVINO.

    python benchmarks/bf16_no_dot.py [MODEL ...] [--threads 2] [--pairs 6] [--kernels] [--json out.json]

MODEL: resnet18, mobilenetv2, bert (default: the two CNNs; `tensorkiln bench`'s models at batch 1). Where the
target has no `vdpbf16ps` (kernels/target.py: `bf16_dot`), OpenVINO's default computes in f32, so
bf16 is worth running only at fp32's speed or better. Each model is compiled, each into a fresh
compile cache, as:

- "bf16": as the rules choose for this target;
- "bf16, bf16 depthwise input": the expanding 1x1 layers store the depthwise layers' input as
  bfloat16 (kernels/bf16_readers.py's `BF16_DEPTHWISE_INPUT` forced on, the choice for AVX512-BF16);
- "bf16, portable matvec": the classifier's matrix-vector product on the plain C bf16 helper
  (kernels/templates/weight_only.py's `bf16_matvec_kind` forced to "portable");
- "bf16, pairs GEMM and attention" (BERT only: the variants above are the CNNs'): the matmuls and
  attention on the bf16 pairs kernels that widen in software (passes/bf16_fp32_gemm.py's
  `PAIRS_WITHOUT_BF16_DOT` set; "bf16" runs them on the float32 templates);
- "fp32";

and timed in turns with OpenVINO at its default settings (its precision is printed),
`tools.timing.alternating_blocks` (blocks side by side, the order reversed every round). Printed:
each run's median ms per call, the median over the blocks of fp32's time / the run's time and of
OpenVINO's time / the run's time (above 1: faster), and each output's largest difference from
PyTorch's float32 relative to its largest logit. `--kernels` also prints each kernel of "bf16" and
of "fp32" (`f.profile`, the fastest of 3 profiles taken in turns, ms per call) and the sums.
"""
from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import benchmark_arguments, compiled_with, finish, torch_peer  # noqa: E402

MODELS = ("resnet18", "mobilenetv2", "bert")
DEFAULT_MODELS = ("resnet18", "mobilenetv2")
VARIANTS = {  # name -> (precision, attributes of tensorkiln modules replaced while it compiles)
    "bf16": ("bf16", {}),
    "bf16, bf16 depthwise input": ("bf16", {("kernels.bf16_readers", "BF16_DEPTHWISE_INPUT"): True}),
    "bf16, portable matvec": ("bf16", {("kernels.templates.weight_only", "bf16_matvec_kind"): lambda: "portable"}),
    "bf16, pairs GEMM and attention": ("bf16", {("passes.bf16_fp32_gemm", "PAIRS_WITHOUT_BF16_DOT"): True}),
    "fp32": ("fp32", {}),
}
MODEL_VARIANTS = {"bert": ("bf16", "bf16, pairs GEMM and attention", "fp32")}  # else every variant but BERT's
CNN_VARIANTS = tuple(name for name in VARIANTS if name != "bf16, pairs GEMM and attention")


def compiled(model, inputs, arrays, precision: str, replaced: dict):
    """from_torch(model) compiled now, in a fresh cache, with `replaced` module attributes in place."""
    return compiled_with(model, inputs, arrays, precision, replaced, "tk-bf16-no-dot-")


def main() -> int:
    parser = benchmark_arguments(__doc__, threads=2)
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"any of {', '.join(MODELS)} (default: all)")
    parser.add_argument("--pairs", type=int, default=6, help="rounds of blocks taken in turns")
    parser.add_argument("--kernels", action="store_true", help="print the per-kernel profiles of bf16 and fp32")
    args = parser.parse_args()
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}: choose from {', '.join(MODELS)}")
    torch = torch_peer(args.threads)
    import numpy as np
    from tensorkiln.kernels.target import cpu_target
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_common import openvino_default_precision, openvino_runner
    from tensorkiln.tools.timing import alternating_blocks

    results, ok = [], True
    for model_name in args.models or DEFAULT_MODELS:
        model, inputs = build(model_name, 1)
        arrays = [t.numpy() for t in inputs]
        with torch.no_grad():
            reference = model(*inputs).numpy()
        runs, errors, functions = {}, {}, {}
        for name in MODEL_VARIANTS.get(model_name, CNN_VARIANTS):
            precision, replaced = VARIANTS[name]
            f = functions[name] = compiled(model, inputs, arrays, precision, replaced)
            out = np.asarray(f(*arrays).numpy())
            errors[name] = float(np.abs(out - reference).max() / np.abs(reference).max())
            runs[name] = lambda f=f: f(*arrays)
        path = os.path.join(tempfile.mkdtemp(prefix="tk-bf16-no-dot-"), f"{model_name}.onnx")
        torch.onnx.export(model, inputs, path, dynamo=False)
        runs["openvino"], _ = openvino_runner(path, arrays, None)
        ov_precision = openvino_default_precision(path)
        print(f"{model_name}, batch 1, {args.threads} threads; {cpu_target()}; "
              f"OpenVINO default computes in {ov_precision}")
        blocks = alternating_blocks(runs, pairs=args.pairs)
        fp32, ov = np.array(blocks["fp32"]), np.array(blocks["openvino"])
        print(f"{'run':28} {'ms':>9} {'fp32 / run':>10} {'OV / run':>9} {'max err':>9}")
        for name, seconds in blocks.items():
            seconds = np.array(seconds)
            over_fp32, over_ov = float(np.median(fp32 / seconds)), float(np.median(ov / seconds))
            error = errors.get(name, float("nan"))
            print(f"{name:28} {np.median(seconds) * 1e3:9.2f} {over_fp32:9.2f}x {over_ov:8.2f}x {error:9.1e}")
            results.append({"model": model_name, "run": name, "seconds": float(np.median(seconds)),
                            "fp32_over_run": over_fp32, "openvino_over_run": over_ov, "max_error": error,
                            "openvino_precision": str(ov_precision)})
            ok = ok and (name == "openvino" or error < 2e-2)
        if args.kernels:
            print_kernels({name: functions[name] for name in ("bf16", "fp32")}, inputs)
    return finish(args, results, ok)


def print_kernels(functions: dict, inputs, rounds: int = 3) -> None:
    """Each kernel's fastest time over `rounds` profiles per function, the functions taken in turns."""
    profiles = {name: [] for name in functions}
    for _ in range(rounds):
        for name, f in functions.items():
            profiles[name].append(f.profile(*inputs, repeat=10))
    for name, taken in profiles.items():
        fastest = [min(p.kernels[i].seconds for p in taken) for i in range(len(taken[0].kernels))]
        print(f"{name}: {len(fastest)} kernels, {sum(fastest) * 1e3:.3f} ms (the sum of each kernel's fastest)")
        for kernel, seconds in zip(taken[0].kernels, fastest):
            print(f"  {kernel.name:40} {kernel.precision:30} {seconds * 1e3:8.3f}  {', '.join(kernel.ops[:6])}")


if __name__ == "__main__":
    sys.exit(main())
