"""ResNet-18 with a symbolic image height and width: programs compiled over many image sizes, and
latency against programs specialized to one size and against PyTorch eager.

    OMP_WAIT_POLICY=passive python benchmarks/dynamic_resnet.py [--sizes 160,224,257] [--pairs 3]
        [--batch 1] [--json FILE]

tensorkiln's ResNet-18 (tensorkiln.models.ResNet18, float32, random weights, eval mode),
tk.jit(model, dynamic={"x": {2: "h", 3: "w"}}) under no_grad (the batch axis symbolic too when
--batch is at least 2; a size of 1 is never a symbol), called once at each of the sampled square
image sizes and at a few non-square ones: the programs it compiled and the seconds all calls took,
compiling included. Then, per sampled size, the per-call latency of that symbolic program against
tk.jit(model, dynamic=False) specialized to the size and against PyTorch eager (the reference
torchvision-layout ResNet-18 of tools/torch_reference, its own random weights, 2 intra-op threads,
no_grad), in alternating blocks (tools/timing.alternating_blocks; medians of the blocks and of the
per-round ratios). The symbolic and specialized outputs must agree to 1e-4. GFLOP/s are 2 x the
convolutions' and the classifier's multiply-adds (counted from the layer shapes) per second,
against the machine's 2-thread FMA peak measured in the same run (benchmarks/kernels.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tensorkiln as tk  # noqa: E402
from benchmarks.common import machine_summary, print_table, write_json  # noqa: E402
from tensorkiln.models import ResNet18  # noqa: E402
from tensorkiln.tools.timing import alternating_blocks  # noqa: E402

EXTRA_SIZES = ((199, 231), (240, 176))  # non-square, odd: called once each to count programs


def images(batch: int, h: int, w: int) -> np.ndarray:
    return np.random.default_rng(h * 1000 + w).standard_normal((batch, 3, h, w)).astype(np.float32)


def multiply_adds(h: int, w: int) -> int:
    """Multiply-adds of the convolutions and the classifier for one h x w image, counted from the layer
    shapes of the reference model (the same architecture; its classifier has 10 classes, not 1000)."""
    import torch
    from tensorkiln.tools import torch_reference as ref
    model, total = ref.ResNet18().eval(), [0]

    def count(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d):
            k = module.weight.shape
            total[0] += output[0].numel() * k[1] * k[2] * k[3]
        elif isinstance(module, torch.nn.Linear):
            total[0] += module.weight.numel()

    for module in model.modules():
        module.register_forward_hook(count)
    with torch.no_grad():
        model(torch.zeros(1, 3, h, w))
    return total[0]


def torch_peer(batch: int, h: int, w: int):
    import torch
    from tensorkiln.tools import torch_reference as ref
    torch.set_num_threads(2)
    model = ref.ResNet18().eval()
    x = torch.from_numpy(images(batch, h, w))

    def run():
        with torch.no_grad():
            return model(x)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="160,224,257")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args()
    print(machine_summary())
    from benchmarks.kernels import measure_limits
    peak = measure_limits(3)["peak_gflops"]
    sizes = [int(s) for s in args.sizes.split(",")]
    tk.manual_seed(0)
    model = ResNet18()
    model.eval()
    axes = {2: "h", 3: "w"} | ({0: "batch"} if args.batch >= 2 else {})
    results = {"peak_gflops": peak, "sizes": {}}
    with tk.no_grad():
        symbolic = tk.jit(model, dynamic={"x": axes})
        start = time.perf_counter()
        for h, w in [(s, s) for s in sizes] + list(EXTRA_SIZES):
            symbolic(images(args.batch, h, w))
        seconds = time.perf_counter() - start
        calls = len(sizes) + len(EXTRA_SIZES)
        print(f"\n{calls} image sizes at batch {args.batch}: {symbolic.compile_count} programs, {seconds:.1f} s "
              f"for all calls (compiling included)")
        results.update(programs=symbolic.compile_count, seconds=seconds)
        rows = []
        for size in sizes:
            x = images(args.batch, size, size)
            specialized = tk.jit(model, dynamic=False)
            got, want = symbolic(x).numpy(), specialized(x).numpy()
            error = float(np.abs(got - want).max() / np.abs(want).max())
            assert error < 1e-4, f"size {size}: symbolic and specialized differ by {error:.1e}"
            times = alternating_blocks({"symbolic": lambda: symbolic(x), "specialized": lambda: specialized(x),
                                        "torch": torch_peer(args.batch, size, size)}, pairs=args.pairs)
            med = {k: float(np.median(v)) for k, v in times.items()}
            ratio = float(np.median([a / b for a, b in zip(times["symbolic"], times["specialized"])]))
            over_torch = float(np.median([a / b for a, b in zip(times["symbolic"], times["torch"])]))
            gflops = 2 * args.batch * multiply_adds(size, size) / med["symbolic"] / 1e9
            rows.append([str(size), f"{med['symbolic'] * 1e3:.2f}", f"{med['specialized'] * 1e3:.2f}",
                         f"{med['torch'] * 1e3:.2f}", f"{ratio:.3f}", f"{over_torch:.3f}",
                         f"{gflops:.1f} ({gflops / peak:.0%})"])
            results["sizes"][str(size)] = {"symbolic_s": med["symbolic"], "specialized_s": med["specialized"],
                                           "torch_s": med["torch"], "symbolic_over_specialized": ratio,
                                           "symbolic_over_torch": over_torch, "gflops": gflops}
    print_table(["size", "symbolic ms", "specialized ms", "PyTorch eager ms", "symbolic / specialized",
                 "symbolic / torch", f"GFLOP/s (of {peak:.0f} peak)"], rows)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
