"""Kernel benchmarks against the machine's limits and numpy (OpenBLAS), with 1 and 2 threads.

    python3 benchmarks/kernels.py            # everything, prints markdown tables
    python3 benchmarks/kernels.py --quick    # fewer sizes and repeats

Measured, each as a median of several runs after a warm-up, in a subprocess per
thread count (OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set for it):

- the machine: peak FMA GFLOP/s (a small C program with independent vector
  FMA chains, GCC vector types) and STREAM copy / triad GB/s;
- SGEMM at 256..2048, tensorkiln vs numpy (and torch when importable);
- ResNet-18's convolution layers (batch 1, 224x224) as GFLOP/s;
- softmax, layer norm, GELU (erf and tanh forms) and a 5-op elementwise chain on
  4096x4096 float32 as GB/s (bytes that must move: read once, write once), the
  kernel into a reused output against STREAM copy, and the whole f(x) call;
- fused attention (batch 1, 8 heads, head_dim 64, seq 512 and 2048, causal and
  not) as ms and GFLOP/s, against torch's scaled_dot_product_attention when
  torch is importable, timed interleaved in the same process.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import RESNET18_CONVS  # noqa: E402
from benchmarks.stream_kernels import FMA_CHAINS_C  # noqa: E402

LIMITS_C = r"""
#include <stdint.h>
#include <stdlib.h>
#include <omp.h>
""" + FMA_CHAINS_C + r"""

/* every thread runs the chains (stream_kernels.py's fma_chains); returns the flops done together */
double peak_fma(int64_t iters)
{
    double total = 0;
    #pragma omp parallel reduction(+:total)
    total += fma_chains(iters);
    return total;
}

void stream_copy(int64_t n, const float *restrict a, float *restrict b)
{
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) b[i] = a[i];
}

