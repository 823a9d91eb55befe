"""bf16 ResNet-18 on a CPU without AVX512-BF16: the widened tiles against the widening loop IR and OpenVINO.

    python benchmarks/bf16_widened.py [--threads 1] [--pairs 6] [--json out.json]

Where the target has no `vdpbf16ps` (kernels/target.py: `bf16_dot`), precision="bf16" convolutions
widen bf16 to float32. This compiles ResNet-18 (batch 1, `tensorkiln bench`'s model) with
precision="bf16" three ways, each into a fresh compile cache:

- "bf16": as the rules choose (bf16_widened_c.py's AVX2 tiles, the direct tile sized by
  conv_nchwc_bf16.py's `WIDENED_TILE_REGISTERS`);
- "bf16, float32 tile budget": the direct tile sized as the float32 kernel's;
- "bf16, loop IR": the loop IR that widens each element (no helper), the code before the tiles;

and fp32, and times them in turns with OpenVINO at its default settings (on such a CPU OpenVINO
computes in f32; its precision is printed), `tools.timing.alternating_blocks` (blocks side by side,
the order reversed every round). Printed: each run's median ms per call and the median over the
blocks of OpenVINO's time / the run's time (above 1: ahead of OpenVINO), and each output's largest
difference from PyTorch's float32 relative to its largest logit.
"""
from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import benchmark_arguments, compiled_with, finish, torch_peer  # noqa: E402

VARIANTS = {  # name -> (precision, attributes of tensorkiln modules replaced while it compiles)
    "bf16": ("bf16", {}),
    "bf16, float32 tile budget": ("bf16", {("kernels.templates.conv_nchwc_bf16", "WIDENED_TILE_REGISTERS"): {}}),
    "bf16, loop IR": ("bf16", {("kernels.templates.conv_nchwc_bf16", "uses_widened_tile"): lambda kb: False,
                               ("kernels.templates.conv_shallow_bf16", "uses_widened_tile"): lambda lanes: False}),
    "fp32": ("fp32", {}),
}


def compiled(model, inputs, arrays, precision: str, replaced: dict):
    """from_torch(model) compiled now, in a fresh cache, with `replaced` module attributes in place."""
    return compiled_with(model, inputs, arrays, precision, replaced, "tk-bf16-widened-")


def main() -> int:
    parser = benchmark_arguments(__doc__, threads=1)
    parser.add_argument("--pairs", type=int, default=6, help="rounds of blocks taken in turns")
    args = parser.parse_args()
    torch = torch_peer(args.threads)
    import numpy as np
    from tensorkiln.kernels.target import cpu_target
    from tensorkiln.tools.bench import build
    from tensorkiln.tools.bench_common import openvino_default_precision, openvino_runner
    from tensorkiln.tools.timing import alternating_blocks

    model, inputs = build("resnet18", 1)
    arrays = [t.numpy() for t in inputs]
    with torch.no_grad():
        reference = model(*inputs).numpy()
    runs, errors = {}, {}
    for name, (precision, replaced) in VARIANTS.items():
        f = compiled(model, inputs, arrays, precision, replaced)
        out = np.asarray(f(*arrays).numpy())
        errors[name] = float(np.abs(out - reference).max() / np.abs(reference).max())
        runs[name] = lambda f=f: f(*arrays)
    path = os.path.join(tempfile.mkdtemp(prefix="tk-bf16-widened-"), "resnet18.onnx")
    torch.onnx.export(model, inputs, path, dynamo=False)
    runs["openvino"], _ = openvino_runner(path, arrays, None)
    ov_precision = openvino_default_precision(path)
    print(f"resnet18, batch 1, {args.threads} threads; {cpu_target()}; OpenVINO default computes in {ov_precision}")
    blocks = alternating_blocks(runs, pairs=args.pairs)
    ov = np.array(blocks["openvino"])
    results = []
    print(f"{'run':28} {'ms':>9} {'OV / run':>9} {'max err':>9}")
    for name, seconds in blocks.items():
        ratio = float(np.median(ov / np.array(seconds)))
        error = errors.get(name, float("nan"))
        print(f"{name:28} {np.median(seconds) * 1e3:9.2f} {ratio:8.2f}x {error:9.1e}")
        results.append({"run": name, "seconds": float(np.median(seconds)), "openvino_over_run": ratio,
                        "max_error": error})
    return finish(args, results, all(r["max_error"] < 2e-2 for r in results if r["run"] != "openvino"),
                  openvino_precision=str(ov_precision))


if __name__ == "__main__":
    sys.exit(main())
