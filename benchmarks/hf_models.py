"""Hugging Face transformers architectures through tensorkiln: correctness of both paths, then latency.

    OMP_WAIT_POLICY=passive python benchmarks/hf_models.py [--rounds 5] [--repeat 20] [--skip-latency]
        [--json FILE]

1. Every architecture of tensorkiln/tools/hf_zoo.py at its "tiny" size (seeded
   random weights, float32) through tk.from_torch and through
   torch.compile(backend="tensorkiln"): whether it ran, and the largest error
   of its floating-point outputs relative to each output's largest eager value.
2. Latency of BERT, Llama (a forward over the whole prompt, no cache) and ViT
   at the "small" size (hidden 256, 4 layers, 128 tokens or a 224x224 image,
   batch 1): eager PyTorch, torch.compile with Inductor (default settings) and
   torch.compile with tensorkiln, timed in turns (tools/timing.interleaved_medians:
   rounds of one block per framework, a pause and an untimed call before each
   block), medians; against eager, and the model's FLOPs (PyTorch's
   FlopCounterMode) per second against the machine's peak FMA rate measured in
   the same run. All three run float32 with torch's threads (2 on this machine).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import machine_summary, print_table, write_json  # noqa: E402
from benchmarks.kernels import measure_limits  # noqa: E402
from tensorkiln.tools import hf_zoo  # noqa: E402
from tensorkiln.tools.timing import interleaved_medians  # noqa: E402

LATENCY_MODELS = ("bert", "llama", "vit")


def correctness_rows() -> tuple[list[list[str]], dict]:
    """One row per architecture: kind, and each path's max relative error (or the error it raised)."""
    rows, results = [], {}
    for name, arch in hf_zoo.ARCHITECTURES.items():
        model, args, kwargs = arch.build("tiny")
        with torch.no_grad():
            expected = hf_zoo.tensors_of(model(*args, **kwargs))
        cells = {}
        for path, run in (("from_torch", hf_zoo.through_from_torch),
                          ("torch.compile", hf_zoo.through_torch_compile)):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cells[path] = hf_zoo.max_relative_error(run(model, args, kwargs), expected)
            except Exception as err:  # the table reports the failure and goes on
                cells[path] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
        results[name] = {"kind": arch.kind, **cells}
        rows.append([name, arch.kind] + [f"ok, {v:.1e}" if isinstance(v, float) else v for v in cells.values()])
        print(f"  .. {name}", file=sys.stderr, flush=True)
    return rows, results


def _flops(model, args, kwargs) -> float:
    from torch.utils.flop_counter import FlopCounterMode
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(*args, **kwargs)
    return float(counter.get_total_flops())


def latency(name: str, repeat: int, rounds: int) -> dict:
    """Median seconds per forward of eager, Inductor and tensorkiln on the small config, timed in turns."""
    model, args, kwargs = hf_zoo.ARCHITECTURES[name].build("small")
    torch._dynamo.reset()
    runs, first_call = {}, {}
    with torch.no_grad():
        expected = hf_zoo.tensors_of(model(*args, **kwargs))
        for framework, backend in (("eager PyTorch", None), ("torch.compile, Inductor (default)", "inductor"),
                                   ("torch.compile, tensorkiln", "tensorkiln")):
            fn = model if backend is None else torch.compile(model, backend=backend)
            start = time.perf_counter()
            result = hf_zoo.tensors_of(fn(*args, **kwargs))
            first_call[framework] = time.perf_counter() - start
            error = hf_zoo.max_relative_error([t.numpy() for t in result], expected)
            if error > 1e-3:
                raise SystemExit(f"{name}: {framework} differs from eager (max relative error {error:.2e})")
            runs[framework] = lambda fn=fn: fn(*args, **kwargs)
        medians = interleaved_medians(runs, repeat=repeat, rounds=rounds)
    return {"medians": medians, "first_call": first_call, "flops": _flops(model, args, kwargs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per framework at least")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"transformers {hf_zoo.transformers.__version__}, torch {torch.__version__}; {machine_summary()}")
    print("\nEvery architecture at its tiny size, float32, max relative error against eager PyTorch:")
    rows, correctness = correctness_rows()
    print_table(["architecture", "kind", "tk.from_torch", "torch.compile(backend='tensorkiln')"], rows)
    report = {"correctness": correctness}
    if not args.skip_latency:
        peak = measure_limits(3)["peak_gflops"]
        report["peak_gflops"], report["latency"] = peak, {}
        rows = []
        for name in LATENCY_MODELS:
            figures = latency(name, args.repeat, args.rounds)
            report["latency"][name] = figures
            eager = figures["medians"]["eager PyTorch"]
            for framework, seconds in figures["medians"].items():
                gflops = figures["flops"] / seconds / 1e9
                rows.append([name, framework, f"{seconds * 1e3:.2f}", f"{eager / seconds:.2f}x",
                             f"{gflops:.1f}", f"{gflops / peak:.1%}", f"{figures['first_call'][framework]:.1f}"])
        print(f"\nLatency at the small size (hidden 256, 4 layers, 128 tokens / 224x224, batch 1), float32, "
              f"medians of {args.rounds} rounds in turns; peak {peak:.0f} GFLOP/s measured in this run:")
        print_table(["model", "framework", "ms (median)", "vs eager", "GFLOP/s", "of peak", "first call s"], rows)
    if args.json:
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