void stream_triad(int64_t n, const float *restrict a, const float *restrict b, float *restrict c, float s)
{
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) c[i] = a[i] + s * b[i];
}
"""


def _median(fn, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _build_limits() -> ctypes.CDLL:
    folder = tempfile.mkdtemp(prefix="tk-limits-")
    src, lib = os.path.join(folder, "limits.c"), os.path.join(folder, "limits.so")
    with open(src, "w") as f:
        f.write(LIMITS_C)
    subprocess.check_call(["gcc", "-O3", "-march=native", "-ffp-contract=fast", "-fopenmp", "-shared", "-fPIC",
                           src, "-o", lib])
    return ctypes.CDLL(lib)


def measure_limits(repeats: int) -> dict:
    lib = _build_limits()
    lib.peak_fma.restype = ctypes.c_double
    lib.peak_fma.argtypes = [ctypes.c_int64]
    iters = 20_000_000
    lib.peak_fma(1000)
    seconds = []
    flops = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        flops = lib.peak_fma(iters)
        seconds.append(time.perf_counter() - start)
    peak = flops / float(np.median(seconds)) / 1e9
    n = 1 << 25  # 128 MiB per array: far beyond the caches
    a, b, c = (np.full(n, 1.0, np.float32) for _ in range(3))
    ptr = lambda x: x.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    copy = _median(lambda: lib.stream_copy(ctypes.c_int64(n), ptr(a), ptr(b)), repeats)
    triad = _median(lambda: lib.stream_triad(ctypes.c_int64(n), ptr(a), ptr(b), ptr(c), ctypes.c_float(3.0)),
                    repeats)
    return {"peak_gflops": peak, "copy_gbs": 2 * 4 * n / copy / 1e9, "triad_gbs": 3 * 4 * n / triad / 1e9}


def measure_sgemm(sizes, repeats: int) -> list[dict]:
    import tensorkiln as tk
    rows = []
    try:
        import torch  # noqa: F401
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    for n in sizes:
        a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
        f = tk.jit(lambda x, y: x @ y)
        f(a, b)
        reps = max(3, repeats if n <= 1024 else repeats // 2)
        t_tk = _median(lambda: f(a, b), reps)
        t_np = _median(lambda: a @ b, reps)
        row = {"n": n, "tk": 2 * n ** 3 / t_tk / 1e9, "numpy": 2 * n ** 3 / t_np / 1e9}
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            row["torch"] = 2 * n ** 3 / _median(lambda: ta @ tb, reps) / 1e9
        rows.append(row)
    return rows


def _conv_algorithm_of(loop_irs: list[str]) -> str:
    """Which convolution template the kernels came from (by their buffers' names)."""
    text = "\n".join(loop_irs)
    for marker, name in (("wino_", "winograd"), ("g_xpad", "gemm_rows"), ("g_acc", "gemm"), ("dw_pad", "depthwise")):
        if marker in text:
            return name
    return "direct"


def measure_convs(repeats: int) -> list[dict]:
    import tensorkiln as tk
    import tensorkiln.nn.functional as F
    rng = np.random.default_rng(0)
    rows = []
    for name, c, h, o, k, s, p in RESNET18_CONVS:
        x = rng.standard_normal((1, c, h, h), dtype=np.float32)
        w = rng.standard_normal((o, c, k, k), dtype=np.float32)
        bias = rng.standard_normal((o,), dtype=np.float32)
        f = tk.jit(lambda x, w, b: F.conv2d(x, w, b, stride=s, padding=p).relu())
        f(x, w, bias)
        oh = (h + 2 * p - k) // s + 1
        flops = 2 * o * oh * oh * c * k * k
        t = _median(lambda: f(x, w, bias), repeats)
        irs = [kk.loop_ir for kk in f.report(x, w, bias).kernels]
        algo = _conv_algorithm_of(irs)
        rows.append({"layer": name, "shape": f"{c}x{h}x{h} -> {o}x{oh}x{oh}", "algorithm": algo,
                     "gflops": flops / t / 1e9, "ms": t * 1e3})
    return rows


def _kernel_call(f, args: tuple):
    """The native entry of jitted `f` for `args`, writing into one preallocated output.

    STREAM copies into an array it reuses; `f(*args)` returns a fresh 64 MiB
    array per call, whose first touch costs the kernel ~1-3 ms of page faults
    (the OS zeroes every page). Timing the entry with a reused output compares
    the kernel with STREAM on equal terms; the fresh-output call is reported
    beside it. (Reaches into the jit cache: benchmark use only.)
    """
    module = f._lookup(args, {})[0].compiled.module
    out = np.empty(module.signature.outputs[0].shape, np.float32)
    return lambda: module(*args, out)


def _numpy_erf():
    """scipy's vectorized erf, or None (numpy has none; math.erf per element would time Python)."""
    try:
        from scipy.special import erf
    except ImportError:
        return None
    return erf


def measure_memory_bound(repeats: int) -> list[dict]:
    """Row kernels and elementwise kernels on 4096x4096 float32: GB/s of the bytes that must move.

    Per kernel, interleaved in one loop (so all see the same machine load):
    the compiled kernel into a reused output, a STREAM copy of the same 64 MiB
    (the reference of the "% of STREAM copy" column), the full `f(x)` call
    with a fresh output, and numpy's unfused equivalent.
    """
    import tensorkiln as tk
    import tensorkiln.nn.functional as F
    x = np.random.default_rng(0).standard_normal((4096, 4096), dtype=np.float32)
    g, b = np.ones(4096, np.float32), np.zeros(4096, np.float32)
    erf = _numpy_erf()
    c = np.float32(0.7978845608)  # sqrt(2 / pi)
    stream = _build_limits()
    copied = np.empty_like(x)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    cases = {
        "softmax": (lambda x: x.softmax(-1), (x,), lambda: np.exp(x - x.max(-1, keepdims=True))),
        "layer norm": (lambda x, g, b: F.layer_norm(x, (4096,), g, b), (x, g, b),
                       lambda: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)),
        "gelu (erf)": (lambda x: F.gelu(x), (x,),
                       None if erf is None else lambda: 0.5 * x * (1 + erf(x * np.float32(0.7071067811865476)))),
        "gelu (tanh)": (lambda x: F.gelu(x, approximate="tanh"), (x,),
                        lambda: 0.5 * x * (1 + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))),
        "5-op chain": (lambda x: ((x * 2.0 + 1.0).relu() - 0.5).abs() * 3.0, (x,),
                       lambda: np.abs(np.maximum(x * 2.0 + 1.0, 0) - 0.5) * 3.0),
    }
    rows = []
    for name, (fn, args, numpy_fn) in cases.items():
        f = tk.jit(fn)
        runs = {"kernel": _kernel_call(f, args), "call": lambda: f(*args),
                "copy": lambda: stream.stream_copy(ctypes.c_int64(x.size), ptr(x), ptr(copied))}
        if numpy_fn is not None:
            runs["numpy"] = numpy_fn
        times = {key: [] for key in runs}
        for run in runs.values():
            run()  # warm-up (and compile)
        for _ in range(max(3, repeats)):
            for key, run in runs.items():
                start = time.perf_counter()
                run()
                times[key].append(time.perf_counter() - start)
        gbs = {key: 2 * x.nbytes / float(np.median(t)) / 1e9 for key, t in times.items()}
        rows.append({"kernel": name, "gbs": gbs["kernel"], "call_gbs": gbs["call"], "numpy_gbs": gbs.get("numpy"),
                     "copy_gbs": gbs["copy"],
                     "ms": float(np.median(times["kernel"])) * 1e3})
    return rows


def _attention_flops(heads: int, length: int, head_dim: int, causal: bool) -> float:
    """Multiply-adds of q k^T and p v, counting only the (query, key) pairs a causal mask keeps."""
    pairs = length * (length + 1) // 2 if causal else length * length
    return 4.0 * heads * pairs * head_dim


