"""`tensorkiln bench`: tensorkiln and the installed peers on the same model, in the same run.

Each model is a PyTorch reference model (tensorkiln/tools/torch_reference.py,
seeded weights); tensorkiln compiles that very module with `tk.from_torch`, so
every framework computes with the same weights. For each framework: compile
time (first call, separately), latency (the median of calls timed in rounds
that take every framework in turn, so a slow phase of a shared machine hits
them all alike), and whether its output agrees with PyTorch eager. Peers:
PyTorch eager, torch.compile, ONNX Runtime (through torch.onnx.export, as
many intra-op threads as --threads, with IOBinding), torch.compile with freezing
and max-autotune, OpenVINO with its default settings (bf16 where the CPU has
AVX512-BF16) and with f32 precision, each when installed.

`--precision bf16` compiles tensorkiln with precision="bf16" and compares it,
by default, with the peers of that precision class: OpenVINO's default and
OpenVINO with INFERENCE_PRECISION_HINT=bf16; tensorkiln's fp32 compile is
measured in the same turns ("tensorkiln-fp32"). `--precision int8w` / `int4w` (or with a group size,
`int4w-g128`) quantizes tensorkiln's matmul weights (weight-only; docs/precision.md) and compares it
with OpenVINO's default, again with tensorkiln fp32 in the same turns. `--precision int8` runs the
int8 ONNX file ONNX Runtime's quantizer writes (QDQ for the CNNs, dynamic for BERT and the MLP) by
tensorkiln's integer kernels, ONNX Runtime and OpenVINO, with tensorkiln fp32 in the same turns
(bench_int8.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Callable

from ..driver.options import CompileOptions
from ..driver.progress import Progress
from ..kernels.target import cpu_description
from .bench_common import (ONNX_FILE_PEERS, agreement, compile_max_autotune, onnx_peers, tensorkiln_held_to,
                           timed_first)
from .bench_gpt2 import measure_gpt2
from .bench_int8 import INT8_MODELS, check_int8_model, measure_int8
from .timing import Timer, interleaved_medians

MODELS = ("resnet18", "mobilenetv2", "bert", "gpt2", "mlp")
# Each peer at its strongest, and named with its settings: torch.compile by default and with freezing +
# max-autotune; ONNX Runtime with IOBinding; OpenVINO with its defaults (bf16 on a CPU with AVX512-BF16)
# and with f32 precision.
ONNX_PEERS = ONNX_FILE_PEERS
PEERS = ("torch", "torch.compile", "torch.compile-max") + ONNX_PEERS
DEFAULT_PEERS = {"fp32": ("torch", "torch.compile", "torch.compile-max", "onnxruntime", "openvino", "openvino-f32"),
                 "bf16": ("openvino", "openvino-bf16"),
                 # weight-only int8 / int4 (activations fp32): OpenVINO's default (bf16) as the fastest peer
                 "int8w": ("openvino",), "int4w": ("openvino",),
                 # int8 ONNX files (QDQ / dynamic): the peers that run them on integer kernels
                 "int8": ("onnxruntime", "openvino")}


def build(name: str, batch: int):
    """(torch module in eval mode, tuple of example torch inputs) at the model's real size."""
    import torch  # optional dependency: the reference models
    from . import torch_reference as ref  # imports torch
    torch.manual_seed(0)
    if name == "resnet18":
        return ref.resnet18_full(), (ref.image(batch, 224),)
    if name == "mobilenetv2":
        return ref.mobilenet_v2_full(), (ref.image(batch, 224),)
    if name == "bert":
        model = ref.BertEncoder(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072,
                                max_positions=512, num_classes=2).eval()
        ids, mask = ref.bert_inputs(batch, 128)
        return model, (ids.clamp(max=30521), mask)
    if name == "mlp":
        return ref.MLP().eval(), (torch.randn(batch, 784, generator=torch.Generator().manual_seed(1)),)
    raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def measure(name: str, batch: int, peers: list[str], repeat: int, rounds: int = 5, precision: str = "fp32",
            timer: Timer = interleaved_medians, progress: Callable[[str], None] = lambda message: None) -> dict:
    """Compile tensorkiln (at `precision`) and each available peer on one model, then time them in turns
    (with `timer`; `progress` is told each stage)."""
    import torch  # optional dependency, like the importer that needs it
    from ..importers.torch import from_torch
    model, inputs = build(name, batch)
    with torch.no_grad():
        reference = model(*inputs).numpy()
    runs, rows = {}, {}

    def record(framework, run, compile_seconds):
        held_to = tensorkiln_held_to(precision) if framework == "tensorkiln" else framework
        rows[framework] = {"compile_s": compile_seconds, **agreement(run(), reference, held_to)}
        runs[framework] = run

    import torch._dynamo  # noqa: F401  (torch.export's one-time import, ~1.5 s, is not compile time)
    arrays = [t.numpy() for t in inputs]
    ours_at = (("tensorkiln", precision),) + ((("tensorkiln-fp32", "fp32"),) if precision != "fp32" else ())
    for framework, at in ours_at:
        progress(f"{name}: compiling tensorkiln ({at})")
        start = time.perf_counter()
        compiled = from_torch(model, inputs, precision=at)
        compile_s = time.perf_counter() - start + timed_first(lambda: compiled(*arrays))
        record(framework, lambda compiled=compiled: compiled(*arrays), compile_s)
    with torch.no_grad():
        if "torch" in peers:
            record("torch", lambda: model(*inputs), 0.0)
        if "torch.compile" in peers:
            progress(f"{name}: compiling torch.compile")
            fast = torch.compile(model, dynamic=False)
            record("torch.compile", lambda: fast(*inputs), timed_first(lambda: fast(*inputs)))
        if "torch.compile-max" in peers:
            progress(f"{name}: compiling torch.compile with freezing and max-autotune")
            fastest = compile_max_autotune(model)
            record("torch.compile-max", lambda: fastest(*inputs), timed_first(lambda: fastest(*inputs)))
    onnx_file = [p for p in peers if p in ONNX_PEERS]
    if onnx_file:
        progress(f"{name}: exporting to ONNX for {', '.join(onnx_file)}")
        path = os.path.join(tempfile.mkdtemp(prefix="tensorkiln-bench-"), f"{name}.onnx")
        torch.onnx.export(model, inputs, path, dynamo=False)
        onnx_peers(path, arrays, peers, progress, record)
    progress(f"{name}: measuring {', '.join(runs)} in turns")
    with torch.no_grad():
        for framework, latency in timer(runs, repeat, rounds).items():
            rows[framework]["latency_s"] = latency
    return rows


