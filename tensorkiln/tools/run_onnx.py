"""`tensorkiln run MODEL.onnx [--input name=file.npy ...] [--input-shape name=SHAPE ...] [--output-dir DIR]`:
load, compile, run, time.

Prints each output's name, shape, dtype and a checksum (sum and a hash of the
bytes), then the compile time (first call: trace + graph passes + C compiler)
and the latency (median of --repeat calls after one warm-up call). Inputs not
given are filled with seeded random data of the declared shape, or of the
shape --input-shape gives (any value for dynamic dimensions; dynamic
dimensions not given = 1). --output-dir writes each output as NAME.npy.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time

import numpy as np

from ..errors import TensorKilnError
from ..importers.onnx.model import load, random_inputs
from .export_cli import parse_shape


def _parse_inputs(items: list[str]) -> dict[str, np.ndarray]:
    result = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"tensorkiln run: --input expects name=file.npy, got {item!r}")
        result[name] = np.load(path)
    return result


def write_outputs(directory: str, names: list[str], outputs: list) -> list[str]:
    """Write each output to directory/NAME.npy (a name that is no file name is made one); the paths."""
    os.makedirs(directory, exist_ok=True)
    paths, used = [], set()
    for name, value in zip(names, outputs):
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".") or "output"
        while stem in used:
            stem += "_"
        used.add(stem)
        path = os.path.join(directory, stem + ".npy")
        np.save(path, np.asarray(value))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    """Entry point of `tensorkiln run`; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="tensorkiln run", description="run an ONNX model with tensorkiln")
    parser.add_argument("model", help="path of the .onnx file")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input value from a .npy file (repeatable); others get seeded random data")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=SHAPE",
                        help="the shape of a random input, e.g. x=4x3x224x224 (any value for dynamic dimensions)")
    parser.add_argument("--output-dir", metavar="DIR", help="write each output to DIR/NAME.npy")
    parser.add_argument("--repeat", type=int, default=10, help="timed calls after the warm-up (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--backend", choices=("c", "interpreter"), default="c")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    shapes = dict(parse_shape(item, "--input-shape") for item in args.input_shape)
    try:
        start = time.perf_counter()
        module = load(args.model, backend=args.backend)
        load_seconds = time.perf_counter() - start
        given = _parse_inputs(args.input)
        unknown = sorted((set(given) | set(shapes)) - set(module.input_names))
        if unknown:
            print(f"tensorkiln run: the model has no input {', '.join(unknown)} "
                  f"(inputs: {', '.join(module.input_names)})", file=sys.stderr)
            return 2
        feed = random_inputs(module, seed=args.seed, shapes=shapes)
        feed.update(given)
        start = time.perf_counter()
        outputs = module(**feed)  # traces, optimizes and compiles this signature
        first_seconds = time.perf_counter() - start
        times = []
        for _ in range(max(args.repeat, 1)):
            start = time.perf_counter()
            module(**feed)
            times.append(time.perf_counter() - start)
    except TensorKilnError as err:
        print(f"tensorkiln run: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    for name in module.input_names:
        value = np.asarray(feed[name])
        print(f"input  {name}: shape {list(value.shape)} {value.dtype}" + ("" if name in given else " (random)"))
    for name, value in zip(module.output_names, outputs):
        value = np.asarray(value)
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
        total = value.astype(np.float64).sum() if value.size else 0.0
        print(f"output {name}: shape {list(value.shape)} {value.dtype} sum {total:.6g} sha256 {digest}")
    if args.output_dir:
        print(f"outputs written: {', '.join(write_outputs(args.output_dir, module.output_names, outputs))}")
    report = module.report(**feed)
    backend = report.backend + (f" ({report.fallback_reason})" if report.fallback_reason else "")
    print(f"backend: {backend}, {len(report.kernels)} kernels")
    print(f"compile: load {load_seconds * 1e3:.1f} ms, first call {first_seconds * 1e3:.1f} ms "
          f"(trace {report.trace_seconds * 1e3:.1f} ms, cc {report.compile_seconds:.2f} s"
          f"{', cache hit' if report.cache_hit else ''})")
    print(f"latency: median {statistics.median(times) * 1e3:.3f} ms over {len(times)} runs "
          f"(min {min(times) * 1e3:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