def measure_attention(repeats: int, lengths=(512, 2048), heads: int = 8, head_dim: int = 64) -> list[dict]:
    """Fused attention (tk.jit of F.scaled_dot_product_attention) vs torch's SDPA, interleaved runs."""
    import tensorkiln as tk
    import tensorkiln.nn.functional as F
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    rows = []
    for length in lengths:
        for causal in (False, True):
            q, k, v = (rng.standard_normal((1, heads, length, head_dim), dtype=np.float32) for _ in range(3))
            f = tk.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            runs = {"tk": lambda: f(q, k, v)}
            if torch is not None:
                tq, tk_, tv = (torch.from_numpy(a) for a in (q, k, v))
                sdpa = torch.nn.functional.scaled_dot_product_attention
                runs["torch"] = lambda: sdpa(tq, tk_, tv, is_causal=causal)
            times = {name: [] for name in runs}
            for fn in runs.values():
                fn()  # warm-up (and compile)
            for _ in range(3 * repeats if length <= 1024 else repeats):  # short runs: more of them
                for name, fn in runs.items():  # interleaved: both see the same machine load
                    start = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - start)
            flops = _attention_flops(heads, length, head_dim, causal)
            row = {"seq": length, "causal": causal}
            for name, t in times.items():
                seconds = float(np.median(t))
                row[f"{name}_ms"], row[f"{name}_gflops"] = seconds * 1e3, flops / seconds / 1e9
            rows.append(row)
    return rows


def worker(args) -> None:
    repeats = 3 if args.quick else 7
    sizes = [256, 1024] if args.quick else [256, 512, 1024, 2048]
    result = {"limits": measure_limits(repeats), "sgemm": measure_sgemm(sizes, repeats),
              "convs": measure_convs(repeats), "memory": measure_memory_bound(repeats)}
    result["attention"] = measure_attention(repeats, (512,) if args.quick else (512, 2048))
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    from benchmarks.common import machine_summary
    results = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   OMP_WAIT_POLICY="passive")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker"] + (["--quick"] if args.quick else [])
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        results[threads] = json.loads(out.strip().splitlines()[-1])
    print(f"# kernels benchmark: {machine_summary()}\n")
    ts = sorted(results)
    print("| machine | " + " | ".join(f"{t} thread(s)" for t in ts) + " |\n|---|" + "---|" * len(ts))
    for key, label in (("peak_gflops", "peak FMA GFLOP/s"), ("copy_gbs", "STREAM copy GB/s"),
                       ("triad_gbs", "STREAM triad GB/s")):
        print(f"| {label} | " + " | ".join(f"{results[t]['limits'][key]:.1f}" for t in ts) + " |")
    print("\n| SGEMM n | threads | tensorkiln GFLOP/s | numpy GFLOP/s | ratio | % of peak |\n|---|---|---|---|---|---|")
    for t in ts:
        for row in results[t]["sgemm"]:
            peak = results[t]["limits"]["peak_gflops"]
            print(f"| {row['n']} | {t} | {row['tk']:.1f} | {row['numpy']:.1f} | {row['tk'] / row['numpy']:.2f} | "
                  f"{100 * row['tk'] / peak:.0f}% |")
    print("\n| ResNet-18 conv (batch 1) | shape | algorithm | threads | GFLOP/s | ms | % of peak |\n"
          "|---|---|---|---|---|---|---|")
    for t in ts:
        for row in results[t]["convs"]:
            peak = results[t]["limits"]["peak_gflops"]
            print(f"| {row['layer']} | {row['shape']} | {row['algorithm']} | {t} | {row['gflops']:.1f} | "
                  f"{row['ms']:.2f} | {100 * row['gflops'] / peak:.0f}% |")
    print("\n| 4096x4096 float32 | threads | tensorkiln GB/s | numpy GB/s | % of STREAM copy | ms | "
          "f(x) GB/s (new output) |\n|---|---|---|---|---|---|---|")
    for t in ts:
        for row in results[t]["memory"]:
            copy = row.get("copy_gbs", results[t]["limits"]["copy_gbs"])  # timed beside the kernel
            numpy_gbs = "-" if row["numpy_gbs"] is None else f"{row['numpy_gbs']:.1f}"
            print(f"| {row['kernel']} | {t} | {row['gbs']:.1f} | {numpy_gbs} | "
                  f"{100 * row['gbs'] / copy:.0f}% | {row['ms']:.2f} | {row['call_gbs']:.1f} |")
    print("\n| attention (1x8 heads, d 64) | causal | threads | tensorkiln ms | GFLOP/s | torch SDPA ms | "
          "GFLOP/s | speedup | % of peak |\n|---|---|---|---|---|---|---|---|---|")
    for t in ts:
        for row in results[t]["attention"]:
            peak = results[t]["limits"]["peak_gflops"]
            torch_ms = f"{row['torch_ms']:.2f} | {row['torch_gflops']:.1f} | {row['torch_ms'] / row['tk_ms']:.2f}" \
                if "torch_ms" in row else "- | - | -"
            print(f"| seq {row['seq']} | {'yes' if row['causal'] else 'no'} | {t} | {row['tk_ms']:.2f} | "
                  f"{row['tk_gflops']:.1f} | {torch_ms} | {100 * row['tk_gflops'] / peak:.0f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
