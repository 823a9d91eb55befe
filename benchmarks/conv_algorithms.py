"""Each convolution algorithm on each ResNet-18 conv layer, against the choice of `conv_algorithm`.

    python benchmarks/conv_algorithms.py                   # batch 1 and 8, 1 and 2 threads
    python benchmarks/conv_algorithms.py --batch 1 --threads 1 --rounds 5 --only-3x3
    python benchmarks/conv_algorithms.py --shallow --batch 1    # layers with few input channels

For each layer (224x224 input) and batch, every NCHW algorithm that applies
(winograd4, winograd2, gemm_rows, gemm: tensorkiln/kernels/templates/conv.py)
is compiled on its own (`forced_conv_algorithm`) as conv + bias + relu, the
weight passed as an argument so that no graph pass changes the layer.
With the weights baked in as constants, as in a model: `nchwc` is the
layer where Winograd is not chosen (the channel-blocked layout pass,
passes/layout.py, takes such layers), and `compiled` is the layer as a
model compiles it, nothing forced (its label says what ran). `rule` is
conv_algorithm's pick for the NCHW layer. All variants of a layer are
timed interleaved, round after round, in one process per thread count (so
load from elsewhere hits them alike); each figure is the median over the
rounds. GFLOP/s counts the direct convolution's 2*K*C*9*OH*OW per image
whatever the algorithm computes; `!` marks a layer whose compiled form is
more than 5% slower than the fastest variant.

`--shallow` runs the stems (few input channels: ResNet-18's, MobileNetV2's
and a few more, up to 16 input channels) instead, with the `shallow`
algorithm (conv_shallow.py) as one more variant; its `nchwc` column is the
blocked kernel alone, writing NCHW, as the layout pass ran such a stem
before `shallow` existed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import RESNET18_CONVS  # noqa: E402

ALGORITHMS = ("winograd4", "winograd2", "gemm_rows", "gemm")
COLUMNS = ALGORITHMS + ("shallow", "nchwc", "compiled")
SHALLOW_LAYERS = [  # name, C_in, H(=W), C_out, kernel, stride, padding: around the rule's SHALLOW_MAX_CHANNELS
    ("ResNet-18 conv1 7x7/2", 3, 224, 64, 7, 2, 3),
    ("MobileNetV2 conv 3x3/2", 3, 224, 32, 3, 2, 1),
    ("gray 3x3", 1, 224, 32, 3, 1, 1),
    ("4ch 3x3", 4, 112, 32, 3, 1, 1),
    ("4ch 1x1", 4, 112, 32, 1, 1, 0),
    ("8ch 3x3", 8, 112, 32, 3, 1, 1),
    ("8ch 3x3/2", 8, 112, 32, 3, 2, 1),
    ("12ch 5x5/2", 12, 60, 40, 5, 2, 2),
    ("16ch 3x3", 16, 56, 32, 3, 1, 1),
    ("16ch 3x3/2", 16, 112, 32, 3, 2, 1),
]
SLOWER_MARK = 1.05  # the compiled layer is marked when this much slower than the fastest variant
SAMPLE_SECONDS = 0.02  # calls per sample: about this long


def _label(f, args) -> str:
    """What a compiled conv layer ran: winograd, the blocked layout (nchwc), gemm_rows, gemm or direct."""
    irs = [k.loop_ir for k in f.report(*args).kernels]
    if any("wino_scratch" in ir for ir in irs):
        return "winograd"
    if any(n.op == "conv2d_nchwc" for n in f.optimized_graph(*args).nodes):
        return "nchwc"
    if any("sh_plane" in ir for ir in irs):
        return "shallow"
    if any("g_xpad" in ir for ir in irs):
        return "gemm_rows"
    return "gemm" if any("g_acc" in ir for ir in irs) else "direct"


def measure_layer(layer, batch: int, rounds: int, algorithms: tuple[str, ...] = ALGORITHMS) -> dict:
    """Median seconds per variant of one layer, timed interleaved."""
    import tensorkiln as tk
    import tensorkiln.nn.functional as F
    from tensorkiln.loops.buffer import Buffer
    from tensorkiln.kernels.templates.conv import applicable_conv_algorithms, conv_algorithm, forced_conv_algorithm

    name, c, h, o, k, s, p = layer
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, c, h, h), dtype=np.float32)
    w = (rng.standard_normal((o, c, k, k)) * (2.0 / (c * k * k)) ** 0.5).astype(np.float32)
    bias = tk.tensor(rng.standard_normal((o,), dtype=np.float32))
    variants: dict[str, tuple] = {}
    for algorithm in algorithms:
        f = tk.jit(lambda x, w: F.conv2d(x, w, bias, stride=s, padding=p).relu())
        with forced_conv_algorithm(algorithm):
            f(x, w)  # compiles inside the block
        node = next(n for n in f.optimized_graph(x, w).nodes if n.op == "conv2d")
        out = Buffer("out", "float32", node.shape)
        if algorithm in applicable_conv_algorithms(node, out):
            variants[algorithm] = (f, (x, w))
    rule = conv_algorithm(node, out)
    baked = tk.tensor(w)
    blocked = tk.jit(lambda x: F.conv2d(x, baked, bias, stride=s, padding=p).relu())
    with forced_conv_algorithm("gemm"):  # not Winograd: the layout pass may take the layer
        blocked(x)
    if _label(blocked, (x,)) == "nchwc":
        variants["nchwc"] = (blocked, (x,))
    compiled = tk.jit(lambda x: F.conv2d(x, baked, bias, stride=s, padding=p).relu())
    compiled(x)
    variants["compiled"] = (compiled, (x,))
    times: dict[str, list[float]] = {v: [] for v in variants}
    calls = {v: max(1, int(SAMPLE_SECONDS / _one_call(f, args))) for v, (f, args) in variants.items()}
    for _ in range(rounds):
        for v, (f, args) in variants.items():
            start = time.perf_counter()
            for _ in range(calls[v]):
                f(*args)
            times[v].append((time.perf_counter() - start) / calls[v])
    oh = (h + 2 * p - k) // s + 1
    return {"layer": name, "shape": f"{c}x{h}x{h} -> {o}x{oh}x{oh}", "batch": batch,
            "flops": 2 * batch * o * oh * oh * c * k * k, "rule": rule, "compiled_as": _label(compiled, (x,)),
            "seconds": {v: float(np.median(t)) for v, t in times.items()}}


def _one_call(f, args) -> float:
    f(*args)
    start = time.perf_counter()
    f(*args)
    return max(time.perf_counter() - start, 1e-6)


def worker(args) -> None:
    if args.shallow:
        rows = [measure_layer(layer, batch, args.rounds, ALGORITHMS + ("shallow",))
                for batch in args.batches for layer in SHALLOW_LAYERS]
    else:
        rows = [measure_layer(layer, batch, args.rounds) for batch in args.batches for layer in RESNET18_CONVS
                if not args.only_3x3 or (layer[4], layer[5]) == (3, 1)]
    print(json.dumps(rows))


def print_table(threads: int, rows: list[dict]) -> None:
    """One markdown table: ms (effective GFLOP/s) per variant, the rule's pick and its ratio to the fastest."""
    columns = [v for v in COLUMNS if any(v in row["seconds"] for row in rows)]
    print(f"\n{threads} thread(s): ms (effective GFLOP/s)\n")
    print("| layer | shape | batch | " + " | ".join(columns) + " | rule | compiled / fastest |")
    print("|---|---|---|" + "---|" * len(columns) + "---|---|")
    for row in rows:
        secs = row["seconds"]
        cells = [f"{secs[v] * 1e3:.3f} ({row['flops'] / secs[v] / 1e9:.0f})" if v in secs else "-" for v in columns]
        cells[-1] += f" {row['compiled_as']}"
        ratio = secs["compiled"] / min(secs.values())
        mark = " !" if ratio > SLOWER_MARK else ""
        print(f"| {row['layer']} | {row['shape']} | {row['batch']} | " + " | ".join(cells) +
              f" | {row['rule']} | {ratio:.2f}{mark} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of interleaved timing per layer")
    parser.add_argument("--only-3x3", action="store_true", help="only the 3x3 stride-1 layers")
    parser.add_argument("--shallow", action="store_true", help="the layers with few input channels (stems)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batch.split(",")]
    if args.worker:
        worker(args)
        return
    from benchmarks.common import machine_summary
    print(f"# convolution algorithms: {machine_summary()}")
    results = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="passive")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--batch", args.batch,
               "--rounds", str(args.rounds)] + (["--only-3x3"] if args.only_3x3 else []) + \
            (["--shallow"] if args.shallow else [])
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        results[threads] = json.loads(out.strip().splitlines()[-1])
        print_table(threads, results[threads])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