def _precision(text: str) -> str:
    """--precision's value: a precision tk.jit accepts, or int8 (the int8 ONNX models)."""
    if text == "int8":
        return text
    try:
        CompileOptions(precision=text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def main(argv: list[str]) -> int:
    """Entry point of `tensorkiln bench`."""
    parser = argparse.ArgumentParser(prog="tensorkiln bench", description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=None,
                        help=f"some of {', '.join(MODELS)} (default: all; with --precision int8 "
                             f"{', '.join(INT8_MODELS)})")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="threads for every framework")
    defaults = "; ".join(f"{k}: {','.join(v)}" for k, v in DEFAULT_PEERS.items())
    parser.add_argument("--vs", default=None, help=f"peers to measure: {','.join(PEERS)} (default: those of the "
                                                   f"precision class, {defaults})")
    parser.add_argument("--precision", default="fp32", type=_precision,
                        help=f"tensorkiln's precision (tk.jit's precision option): {', '.join(sorted(DEFAULT_PEERS))}, "
                             f"or int8w-g<size> / int4w-g<size> (weights quantized in groups of that many depths)")
    parser.add_argument("--repeat", type=int, default=10, help="timed calls per framework, at least")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of timing every framework in turn")
    parser.add_argument("--json", default=None, help="write the results to this file")
    args = parser.parse_args(argv)
    args.models = args.models or list(INT8_MODELS if args.precision == "int8" else MODELS)
    peers = [p for p in (args.vs or ",".join(DEFAULT_PEERS[args.precision.split("-", 1)[0]])).split(",") if p]
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        parser.error(f"unknown peers {unknown}; choose from {', '.join(PEERS)}")
    try:
        import torch
    except ImportError:
        print("tensorkiln bench needs PyTorch for its reference models: pip install 'tensorkiln[torch]'",
              file=sys.stderr)
        return 2
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read when the first library loads OpenMP
        torch.set_num_threads(args.threads)
    if args.precision == "int8":
        for name in args.models:
            check_int8_model(name)
    results = {}
    with Progress("bench", delay=0.0) as tracker:  # every stage of a benchmark is long: shown from the start
        for name in args.models:
            if args.precision == "int8":
                model, inputs = build(name, args.batch)
                results[name] = measure_int8(name, model, inputs, peers, args.repeat, args.rounds,
                                             interleaved_medians, tracker.stage)
            elif name == "gpt2":
                results["gpt2 prefill"], results["gpt2 decode"] = measure_gpt2(
                    args.batch, peers, args.repeat, tracker.stage, rounds=args.rounds, precision=args.precision)
            else:
                results[name] = measure(name, args.batch, peers, args.repeat, args.rounds, args.precision,
                                        progress=tracker.stage)
    _print_table(results, args.batch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_description(), "batch": args.batch, "threads": args.threads,
                       "precision": args.precision, "results": results}, f, indent=2)
    return 0 if all(r["agrees"] for model in results.values() for r in model.values()) else 1


def _print_table(results: dict, batch: int) -> None:
    print(f"\n{cpu_description()}, {os.cpu_count()} cores")
    print(f"batch {batch}; latency: median of calls timed in turns with the other frameworks; "
          "compile: the first call")
    header = f"{'model':<12} {'framework':<26} {'latency':>11} {'tk speedup':>11} {'compile':>9}  agrees"
    print(header)
    print("-" * len(header))
    for name, rows in results.items():
        tk_latency = rows["tensorkiln"]["latency_s"]
        for framework, r in rows.items():
            speedup = r["latency_s"] / tk_latency
            print(f"{name:<12} {framework:<26} {_latency_text(r['latency_s']):>11} {speedup:>10.2f}x "
                  f"{r['compile_s']:>7.2f} s  {'yes' if r['agrees'] else 'NO (%.1e)' % r['max_rel_error']}")


def _latency_text(seconds: float) -> str:
    """Milliseconds, or microseconds below one millisecond (a batch-1 MLP takes tens of us)."""
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"
