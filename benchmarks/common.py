"""Shared timing helpers for the benchmark scripts: medians after warm-up, tables, JSON."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import tempfile
import platform
import time

import numpy as np

from tensorkiln.kernels.target import cpu_description
from tensorkiln.tools.timing import median_seconds  # noqa: F401  (re-exported for the scripts)

# ResNet-18's convolution layers, for the kernel benchmarks
RESNET18_CONVS = [  # name, C_in, H(=W), C_out, kernel, stride, padding (224x224 input)
    ("conv1 7x7/2", 3, 224, 64, 7, 2, 3),
    ("layer1 3x3", 64, 56, 64, 3, 1, 1),
    ("layer2.0 3x3/2", 64, 56, 128, 3, 2, 1),
    ("layer2 3x3", 128, 28, 128, 3, 1, 1),
    ("layer2 down 1x1/2", 64, 56, 128, 1, 2, 0),
    ("layer3.0 3x3/2", 128, 28, 256, 3, 2, 1),
    ("layer3 3x3", 256, 14, 256, 3, 1, 1),
    ("layer3 down 1x1/2", 128, 28, 256, 1, 2, 0),
    ("layer4.0 3x3/2", 256, 14, 512, 3, 2, 1),
    ("layer4 3x3", 512, 7, 512, 3, 1, 1),
    ("layer4 down 1x1/2", 256, 14, 512, 1, 2, 0),
]


def machine_summary() -> str:
    """CPU (model, family and model, vector ISA, caches), core count and Python/numpy versions, for the
    header of a results table."""
    return f"{cpu_description()}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}"


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """A plain-text table with right-aligned columns (first column left-aligned)."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def write_json(path: str, data: dict) -> None:
    """Write benchmark results as JSON."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=2)


def interleaved_seconds(fns, calls: int, quantile: float = 10) -> list[float]:
    """Seconds per call of each fn, called in turn `calls` times: the `quantile`-th percentile.

    On a machine shared with other processes, they only ever add time, so a
    low percentile of alternating calls estimates the uncontended time far
    more stably than a median.
    """
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(calls):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    return [float(np.percentile(t, quantile)) for t in times]


def benchmark_arguments(doc: str, threads: int = 2) -> argparse.ArgumentParser:
    """The parser every kernel benchmark starts from: --threads and --json, described by `doc`'s first line.

    Call `parse_args` on it before importing anything that loads OpenMP: `parse_args` sets
    OMP_NUM_THREADS from --threads, which the OpenMP runtime reads once, when it loads.
    """
    parser = _ThreadsParser(description=doc.strip().splitlines()[0])
    parser.add_argument("--threads", type=int, default=threads, help="OpenMP threads (OMP_NUM_THREADS)")
    parser.add_argument("--json", help="write the figures to this file")
    return parser


class _ThreadsParser(argparse.ArgumentParser):
    """An ArgumentParser whose parse_args also sets OMP_NUM_THREADS from --threads."""

    def parse_args(self, *args, **kwargs):  # type: ignore[override]
        parsed = super().parse_args(*args, **kwargs)
        os.environ["OMP_NUM_THREADS"] = str(parsed.threads)  # read when the first library loads OpenMP
        return parsed


def bf16_rounded(a: np.ndarray) -> np.ndarray:
    """`a` rounded to bfloat16 (to nearest even), as float32: the operands a bf16 kernel multiplies."""
    from tensorkiln.dtypes import bf16_bits_from_f32, f32_from_bf16_bits
    return f32_from_bf16_bits(bf16_bits_from_f32(np.asarray(a, dtype=np.float32)))


def bf16_dot_text() -> str:
    """Whether this host multiplies bf16 pairs with vdpbf16ps, for a benchmark's header line."""
    from tensorkiln.kernels.target import cpu_target
    return "yes" if cpu_target().bf16_dot else "no (widened)"


def compiled_with(model, inputs, arrays, precision: str, replaced: dict, cache_prefix: str = "tk-variant-"):
    """from_torch(model) compiled now, in a fresh cache, with `replaced` attributes of tensorkiln modules
    in place ({(module under tensorkiln, attribute): value}), then called once on `arrays`."""
    from tensorkiln.importers.torch import from_torch
    modules = {name: importlib.import_module(f"tensorkiln.{name}") for name, _ in replaced}
    saved = {key: getattr(modules[key[0]], key[1]) for key in replaced}
    os.environ["TENSORKILN_CACHE"] = tempfile.mkdtemp(prefix=cache_prefix)
    try:
        for (name, attribute), value in replaced.items():
            setattr(modules[name], attribute, value)
        f = from_torch(model, inputs, precision=precision)
        f(*arrays)
        return f
    finally:
        for (name, attribute), value in saved.items():
            setattr(modules[name], attribute, value)


def torch_peer(threads: int):
    """PyTorch, the peer, on `threads` threads (imported on use: like every benchmark's peers, optional)."""
    import torch
    torch.set_num_threads(threads)
    return torch


def finish(args: argparse.Namespace, results, passed: bool = True, **figures) -> int:
    """The end of a benchmark's main(): the results (and `figures`) to --json, if given, with the thread
    count; the exit status, 1 where a check of the results failed."""
    if args.json:
        write_json(args.json, {"threads": args.threads, **figures, "results": results})
    return 0 if passed else 1


# The four runs a bf16 kernel benchmark times in turns: tensorkiln in bf16 and fp32, torch in both.
BF16_RUNS = ("tk bf16", "tk fp32", "torch bf16", "torch fp32")


def print_bf16_header(what: str, threads: int, case: str, width: int) -> None:
    """The title and column heads of a table of `time_bf16_case` rows (`case` heads the first column)."""
    print(f"{what}, {threads} threads, vdpbf16ps: {bf16_dot_text()}; GFLOP/s, medians of turns")
    print(f"{case:>{width}} {'tk bf16':>8} {'tk fp32':>8} {'torch bf16':>10} {'torch fp32':>10} {'bf16/fp32':>9} "
          f"{'max rel err':>11}")


def time_bf16_case(label: str, width: int, flops: float, runs: dict, error: float) -> dict:
    """Time the four `runs` (BF16_RUNS) in turns, print their GFLOP/s, bf16's speed-up over fp32 and the
    bf16 result's error as one row; return those figures."""
    from tensorkiln.tools.timing import interleaved_medians
    seconds = interleaved_medians(runs, repeat=20, rounds=5)
    gflops = {name: flops / s / 1e9 for name, s in seconds.items()}
    speedup = seconds["tk fp32"] / seconds["tk bf16"]
    print(f"{label:>{width}} {gflops['tk bf16']:8.1f} {gflops['tk fp32']:8.1f} {gflops['torch bf16']:10.1f} "
          f"{gflops['torch fp32']:10.1f} {speedup:8.2f}x {error:11.1e}")
    return {"gflops": gflops, "bf16_over_fp32": speedup, "max_rel_error": error}
